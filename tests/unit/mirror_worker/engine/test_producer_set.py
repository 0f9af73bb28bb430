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


def test_exactly_once_each_sources_one_producer_is_polled_whatever_its_partitions():
    first, second = CountingProducer(3), CountingProducer(0)
    streams = [SimpleNamespace(alias="a", producers=[first]), SimpleNamespace(alias="b", producers=[second])]
    producers = ProducerSet([], streams, True, MirrorMetrics("m"), {"mirror": "m"})
    producers.serve(0)
    assert (first.polls, second.polls) == (1, 1) and producers.all() == [first, second]


def test_at_least_once_the_shared_producers_are_always_polled():
    shared = [CountingProducer(0)]
    ProducerSet(shared, [], False, MirrorMetrics("m"), {"mirror": "m"}).serve(0)
    assert shared[0].polls == 1
