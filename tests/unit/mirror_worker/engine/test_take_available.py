"""The loop takes what the consumer already holds and waits only while it holds nothing (issue #17, latency)."""

from __future__ import annotations

from mirror_worker.engine.consume import take_available


class QueueConsumer:
    """consume(n, timeout) as librdkafka serves it: up to n queued records; with nothing queued it waits,
    and records that `arrive` during the wait are handed out (a real wait would return at the first one)."""

    def __init__(self, queued: list, arrive: list | None = None) -> None:
        self.queued = list(queued)
        self.arrive = list(arrive or [])
        self.calls: list[tuple[int, float]] = []

    def consume(self, n: int, timeout: float) -> list:
        self.calls.append((n, timeout))
        if not self.queued and timeout > 0:
            self.queued, self.arrive = self.arrive, []
        out, self.queued = self.queued[:n], self.queued[n:]
        return out


def test_a_partial_batch_is_taken_without_waiting():
    consumer = QueueConsumer(queued=[1, 2, 3])
    assert take_available(consumer, 2500, 0.5) == [1, 2, 3]
    assert consumer.calls == [(2500, 0)]  # never a wait for the batch to fill


def test_a_full_prefetch_queue_gives_a_full_batch():
    consumer = QueueConsumer(queued=list(range(10)))
    assert take_available(consumer, 4, 0.5) == [0, 1, 2, 3]
    assert consumer.calls == [(4, 0)]


def test_an_empty_queue_waits_for_the_first_record_then_takes_what_came_with_it():
    consumer = QueueConsumer(queued=[], arrive=[7, 8, 9])
    assert take_available(consumer, 2500, 0.5) == [7, 8, 9]
    assert consumer.calls == [(2500, 0), (1, 0.5), (2499, 0)]


def test_nothing_arriving_returns_empty_after_one_wait():
    consumer = QueueConsumer(queued=[])
    assert take_available(consumer, 100, 0.5) == []
    assert consumer.calls == [(100, 0), (1, 0.5)]
