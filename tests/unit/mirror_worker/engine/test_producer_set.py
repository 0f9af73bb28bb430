"""Exactly-once: only producers with something queued, in flight or to serve are polled each round."""

from __future__ import annotations

from types import SimpleNamespace

from mirror_worker.engine.producer_set import ProducerSet
from mirror_worker.metrics import MirrorMetrics


class CountingProducer:
    def __init__(self, outstanding: int) -> None:
        self.outstanding = outstanding
        self.polls = 0

    def __len__(self) -> int:
        return self.outstanding

    def poll(self, timeout=None) -> int:
        self.polls += 1
        return 0


def test_an_idle_partitions_producer_is_not_polled():
    busy, idle = CountingProducer(3), CountingProducer(0)
    stream = SimpleNamespace(alias="s", producers={("t", 0): busy, ("t", 1): idle})
    producers = ProducerSet([], [stream], True, MirrorMetrics("m"), {"mirror": "m"})
    producers.serve(0)
    assert (busy.polls, idle.polls) == (1, 0)


def test_at_least_once_the_shared_producers_are_always_polled():
    shared = [CountingProducer(0)]
    ProducerSet(shared, [], False, MirrorMetrics("m"), {"mirror": "m"}).serve(0)
    assert shared[0].polls == 1
