"""Exactly-once commits: each source's one transaction (exactly_once/stream_transaction.py) committed with
the positions of every partition that progressed, the ones due for a keep-alive, the ones claimed at
assignment and the ones released at a revoke.

A transaction that aborts, or whose commit finished late, takes every partition's records since the last
commit with it: all of them are rewound (re-sent from their committed positions) by the caller.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from confluent_kafka import KafkaException, TopicPartition

from mirror_worker.engine.backpressure import PAUSE_AFTER_S
from mirror_worker.engine.run_state import RunState
from mirror_worker.exactly_once.transactions import ProducerFenced, TransactionAborted, TransactionPending
from mirror_worker.exceptions import MirrorError
from mirror_worker.metrics import MirrorMetrics

if TYPE_CHECKING:
    from mirror_worker.engine.source_stream import SourceStream

log = logging.getLogger("mirror_worker")

@dataclass
class CommitOutcome:
    complete: bool  # every flush (or transaction) completed: nothing handed over is left unconfirmed
    # Partitions to rewind (re-send from the commit): exactly-once, their transaction was aborted; either
    # mode, a record of theirs was not delivered in time (held for a resend, engine/ledger.py).
    aborted: list[tuple[SourceStream, tuple[str, int], str]] = field(default_factory=list)


# How long a worker whose producer was fenced, and whose group membership is not current, polls for the
# rebalance that tells it what it still owns (a zombie's comes at once).
FENCED_WAIT_S = 15.0


class TransactionCommits:
    """`count_delivered(stream, pending)` and `settle_source(stream, committed, owned, now)` are the commit
    cycle's (metrics; source group and offset syncs); hold/release_consumers keep the consumers in their group
    while a commit waits on the destination from the main loop."""

    def __init__(self, metrics: MirrorMetrics, label: dict, state: RunState, clock: Callable[[], float],
                 count_delivered: Callable, settle_source: Callable, step_over: Callable,
                 hold_consumers: Callable[[], object] | None, release_consumers: Callable[[], None] | None,
                 positions_keepalive_s: float) -> None:
        self.metrics = metrics
        self.label = label
        self.state = state
        self.clock = clock
        self.count_delivered = count_delivered
        self.settle_source = settle_source
        self.step_over = step_over
        self.hold_consumers = hold_consumers
        self.release_consumers = release_consumers
        self.positions_keepalive_s = positions_keepalive_s

    def commit_stream(self, stream: SourceStream, outcome: CommitOutcome, *, deadline: float | None,
                      from_loop: bool, source_group: bool = True, claims: dict | None = None,
                      released: set | None = None, step_over: bool = False) -> None:
        """Commit the stream's open transaction with its positions; what could not be committed marks
        `outcome` incomplete, and what the transaction lost is added to `outcome.aborted`."""
        tx = stream.transactions
        if tx is None or tx.closed:
            return
        if self.state.fatal is not None:  # e.g. fenced by another process: nothing more is sent
            outcome.complete = False
            return
        ledger = stream.ledger
        released = released or set()
        if step_over:
            self.step_over(stream)
        pending, stream.pending = stream.pending, {}
        resends = ledger.resends()
        if resends and tx.pending_commit() is None:
            # A record failed in the open transaction: it can only abort, and every partition is re-sent.
            reason = next(iter(resends.values()))
            try:
                tx.abort(reason)
            except TransactionPending:
                outcome.complete = False
                merge_pending(stream, pending)
                return
            except ProducerFenced as exc:
                self._fenced(stream, outcome, exc, from_loop)
                return
            # Nothing more this cycle: the positions the ledger holds now cover the aborted records, until the
            # caller rewinds their partitions (a claim is tried again after that).
            self._lost(stream, outcome, reason)
            return
        owned = stream.assigned | released
        progressed = {key: offset for key, offset in ledger.committable(ledger.checkpoint()).items() if key in owned}
        positions = {**tx.keepalive_due(stream.assigned, self.positions_keepalive_s), **progressed, **(claims or {})}
        for key in released:  # named released even when it did not move
            if key not in positions and key in ledger.committed:
                positions[key] = ledger.committed[key]
        if not positions and tx.pending_commit() is None:
            self.count_delivered(stream, pending)
            self.settle_source(stream, {}, owned, source_group)
            return
        done = self._commit(stream, positions, released, deadline, from_loop)
        if isinstance(done, ProducerFenced):
            self._fenced(stream, outcome, done, from_loop)
            return
        if isinstance(done, TransactionAborted):
            self._lost(stream, outcome, str(done))
            return
        if done is None:
            outcome.complete = False  # still open: the next cycle, a rebalance or the shutdown finishes it
            merge_pending(stream, pending)
            return
        ledger.mark_committed({key: offset for key, offset in done.items() if key in stream.assigned})
        self.count_delivered(stream, pending)
        if done != positions:  # a late commit's positions: what was handed over after it is in no transaction
            self._lost(stream, outcome, "a commit that timed out finished late")
        self.settle_source(stream, {key: offset for key, offset in done.items() if key not in released},
                           owned, source_group)

    def _lost(self, stream: SourceStream, outcome: CommitOutcome, reason: str) -> None:
        """The transaction's records are gone (aborted): every partition handed over since its commit, or held
        for a resend, is re-sent."""
        outcome.complete = False
        ledger = stream.ledger
        resends = ledger.resends()
        for key in sorted(stream.assigned):
            committed = ledger.committed.get(key)
            if key in resends or (committed is not None and ledger.next_offsets.get(key, committed) > committed):
                outcome.aborted.append((stream, key, reason))

    def _commit(self, stream: SourceStream, positions: dict, released: set, deadline: float | None,
                hold_consumers: bool):
        """tx.commit, again while the destination does not answer: the positions committed, what the commit
        raised (TransactionAborted, ProducerFenced), or None if the deadline (or the shutdown's) came first.

        Unbounded only from the main loop (hold_consumers); elsewhere (a rebalance callback, fit_batches)
        bounded by shutdown_timeout_s."""
        if deadline is None and not hold_consumers:
            deadline = self.clock() + self.state.shutdown_timeout_s
        hold = hold_consumers and self.hold_consumers is not None
        started = last_log = self.clock()
        held = False
        tx = stream.transactions
        ended = tx.ended
        try:
            while True:
                if tx.ended != ended:
                    # A rebalance callback served by hold_consumers' poll ended the transaction that held the records
                    # of `positions` (aborted at a loss, or committed): committed now, in the next one, those
                    # positions would skip records no transaction carries any more.
                    return TransactionAborted("the transaction ended while its commit waited (a rebalance meanwhile)")
                try:
                    return tx.commit(positions, released, self._attempt_timeout(deadline))
                except (TransactionAborted, ProducerFenced) as exc:
                    return exc
                except TransactionPending as exc:
                    error = str(exc)
                now = self.clock()
                if deadline is None:  # a stop asked meanwhile: its deadline (None while running)
                    deadline = self.state.shutdown_deadline()
                if self.state.fatal is not None or (deadline is not None and now >= deadline):
                    return None
                if hold and not held and now - started >= PAUSE_AFTER_S:
                    # Once: a rebalance callback served by a poll mid-wait may read positions this worker's own
                    # pending commit holds (a stable read then waits out its timeout). A wait past
                    # max.poll.interval.ms drops the worker from its group; it rejoins once the commit is done.
                    self.hold_consumers()
                    held = True
                if now - last_log > 10:
                    self.metrics.errors.labels(kind="transaction_pending", **self.label).inc()
                    log.warning("waiting for the destination to commit the transaction", extra={
                        **self.label, "source": stream.alias, "partitions": len(positions), "error": error})
                    last_log = now
                time.sleep(0.2)
        finally:
            if held and self.release_consumers is not None:
                self.release_consumers()

    def _attempt_timeout(self, deadline: float | None) -> float:
        return 5.0 if deadline is None else max(0.5, min(5.0, deadline - self.clock()))

    # ---------------------------------------------------------------- fenced
    def _fenced(self, stream: SourceStream, outcome: CommitOutcome, exc: Exception, from_loop: bool) -> bool:
        """This worker's transactional.id was fenced: a new owner of one of its partitions fenced the writer its
        position named (stream_transaction.py (F)). Once the source group confirms what this worker still owns,
        it re-opens its id and re-sends what the aborted transaction held; else it stops (another process
        writes as this mirror). True when it goes on."""
        outcome.complete = False
        if self._member_now(stream) or (from_loop and self._rebalanced(stream)):
            # The same error when the destination's coordinator aborted a transaction left open past
            # transaction.timeout.ms and bumped its epoch (seen at 5,000 partitions on a saturated machine, no
            # rebalance anywhere): the line names both.
            log.warning("exactly-once producer fenced (a new owner of a partition, or the destination aborted a "
                        "transaction open past transaction.timeout.ms): re-opened", extra={
                **self.label, "source": stream.alias, "error": str(exc)})
            self.metrics.errors.labels(kind="transaction_fenced", **self.label).inc()
            try:
                stream.transactions.reopen()
            except MirrorError as failed:
                self.state.fail(f"exactly-once producer not re-opened after a fence: {failed}")
                return False
            self._lost(stream, outcome, f"fenced: {exc}")
            return True
        self.state.fail(f"exactly-once producer fenced by another worker: {exc}")
        return False

    def _member_now(self, stream: SourceStream) -> bool:
        """Whether the source group still counts this worker, at its generation, as the owner of what it holds:
        a commit of their positions is refused with the generation of a member the group dropped."""
        owned = sorted(k for k in stream.assigned if k in stream.ledger.committed)
        if not owned:
            return not stream.assigned
        offsets = [TopicPartition(t, p, stream.ledger.committed[(t, p)], stream.topic_ids.get(t, "")) for t, p in owned]
        try:
            stream.consumer.commit(offsets=offsets, asynchronous=False)
            return True
        except KafkaException as exc:
            log.warning("source group membership not confirmed", extra={
                **self.label, "source": stream.alias, "error": exc.args[0].str()})
            return False

    def _rebalanced(self, stream: SourceStream) -> bool:
        """Poll (consumers held) until a rebalance changes what the stream owns, within FENCED_WAIT_S: a zombie
        learns at its next polls that the group dropped it, and its partitions are released."""
        if self.hold_consumers is None:
            return False
        seen = stream.rebalances
        deadline = self.clock() + FENCED_WAIT_S
        held = False
        try:
            while stream.rebalances == seen:
                if self.clock() >= deadline:
                    return False
                held = self.hold_consumers() or held
                time.sleep(0.2)
            return True
        finally:
            if held and self.release_consumers is not None:
                self.release_consumers()


def merge_pending(stream: SourceStream, pending: dict) -> None:
    """Records handed over but not confirmed (a flush that did not complete, a transaction still open): counted
    as produced by a later cycle."""
    for topic, (records, size, newest) in pending.items():
        counts = stream.pending.setdefault(topic, [0, 0, 0])
        counts[0] += records
        counts[1] += size
        counts[2] = max(counts[2], newest)
