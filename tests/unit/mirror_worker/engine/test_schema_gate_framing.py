"""The schema gate's framing look-ups (engine/schema_gate.py recheck_framing) with an in-memory syncer: when the
registry is asked again about a topic whose field had no subject (issue 43 defect 2)."""

from __future__ import annotations

import logging

from mirror_worker.engine import schema_gate
from mirror_worker.engine.halts import Halts
from mirror_worker.engine.schema_gate import SchemaGate
from mirror_worker.metrics import MirrorMetrics
from mirror_worker.schemas import wire_format
from mirror_worker.schemas.framing import MAX_ANSWERED_IDS, RECHECK_INTERVAL_S, TopicFraming
from tests.unit.fakes import FakeMessage


class CountingSyncer:
    """A topic without subjects until `subject_at_look` looks have been made; counts the looks."""

    def __init__(self, subject_at_look: int | None = None, clock=lambda: 0.0) -> None:
        self.clock = clock
        self.id_headers: dict = {}
        self.framing = {"t": TopicFraming(False, False, 0.0)}
        self.looks = 0
        self.subject_at_look = subject_at_look

    def recheck_topic(self, topic):
        self.looks += 1
        found = self.subject_at_look is not None and self.looks >= self.subject_at_look
        self.framing[topic] = TopicFraming(False, found, self.clock())
        return self.framing[topic]


def _gate(syncer) -> SchemaGate:
    metrics = MirrorMetrics("m")
    return SchemaGate(syncer, Halts(metrics, {"mirror": "m"}, None, lambda topic, partition: 0), metrics,
                      {"mirror": "m"}, "src")


def _framed(schema_id: int, offset: int, timestamp: int = 1_000) -> FakeMessage:
    return FakeMessage("t", 0, offset, key=b"plain", value=wire_format.header(schema_id) + b"body", timestamp=timestamp)


def test_an_id_new_to_the_topic_asks_again_whatever_the_records_timestamp_and_a_known_one_does_not():
    syncer = CountingSyncer(subject_at_look=3)
    gate = _gate(syncer)
    assert gate.recheck_framing(None, _framed(4, 0)) == (False, False)
    assert gate.recheck_framing(None, _framed(4, 1)) == (False, False)    # answered: no look
    assert syncer.looks == 1
    assert gate.recheck_framing(None, _framed(9, 2, timestamp=1)) == (False, False)  # new id, stamped long ago
    assert gate.recheck_framing(None, _framed(12, 3, timestamp=1)) == (False, True)  # its subject is there now
    assert syncer.looks == 3


def test_past_the_ids_it_remembers_the_gate_asks_at_most_once_per_interval_and_says_so_once(caplog, monkeypatch):
    now = [100.0]
    monkeypatch.setattr(schema_gate.time, "monotonic", lambda: now[0])
    syncer = CountingSyncer(clock=lambda: now[0])
    gate = _gate(syncer)
    with caplog.at_level(logging.WARNING, logger="mirror_worker"):
        for schema_id in range(MAX_ANSWERED_IDS + 5):
            gate.recheck_framing(None, _framed(schema_id, schema_id))
        assert syncer.looks == MAX_ANSWERED_IDS  # one per id it could remember, none for the five past them
        now[0] += RECHECK_INTERVAL_S
        gate.recheck_framing(None, _framed(MAX_ANSWERED_IDS + 6, 0))
        gate.recheck_framing(None, _framed(MAX_ANSWERED_IDS + 7, 0))
    assert syncer.looks == MAX_ANSWERED_IDS + 1  # an interval later: one more
    assert len([r for r in caplog.records if r.getMessage().startswith("schema framing: more distinct ids")]) == 1
    gate.recheck_framing(None, _framed(0, 0))
    assert syncer.looks == MAX_ANSWERED_IDS + 1  # remembered: no look
