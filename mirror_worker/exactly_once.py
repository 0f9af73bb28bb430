"""Exactly-once mode: each source partition's records and its source position commit in one transaction.

Source-cluster offsets cannot join a destination transaction, so the position is kept on the
destination, as a consumer-group offset written with `send_offsets_to_transaction`:

    group  kafka-mirror-eos.<mirror>.<source alias>
    key    (destination topic, source partition number)   value = next source offset to mirror

The destination topic has at least as many partitions as its source in this mode, so the key always
names a real partition (the broker refuses offsets of unknown partitions). Nobody consumes with that
group; it is only a transactional key-value store that `read_committed` fetches honour per partition.

One transactional producer per assigned source partition (transactional.id names the mirror, source and
partition), so a new owner's `init_transactions` fences the old owner and aborts its open transaction
before the position is read. Invariant: the committed position of a partition equals the number of its
records in committed transactions, so a restart from it neither skips nor repeats a record.
"""

from __future__ import annotations

import logging
import time

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from mirror_worker.exceptions import MirrorError

log = logging.getLogger("mirror_worker")

PositionKey = tuple[str, int]  # (source topic, source partition)


class TransactionAborted(MirrorError):
    """The partition's open transaction was aborted: its records since the last commit must be re-sent."""


class ProducerFenced(MirrorError):
    """Another worker took over the partition's transactional.id: this worker must stop writing it."""


def positions_group(mirror: str, alias: str) -> str:
    return f"kafka-mirror-eos.{mirror}.{alias}"


def transactional_id(mirror: str, alias: str, topic: str, partition: int) -> str:
    return f"kafka-mirror.{mirror}.{alias}.{topic}.{partition}"


class PartitionTransactions:
    """The transactional producers of one source cluster's assigned partitions, and their positions."""

    def __init__(self, mirror: str, alias: str, producer_settings: dict, group_settings: dict,
                 destination_topic, topic_id, timeout_s: float) -> None:
        self.mirror = mirror
        self.alias = alias
        self.producer_settings = producer_settings
        self.destination_topic = destination_topic  # source topic -> destination topic
        self.topic_id = topic_id  # source topic -> its id now, kept with each position (recreation check)
        self.timeout_s = timeout_s
        self.group = Consumer({
            **group_settings,
            "group.id": positions_group(mirror, alias),
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        })
        self.group_metadata = self.group.consumer_group_metadata()
        self.producers: dict[PositionKey, Producer] = {}

    def _slot(self, key: PositionKey, offset: int = -1001) -> TopicPartition:
        return TopicPartition(self.destination_topic(key[0]), key[1], offset, self.topic_id(key[0]) or "")

    def open(self, keys: list[PositionKey]) -> dict[PositionKey, tuple[int, str] | None]:
        """Fence earlier owners, open a transaction per partition, and read where each one stands."""
        for key in keys:
            if key in self.producers:
                continue
            producer = Producer({
                **self.producer_settings,
                "transactional.id": transactional_id(self.mirror, self.alias, *key),
            })
            self._call(producer.init_transactions, key, "init")
            producer.begin_transaction()
            self.producers[key] = producer
        return self.positions(keys)

    def positions(self, keys: list[PositionKey]) -> dict[PositionKey, tuple[int, str] | None]:
        """Each partition's committed (next offset, source topic id), or None before its first commit."""
        if not keys:
            return {}
        deadline = time.monotonic() + self.timeout_s
        while True:
            try:
                committed = self.group.committed([self._slot(k) for k in keys], timeout=self.timeout_s)
                break
            except KafkaException as exc:
                # A young cluster's coordinator, or an offset still inside a transaction being aborted.
                if not exc.args[0].retriable() or time.monotonic() > deadline:
                    raise MirrorError(f"cannot read exactly-once positions of source {self.alias!r}: "
                                      f"{exc.args[0].str()}") from None
                time.sleep(0.2)
        return {key: ((tp.offset, tp.metadata) if tp.offset >= 0 else None) for key, tp in zip(keys, committed)}

    def commit(self, key: PositionKey, next_offset: int, timeout_s: float) -> None:
        """Add the position to the partition's transaction, commit it, open the next one."""
        producer = self.producers[key]
        try:
            producer.send_offsets_to_transaction([self._slot(key, next_offset)], self.group_metadata, timeout_s)
            producer.commit_transaction(timeout_s)
        except KafkaException as exc:
            error = exc.args[0]
            if error.fatal():
                raise ProducerFenced(f"{key[0]}[{key[1]}]: {error.str()}") from None
            self._abort(producer, key)
            raise TransactionAborted(f"{key[0]}[{key[1]}]: {error.str()}") from None
        producer.begin_transaction()

    def abort(self, key: PositionKey) -> None:
        producer = self.producers.get(key)
        if producer is not None:
            self._abort(producer, key)

    def _abort(self, producer: Producer, key: PositionKey) -> None:
        try:
            producer.abort_transaction(self.timeout_s)
            producer.begin_transaction()
        except KafkaException as exc:
            raise ProducerFenced(f"{key[0]}[{key[1]}]: abort failed: {exc.args[0].str()}") from None

    def close(self, keys) -> None:
        """Drop the producers of partitions this worker no longer owns (their transactions are done)."""
        for key in list(keys):
            producer = self.producers.pop(key, None)
            if producer is not None:
                try:
                    producer.abort_transaction(min(5.0, self.timeout_s))
                except KafkaException:
                    pass  # fenced or already ended: nothing of ours is left open

    def close_all(self) -> None:
        self.close(list(self.producers))
        self.group.close()

    def _call(self, method, key: PositionKey, what: str) -> None:
        deadline = time.monotonic() + self.timeout_s
        while True:
            try:
                method(self.timeout_s)
                return
            except KafkaException as exc:
                error = exc.args[0]
                if not error.retriable() or time.monotonic() > deadline:
                    raise MirrorError(f"exactly-once {what} of {key[0]}[{key[1]}] failed: {error.str()}") from None
                time.sleep(0.2)
