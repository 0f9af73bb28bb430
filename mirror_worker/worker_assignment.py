"""Partitions coming and going (rebalance callbacks) and where each starts: committed position, data-loss checks, recreated topics.

A part of MirrorWorker (worker.py), which holds the state these methods share.
"""

from __future__ import annotations

import logging
import sys
from typing import TYPE_CHECKING

from confluent_kafka import KafkaException, TopicCollection, TopicPartition

from mirror_worker.data_loss import StartDecision, decide_start
from mirror_worker.exactly_once import positions_group

if TYPE_CHECKING:
    from mirror_worker.source_stream import SourceStream

log = logging.getLogger("mirror_worker")


class AssignmentHandling:
    """Partitions assigned, revoked or lost, and the position each one starts from."""

    def _on_assign(self, stream: SourceStream, partitions: list[TopicPartition]) -> None:
        keys = {(tp.topic, tp.partition) for tp in partitions}
        self.follow_growth(stream, keys)
        halts = self._assign_checked(stream, partitions)
        stream.assigned |= keys
        if self._paused:
            stream.consumer.pause(partitions)
        halts += [((tp.topic, tp.partition), tp.offset, stream.schema_conflicts[tp.topic])
                  for tp in partitions if tp.topic in stream.schema_conflicts]
        for (topic, partition), offset, reason in halts:
            self._halt(stream, topic, partition, offset, reason)
        log.info("partitions assigned", extra={**self._label, "source": stream.alias, "partitions": _fmt(keys)})

    def _on_revoke(self, stream: SourceStream, partitions: list[TopicPartition]) -> None:
        keys = {(tp.topic, tp.partition) for tp in partitions}
        # Commit what is done for the partitions that leave, so their next owner starts right there.
        self.checkpoint_and_commit(only=(stream, keys), deadline=self._shutdown_deadline())
        self._release(stream, keys)
        log.info("partitions revoked", extra={**self._label, "source": stream.alias, "partitions": _fmt(keys)})

    def _on_lost(self, stream: SourceStream, partitions: list[TopicPartition]) -> None:
        keys = {(tp.topic, tp.partition) for tp in partitions}
        self._release(stream, keys)
        log.warning("partitions lost (not committed)", extra={**self._label, "source": stream.alias, "partitions": _fmt(keys)})

    def _release(self, stream: SourceStream, keys: set[tuple[str, int]]) -> None:
        """Forget partitions this worker no longer owns: their transactions, positions and stashed records."""
        if stream.transactions is not None:
            stream.transactions.close(keys)
        stream.ledger.forget(keys)
        stream.assigned -= keys
        stream.rebalances += 1
        stream.stash = [m for m in stream.stash if (m.topic(), m.partition()) not in keys]

    def _assign_checked(self, stream: SourceStream, partitions: list[TopicPartition]) -> list:
        """Start each partition at its position, unless records between it and the log were lost.

        Positions: exactly-once, the destination's (after fencing the partitions' previous owners); else,
        or before the first exactly-once commit, the source group's. Returns the partitions to halt.
        """
        keys = [(tp.topic, tp.partition) for tp in partitions]
        positions = stream.transactions.open(keys) if stream.transactions is not None else {}
        missing = [TopicPartition(t, p) for t, p in keys if positions.get((t, p)) is None]
        # Exactly-once positions that existed and are gone (expired): no fallback can be trusted for them.
        vanished = stream.transactions.vanished([(tp.topic, tp.partition) for tp in missing]) if missing and \
            stream.transactions is not None else set()
        if missing:
            for tp in stream.consumer.committed(missing, timeout=self.config.startup_timeout_s):
                if tp.offset >= 0:
                    positions[(tp.topic, tp.partition)] = (tp.offset, tp.metadata)
        recreated = self._fetch_topic_ids(stream, sorted({t for t, _ in keys}))
        reset_to_earliest = stream.reset_policy in ("earliest", "smallest", "beginning")
        halts = []
        for tp in partitions:
            key = (tp.topic, tp.partition)
            position, position_topic_id = positions.get(key) or (None, None)
            low, high = stream.consumer.get_watermark_offsets(tp, timeout=self.config.startup_timeout_s)
            if key in vanished:
                stream.ledger.forget([key])  # nothing is committed for it: no position is known
                tp.offset = position if position is not None and low <= position <= high else high
                halts.append((key, tp.offset, self._vanished_reason(stream, key)))
                continue
            if tp.topic in recreated and position_topic_id in (None, "", recreated[tp.topic]):
                # Seen recreated while this worker ran; the broker dropped the old topic's offsets with it.
                position, position_topic_id = position or 0, recreated[tp.topic]
            decision = decide_start(position, position_topic_id, stream.topic_ids.get(tp.topic), low, high,
                                    reset_to_earliest, f"{tp.topic}[{tp.partition}]")
            tp.offset = decision.offset
            stream.ledger.forget([key])
            stream.ledger.mark_committed({key: position if decision.lost and self._halts_on_loss else decision.offset})
            if decision.lost:
                self._report_data_loss(stream, tp.topic, tp.partition, decision)
                if self._halts_on_loss:
                    halts.append((key, position, decision.reason))
        log.info("start positions", extra={
            **self._label, "source": stream.alias,
            "positions": sorted(f"{tp.topic}[{tp.partition}]@{tp.offset}" for tp in partitions),
        })
        # A first sync per partition before this worker produces any of its records: a consumer that
        # committed anywhere from here on translates, even before the first commit of this worker.
        halted = {key for key, _, _ in halts}
        self._write_offset_syncs(stream, {(tp.topic, tp.partition): tp.offset for tp in partitions
                                          if (tp.topic, tp.partition) not in halted})
        if stream.incremental_assignment:
            stream.consumer.incremental_assign(partitions)
        else:
            stream.consumer.assign(partitions)
        return halts

    def _vanished_reason(self, stream: SourceStream, key: tuple[str, int]) -> str:
        group = positions_group(self.config.name, stream.alias)
        return (f"its exactly-once position is gone from the destination (group {group}, "
                f"{self.router.policy.remote_topic(key[0])}[{key[1]}]) although one was committed "
                f"({self.config.positions_topic} says so): expired after offsets.retention.minutes, most likely "
                "because the mirror was stopped longer than that; not restarting from the source group or "
                "the reset policy (duplicates or loss): commit the right position in that group to resume")

    @property
    def _halts_on_loss(self) -> bool:
        return self.config.on_data_loss == "halt"

    def _fetch_topic_ids(self, stream: SourceStream, topics: list[str]) -> dict[str, str]:
        """Refresh the ids of `topics`; returns {topic: previous id} of those recreated since last seen.

        A recreated topic stays marked for the rest of this run, so its partitions halt whenever assigned.
        """
        if not topics:
            return {}
        futures = stream.admin.describe_topics(TopicCollection(topics), request_timeout=self.config.startup_timeout_s)
        for topic, future in futures.items():
            try:
                topic_id = str(future.result().topic_id)
            except KafkaException:
                continue  # deleted meanwhile: the subscription change handles it
            old = stream.topic_ids.get(topic)
            if old is not None and old != topic_id and topic not in stream.recreated:
                stream.recreated[topic] = old
                log.error("source topic deleted and recreated", extra={
                    **self._label, "source": stream.alias, "topic": topic, "old_id": old, "new_id": topic_id,
                })
            stream.topic_ids[topic] = topic_id
        return {t: old for t, old in stream.recreated.items() if t in topics}

    def _check_topic_ids(self, stream: SourceStream, topics: list[str]) -> None:
        """A topic deleted and recreated between two looks: its assigned partitions lost their records."""
        for topic, old in self._fetch_topic_ids(stream, topics).items():
            for t, partition in sorted(stream.assigned):
                key = (t, partition)
                if t != topic or key in stream.ledger.halted or key in stream.reported_loss:
                    continue
                position = stream.ledger.next_offsets.get(key, stream.ledger.committed.get(key))
                decision = decide_start(position, old, stream.topic_ids[topic], 0, 0, True, f"{topic}[{partition}]")
                self._on_data_loss(stream, topic, partition, position, decision)

    def _report_data_loss(self, stream: SourceStream, topic: str, partition: int, decision: StartDecision) -> None:
        stream.reported_loss.add((topic, partition))
        labels = {**self._label, "source": stream.alias, "topic": topic}
        self.metrics.data_loss.labels(kind=decision.verdict.value, **labels).inc()
        action = "partition halted" if self._halts_on_loss else f"resuming at offset {decision.offset} (on_data_loss=reset)"
        log.error("source data lost before it was mirrored", extra={
            **labels, "partition": partition, "kind": decision.verdict.value, "reason": decision.reason, "action": action,
        })
        print(f"mirror_worker: data loss on source {stream.alias!r}: {decision.reason}; {action}",
              file=sys.stderr, flush=True)

    def _on_data_loss(self, stream: SourceStream, topic: str, partition: int, position: int | None,
                      decision: StartDecision) -> None:
        """A running partition's position fell off the source log: halt it, or (opt-in) jump to the log."""
        self._report_data_loss(stream, topic, partition, decision)
        key = (topic, partition)
        if self._halts_on_loss:
            self._halt(stream, topic, partition, position if position is not None else decision.offset, decision.reason)
            return
        stream.ledger.next_offsets[key] = decision.offset
        stream.stash = [m for m in stream.stash if (m.topic(), m.partition()) != key]
        stream.consumer.seek(TopicPartition(topic, partition, decision.offset))

    def _rewind(self, stream: SourceStream, key: tuple[str, int], reason: str) -> None:
        """An aborted transaction: re-send the partition from its last committed position."""
        start = stream.ledger.committed[key]
        stream.ledger.next_offsets.pop(key, None)
        stream.stash = [m for m in stream.stash if (m.topic(), m.partition()) != key]
        stream.consumer.seek(TopicPartition(key[0], key[1], start))
        self.metrics.errors.labels(kind="transaction_aborted", **self._label).inc()
        log.warning("transaction aborted, re-sending from the committed position", extra={
            **self._label, "source": stream.alias, "partition": f"{key[0]}[{key[1]}]", "offset": start, "error": reason,
        })



def _fmt(keys) -> list[str]:
    return sorted(f"{t}[{p}]" for t, p in keys)
