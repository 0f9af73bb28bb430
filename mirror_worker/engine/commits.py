"""The at-least-once rule and its exactly-once twin: flush (or commit transactions), then commit offsets and write offset syncs."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from confluent_kafka import KafkaException, TopicPartition

from mirror_worker.dr.offset_syncs import OffsetSyncWriter
from mirror_worker.engine.backpressure import PAUSE_AFTER_S
from mirror_worker.engine.run_state import RunState
from mirror_worker.engine.transaction_cycle import CommitOutcome, TransactionCommits, merge_pending
from mirror_worker.metrics import MirrorMetrics

if TYPE_CHECKING:
    from mirror_worker.engine.source_stream import SourceStream

log = logging.getLogger("mirror_worker")

class CommitCycle:
    """Flush (or commit transactions), then commit the checkpoint taken before it.

    `streams` is the worker's list of sources (read at each commit); `producers()` returns every producer
    records are handed to; `sync_producer()` returns the producer that writes the offset syncs when
    `offset_sync_writer` is set: asked at each write, since the worker replaces its producers (fit_batches) and a
    replaced one is neither polled nor flushed any more.
    """

    def __init__(self, streams: list[SourceStream], producers: Callable[[], list], metrics: MirrorMetrics,
                 label: dict, state: RunState, clock: Callable[[], float], exactly_once: bool,
                 offset_sync_writer: OffsetSyncWriter | None = None, sync_producer: Callable[[], object] = lambda: None,
                 hold_consumers: Callable[[], object] | None = None, release_consumers: Callable[[], None] | None = None,
                 positions_keepalive_s: float = 3600.0, on_wait: Callable[[], None] = lambda: None) -> None:
        self.streams = streams
        self.producers = producers
        self.metrics = metrics
        self.label = label
        self.state = state
        self.clock = clock
        self.exactly_once = exactly_once
        self.offset_sync_writer = offset_sync_writer
        self.sync_producer = sync_producer
        # While the main loop's flush waits on the destination: keep the consumers in their group (pause and
        # poll them), and let them go again afterwards.
        self.hold_consumers = hold_consumers
        self.release_consumers = release_consumers
        # Exactly-once: each source's transaction, with the positions due for a keep-alive (transactions.py).
        self.transactions = TransactionCommits(
            metrics, label, state, clock, self._count_delivered, self._settle_source,
            self._step_over_control_records, hold_consumers, release_consumers, positions_keepalive_s)
        # At-least-once: a record was not delivered in time; what is queued behind it is purged at the next
        # flush round, so that nothing of its partition lands before its resend (order).
        self.purge_requested = False
        self.on_wait = on_wait  # called while a flush waits on the destination (the stall watch)
        # Exactly-once: positions committed on the destination, not yet on the source group (see source_group).
        self.source_due: dict[str, set[tuple[str, int]]] = {}

    def request_purge(self) -> None:
        """At-least-once: a record was not delivered in time. What the producers still queue (not what is in flight)
        is purged at the next round of a flush, so that nothing of its partition lands before the resend."""
        self.purge_requested = True

    def flush(self, deadline: float | None, hold_consumers: bool = False) -> bool:
        """Wait until every producer delivered everything; False if the deadline came first.

        hold_consumers (the main loop's cycle only, never a rebalance callback): a wait longer than
        PAUSE_AFTER_S pauses and polls the consumers, so a destination outage longer than
        max.poll.interval.ms does not drop this worker from its group.
        """
        hold = hold_consumers and self.hold_consumers is not None
        started = last_log = self.clock()
        held = False
        try:
            while True:
                remaining = 0
                for producer in self.producers():
                    remaining += producer.flush(0.5)
                if remaining == 0:
                    self.purge_requested = False
                    return True
                if self.purge_requested:
                    self.purge_requested = False
                    for producer in self.producers():
                        producer.purge(in_queue=True, in_flight=False, blocking=False)
                now = self.clock()
                if self.state.fatal is not None:
                    return False
                if deadline is None:  # a stop asked meanwhile: its deadline (None while running)
                    deadline = self.state.shutdown_deadline()
                if deadline is not None and now >= deadline:
                    return False
                if hold and now - started >= PAUSE_AFTER_S:
                    self.hold_consumers()
                    held = True
                self.on_wait()
                if now - last_log > 10:
                    log.warning("waiting for the destination to acknowledge", extra={**self.label, "in_flight": remaining})
                    last_log = now
        finally:
            if held and self.release_consumers is not None:
                self.release_consumers()

    def checkpoint_and_commit(self, only: tuple[SourceStream, set] | None = None,
                              deadline: float | None = None, from_loop: bool = False,
                              source_group: bool = True) -> CommitOutcome:
        """source_group=False (exactly-once, the loop's short transaction interval): the transactions only;
        the source group's offsets and the offset syncs wait for the next cycle with source_group."""
        if self.exactly_once:
            return self._commit_transactions(only, deadline, from_loop, source_group)
        if only is None:
            for stream in self.streams:
                self._step_over_control_records(stream)
        checkpoints = [(stream, stream.ledger.checkpoint(), stream.pending) for stream in self.streams]
        for stream in self.streams:
            stream.pending = {}
        if not self.flush(deadline, hold_consumers=from_loop) or self.state.fatal is not None:
            # Nothing handed over since these checkpoints is known to be delivered: commit nothing.
            for stream, _, pending in checkpoints:
                merge_pending(stream, pending)
            return CommitOutcome(False)
        for stream, checkpoint, pending in checkpoints:
            self._count_delivered(stream, pending)
            if only is not None and only[0] is not stream:
                continue
            owned = only[1] if only is not None else stream.assigned
            # Only partitions this worker still owns: a commit for others would race their new owner.
            offsets = {k: v for k, v in stream.ledger.committable(checkpoint).items() if k in owned}
            if offsets:
                self.commit(stream, offsets)
                self.write_offset_syncs(stream, offsets)
        outcome = CommitOutcome(True)
        if only is None:  # every record handed over is delivered or failed: resend from the commit
            outcome.aborted = [(stream, key, reason) for stream in self.streams
                               for key, reason in stream.ledger.resends().items() if key in stream.assigned]
        return outcome

    def _step_over_control_records(self, stream: SourceStream) -> None:
        """Let the ledger take the consumer's position where it passed offsets that hold no record.

        Only between two batches (never from a rebalance callback, which may run inside consume() after it
        collected records not handed over yet), and only for partitions with nothing in the stash: the
        position counts every record the consumer returned, handed over or not.
        """
        if stream.interrupted:
            return  # some records the consumer returned were never handed over: its position is not ours
        stashed = {(m.topic(), m.partition()) for m in stream.stash}
        settled = [TopicPartition(t, p) for t, p in sorted(stream.assigned)
                   if (t, p) not in stashed and (t, p) not in stream.ledger.halted]
        if not settled:
            return
        try:
            positions = stream.consumer.position(settled)
        except KafkaException:
            return  # the position is an optimisation: the records' own offsets stay committable
        stream.ledger.step_over({(tp.topic, tp.partition): tp.offset for tp in positions if tp.offset >= 0})

    def write_offset_syncs(self, stream: SourceStream, positions: dict) -> None:
        """Right after a completed flush or transaction commit, before anything else is produced."""
        if self.offset_sync_writer is None:
            return
        try:
            syncs, errors = self.offset_sync_writer.write(self.sync_producer(), stream.alias, positions, stream.topic_ids)
        except (KafkaException, BufferError, TimeoutError) as exc:
            syncs, errors = [], {"*": str(exc) or type(exc).__name__}
        if errors:
            # Not fatal: translation uses the syncs written before (or after) this one.
            self.metrics.errors.labels(kind="offset_sync", **self.label).inc()
            log.warning("offset syncs not written", extra={**self.label, "source": stream.alias, "errors": errors})
        for sync in syncs:
            self.metrics.offset_syncs.labels(source=stream.alias, topic=sync.topic, **self.label).inc()

    def _count_delivered(self, stream: SourceStream, pending: dict) -> None:
        now_ms = time.time() * 1000
        for topic, (records, size, newest) in pending.items():
            labels = {**self.label, "source": stream.alias, "topic": topic}
            self.metrics.records_produced.labels(**labels).inc(records)
            self.metrics.bytes_produced.labels(**labels).inc(size)
            if newest:
                self.metrics.replication_latency.labels(**labels).set(max(0.0, (now_ms - newest) / 1000))

    def _commit_transactions(self, only: tuple[SourceStream, set] | None, deadline: float | None,
                             from_loop: bool = False, source_group: bool = True) -> CommitOutcome:
        """Commit each stream's transaction (engine/transaction_cycle.py); `only`: a rebalance callback's
        partitions, released in that stream's commit."""
        outcome = CommitOutcome(True)
        for stream in self.streams:
            if only is not None and only[0] is not stream:
                continue
            # Markers are stepped over on the cycles that commit the source group too (every commit interval), not
            # on every transaction: a position request for every assigned partition per 30-ms cycle took 4.4 s of
            # a 5,000-partition copy's main loop.
            self.transactions.commit_stream(stream, outcome, deadline=deadline, from_loop=from_loop,
                                            source_group=source_group, released=set(only[1]) if only else None,
                                            step_over=only is None and source_group)
        return outcome

    def claim(self, stream: SourceStream, offsets: dict) -> CommitOutcome:
        """Exactly-once, at an assignment: commit the new partitions' positions naming this worker as their
        writer before any of their records is handed over (stream_transaction.py (W))."""
        outcome = CommitOutcome(True)
        self.transactions.commit_stream(stream, outcome, deadline=self.state.shutdown_deadline(), from_loop=False,
                                        source_group=False, claims=offsets)
        return outcome

    def _settle_source(self, stream: SourceStream, committed: dict, owned: set, now: bool) -> None:
        """Exactly-once: the positions committed on the destination go to the source group too (for lag
        monitoring; positions come from the destination), with offset syncs, on cycles with `now` only.

        An offset sync pairs a position with the destination's high watermark read now: right for a
        partition committed in this cycle (nothing produced since), or one with nothing handed over since
        its commit (nothing of it open in a transaction); the others get theirs at a later cycle."""
        due = self.source_due.setdefault(stream.alias, set())
        due.update(committed)
        if not now:
            return
        # The position now (the ledger's committed offset is the destination's), not the one noted: a partition
        # lost and assigned again meanwhile starts again from the destination's.
        settled = {key: stream.ledger.committed[key] for key in due if key in owned and key in stream.ledger.committed}
        due.difference_update(settled)
        due.intersection_update(stream.assigned)  # given away meanwhile: its new owner commits it
        if not settled:
            return
        self.write_offset_syncs(stream, {
            key: offset for key, offset in settled.items()
            if key in committed or (stream.ledger.next_offsets.get(key, offset) == offset
                                    and not stream.transactions.unfinished())})
        self.commit(stream, settled)

    def commit(self, stream: SourceStream, offsets: dict) -> None:
        """Commit `offsets` on the source group; a failed commit is counted, never fatal."""
        partitions = [TopicPartition(t, p, o, stream.topic_ids.get(t, "")) for (t, p), o in offsets.items()]
        try:
            closing = self.state.closing_deadline
            if closing is not None:
                # A synchronous commit waits without limit for an unreachable coordinator: at shutdown, ask
                # the coordinator first, within the deadline.
                stream.consumer.committed([TopicPartition(t, p) for t, p in offsets],
                                          timeout=max(0.1, closing - self.clock()))
            stream.consumer.commit(offsets=partitions, asynchronous=False)
        except KafkaException as exc:
            # Not fatal: the records are on the destination; the next owner re-mirrors from the last commit.
            self.metrics.errors.labels(kind="commit", **self.label).inc()
            log.warning("commit failed", extra={**self.label, "source": stream.alias, "error": exc.args[0].str()})
            return
        stream.ledger.mark_committed(offsets)
        for (topic, partition), offset in offsets.items():
            self.metrics.committed_offset.labels(source=stream.alias, topic=topic, partition=str(partition), **self.label).set(offset)
