"""Partitions coming and going (rebalance callbacks) and where each starts: committed position, data-loss checks, recreated topics, rewinds."""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from confluent_kafka import TopicPartition

from mirror_worker.clients.groups import committed_positions
from mirror_worker.clients.log_ends import log_bounds
from mirror_worker.engine.commits import CommitCycle
from mirror_worker.engine.data_loss import StartDecision, Verdict, decide_start, resets_to_earliest
from mirror_worker.engine.halts import Halts
from mirror_worker.engine.run_state import RunState
from mirror_worker.exceptions import MirrorError, StopInterrupted
from mirror_worker.metrics import MirrorMetrics
from mirror_worker.topics.admin import topic_ids

if TYPE_CHECKING:
    from mirror_worker.engine.source_stream import SourceStream

log = logging.getLogger("mirror_worker")

# The pause between two attempts of an exactly-once claim (assignment._claim).
CLAIM_RETRY_S = 0.5


class PartitionAssignment:
    """Partitions assigned, revoked or lost, and the position each one starts from.

    `halts_on_loss`: on_data_loss=halt (else reset to the earliest record still there); `paused()` tells
    whether the worker's consumers are paused for backpressure (new partitions join paused).
    """

    def __init__(self, commits: CommitCycle, halts: Halts, metrics: MirrorMetrics, label: dict, state: RunState,
                 startup_timeout_s: float, halts_on_loss: bool, paused: Callable[[], bool],
                 vanished_reason: Callable[[SourceStream, tuple[str, int]], str] | None = None,
                 catchup_check: Callable[[SourceStream], None] | None = None,
                 fresh_start: Callable[[SourceStream, str, int, int, int], int] | None = None) -> None:
        self.commits = commits
        self.halts = halts
        self.metrics = metrics
        self.label = label
        self.state = state
        self.startup_timeout_s = startup_timeout_s
        self.halts_on_loss = halts_on_loss
        self.paused = paused
        # Exactly-once: why a partition whose position expired from the destination halts (see exactly_once/transactions.py).
        self.vanished_reason = vanished_reason or (lambda _stream, key: f"{key[0]}[{key[1]}]: position expired")
        # Raises when a Spark catch-up holds the group (engine/catchup_lease.py) or the mirror was failed over
        # (dr/failover_mark.py): nothing may be mirrored then.
        self.catchup_check = catchup_check or (lambda _stream: None)
        # Where a partition without a position starts, instead of the reset policy (a failback mirror: dr/failback.py).
        self.fresh_start = fresh_start
        # Set by TopicManagement: partitions assigned beyond a topic's known count grow the destination first.
        self.before_assign: Callable[[SourceStream, set], None] = lambda _stream, _keys: None

    # ---------------------------------------------------------------- rebalance callbacks
    def on_assign(self, stream: SourceStream, partitions: list[TopicPartition]) -> None:
        keys = {(tp.topic, tp.partition) for tp in partitions}
        if partitions:
            self.catchup_check(stream)  # a member of the group by now: a catch-up starting later sees this worker
        self.before_assign(stream, keys)
        try:
            halts, claimed = self._assign_checked(stream, partitions)
        except StopInterrupted as exc:
            self._not_taken_up(stream, partitions, str(exc))
            return
        stream.assigned |= keys
        if self.paused() or not claimed:  # unclaimed (exactly-once, a stop came first): never fetched
            stream.consumer.pause(partitions)
        elif partitions:
            # librdkafka keeps a partition's pause across assignments: one halted before a rebalance gave it
            # back would fetch nothing, for good (it halts again, here or in the hot path, if it must).
            stream.consumer.resume(partitions)
        if stream.schemas is not None:
            halts += stream.schemas.conflict_halts(partitions)
        for (topic, partition), offset, reason in halts:
            self.halts.halt(stream, topic, partition, offset, reason)
        log.info("partitions assigned", extra={**self.label, "source": stream.alias, "partitions": _fmt(keys)})

    def _not_taken_up(self, stream: SourceStream, partitions: list[TopicPartition], why: str) -> None:
        """Exactly-once: a stop came while the partitions' start waited on the destination (their earlier
        writers being fenced, this worker's producer starting). None was claimed or started in the ledger: they
        are handed to the consumer paused, never fetched, and the stop goes on; their next owner starts where
        their positions stand. (Left to the exception, the consumer's poll raised it and the worker exited 1.)"""
        if stream.transactions is not None:
            stream.transactions.forget({(tp.topic, tp.partition) for tp in partitions})
        if stream.incremental_assignment:
            stream.consumer.incremental_assign(partitions)
        else:
            stream.consumer.assign(partitions)
        stream.consumer.pause(partitions)
        log.info("partitions not taken up: the worker is stopping", extra={
            **self.label, "source": stream.alias, "partitions": _fmt({(tp.topic, tp.partition) for tp in partitions}),
            "reason": why})

    def on_revoke(self, stream: SourceStream, partitions: list[TopicPartition]) -> None:
        keys = {(tp.topic, tp.partition) for tp in partitions}
        # Commit what is done for the partitions that leave, so their next owner starts right there.
        outcome = self.commits.checkpoint_and_commit(only=(stream, keys), deadline=self.state.shutdown_deadline())
        for aborted_stream, key, reason in outcome.aborted:
            self.rewind(aborted_stream, key, reason)
        self._release(stream, keys)
        log.info("partitions revoked", extra={**self.label, "source": stream.alias, "partitions": _fmt(keys)})

    def on_lost(self, stream: SourceStream, partitions: list[TopicPartition]) -> None:
        keys = {(tp.topic, tp.partition) for tp in partitions}
        self._abort_with(stream, keys)
        self._release(stream, keys)
        log.warning("partitions lost (not committed)", extra={**self.label, "source": stream.alias, "partitions": _fmt(keys)})

    def _abort_with(self, stream: SourceStream, keys: set[tuple[str, int]]) -> None:
        """Exactly-once, partitions lost (not committed): the open transaction may hold records of theirs
        without their positions, so it must never commit. It is aborted, and the partitions kept re-sent.
        (A commit left pending sent their positions with their records: it may finish either way.)"""
        tx = stream.transactions
        ledger = stream.ledger
        if tx is None or tx.pending_commit() is not None or not any(
                ledger.next_offsets.get(key, -1) > ledger.committed.get(key, -1) for key in keys):
            return
        try:
            tx.abort("partitions lost with records in the open transaction")
        except MirrorError as exc:  # pending (it aborts by itself, or its producer is replaced) or fenced
            log.warning("open transaction not aborted at a lost assignment", extra={
                **self.label, "source": stream.alias, "error": str(exc)})
            tx.broken = True  # replaced (and its transaction aborted by the replacement) before the next use
        for key in sorted(stream.assigned - keys):
            if ledger.next_offsets.get(key, -1) > ledger.committed.get(key, -1):
                self.rewind(stream, key, "the open transaction aborted: partitions were lost")

    def _release(self, stream: SourceStream, keys: set[tuple[str, int]]) -> None:
        """Forget partitions this worker no longer owns: their positions and stashed records."""
        if stream.transactions is not None:
            stream.transactions.forget(keys)
        stream.ledger.forget(keys)
        self.metrics.forget_partitions(stream.alias, keys)  # a halt or position of theirs is no longer this worker's
        stream.assigned -= keys
        stream.rebalances += 1
        stream.drop_stashed(keys)

    # ---------------------------------------------------------------- start positions
    def _log_bounds(self, stream: SourceStream, partitions: list[TopicPartition]) -> dict[tuple[str, int], tuple]:
        """Each partition's (log start, end its consumer reaches), in two ListOffsets requests for all of them.
        The consumer's get_watermark_offsets, one partition after another, costs two round trips each: 1.3 s
        from join to start positions for 12 partitions 50 ms away (bench.wan, source side), a minute for a
        thousand."""
        return log_bounds(stream.admin, [TopicPartition(tp.topic, tp.partition) for tp in partitions],
                          stream.reads_committed, self.startup_timeout_s)

    def _assign_checked(self, stream: SourceStream, partitions: list[TopicPartition]) -> tuple[list, bool]:
        """Start each partition at its position, unless records between it and the log were lost.

        Positions: exactly-once, the destination's (after fencing the partitions' previous owners); else,
        or before the first exactly-once commit, the source group's. Returns the partitions to halt, and
        whether they may be fetched (exactly-once: claimed).
        """
        keys = [(tp.topic, tp.partition) for tp in partitions]
        positions = stream.transactions.open(keys) if stream.transactions is not None else {}
        missing = [TopicPartition(t, p) for t, p in keys if positions.get((t, p)) is None]
        # Exactly-once positions that existed and are gone (expired): no fallback can be trusted for them.
        vanished = stream.transactions.vanished([(tp.topic, tp.partition) for tp in missing]) if missing and \
            stream.transactions is not None else set()
        if missing:
            positions.update(committed_positions(stream.consumer, missing, self.startup_timeout_s))
        recreated = self.fetch_topic_ids(stream, sorted({t for t, _ in keys}))
        bounds = self._log_bounds(stream, partitions)
        reset_to_earliest = resets_to_earliest(stream.reset_policy)
        halts = []
        for tp in partitions:
            key = (tp.topic, tp.partition)
            position, position_topic_id = positions.get(key) or (None, None)
            low, high = bounds[key]
            if key in vanished:
                stream.ledger.forget([key])  # nothing is committed for it: no position is known
                tp.offset = position if position is not None and low <= position <= high else high
                halts.append((key, tp.offset, self.vanished_reason(stream, key)))
                continue
            if tp.topic in recreated and position_topic_id in (None, "", recreated[tp.topic]):
                # Seen recreated while this worker ran; the broker dropped the old topic's offsets with it.
                position, position_topic_id = position or 0, recreated[tp.topic]
            decision = decide_start(position, position_topic_id, stream.topic_ids.get(tp.topic), low, high,
                                    reset_to_earliest, f"{tp.topic}[{tp.partition}]")
            if decision.verdict is Verdict.FRESH and self.fresh_start is not None:
                decision = StartDecision(Verdict.FRESH, self.fresh_start(stream, tp.topic, tp.partition, low, high))
            tp.offset = decision.offset
            stream.ledger.start(key, position if decision.lost and self.halts_on_loss else decision.offset)
            if decision.lost:
                self._report_data_loss(stream, tp.topic, tp.partition, decision)
                if self.halts_on_loss:
                    halts.append((key, position, decision.reason))
        log.info("start positions", extra={
            **self.label, "source": stream.alias,
            "positions": sorted(f"{tp.topic}[{tp.partition}]@{tp.offset}" for tp in partitions),
        })
        # A first sync per partition before this worker produces any of its records: a consumer that
        # committed anywhere from here on translates, even before the first commit of this worker.
        claimed = self._claim(stream, keys) if stream.transactions is not None else True
        halted = {key for key, _, _ in halts}
        self.commits.write_offset_syncs(stream, {(tp.topic, tp.partition): tp.offset for tp in partitions
                                                 if (tp.topic, tp.partition) not in halted})
        if stream.incremental_assignment:
            stream.consumer.incremental_assign(partitions)
        else:
            stream.consumer.assign(partitions)
        return halts, claimed

    def _claim(self, stream: SourceStream, keys: list[tuple[str, int]]) -> None:
        """Exactly-once: the new partitions' positions name this worker as their writer before any of their
        records is handed over (stream_transaction.py (W)); tried again within the start-up timeout (a destination
        topic created moments before is refused by the transaction's offset commit until its coordinator knows it:
        5,000 partitions, bench/width.py), then the worker stops with one line. False: a stop (or a fatal
        error) came first, and the partitions must not be fetched."""
        claims = {key: stream.ledger.committed[key] for key in keys if key in stream.ledger.committed}
        if not claims:
            return True
        reason = "the claim's transaction was not committed in time"
        deadline = time.monotonic() + self.startup_timeout_s
        while True:
            outcome = self.commits.claim(stream, claims)
            for aborted_stream, key, why in outcome.aborted:  # the transaction held other partitions' records
                self.rewind(aborted_stream, key, why)
                reason = why
            if outcome.complete:
                return True
            if self.state.fatal is not None or not self.state.running:
                return False
            if time.monotonic() >= deadline:
                raise MirrorError(f"exactly-once: the partitions assigned to this worker could not be claimed on the "
                                  f"destination ({len(claims)} of source {stream.alias!r}) within "
                                  f"{self.startup_timeout_s:.0f}s: {reason}")
            time.sleep(CLAIM_RETRY_S)

    def fetch_topic_ids(self, stream: SourceStream, topics: list[str]) -> dict[str, str]:
        """Refresh the ids of `topics`; returns {topic: previous id} of those recreated since last seen.

        A recreated topic stays marked for the rest of this run, so its partitions halt whenever assigned.
        """
        # A topic deleted meanwhile has no id: the subscription change handles it.
        for topic, topic_id in topic_ids(stream.admin, topics, self.startup_timeout_s).items():
            old = stream.topic_ids.get(topic)
            if old is not None and old != topic_id and topic not in stream.recreated:
                stream.recreated[topic] = old
                log.error("source topic deleted and recreated", extra={
                    **self.label, "source": stream.alias, "topic": topic, "old_id": old, "new_id": topic_id,
                })
            stream.topic_ids[topic] = topic_id
        return {t: old for t, old in stream.recreated.items() if t in topics}

    # ---------------------------------------------------------------- data loss while running, rewinds
    def check_topic_ids(self, stream: SourceStream, topics: list[str]) -> None:
        """A topic deleted and recreated between two looks: its assigned partitions lost their records."""
        for topic, old in self.fetch_topic_ids(stream, topics).items():
            for t, partition in sorted(stream.assigned):
                key = (t, partition)
                if t != topic or key in stream.ledger.halted or key in stream.reported_loss:
                    continue
                position = stream.ledger.position(key)
                decision = decide_start(position, old, stream.topic_ids[topic], 0, 0, True, f"{topic}[{partition}]")
                self.on_data_loss(stream, topic, partition, position, decision)

    def on_position_reset(self, stream: SourceStream, topic: str, partition: int, error: str) -> None:
        """librdkafka's fetch fell off the log (auto.offset.reset=error): decide as on assignment."""
        position = stream.ledger.position((topic, partition))
        recreated = self.fetch_topic_ids(stream, [topic])
        low, high = stream.consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
        decision = decide_start(position, recreated.get(topic), stream.topic_ids.get(topic), low, high, True,
                                f"{topic}[{partition}]")
        if decision.verdict is Verdict.RESUME:  # librdkafka saw a log that moved; ours is inside it now
            decision = StartDecision(Verdict.TRUNCATED, low, f"{topic}[{partition}]: {error}")
        self.on_data_loss(stream, topic, partition, position, decision)

    def _report_data_loss(self, stream: SourceStream, topic: str, partition: int, decision: StartDecision) -> None:
        stream.reported_loss.add((topic, partition))
        labels = {**self.label, "source": stream.alias, "topic": topic}
        self.metrics.data_loss.labels(kind=decision.verdict.value, **labels).inc()
        action = "partition halted" if self.halts_on_loss else f"resuming at offset {decision.offset} (on_data_loss=reset)"
        log.error("source data lost before it was mirrored", extra={
            **labels, "partition": partition, "kind": decision.verdict.value, "reason": decision.reason, "action": action,
        })
        print(f"mirror_worker: data loss on source {stream.alias!r}: {decision.reason}; {action}",
              file=sys.stderr, flush=True)

    def on_data_loss(self, stream: SourceStream, topic: str, partition: int, position: int | None,
                     decision: StartDecision) -> None:
        """A running partition's position fell off the source log: halt it, or (opt-in) jump to the log."""
        self._report_data_loss(stream, topic, partition, decision)
        key = (topic, partition)
        if self.halts_on_loss:
            self.halts.halt(stream, topic, partition, position if position is not None else decision.offset, decision.reason)
            return
        stream.ledger.seek(key, decision.offset)
        stream.drop_stashed({key})
        stream.consumer.seek(TopicPartition(topic, partition, decision.offset))

    def rewind(self, stream: SourceStream, key: tuple[str, int], reason: str) -> None:
        """An aborted transaction, or a record not delivered in time: re-send the partition from its last
        committed position (a partition held for that resend is resumed)."""
        held = key in stream.ledger.resends()
        start = stream.ledger.rewind(key)
        stream.drop_stashed({key})
        partition = TopicPartition(key[0], key[1], start)
        stream.consumer.seek(partition)
        if held and not self.paused():
            stream.consumer.resume([partition])
        if stream.transactions is not None:
            self.metrics.errors.labels(kind="transaction_aborted", **self.label).inc()
        log.warning("transaction aborted, re-sending from the committed position" if stream.transactions is not None
                    else "re-sending from the committed position", extra={
            **self.label, "source": stream.alias, "partition": f"{key[0]}[{key[1]}]", "offset": start, "error": reason,
        })


def _fmt(keys) -> list[str]:
    return sorted(f"{t}[{p}]" for t, p in keys)
