"""Where a source partition's log starts and ends for the mirror's consumer.

A read_committed consumer (librdkafka's default, forced by exactly-once) gets nothing past the last stable
offset (LSO): the first offset of the oldest transaction still open. Lag, catch-up and consistency check
measure to that end, not to the high watermark, or they would wait for (or copy) records of a transaction
that may still abort.
"""

from __future__ import annotations

from confluent_kafka import IsolationLevel, TopicPartition
from confluent_kafka.admin import OffsetSpec


def reads_committed(consumer_settings: dict) -> bool:
    """Whether the mirror's consumer with these settings reads committed records only."""
    return consumer_settings.get("isolation.level", "read_committed") != "read_uncommitted"


def list_offsets(admin, partitions: list[TopicPartition], spec: OffsetSpec, committed: bool,
                 timeout: float) -> dict[tuple[str, int], int]:
    """One ListOffsets request for every partition: the offset `spec` names, as a read_committed
    (`committed`) or read_uncommitted reader sees it."""
    if not partitions:
        return {}
    level = IsolationLevel.READ_COMMITTED if committed else IsolationLevel.READ_UNCOMMITTED
    futures = admin.list_offsets({tp: spec for tp in partitions}, isolation_level=level, request_timeout=timeout)
    return {(tp.topic, tp.partition): future.result().offset for tp, future in futures.items()}


def log_bounds(admin, partitions: list[TopicPartition], committed: bool,
               timeout: float) -> dict[tuple[str, int], tuple[int, int]]:
    """(log start, end the reader can reach) per partition: the end is the LSO for a read_committed reader."""
    low = list_offsets(admin, partitions, OffsetSpec.earliest(), committed, timeout)
    end = list_offsets(admin, partitions, OffsetSpec.latest(), committed, timeout)
    return {key: (low[key], end[key]) for key in end}
