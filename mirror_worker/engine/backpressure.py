"""Backpressure: `queue.size` records in flight across every producer, the wait for room, holding the consumers.

Invariant: while a stream holds records the producers refused (its stash), nothing newer is fetched for
it; the stash is handed over first, in order. Pausing is the last resort: librdkafka drops a paused
partition's prefetched records, so pausing on every full queue would fetch everything twice.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from confluent_kafka import TopicPartition

from mirror_worker.engine.run_state import RunState
from mirror_worker.metrics import MirrorMetrics

if TYPE_CHECKING:
    from mirror_worker.engine.source_stream import SourceStream

log = logging.getLogger("mirror_worker")
# A wait on the destination this long pauses the consumers (here and in CommitCycle.flush).
PAUSE_AFTER_S = 1.0


class Backpressure:
    """`streams` is the worker's list of sources; `producers()` returns every producer records are handed to."""

    def __init__(self, streams: list[SourceStream], producers: Callable[[], list], queue_size: int,
                 batch_size: int, metrics: MirrorMetrics, label: dict, state: RunState,
                 clock: Callable[[], float], on_wait: Callable[[], None] = lambda: None,
                 serve: Callable[[float], None] | None = None, on_pause: Callable[[], None] = lambda: None) -> None:
        self.streams = streams
        self.producers = producers
        # Polls every producer for `timeout` s (the worker's: a fatal error of an exactly-once producer is its
        # partition's, not the worker's); plain poll() of each when not given.
        self.serve = serve or (lambda timeout: [p.poll(timeout) for p in self.producers()])
        self.queue_size = queue_size
        self.batch_size = batch_size
        self.metrics = metrics
        self.label = label
        self.state = state
        self.clock = clock
        self.on_wait = on_wait  # called while waiting for room (the stall watch)
        self.on_pause = on_pause  # called when a wait for room paused the consumers (the cycles' Backlog)
        self.paused = False
        self._in_flight_peak = 0

    def in_flight(self) -> int:
        return sum(len(p) for p in self.producers())

    def room(self) -> int:
        """How many more records may be handed to the producers now."""
        return self.queue_size - self.in_flight()

    def note_in_flight(self, in_flight: int) -> None:
        """After a batch was handed over, when the records in flight peak (deliveries only lower them).

        `in_flight`: as the hot path counted them against queue.size (those before the batch, plus the batch).
        Read again here, len() would also count the events librdkafka queued meanwhile (statistics every
        few seconds per producer, log lines): under load the peak read 42 with queue.size 40 and twelve
        exactly-once producers, no record over the bound."""
        if in_flight > self._in_flight_peak:
            self._in_flight_peak = in_flight
            self.metrics.in_flight_max.labels(**self.label).set(in_flight)

    def wait_for_room(self) -> None:
        """Wait for room in the producers while a stream holds records they refused (queue full).

        The consumers are paused only when the wait outlasts PAUSE_AFTER_S. While paused, they are still
        polled (nothing is fetched) to keep the group membership (max.poll.interval.ms); what they still
        hand out joins the stash, behind the refused records.
        """
        if not any(stream.stash for stream in self.streams):
            return
        # A producer may refuse records below queue.size: its own byte bound (queue.buffering.max.kbytes, sized from
        # the memory budget) is full. Waiting for the count alone would then return at once and the loop would spin
        # on the refusal: wait for half a batch to be delivered instead.
        room_at = min(self.queue_size - self.batch_size // 2, max(1, self.in_flight() - self.batch_size // 2))
        started = last_log = self.clock()
        try:
            while True:
                self.serve(0.002)
                if self.in_flight() <= room_at or not self.state.running:
                    break
                now = self.clock()
                if now - started < PAUSE_AFTER_S:
                    continue
                self.on_wait()
                if self.hold_consumers():
                    self.metrics.backpressure_pauses.labels(**self.label).inc()
                    self.on_pause()
                if now - last_log > 10:
                    log.warning("destination slow: consumption paused", extra={**self.label, "in_flight": self.in_flight()})
                    last_log = now
        finally:
            self.metrics.backpressure_seconds.labels(**self.label).inc(self.clock() - started)
            if self.paused:
                self.release_consumers()

    def hold_consumers(self) -> bool:
        """While the loop waits on the destination: pause the consumers and poll them (nothing is fetched)
        so that the group keeps this worker past max.poll.interval.ms; what they still hand out joins the
        stash. Never from a rebalance callback. True when this call paused them."""
        paused_now = not self.paused
        if paused_now:
            self._pause_all(True)
        for stream in self.streams:
            msg = stream.consumer.poll(0)
            if msg is not None:
                stream.stash.append(msg)
        return paused_now

    def release_consumers(self) -> None:
        """Resume every assigned partition that is not halted."""
        self._pause_all(False)

    def _pause_all(self, pause: bool) -> None:
        self.paused = pause
        for stream in self.streams:
            partitions = [
                TopicPartition(t, p) for t, p in stream.assigned if pause or (t, p) not in stream.ledger.halted
            ]
            if partitions:
                (stream.consumer.pause if pause else stream.consumer.resume)(partitions)
