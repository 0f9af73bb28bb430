"""Exactly-once positions: their names, keys and metadata, and how long they live (pure, no clients but
the retention read). The transactions that write them are in exactly_once/transactions.py, whose docstring draws the
layout; this module is what other planes (the lag measure, the Spark catch-up) and the tests name.

Identities: a destination partition is written by one source partition at most, so everything is keyed by
it, which is unique per destination cluster by construction. Each position carries its owner (source
cluster id, source topic, the mirror's consumer group). Upgrades: the earlier layout's names
(`legacy_*`) are still read when the new group has no position.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass

from confluent_kafka import KafkaException, TopicPartition
from confluent_kafka.admin import ConfigResource

from mirror_worker.exceptions import ConfigError

log = logging.getLogger("mirror_worker")

PositionKey = tuple[str, int]  # (source topic, source partition)


class IdentityCollision(ConfigError):
    """Another mirror already writes a destination partition this one would write."""


POSITIONS_GROUP = "kafka-mirror-eos"


def legacy_positions_group(mirror: str, alias: str) -> str:
    """Where positions were kept before identities derived from the destination partition (upgrades)."""
    return f"{POSITIONS_GROUP}.{mirror}.{alias}"


def transactional_id(destination_topic: str, partition: int) -> str:
    """A destination partition's own transactional.id: the Spark catch-up's writer of that partition, and the
    worker's before its transactions took every partition of a source (upgrades fence it once)."""
    return f"{POSITIONS_GROUP}.{destination_topic}.{partition}"


def worker_transactional_id(group: str, alias: str, member: str) -> str:
    """A worker's one transactional.id per source cluster, whatever its partitions: `member` is the static
    group.instance.id when there is one (a restart fences its predecessor at once), else unique to the process."""
    return f"{POSITIONS_GROUP}.{group}.{alias}.{member}"


def legacy_transactional_id(mirror: str, alias: str, topic: str, partition: int) -> str:
    return f"kafka-mirror.{mirror}.{alias}.{topic}.{partition}"


def position_record_key(destination_topic: str, partition: int) -> bytes:
    """The key of a partition's record in the positions topic: one per destination partition."""
    return json.dumps([destination_topic, partition]).encode()


def legacy_position_record_key(alias: str, key: PositionKey) -> bytes:
    return json.dumps([alias, key[0], key[1]]).encode()


@dataclass(frozen=True)
class Owner:
    """Who writes a destination partition: one source partition of one mirror (its consumer group)."""

    cluster: str  # the source cluster id
    topic: str    # the source topic
    group: str

    def describe(self) -> str:
        return f"group {self.group}, source cluster {self.cluster}, topic {self.topic}"


def position_metadata(topic_id: str, owner: Owner, writer: str) -> str:
    """`writer`: the transactional.id that may have the partition's records in an open transaction, "" once
    released (its owner committed everything of it when it gave it up), see transactions.py."""
    return json.dumps({"topic_id": topic_id, "cluster": owner.cluster, "topic": owner.topic, "group": owner.group,
                       "writer": writer})


RELEASED = ""  # a position's writer once its owner gave the partition up with everything committed


def position_writer(metadata: str | None) -> str | None:
    """The transactional.id a position names as its partition's writer; RELEASED; or None for a position of an
    earlier layout (its writer was the partition's own transactional_id) or none at all."""
    if not metadata or not metadata.startswith("{"):
        return None
    try:
        writer = json.loads(metadata).get("writer")
    except (ValueError, AttributeError):
        return None
    return writer if isinstance(writer, str) else None


def parse_position_metadata(metadata: str | None) -> tuple[str, Owner | None]:
    """(the source topic id, the owner) of a committed position; earlier layouts kept only the topic id."""
    if not metadata or not metadata.startswith("{"):
        return metadata or "", None
    try:
        fields = json.loads(metadata)
        return fields.get("topic_id") or "", Owner(fields["cluster"], fields["topic"], fields["group"])
    except (ValueError, KeyError, TypeError, AttributeError):
        return "", None


# Positions are re-committed at least this often, and at least four times per offsets retention period.
KEEPALIVE_MAX_S = 3600.0


def keepalive_interval_s(retention_ms: int | None) -> float:
    """How often an unchanged position is committed again, given the destination's offsets retention."""
    if not retention_ms or retention_ms <= 0:
        return KEEPALIVE_MAX_S
    return max(1.0, min(KEEPALIVE_MAX_S, retention_ms / 1000 / 4))


def keepalive_due(held: dict[PositionKey, int], committed_at: dict[PositionKey, float], owned, now: float,
                  interval_s: float) -> dict[PositionKey, int]:
    """Positions of owned partitions not committed for `interval_s`: {key: the position to commit again}."""
    return {key: offset for key, offset in held.items()
            if key in owned and now - committed_at.get(key, float("-inf")) >= interval_s}


def offsets_retention_ms(admin, timeout_s: float) -> int | None:
    """The destination brokers' offsets.retention.minutes in ms, or None when it cannot be read."""
    try:
        broker = min(admin.list_topics(timeout=timeout_s).brokers)
        resource = ConfigResource(ConfigResource.Type.BROKER, str(broker))
        entries = admin.describe_configs([resource], request_timeout=timeout_s)[resource].result(timeout_s)
        return int(entries["offsets.retention.minutes"].value) * 60_000
    except (KafkaException, KeyError, ValueError, TypeError) as exc:
        log.warning("offsets.retention.minutes of the destination not readable", extra={"error": str(exc)})
        return None


def committed_position(tp: TopicPartition) -> tuple[int, str] | None:
    """A committed position as (next offset, source topic id), None when there is none."""
    return (tp.offset, parse_position_metadata(tp.metadata)[0]) if tp.offset >= 0 else None


# The positions of one send_offsets_to_transaction reach __consumer_offsets as one batch, which the broker
# refuses past its message.max.bytes (1 MiB by default) with "Unknown broker error" for every partition: at ~260 B
# a position (names and metadata), ~4,000 positions at once. Sends of at most this many bytes, several in one
# transaction when needed (tests/integration/test_width.py).
OFFSETS_SEND_BYTES = 512 * 1024
_RECORD_OVERHEAD = 96  # a position's key and value framing, its group's name, the batch's per-record bytes


def offset_sends(slots: list[TopicPartition], limit: int = OFFSETS_SEND_BYTES) -> list[list[TopicPartition]]:
    """`slots` in order, cut into sends of at most `limit` estimated bytes each (one slot alone may exceed it)."""
    sends: list[list[TopicPartition]] = []
    size = 0
    for slot in slots:
        cost = _RECORD_OVERHEAD + len(slot.topic) + len((slot.metadata or "").encode())
        if not sends or size + cost > limit:
            sends.append([])
            size = 0
        sends[-1].append(slot)
        size += cost
    return sends
