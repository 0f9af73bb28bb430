"""Partitions that copy nothing while records wait: never silent (a log line and the `mirror_partition_stalled` gauge).

A partition is stalled when records wait in it (the source's end, or what was handed to a producer, is past
its committed offset) and its committed offset has not moved for `stall_after_s`. Whatever the cause (a
destination that never acknowledges, a consumer that fetches nothing, a producer that retries forever), the
committed offset is where it shows. Halted partitions are reported by their halt, not here.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from confluent_kafka import KafkaException, TopicPartition

from mirror_worker.metrics import MirrorMetrics

if TYPE_CHECKING:
    from mirror_worker.engine.source_stream import SourceStream

log = logging.getLogger("mirror_worker")
CHECK_EVERY_S = 1.0
# More partitions than this stalled (or copying again) in one check: one line names how many and the first
# EXAMPLES of them, not a line each (a whole destination that stood still at 5,000 partitions logged 5,000).
LOG_EACH_UP_TO = 10
EXAMPLES = 10
WHY = ("records wait and none was copied: the destination does not acknowledge (see the client errors), or the "
       "source holds them back (a transaction left open)")


class StallWatch:
    """`check()` from the main loop and from every wait on the destination (it runs at most once a second)."""

    def __init__(self, streams: list[SourceStream], metrics: MirrorMetrics, label: dict, stall_after_s: float,
                 clock: Callable[[], float], in_flight: Callable[[], int] = lambda: 0) -> None:
        self.streams = streams
        self.metrics = metrics
        self.label = label
        self.stall_after_s = stall_after_s
        self.clock = clock
        self.in_flight = in_flight
        self._since: dict[tuple[str, str, int], tuple[int, float]] = {}  # -> (committed offset, since when)
        self.stalled: set[tuple[str, str, int]] = set()
        self._next_check = 0.0

    def check(self) -> None:
        now = self.clock()
        if now < self._next_check:
            return
        self._next_check = now + CHECK_EVERY_S
        owned = set()
        stalled: list[tuple[tuple[str, str, int], int, int, float]] = []  # (ident, committed, end, seconds)
        flowing: list[tuple[tuple[str, str, int], int]] = []  # (ident, committed)
        for stream in self.streams:
            for key in sorted(stream.assigned):
                committed = stream.ledger.committed.get(key)
                if committed is None or key in stream.ledger.halted:
                    continue
                ident = (stream.alias, *key)
                owned.add(ident)
                end = _waiting_end(stream, key)
                since = self._since.get(ident)
                if since is None or since[0] != committed or end <= committed:
                    self._since[ident] = (committed, now)
                    if ident in self.stalled:
                        self._clear(ident)
                        flowing.append((ident, committed))
                    continue
                if ident not in self.stalled and now - since[1] >= self.stall_after_s:
                    self.stalled.add(ident)
                    self.metrics.stalled_partitions.labels(
                        **self.label, source=stream.alias, topic=key[0], partition=str(key[1])).set(1)
                    stalled.append((ident, committed, end, round(now - since[1], 1)))
        self._log(stalled, flowing)
        for ident in set(self._since) - owned:  # revoked, lost or halted: no longer this watch's to report
            self._since.pop(ident)
            if ident in self.stalled:
                self._clear(ident)

    def _log(self, stalled: list, flowing: list) -> None:
        if len(stalled) > LOG_EACH_UP_TO:
            log.warning("partitions stalled", extra={
                **self.label, "partitions": len(stalled), "sources": sorted({i[0] for i, *_ in stalled}),
                "examples": [f"{i[1]}[{i[2]}]@{committed}" for i, committed, *_ in stalled[:EXAMPLES]],
                "seconds": max(s for *_, s in stalled), "in_flight": self.in_flight(), "why": WHY})
        else:
            for (source, topic, partition), committed, end, seconds in stalled:
                log.warning("partition stalled", extra={
                    **self.label, "source": source, "topic": topic, "partition": partition, "committed": committed,
                    "waiting_up_to": end, "seconds": seconds, "in_flight": self.in_flight(), "why": WHY})
        if len(flowing) > LOG_EACH_UP_TO:
            log.info("partitions copying again", extra={
                **self.label, "partitions": len(flowing), "sources": sorted({i[0] for i, _ in flowing}),
                "examples": [f"{i[1]}[{i[2]}]@{committed}" for i, committed in flowing[:EXAMPLES]]})
        else:
            for (source, topic, partition), committed in flowing:
                log.info("partition copying again", extra={
                    **self.label, "source": source, "topic": topic, "partition": partition, "committed": committed})

    def _clear(self, ident: tuple[str, str, int]) -> None:
        self.stalled.discard(ident)
        source, topic, partition = ident
        try:
            self.metrics.stalled_partitions.remove(self.label["mirror"], source, topic, str(partition))
        except KeyError:
            pass


def waiting_more_than(stream: SourceStream, limit: int) -> bool:
    """Whether more than `limit` records wait in the stream's partitions past what was handed over, by the
    consumer's cached high watermarks (no request). Stops counting once past `limit`, so a stream far behind
    costs a few partitions' look-ups; a stash, or a partition whose end is not known yet, counts as waiting.

    Not a partial batch: the loop takes what the consumer already holds, and at 5,000 partitions batches came
    partial all through a backlog (a catch-up window ended at each: the copy took twice as long)."""
    if stream.stash:
        return True
    waiting = 0
    for key in stream.assigned:
        position = stream.ledger.next_offsets.get(key, stream.ledger.committed.get(key))
        if position is None or key in stream.ledger.halted:
            continue
        try:
            _low, high = stream.consumer.get_watermark_offsets(TopicPartition(*key), cached=True)
        except KafkaException:
            return True
        if high < 0:
            return True
        waiting += max(0, high - position)
        if waiting > limit:
            return True
    return False


def _waiting_end(stream: SourceStream, key: tuple[str, int]) -> int:
    """The furthest offset known to wait: handed to a producer, or the source's end as last fetched."""
    end = stream.ledger.next_offsets.get(key, -1)
    try:
        _low, high = stream.consumer.get_watermark_offsets(TopicPartition(*key), cached=True)
    except KafkaException:
        return end
    return max(end, high)
