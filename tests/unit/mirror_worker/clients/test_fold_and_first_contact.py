"""Repeated client errors folded (clients/fold.py) and the first contact with every cluster at once
(clients/first_contact.py), with fake clients and a fake clock: no server."""

from __future__ import annotations

import logging

import pytest
from confluent_kafka import KafkaError, KafkaException

from mirror_worker.clients.first_contact import Probe, first_contact
from mirror_worker.clients.fold import REPEATS_FIELD, FoldRepeats, RepeatFold, kind_of
from mirror_worker.exceptions import ClusterRefusedError, StoppedBeforeStart, UnreachableClusterError

REFUSED = "127.0.0.1:2/bootstrap: Connect to ipv4#127.0.0.1:2 failed: Connection refused (after {}ms in state CONNECT)"


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_repeating_failure_is_logged_first_then_once_a_minute_with_the_count_left_out():
    clock = Clock()
    fold = RepeatFold(every_s=60, clock=clock)
    kind = ("destination", kind_of(REFUSED.format(0)))
    assert fold.admit(kind) == 0
    for second in range(1, 60):  # a broker down in a running worker: every second, the same failure
        clock.now = second
        assert fold.admit(("destination", kind_of(REFUSED.format(second)))) is None
    clock.now = 60
    assert fold.admit(kind) == 59  # still visible while it lasts, with how many reports it stands for
    assert fold.admit(("east", kind[1])) == 0  # another cluster's failure is its own kind


def test_the_librdkafka_log_filter_folds_its_lines_and_counts_them():
    clock = Clock()
    record = lambda ms: logging.LogRecord("mirror_worker.librdkafka", logging.ERROR, __file__, 1, REFUSED.format(ms),
                                          None, None)
    folding = FoldRepeats(RepeatFold(every_s=60, clock=clock))
    assert [folding.filter(record(ms)) for ms in (0, 1, 2)] == [True, False, False]
    clock.now = 61
    late = record(3)
    assert folding.filter(late) and getattr(late, REPEATS_FIELD) == 2


class FakeClient:
    """A cluster that answers after `answers_after` calls (never when None), on a clock each call advances."""

    def __init__(self, clock: Clock, answers_after: int | None, cluster_id: str = "id") -> None:
        self.clock, self.answers_after, self.cluster_id, self.calls = clock, answers_after, cluster_id, 0

    def list_topics(self, timeout: float):
        self.calls += 1
        if self.answers_after is not None and self.calls > self.answers_after:
            return self
        self.clock.now += timeout
        raise KafkaException(KafkaError(KafkaError._TRANSPORT, "Failed to get metadata: Local: Broker transport failure"))

    def poll(self, _timeout: float) -> int:
        return 0


def test_every_cluster_that_does_not_answer_is_named_one_line_each():
    clock = Clock()
    probes = [Probe(FakeClient(clock, None), "destination", "destination"),
              Probe(FakeClient(clock, 2, "src-id"), "source 'east'", "east"),
              Probe(FakeClient(clock, None), "source 'west'", "west")]
    with pytest.raises(UnreachableClusterError) as caught:
        first_contact(probes, 5, lambda _c: None, lambda: False, clock)
    assert [line.split(": ")[0] for line in str(caught.value).splitlines()] == [
        "destination cluster unreachable within 5s", "source 'west' cluster unreachable within 5s"]


def test_the_ids_come_back_in_the_probes_order():
    clock = Clock()
    probes = [Probe(FakeClient(clock, 3, "dst"), "destination", "destination"),
              Probe(FakeClient(clock, 0, "src"), "source 'east'", "east")]
    assert first_contact(probes, 30, lambda _c: None, lambda: False, clock) == ["dst", "src"]


def test_a_stop_ends_the_wait_between_two_slices():
    clock = Clock()
    client = FakeClient(clock, None)
    stops = iter([False, False, True])
    with pytest.raises(StoppedBeforeStart, match="waiting for the destination cluster"):
        first_contact([Probe(client, "destination", "destination")], 30, lambda _c: None, lambda: next(stops), clock)
    assert client.calls == 2 and clock.now < 30


def test_a_refusal_fails_at_once_naming_the_cluster():
    clock = Clock()
    probes = [Probe(FakeClient(clock, 0), "destination", "destination"), Probe(FakeClient(clock, None), "source 'east'", "east")]
    refused = {"east": "SASL authentication error"}.get
    with pytest.raises(ClusterRefusedError, match="^source 'east' cluster refused the connection: SASL"):
        first_contact(probes, 30, refused, lambda: False, clock)
    assert clock.now < 1
