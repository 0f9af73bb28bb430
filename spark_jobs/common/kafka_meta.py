"""Driver-side Kafka metadata for the Spark jobs: partitions, watermarks, times, committed offsets."""

from __future__ import annotations

import logging
from functools import cached_property

from confluent_kafka import KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from mirror_worker.batch_api import (
    admin_client, committed_positions, connection_settings, list_offsets, log_bounds, reads_committed, topic_ids,
)
from mirror_worker.batch_api import consumer as kafka_consumer
from spark_jobs.common.job_config import JobInputError, JobTarget
from spark_jobs.common.stable_offsets import LogEnds

_quiet = logging.getLogger("spark_jobs.librdkafka")
_quiet.addHandler(logging.NullHandler())
_quiet.propagate = False


class KafkaMeta:
    """One metadata client per cluster; `what` names the cluster in error messages."""

    def __init__(self, bootstrap: str, what: str, settings: dict | None = None, group_id: str = "spark-jobs-meta",
                 timeout: float = 15.0) -> None:
        self.what, self.timeout = what, timeout
        self.committed_reads = reads_committed(settings or {})
        self.connection = {**connection_settings(settings or {}), "bootstrap.servers": bootstrap, "logger": _quiet}
        self.conf = {**self.connection, "enable.auto.commit": False}
        self.consumer = kafka_consumer(self.conf, {"group.id": group_id})
        try:
            self.topics = {
                name: len(meta.partitions)
                for name, meta in self.consumer.list_topics(timeout=timeout).topics.items()
                if meta.error is None
            }
        except KafkaException as exc:
            self.consumer.close()
            raise JobInputError(f"{what} cluster unreachable at {bootstrap} within {timeout:.0f}s: {exc.args[0].str()}") from None

    def partitions(self, topic: str) -> int:
        if topic not in self.topics:
            raise JobInputError(f"unknown topic {topic!r} on the {self.what} cluster")
        return self.topics[topic]

    def watermarks(self, topic: str) -> dict[int, tuple[int, int]]:
        return {
            p: self.consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=self.timeout)
            for p in range(self.partitions(topic))
        }

    @cached_property
    def admin(self) -> AdminClient:
        return admin_client(self.connection, whole=True)

    def log_ends(self, topics) -> dict[tuple[str, int], LogEnds]:
        """Per partition of `topics`: log start, the end this cluster's reader reaches (the LSO read_committed),
        high watermark."""
        partitions = [TopicPartition(t, p) for t in topics for p in range(self.partitions(t))]
        bounds = log_bounds(self.admin, partitions, self.committed_reads, self.timeout)
        if self.committed_reads:
            high = list_offsets(self.admin, partitions, OffsetSpec.latest(), False, self.timeout)
        else:  # a read_uncommitted reader reaches the high watermark
            high = {key: end for key, (_, end) in bounds.items()}
        return {key: LogEnds(low, stable, high[key]) for key, (low, stable) in bounds.items()}

    def offsets_for_time(self, topic: str, timestamp_ms: int) -> dict[int, int]:
        """First offset at or after `timestamp_ms` per partition (the end offset when there is none)."""
        wanted = [TopicPartition(topic, p, timestamp_ms) for p in range(self.partitions(topic))]
        found = self.consumer.offsets_for_times(wanted, timeout=self.timeout)
        ends = self.watermarks(topic)
        return {tp.partition: tp.offset if tp.offset >= 0 else ends[tp.partition][1] for tp in found}

    def positions(self, group: str, topic: str) -> dict[int, tuple[int, str]]:
        """The group's committed offset and commit metadata (the topic id the mirror wrote) per partition that has one."""
        reader = kafka_consumer(self.conf, {"group.id": group})
        try:
            found = committed_positions(reader, [TopicPartition(topic, p) for p in range(self.partitions(topic))],
                                        self.timeout)
        finally:
            reader.close()
        return {partition: position for (_, partition), position in found.items()}

    def committed(self, group: str, topic: str) -> dict[int, int | None]:
        found = self.positions(group, topic)
        return {p: found[p][0] if p in found else None for p in range(self.partitions(topic))}

    def topic_ids(self, topics: list[str]) -> dict[str, str]:
        return topic_ids(self.admin, topics, self.timeout)

    def close(self) -> None:
        self.consumer.close()


def resolve_topics(target: JobTarget, source: KafkaMeta) -> list[str]:
    """The job's source topics: those given (each must exist), or all the mirror's filter selects."""
    if target.topics:
        for topic in target.topics:
            source.partitions(topic)
        return list(target.topics)
    if target.topic_filter is None:
        raise JobInputError("--topics is required")
    topics = target.topic_filter.select(source.topics)
    if not topics:
        raise JobInputError("the mirror selects no topic on the source cluster")
    return topics
