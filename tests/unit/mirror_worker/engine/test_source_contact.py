"""The source contact with a fake clock: a source that stops answering is reported after the timeout, at most once
a minute while it lasts, counted, and reported again when it answers."""

from __future__ import annotations

import logging

from confluent_kafka import KafkaError, KafkaException

from mirror_worker.engine.source_contact import SourceContact
from mirror_worker.metrics import MirrorMetrics


def _errors(metrics: MirrorMetrics) -> float | None:
    return metrics.registry.get_sample_value("mirror_errors_total", {"mirror": "m", "kind": "source_unreachable"})


def test_an_unreachable_source_is_reported_after_the_timeout_then_once_a_minute_then_back(caplog):
    now = [0.0]
    metrics = MirrorMetrics("m")
    contact = SourceContact([], metrics, {"mirror": "m"}, after_s=30.0, clock=lambda: now[0])
    with caplog.at_level(logging.INFO, logger="mirror_worker"):
        contact.note("east", None, 0.0)
        for t in range(5, 150, 5):  # unreachable from 5 s to 145 s
            now[0] = t
            contact.note("east", "1/3 brokers are down", t)
        now[0] = 150.0
        contact.note("east", None, 150.0)
    said = [(r.getMessage(), getattr(r, "source", None), getattr(r, "seconds", getattr(r, "unreachable_s", None)))
            for r in caplog.records]
    assert said == [("source unreachable", "east", 30.0), ("source unreachable", "east", 90.0),
                    ("source reachable again", "east", 145.0)]
    assert [r.levelname for r in caplog.records] == ["WARNING", "WARNING", "INFO"]
    assert _errors(metrics) == 2


def test_a_short_blip_is_not_reported(caplog):
    now = [0.0]
    contact = SourceContact([], MirrorMetrics("m"), {"mirror": "m"}, after_s=30.0, clock=lambda: now[0])
    with caplog.at_level(logging.INFO, logger="mirror_worker"):
        for t, error in ((0, None), (5, "timed out"), (25, "timed out"), (30, None)):
            now[0] = t
            contact.note("east", error, t)
    assert caplog.records == []


def test_the_thread_asks_every_source_and_stops():
    class Source:
        def __init__(self) -> None:
            self.asked = 0

        def list_topics(self, timeout):
            self.asked += 1
            raise KafkaException(KafkaError(KafkaError._TRANSPORT, "down"))

    source = Source()
    metrics = MirrorMetrics("m")
    contact = SourceContact([("east", source)], metrics, {"mirror": "m"}, after_s=0.0, every_s=0.01)
    contact.start()
    try:
        while not _errors(metrics):
            pass
    finally:
        contact.stop()
        contact.join(5)
    assert not contact.is_alive() and source.asked >= 1
