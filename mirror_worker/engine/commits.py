"""The at-least-once rule and its exactly-once twin: flush (or commit transactions), then commit offsets and write offset syncs."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from confluent_kafka import KafkaException, TopicPartition

from mirror_worker.dr.offset_syncs import OffsetSyncWriter
from mirror_worker.engine.backpressure import PAUSE_AFTER_S
from mirror_worker.engine.run_state import RunState
from mirror_worker.exactly_once.transactions import ProducerFenced, TransactionAborted, TransactionPending
from mirror_worker.metrics import MirrorMetrics

if TYPE_CHECKING:
    from mirror_worker.engine.source_stream import SourceStream

log = logging.getLogger("mirror_worker")

# How long a worker whose exactly-once producer was fenced polls for the rebalance that takes the partition
# from it (a zombie's comes at once; see CommitCycle._taken_over).
FENCED_WAIT_S = 15.0


@dataclass
class CommitOutcome:
    complete: bool  # every flush (or transaction) completed: nothing handed over is left unconfirmed
    # Partitions to rewind (re-send from the commit): exactly-once, their transaction was aborted; either
    # mode, a record of theirs was not delivered in time (held for a resend, engine/ledger.py).
    aborted: list[tuple[SourceStream, tuple[str, int], str]] = field(default_factory=list)


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
        self.positions_keepalive_s = positions_keepalive_s  # exactly-once, see keep_positions_alive
        # At-least-once: a record was not delivered in time; what is queued behind it is purged at the next
        # flush round, so that nothing of its partition lands before its resend (order).
        self.purge_requested = False
        self.on_wait = on_wait  # called while a flush waits on the destination (the stall watch)
        # Exactly-once: positions committed on the destination, not yet on the source group (see source_group).
        self.source_due: dict[str, set[tuple[str, int]]] = {}

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
                _merge_pending(stream, pending)
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
        """Commit every partition that progressed, its records and its position in one transaction."""
        outcome = CommitOutcome(True)
        for stream in self.streams:
            if only is not None and only[0] is not stream:
                continue
            owned = only[1] if only is not None else stream.assigned
            ledger = stream.ledger
            if only is None:
                self._step_over_control_records(stream)
            resends = ledger.resends() if only is None else {}
            progressed = {
                key: offset for key, offset in ledger.committable(ledger.checkpoint()).items()
                if key in owned and key in stream.producers and key not in resends
            }
            pending, stream.pending = stream.pending, {}
            committed = {}
            for key in [*resends, *(k for k in stream.producers if stream.transactions.pending_commit(k) is not None)]:
                if key in owned and key in stream.producers and key not in progressed:
                    # A record failed in its transaction: abort it, then rewind (or, a commit that timed out
                    # first: finish it, then rewind, see pending_commit).
                    progressed[key] = None
            targets = {key: offset if stream.transactions.pending_commit(key) is None
                       else stream.transactions.pending_commit(key)
                       for key, offset in progressed.items()
                       if offset is not None or stream.transactions.pending_commit(key) is not None}
            # Every partition's commit at once, and again at once while the destination does not answer: a commit
            # that hangs (send_offsets_to_transaction after a broker restart) costs one bound, not one per partition.
            results = self._commit_all(stream, targets, deadline, from_loop) if targets else {}
            for key, offset in progressed.items():
                try:
                    if key not in targets:
                        stream.transactions.abort(key, resends[key])
                        raise TransactionAborted(resends[key])
                    done = results[key]
                    if isinstance(done, BaseException):
                        raise done
                    if done is None:
                        outcome.complete = False  # still open: the rebalance or the shutdown aborts it
                        continue
                except TransactionAborted as exc:
                    outcome.complete = False
                    outcome.aborted.append((stream, key, str(exc)))
                    continue
                except TransactionPending:
                    outcome.complete = False
                    continue
                except ProducerFenced as exc:
                    outcome.complete = False
                    if self._given_up(stream, key, exc, only is None):
                        continue
                    return outcome
                committed[key] = done
                if done != offset:  # what was handed over after the late commit is in no transaction: re-sent
                    outcome.complete = False
                    outcome.aborted.append((stream, key, resends.get(key, f"commit of position {done} finished late")))
            self._count_delivered(stream, pending)
            if committed:
                ledger.mark_committed(committed)
            self._settle_source(stream, committed, owned, source_group)
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
                                    and not stream.transactions.unfinished(key))})
        self.commit(stream, settled)

    def _given_up(self, stream: SourceStream, key: tuple[str, int], exc: Exception, from_loop: bool) -> bool:
        """A fenced producer: True when the group gave the partition to another owner (the worker goes on);
        else the worker stops, since another process writes as this mirror."""
        if self._taken_over(stream, key, from_loop):
            log.warning("exactly-once producer fenced: the partition has a new owner", extra={
                **self.label, "source": stream.alias, "partition": f"{key[0]}[{key[1]}]", "error": str(exc)})
            return True
        self.state.fail(f"exactly-once producer fenced by another worker: {exc}")
        return False

    def _taken_over(self, stream: SourceStream, key: tuple[str, int], from_loop: bool) -> bool:
        """After the producer of `key` was fenced: True once the group took the partition from this worker.
        A worker frozen past max.poll.interval.ms (a zombie) learns it at its next polls, which run the
        rebalance; a partition still ours after FENCED_WAIT_S is another process writing as this mirror.
        A rebalance callback's partitions are leaving anyway (True)."""
        if not from_loop:
            return True
        if self.hold_consumers is None:
            return False
        deadline = self.clock() + FENCED_WAIT_S
        held = False
        try:
            while key in stream.assigned:
                if self.clock() >= deadline:
                    return False
                held = self.hold_consumers() or held
                time.sleep(0.2)
            return True
        finally:
            if held and self.release_consumers is not None:
                self.release_consumers()

    def _attempt_timeout(self, deadline: float | None) -> float:
        return 5.0 if deadline is None else max(0.5, min(5.0, deadline - self.clock()))

    def _commit_all(self, stream: SourceStream, targets: dict[tuple[str, int], int], deadline: float | None,
                    hold_consumers: bool) -> dict[tuple[str, int], int | None | BaseException]:
        """Commit each partition's transaction (PartitionTransactions.commit_many: all at once), the ones the
        destination did not answer tried again, together, until they finish: {key: the position committed,
        what the commit raised, or None if the deadline (or the shutdown's) came first: still open}.

        Unbounded only from the main loop (hold_consumers); elsewhere (a rebalance callback, fit_batches)
        bounded by shutdown_timeout_s."""
        if deadline is None and not hold_consumers:
            deadline = self.clock() + self.state.shutdown_timeout_s
        hold = hold_consumers and self.hold_consumers is not None
        started = last_log = self.clock()
        held = False
        results: dict[tuple[str, int], int | None | BaseException] = {}
        pending = dict(targets)
        try:
            while True:
                for key in [k for k in pending if k not in stream.producers]:
                    results[key] = None  # revoked or lost meanwhile (held consumers run rebalances): its owner re-sends
                    del pending[key]
                if not pending:
                    return results
                errors = {}
                answered = stream.transactions.commit_many(pending, self._attempt_timeout(deadline))
                for key in list(pending):
                    result = answered.get(key)  # none: its producer left during the calls (a rebalance)
                    if isinstance(result, TransactionPending):
                        errors[key] = str(result)
                    else:
                        results[key] = result
                        del pending[key]
                if not pending:
                    return results
                now = self.clock()
                if deadline is None:  # a stop asked meanwhile: its deadline (None while running)
                    deadline = self.state.shutdown_deadline()
                if self.state.fatal is not None or (deadline is not None and now >= deadline):
                    return {**results, **dict.fromkeys(pending)}
                if hold and not held and now - started >= PAUSE_AFTER_S:
                    self.hold_consumers()
                    held = True
                if now - last_log > 10:
                    self.metrics.errors.labels(kind="transaction_pending", **self.label).inc()
                    key, error = next(iter(errors.items()))
                    log.warning("waiting for the destination to commit transactions", extra={
                        **self.label, "source": stream.alias, "partitions": len(errors),
                        "partition": f"{key[0]}[{key[1]}]", "error": error})
                    last_log = now
                time.sleep(0.2)
        finally:
            if held and self.release_consumers is not None:
                self.release_consumers()

    def keep_positions_alive(self) -> None:
        """Exactly-once: commit again, unchanged, each position the destination's offsets retention could
        expire (see exactly_once/transactions.py). Runs right after a commit cycle: the due transactions hold no records."""
        for stream in self.streams:
            if stream.transactions is None or self.state.fatal is not None:
                continue
            for key, offset in stream.transactions.keepalive_due(stream.assigned, self.positions_keepalive_s).items():
                try:
                    done = self._commit_all(stream, {key: offset}, None, True)[key]
                    if isinstance(done, BaseException):
                        raise done
                    if done is None:
                        return  # stopping
                except TransactionAborted as exc:
                    # Most likely the destination is unreachable: try again next cycle, not every partition now.
                    log.warning("position keep-alive failed", extra={**self.label, "source": stream.alias, "error": str(exc)})
                    break
                except ProducerFenced as exc:
                    # A zombie (frozen past max.poll.interval.ms) may learn it here first, as in the commit cycle.
                    if self._given_up(stream, key, exc, True):
                        continue
                    return

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


def _merge_pending(stream: SourceStream, pending: dict) -> None:
    for topic, (records, size, newest) in pending.items():
        counts = stream.pending.setdefault(topic, [0, 0, 0])
        counts[0] += records
        counts[1] += size
        counts[2] = max(counts[2], newest)
