"""Where a source partition's log starts and ends for the mirror's consumer.

A read_committed consumer (librdkafka's default, forced by exactly-once) gets nothing past the last stable
offset (LSO): the first offset of the oldest transaction still open. Lag, catch-up and consistency check
measure to that end, not to the high watermark, or they would wait for (or copy) records of a transaction
that may still abort.
"""

from __future__ import annotations

import time

from confluent_kafka import IsolationLevel, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import OffsetSpec


def reads_committed(consumer_settings: dict) -> bool:
    """Whether the mirror's consumer with these settings reads committed records only."""
    return consumer_settings.get("isolation.level", "read_committed") != "read_uncommitted"


def list_offsets(admin, partitions: list[TopicPartition], spec: OffsetSpec, committed: bool,
                 timeout: float) -> dict[tuple[str, int], int]:
    """One ListOffsets request for every partition: the offset `spec` names, as a read_committed
    (`committed`) or read_uncommitted reader sees it.

    Partitions answered with a retriable error (a leader not ready: a broker still loading thousands of new
    partitions answered NOT_LEADER_FOR_PARTITION, bench/width.py at 5,000) are asked again, together, within
    `timeout`; then, or at once for any other error, the KafkaException is raised."""
    level = IsolationLevel.READ_COMMITTED if committed else IsolationLevel.READ_UNCOMMITTED
    deadline = time.monotonic() + timeout
    offsets: dict[tuple[str, int], int] = {}
    while partitions:
        futures = admin.list_offsets({tp: spec for tp in partitions}, isolation_level=level, request_timeout=timeout)
        again = []
        for tp, future in futures.items():
            try:
                offsets[(tp.topic, tp.partition)] = future.result().offset
            except KafkaException as exc:
                if not _not_ready(exc.args[0]) or time.monotonic() > deadline:
                    raise
                again.append(TopicPartition(tp.topic, tp.partition))
        partitions = again
        if partitions:
            time.sleep(0.2)
    return offsets


# A partition's leader not known or not ready yet. confluent-kafka builds a per-partition result's KafkaError
# from its code alone, so retriable() says False for these.
_NOT_READY = {KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE, KafkaError.UNKNOWN_LEADER_EPOCH,
              KafkaError.FENCED_LEADER_EPOCH,
              KafkaError.REQUEST_TIMED_OUT, KafkaError._TIMED_OUT, KafkaError.NOT_ENOUGH_REPLICAS,
              KafkaError.OFFSET_NOT_AVAILABLE}


def _not_ready(error: KafkaError) -> bool:
    return error.retriable() or error.code() in _NOT_READY


def log_bounds(admin, partitions: list[TopicPartition], committed: bool,
               timeout: float) -> dict[tuple[str, int], tuple[int, int]]:
    """(log start, end the reader can reach) per partition: the end is the LSO for a read_committed reader."""
    low = list_offsets(admin, partitions, OffsetSpec.earliest(), committed, timeout)
    end = list_offsets(admin, partitions, OffsetSpec.latest(), committed, timeout)
    return {key: (low[key], end[key]) for key in end}
