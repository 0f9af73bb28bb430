"""Reading exactly-once positions on the destination (the layout: transactions.py's docstring).

`PositionStore` reads the positions group read_committed (the positions a restart continues from; that
reader's group metadata is what transactions send their offsets with, so it stays open) and, when partitions
are claimed, read_uncommitted (who owns a partition, before any fencing: a reader opened for the check and
closed after, as are the readers of the earlier layout's group and of the positions topic; a librdkafka consumer
is 3-5 threads, and one kept open for this made exactly-once 1.7x at-least-once's threads). Writing stays with the
transactions (PartitionTransactions).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, TopicPartition

from mirror_worker.clients import factory
from mirror_worker.exactly_once.positions import (
    POSITIONS_GROUP, RELEASED, IdentityCollision, PositionKey, committed_position, legacy_position_record_key,
    legacy_positions_group, parse_position_metadata, position_metadata, position_record_key, position_writer,
)
from mirror_worker.exceptions import MirrorError


class PositionStore:
    """Positions of one source cluster's partitions. `destination_topic`, `topic_id` and `owner` map a source
    topic to its destination topic, its id now and this mirror's identity as that topic's writer.
    `new_consumer(settings, overrides)` makes its readers (default: clients.factory.consumer)."""

    def __init__(self, mirror: str, alias: str, group_settings: dict, destination_topic, topic_id, owner,
                 timeout_s: float, positions_topic: str,
                 new_consumer: Callable[[dict, dict], Consumer] | None = None) -> None:
        self.mirror = mirror
        self.alias = alias
        self.group_settings = group_settings
        self.destination_topic = destination_topic
        self.topic_id = topic_id
        self.owner = owner
        self.timeout_s = timeout_s
        self.positions_topic = positions_topic
        self.new_consumer = new_consumer or factory.consumer
        self.group = self._reader(POSITIONS_GROUP)
        self.group_metadata = self.group.consumer_group_metadata()
        self.warmed_legacy: Consumer | None = None  # warm_legacy's reader, until the next read takes or closes it

    def warm(self) -> None:
        """Connect the positions reader to its group's coordinator and the positions topic's leader before its first
        reads need them. A consumer that neither subscribes nor assigns did not connect on its own: its first
        committed() took seven round trips (1.45 s with the destination 200 ms away, py-spy of a start, stop 62);
        warmed beside the transactional producer's start, the reads after it take their own round trip only.
        Nothing is read that matters: the positions topic's own offset in the group (there is none) and its ends."""
        partition = TopicPartition(self.positions_topic, 0)
        try:
            self.group.committed([partition], timeout=self.timeout_s)
            self.group.get_watermark_offsets(partition, timeout=self.timeout_s)
        except KafkaException:
            pass  # the reads that matter say what is wrong, in their own words

    def warm_legacy(self) -> None:
        """Open and connect the reader of the earlier layout's group that the next read takes (read() asks it for
        the partitions without a position: a new mirror's every partition; a reader opened then cost four to
        five round trips more, librdkafka's debug log of a start 200 ms away, stop 62). Same data, read at the
        same moment: only its connection is made earlier."""
        reader = self._reader(legacy_positions_group(self.mirror, self.alias), stable=False)
        try:
            reader.committed([TopicPartition(self.positions_topic, 0)], timeout=self.timeout_s)
        except KafkaException:
            pass  # the read itself says what is wrong
        previous, self.warmed_legacy = self.warmed_legacy, reader  # one left by a start that failed: not kept open
        if previous is not None:
            previous.close()

    def _legacy_reader(self, stable: bool) -> Consumer:
        warmed, self.warmed_legacy = self.warmed_legacy, None
        if warmed is not None and not stable:
            return warmed
        if warmed is not None:
            warmed.close()
        return self._reader(legacy_positions_group(self.mirror, self.alias), stable)

    def _reader(self, group: str, stable: bool = True) -> Consumer:
        return self.new_consumer(self.group_settings, {
            "group.id": group, "enable.auto.commit": False,
            "isolation.level": "read_committed" if stable else "read_uncommitted"})

    def slot(self, key: PositionKey, offset: int = -1001, writer: str = "") -> TopicPartition:
        """The partition's position as a group offset: at `offset` with this mirror's metadata naming `writer`
        (positions.position_metadata), or to look up."""
        metadata = position_metadata(self.topic_id(key[0]) or "", self.owner(key[0]), writer) if offset >= 0 else ""
        return TopicPartition(self.destination_topic(key[0]), key[1], offset, metadata)

    def record(self, producer, key: PositionKey) -> None:
        """In `producer`'s open transaction: this partition has a position on the destination from now on (its
        record in the positions topic, see transactions.py)."""
        owner = self.owner(key[0])
        value = json.dumps({"mirror": self.mirror, "source": self.alias, "topic": key[0], "partition": key[1],
                            "group": POSITIONS_GROUP, "owner": owner.describe()}).encode()
        record_key = position_record_key(self.destination_topic(key[0]), key[1])
        try:
            producer.produce(self.positions_topic, value, record_key, partition=0)
        except BufferError:
            producer.flush(self.timeout_s)
            producer.produce(self.positions_topic, value, record_key, partition=0)

    def refuse_foreign(self, keys: list[PositionKey]) -> dict[PositionKey, str | None]:
        """Before any fencing: a position of another owner means another mirror writes that partition.
        Returns the writer each position names (positions.position_writer), pending transactions ignored."""
        if not keys:
            return {}
        owners = self._reader(POSITIONS_GROUP, stable=False)  # the last committed offsets, pending ones ignored
        try:
            committed = self._committed(owners, keys)
        finally:
            owners.close()
        writers = {}
        for key, tp in zip(keys, committed):
            writers[key] = position_writer(tp.metadata) if tp.offset >= 0 else RELEASED
            _topic_id, owner = parse_position_metadata(tp.metadata)
            if owner is not None and owner != self.owner(key[0]):
                raise IdentityCollision(
                    f"exactly-once: destination partition {tp.topic}[{tp.partition}] is already written by "
                    f"another mirror ({owner.describe()}); this one ({self.owner(key[0]).describe()}) would "
                    "fence it: give one of them other destination topics (prefix, topic-map), or, if that "
                    f"mirror is gone for good, delete its positions (group {POSITIONS_GROUP}, that topic)")
        return writers

    def read(self, keys: list[PositionKey], stable_legacy: bool = False
             ) -> tuple[dict[PositionKey, tuple[int, str] | None], set[PositionKey], dict[PositionKey, str | None]]:
        """Each partition's committed (next offset, source topic id), or None before its first commit; the
        partitions whose position came from the earlier layout's group; and the writer each position of the
        positions group names (positions.position_writer; RELEASED where there is none).

        A partition without one in the positions group gets the earlier layout's position, if any (read
        without waiting for open transactions unless `stable_legacy`: open() fences their writer first)."""
        committed = self._committed(self.group, keys)
        found = {key: committed_position(tp) for key, tp in zip(keys, committed)}
        writers = {key: position_writer(tp.metadata) if tp.offset >= 0 else RELEASED for key, tp in zip(keys, committed)}
        absent = [key for key, position in found.items() if position is None]
        from_legacy: set[PositionKey] = set()
        if not absent and self.warmed_legacy is not None:  # not needed: a reader is not kept open
            self.warmed_legacy.close()
            self.warmed_legacy = None
        if absent:
            legacy = self._legacy_reader(stable_legacy)
            try:
                for key, tp in zip(absent, self._committed(legacy, absent)):
                    found[key] = committed_position(tp)
                    if found[key] is not None:
                        from_legacy.add(key)
            finally:
                legacy.close()
        return found, from_legacy, writers

    def _committed(self, reader: Consumer, keys: list[PositionKey]) -> list[TopicPartition]:
        if not keys:
            return []
        deadline = time.monotonic() + self.timeout_s
        while True:
            try:
                return reader.committed([self.slot(k) for k in keys], timeout=self.timeout_s)
            except KafkaException as exc:
                # A young cluster's coordinator, or an offset still inside a transaction being aborted.
                if not exc.args[0].retriable() or time.monotonic() > deadline:
                    raise MirrorError(f"cannot read exactly-once positions of source {self.alias!r}: "
                                      f"{exc.args[0].str()}") from None
                time.sleep(0.2)

    def vanished(self, keys: list[PositionKey]) -> set[PositionKey]:
        """Of partitions without a position, those that had one: their record is in the positions topic."""
        if not keys:
            return set()
        wanted = {position_record_key(self.destination_topic(key[0]), key[1]): key for key in keys}
        wanted.update({legacy_position_record_key(self.alias, key): key for key in keys})
        try:
            low, high = self.group.get_watermark_offsets(TopicPartition(self.positions_topic, 0), timeout=self.timeout_s)
            if low == high:
                return set()  # nothing was ever written there (a new mirror): no need to read it to its end
        except KafkaException:
            pass  # read it, as below
        reader = self.new_consumer(self.group_settings, {
            "group.id": POSITIONS_GROUP,
            "isolation.level": "read_committed", "enable.auto.commit": False, "enable.partition.eof": True,
        })
        found: set[PositionKey] = set()
        deadline = time.monotonic() + self.timeout_s
        try:
            reader.assign([TopicPartition(self.positions_topic, 0, OFFSET_BEGINNING)])
            while True:
                if time.monotonic() > deadline:
                    raise MirrorError(f"cannot read {self.positions_topic} within {self.timeout_s:.0f}s")
                msg = reader.poll(0.5)
                if msg is None:
                    continue
                if msg.error() is not None:
                    if msg.error().code() == KafkaError._PARTITION_EOF:
                        return found
                    raise MirrorError(f"cannot read {self.positions_topic}: {msg.error().str()}")
                if msg.value() is not None and msg.key() in wanted:
                    found.add(wanted[msg.key()])
        finally:
            reader.close()

    def close(self) -> None:
        if self.warmed_legacy is not None:
            self.warmed_legacy.close()
            self.warmed_legacy = None
        self.group.close()
