"""Measuring a mirror (the I/O edge of the lag sensor): partition samples and newest heartbeats.

- Lag: for every source partition the mirror replicates (its topic filter over the source's topics),
  the mirror group's committed offset and the partition's log start and end (the last stable offset
  for a read_committed consumer). The group is only read (OffsetFetch), never joined. In exactly-once mode positions live on the destination, in the
  positions group keyed by (destination topic, source partition) — see mirror_worker/exactly_once/transactions.py.
- Latency: each worker's newest heartbeat (by offset) on the destination's heartbeat topic for this mirror,
  per source (key `<mirror>/<source>`, JSON value with `worker` and `timestamp_ms`), searched back `lookback_s`.
  The worker makes that topic LogAppendTime, so each record also carries the destination broker's append
  time, which the rules trust over the worker's stamp.
"""

from __future__ import annotations

import json
import time

from confluent_kafka import OFFSET_END, TIMESTAMP_LOG_APPEND_TIME, Consumer, KafkaException, TopicPartition

from mirror_airflow.lag.rules import Heartbeat, PartitionKey, Sample
from mirror_worker.api import (
    POSITIONS_GROUP, MirrorConfig, admin_client, committed_offsets, describe_topics, legacy_positions_group,
    log_bounds, reads_committed, side_consumer,
)


class MeasurementError(Exception):
    """The mirror's clusters could not be measured (unreachable, unauthorised, timed out)."""


def _reader(settings: dict, group: str) -> Consumer:
    return side_consumer(settings, group, {"enable.partition.eof": "true", "client.id": "kafka-mirror-lag-sensor"})


def measure_partitions(mirror: MirrorConfig, timeout: float = 30.0) -> list[tuple[PartitionKey, Sample]]:
    """One sample per source partition the mirror replicates."""
    out: list[tuple[PartitionKey, Sample]] = []
    topic_filter, policy = mirror.topic_filter(), mirror.naming_policy()
    try:
        for source in mirror.sources:
            consumer = _reader(source.consumer, mirror.group_id)
            try:
                topics = describe_topics(consumer, timeout)
                wanted = topic_filter.select(topics)
                partitions = [TopicPartition(t, p) for t in sorted(wanted) for p in range(topics[t].partitions)]
                committed = _committed(mirror, source.name, consumer, partitions, policy, timeout)
                marks = log_bounds(admin_client(source.consumer), partitions,
                                   reads_committed(source.consumer), timeout)
                now = time.time()
                for tp in partitions:
                    key = (tp.topic, tp.partition)
                    out.append(((source.name, *key), Sample(now, committed.get(key), marks[key][1], marks[key][0])))
            finally:
                consumer.close()
    except KafkaException as exc:
        raise MeasurementError(f"mirror {mirror.name}: lag measurement failed: {exc.args[0].str()}") from None
    return out


def _committed(mirror: MirrorConfig, alias: str, consumer: Consumer, partitions: list[TopicPartition], policy,
               timeout: float) -> dict[tuple[str, int], int]:
    if not partitions:
        return {}
    if not mirror.exactly_once:
        result = committed_offsets(consumer, partitions, timeout)  # asked again while the coordinator moves
        return {(tp.topic, tp.partition): tp.offset for tp in result if tp.offset >= 0}
    found: dict[tuple[str, int], int] = {}
    # A worker not restarted since the upgrade still keeps its positions in the earlier layout's group.
    for group in (POSITIONS_GROUP, legacy_positions_group(mirror.name, alias)):
        missing = [tp for tp in partitions if (tp.topic, tp.partition) not in found]
        if not missing:
            break
        positions = side_consumer(mirror.producer, group, {"isolation.level": "read_committed"})
        try:
            slots = [TopicPartition(policy.remote_topic(tp.topic), tp.partition) for tp in missing]
            result = committed_offsets(positions, slots, timeout)
            found.update({(tp.topic, tp.partition): slot.offset for tp, slot in zip(missing, result) if slot.offset >= 0})
        finally:
            positions.close()
    return found


def newest_heartbeats(mirror: MirrorConfig, lookback_s: float, timeout: float = 30.0) -> dict[str, list[Heartbeat]]:
    """Per source alias: each worker's newest heartbeat of the last `lookback_s` (none found: an empty list)."""
    found: dict[str, dict[str, Heartbeat]] = {source.name: {} for source in mirror.sources}
    none_found: dict[str, list[Heartbeat]] = {alias: [] for alias in found}
    keys = {f"{mirror.name}/{alias}".encode(): alias for alias in found}
    topic = mirror.heartbeat_topic
    consumer = _reader(mirror.heartbeat_producer or mirror.producer, "kafka-mirror-lag-sensor")
    try:
        metadata = consumer.list_topics(topic, timeout=timeout).topics.get(topic)
        if metadata is None or metadata.error is not None or not metadata.partitions:
            return none_found
        since_ms = int((time.time() - lookback_s) * 1000)
        starts = consumer.offsets_for_times([TopicPartition(topic, p, since_ms) for p in metadata.partitions],
                                            timeout=timeout)
        ends = {}
        for tp in starts:
            _low, high = consumer.get_watermark_offsets(TopicPartition(topic, tp.partition), timeout=timeout,
                                                        cached=False)
            if tp.offset != OFFSET_END and 0 <= tp.offset < high:
                ends[tp.partition] = high
        if not ends:
            return none_found
        consumer.assign([tp for tp in starts if tp.partition in ends])
        deadline = time.monotonic() + timeout
        while ends and time.monotonic() < deadline:
            for msg in consumer.consume(1000, 1.0):
                if msg.error():
                    if msg.error().code() == -191:  # _PARTITION_EOF
                        ends.pop(msg.partition(), None)
                        continue
                    raise KafkaException(msg.error())
                if msg.offset() >= ends.get(msg.partition(), 0) - 1:
                    ends.pop(msg.partition(), None)
                alias = keys.get(msg.key())
                if alias is None:
                    continue
                if (beat := _heartbeat(msg)) is not None:
                    found[alias][beat.worker] = beat  # read in offset order: the last one read is the newest
        if ends:
            raise MeasurementError(f"mirror {mirror.name}: reading heartbeats from {topic} timed out")
    except KafkaException as exc:
        raise MeasurementError(f"mirror {mirror.name}: heartbeat read failed: {exc.args[0].str()}") from None
    finally:
        consumer.close()
    return {alias: list(by_worker.values()) for alias, by_worker in found.items()}


def _heartbeat(msg) -> Heartbeat | None:
    try:
        value = json.loads(msg.value())
        worker_time = value["timestamp_ms"] / 1000.0
        worker = str(value.get("worker", "?"))
    except (ValueError, KeyError, TypeError, AttributeError):
        return None
    kind, stamp = msg.timestamp()
    # Only a LogAppendTime record's timestamp is the broker's; a CreateTime one is the worker's clock again.
    return Heartbeat(worker, msg.offset(), worker_time, stamp / 1000.0 if kind == TIMESTAMP_LOG_APPEND_TIME else None)
