"""Catch-up on an exactly-once mirror: the copy moves the worker's own positions on the destination.

An exactly-once worker resumes from its positions on the destination (mirror_worker/exactly_once/transactions.py), not
from the source group, whose offsets are only for monitoring there. A catch-up that moved only the source
group left the worker's older position behind, and the worker copied the whole backlog a second time.
So, for an exactly-once mirror, the catch-up:
- plans each partition from its destination position when it has one, as the worker starts it (else from
  the source group's offset, as the worker does before its first exactly-once commit); a position that
  existed and expired halts the job for that partition, as it halts the worker's;
- copies each partition through the worker's `PartitionTransactions`, with the worker's transactional.id
  for that partition: its `init_transactions` fences a worker that holds the partition (aborting its open
  transaction); records and the position commit in one transaction, every `commit_every` records or
  `commit_every_s` seconds and at the range end, so a failed task leaves a position that says exactly what was copied. A worker started
  during the catch-up exits on seeing the catch-up's lease (mirror_worker/engine/catchup_lease.py); one that could
  not check the lease fences the task instead, whose next commit fails: the two never both write a range;
- reads the position again after fencing: when a worker moved it past the plan's start between the plan
  and the task, the task starts there.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from mirror_worker.batch_api import Owner, POSITIONS_GROUP, PartitionTransactions, ProducerFenced, TransactionAborted

PositionKey = tuple[str, int]


@dataclass(frozen=True)
class ExactlyOnce:
    """What a task needs to write an exactly-once mirror's transactions (picklable)."""

    mirror: str
    alias: str
    positions_topic: str
    group_settings: dict            # the destination connection: the positions group lives there
    timeout_s: float = 30.0
    commit_every: int = 100_000     # records per transaction: bounds what a failed task leaves uncommitted
    # and seconds: a transaction commits well within librdkafka's transaction.timeout.ms (60 s) however slowly
    # records come (large records, quotas, a WAN), or the coordinator aborts it and the task fails as "fenced".
    commit_every_s: float = 10.0
    group_id: str = ""              # with the source cluster id: the owner the worker writes with its positions
    source_cluster_id: str = ""

    def owner(self, topic: str) -> Owner:
        return Owner(self.source_cluster_id, topic, self.group_id)


def exactly_once_for(target, source_cluster_id: str) -> ExactlyOnce | None:
    """The mirror's exactly-once settings, or None when it mirrors at least once (or runs from flags)."""
    mirror = target.mirror
    if mirror is None or not mirror.exactly_once:
        return None
    return ExactlyOnce(mirror.name, target.source_alias, mirror.positions_topic, target.connection("destination"),
                       float(mirror.startup_timeout_s), group_id=mirror.group_id,
                       source_cluster_id=source_cluster_id)


def _transactions(eos: ExactlyOnce, producer_settings: dict, destination_topic, topic_id) -> PartitionTransactions:
    return PartitionTransactions(eos.mirror, eos.alias, producer_settings, eos.group_settings, destination_topic,
                                 topic_id, eos.timeout_s, eos.positions_topic, eos.owner)


def destination_positions(eos: ExactlyOnce, keys: list[PositionKey], destination_topic,
                          topic_ids: dict[str, str]) -> tuple[dict[PositionKey, tuple[int, str]], set[PositionKey]]:
    """(the destination position and topic id of each partition that has one, the partitions whose position
    expired): read as the worker reads them, without opening any producer (nothing is fenced here)."""
    transactions = _transactions(eos, {}, destination_topic, lambda topic: topic_ids.get(topic) or "")
    try:
        found = transactions.positions(keys)
        vanished = transactions.vanished([key for key, position in found.items() if position is None])
    finally:
        transactions.close_all()
    return {key: position for key, position in found.items() if position is not None}, vanished


def expired_line(key: PositionKey, eos: ExactlyOnce) -> str:
    return (f"{key[0]}[{key[1]}]: its exactly-once position on the destination (group "
            f"{POSITIONS_GROUP}) expired; neither the source group's offset nor a reset can "
            "be trusted for it: the worker halts it too (see docs/guides/exactly-once.md)")


class Fenced(Exception):
    """A worker took the partition over while the task copied it."""


def copy_exactly_once(task, settings, consumer, errors: list, copy_range):
    """Copy `task`'s range through the partition's transactional producer; what `copy_range` returns.

    `copy_range` is copy_range.copy_range or copy_until (passed in: that module imports this one). A range
    the driver stopped early (copy_until) ends with a transaction holding the position it stopped at: the
    part handed to Spark starts there, and its task reads that position after fencing, as any task does.
    """
    eos: ExactlyOnce = settings.exactly_once
    key = (task.topic, task.partition)
    where = f"{task.topic}[{task.partition}]"
    producer_settings = {**settings.producer, "delivery.report.only.error": True,
                         "on_delivery": lambda err, _msg: errors.append(err.str())}
    transactions = _transactions(eos, producer_settings, lambda _topic: task.destination_topic,
                                 lambda _topic: task.topic_id)
    try:
        found = transactions.open([key])[key]  # fences the partition's previous owner
        # Ahead of the plan: a worker mirrored part of the range since. (Behind it only when a person chose the
        # start with --from-offsets or --from-timestamp.)
        start = min(max(task.start, found[0]), task.end) if found is not None else task.start
        # The claim: the partition's position names this task's transactional id before any record is copied,
        # so a worker that starts meanwhile fences this task (stream_transaction.py, rule (W)).
        transactions.commit(key, found[0] if found is not None else start, eos.timeout_s)
        return copy_range(replace(task, start=start), settings, consumer, transactions.producers[key], errors,
                          checkpoint=lambda position: transactions.commit(key, position, eos.timeout_s),
                          checkpoint_every=eos.commit_every, checkpoint_every_s=eos.commit_every_s)
    except ProducerFenced as exc:
        raise Fenced(f"{where}: a worker took the partition over during the catch-up ({exc}); what the catch-up "
                     "committed stays, the worker continues from its position") from None
    except TransactionAborted as exc:
        raise Fenced(f"{where}: transaction aborted ({exc}); the position says what was copied: rerun") from None
    finally:
        transactions.close_all()
