"""The at-least-once rule and its exactly-once twin: flush (or commit transactions), then commit offsets and write offset syncs.

A part of MirrorWorker (worker.py), which holds the state these methods share.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from confluent_kafka import KafkaException, TopicPartition

from mirror_worker.exactly_once import ProducerFenced, TransactionAborted

if TYPE_CHECKING:
    from mirror_worker.source_stream import SourceStream

log = logging.getLogger("mirror_worker")
# A wait on the destination this long pauses the consumers (see _flush and MirrorWorker._apply_backpressure).
PAUSE_AFTER_S = 1.0


class CommitCycle:
    """Flush (or commit transactions), then commit the checkpoint taken before it."""

    def _shutdown_deadline(self) -> float | None:
        if self._closing_deadline is not None:
            return self._closing_deadline
        return self.clock() + self.config.shutdown_timeout_s if self.stop_event.is_set() else None

    def _flush(self, deadline: float | None, hold_consumers: bool = False) -> bool:
        """Wait until every producer delivered everything; False if the deadline came first.

        hold_consumers (the main loop's cycle only, never a rebalance callback): a wait longer than
        PAUSE_AFTER_S pauses and polls the consumers, so a destination outage longer than
        max.poll.interval.ms does not drop this worker from its group.
        """
        started = last_log = self.clock()
        try:
            while True:
                remaining = 0
                for producer in self._all_producers():
                    remaining += producer.flush(0.5)
                if remaining == 0:
                    return True
                now = self.clock()
                if self.fatal is not None:
                    return False
                if deadline is None and self.stop_event.is_set():
                    deadline = now + self.config.shutdown_timeout_s
                if deadline is not None and now >= deadline:
                    return False
                if hold_consumers and now - started >= PAUSE_AFTER_S:
                    self._hold_consumers()
                if now - last_log > 10:
                    log.warning("waiting for the destination to acknowledge", extra={**self._label, "in_flight": remaining})
                    last_log = now
        finally:
            if hold_consumers and self._paused:
                self._pause_all(False)

    def checkpoint_and_commit(self, only: tuple[SourceStream, set] | None = None, deadline: float | None = None,
                              from_loop: bool = False) -> bool:
        if self.config.exactly_once:
            return self._commit_transactions(only, deadline)
        checkpoints = [(stream, stream.ledger.checkpoint(), stream.pending) for stream in self.streams]
        for stream in self.streams:
            stream.pending = {}
        if not self._flush(deadline, hold_consumers=from_loop) or self.fatal is not None:
            # Nothing handed over since these checkpoints is known to be delivered: commit nothing.
            for stream, _, pending in checkpoints:
                _merge_pending(stream, pending)
            return False
        for stream, checkpoint, pending in checkpoints:
            self._count_delivered(stream, pending)
            if only is not None and only[0] is not stream:
                continue
            owned = only[1] if only is not None else stream.assigned
            # Only partitions this worker still owns: a commit for others would race their new owner.
            offsets = {k: v for k, v in stream.ledger.committable(checkpoint).items() if k in owned}
            if offsets:
                self._commit(stream, offsets)
                self._write_offset_syncs(stream, offsets)
        return True

    def _write_offset_syncs(self, stream: SourceStream, positions: dict) -> None:
        """Right after a completed flush or transaction commit, before anything else is produced."""
        if self.offset_sync_writer is None:
            return
        producer = self.producers[0] if self.producers else self.heartbeat_producer
        try:
            syncs, errors = self.offset_sync_writer.write(producer, stream.alias, positions, stream.topic_ids)
        except (KafkaException, BufferError) as exc:
            syncs, errors = [], {"*": str(exc)}
        if errors:
            # Not fatal: translation uses the syncs written before (or after) this one.
            self.metrics.errors.labels(kind="offset_sync", **self._label).inc()
            log.warning("offset syncs not written", extra={**self._label, "source": stream.alias, "errors": errors})
        for sync in syncs:
            self.metrics.offset_syncs.labels(source=stream.alias, topic=sync.topic, **self._label).inc()

    def _count_delivered(self, stream: SourceStream, pending: dict) -> None:
        now_ms = time.time() * 1000
        for topic, (records, size, newest) in pending.items():
            labels = {**self._label, "source": stream.alias, "topic": topic}
            self.metrics.records_produced.labels(**labels).inc(records)
            self.metrics.bytes_produced.labels(**labels).inc(size)
            if newest:
                self.metrics.replication_latency.labels(**labels).set(max(0.0, (now_ms - newest) / 1000))

    def _commit_transactions(self, only: tuple[SourceStream, set] | None, deadline: float | None) -> bool:
        """Commit every partition that progressed, its records and its position in one transaction."""
        all_committed = True
        for stream in self.streams:
            if only is not None and only[0] is not stream:
                continue
            owned = only[1] if only is not None else stream.assigned
            ledger = stream.ledger
            progressed = {
                key: offset for key, offset in ledger.committable(ledger.checkpoint()).items()
                if key in owned and key in stream.producers
            }
            pending, stream.pending = stream.pending, {}
            committed = {}
            for key, offset in progressed.items():
                timeout = self.config.shutdown_timeout_s if deadline is None else max(0.5, deadline - self.clock())
                try:
                    stream.transactions.commit(key, offset, timeout)
                except TransactionAborted as exc:
                    all_committed = False
                    self._rewind(stream, key, str(exc))
                    continue
                except ProducerFenced as exc:
                    self.fatal = f"exactly-once producer fenced by another worker: {exc}"
                    return False
                committed[key] = offset
            self._count_delivered(stream, pending)
            if committed:
                ledger.mark_committed(committed)
                self._write_offset_syncs(stream, committed)
                # Also on the source group, for lag monitoring; positions come from the destination.
                self._commit(stream, committed)
        return all_committed

    def keep_positions_alive(self) -> None:
        """Exactly-once: commit again, unchanged, each position the destination's offsets retention could
        expire (see exactly_once.py). Runs right after a commit cycle: the due transactions hold no records."""
        for stream in self.streams:
            if stream.transactions is None or self.fatal is not None:
                continue
            for key, offset in stream.transactions.keepalive_due(stream.assigned, self.positions_keepalive_s).items():
                try:
                    stream.transactions.commit(key, offset, self.config.shutdown_timeout_s)
                except TransactionAborted as exc:
                    # Most likely the destination is unreachable: try again next cycle, not every partition now.
                    log.warning("position keep-alive failed", extra={**self._label, "source": stream.alias, "error": str(exc)})
                    break
                except ProducerFenced as exc:
                    self.fatal = f"exactly-once producer fenced by another worker: {exc}"
                    return

    def _commit(self, stream: SourceStream, offsets: dict) -> None:
        partitions = [TopicPartition(t, p, o, stream.topic_ids.get(t, "")) for (t, p), o in offsets.items()]
        try:
            if self._closing_deadline is not None:
                # A synchronous commit waits without limit for an unreachable coordinator: at shutdown, ask
                # the coordinator first, within the deadline.
                stream.consumer.committed([TopicPartition(t, p) for t, p in offsets],
                                          timeout=max(0.1, self._closing_deadline - self.clock()))
            stream.consumer.commit(offsets=partitions, asynchronous=False)
        except KafkaException as exc:
            # Not fatal: the records are on the destination; the next owner re-mirrors from the last commit.
            self.metrics.errors.labels(kind="commit", **self._label).inc()
            log.warning("commit failed", extra={**self._label, "source": stream.alias, "error": exc.args[0].str()})
            return
        stream.ledger.mark_committed(offsets)
        for (topic, partition), offset in offsets.items():
            self.metrics.committed_offset.labels(source=stream.alias, topic=topic, partition=str(partition), **self._label).set(offset)



def _merge_pending(stream: SourceStream, pending: dict) -> None:
    for topic, (records, size, newest) in pending.items():
        counts = stream.pending.setdefault(topic, [0, 0, 0])
        counts[0] += records
        counts[1] += size
        counts[2] = max(counts[2], newest)
