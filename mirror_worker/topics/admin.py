"""Topic discovery on the sources and idempotent creation of destination topics (admin I/O edge)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from confluent_kafka import KafkaError, KafkaException, TopicCollection, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewPartitions, NewTopic, OffsetSpec

from mirror_worker.clients.pauses import pauses
from mirror_worker.config.model import TopicCreation
from mirror_worker.exceptions import MirrorError
from mirror_worker.topics.configs import ConfigChange, apply_config_changes

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TopicInfo:
    name: str
    partitions: int
    replication_factor: int


def describe_topics(client, timeout: float = 10.0) -> dict[str, TopicInfo]:
    """Topics visible through any client's metadata (consumer, producer or admin)."""
    return topics_in(client.list_topics(timeout=timeout))


def topics_in(metadata) -> dict[str, TopicInfo]:
    """The topics of one metadata answer (ClusterMetadata), those without an error and with partitions."""
    topics = {}
    for name, topic in metadata.topics.items():
        if topic.error is not None or not topic.partitions:
            continue
        replicas = max(len(p.replicas) for p in topic.partitions.values())
        topics[name] = TopicInfo(name, len(topic.partitions), replicas)
    return topics


def outgrown_topics(partitions, known: dict[str, TopicInfo]) -> set[str]:
    """Topics of `partitions` ((topic, partition) pairs) with a partition beyond their known count."""
    return {t for t, p in partitions if t in known and p >= known[t].partitions}


class TopicCreationError(MirrorError):
    """A destination topic could not be created or grown."""


class DestinationTopics:
    """Creates what is missing, grows what is too small, treats 'already exists' as success."""

    def __init__(self, admin: AdminClient, creation: TopicCreation, preserve_partitions: bool, timeout: float = 30.0,
                 stopping: Callable[[], bool] = lambda: False):
        self.admin = admin
        self.creation = creation
        self.preserve_partitions = preserve_partitions
        self.timeout = timeout
        self.stopping = stopping  # a stop was asked: waits end early

    def wanted_partitions(self, source: TopicInfo) -> int:
        count = self.creation.partitions_for(source.partitions)
        # Destination partition = source partition needs every source partition to exist there.
        return max(count, source.partitions) if self.preserve_partitions else count

    def grown_count(self, source: TopicInfo, current: int) -> int | None:
        """What a destination topic of `current` partitions grows to, or None to leave it.

        Grown whatever the routing when the source has more partitions than the destination (a source that
        gained partitions carries more load), to the count a new topic would get. Never shrunk.
        """
        wanted = self.wanted_partitions(source)
        return wanted if current < min(source.partitions, wanted) else None

    def ensure(self, mapping: dict[str, TopicInfo], extra_config: dict[str, dict[str, str]] | None = None,
               replication_factor: int | None = None, existing: dict[str, TopicInfo] | None = None) -> dict[str, int]:
        """mapping: destination topic -> its source topic's info. Returns destination partition counts.
        `replication_factor`: new topics get it instead of the one `topic-creation` derives from the source's.
        `existing`: the destination's topics when the caller just read them (else read here)."""
        counts, failures = self.ensure_each(mapping, extra_config, replication_factor, existing)
        if failures:
            raise TopicCreationError(next(iter(failures.values())))
        return counts

    def ensure_each(self, mapping: dict[str, TopicInfo], extra_config: dict[str, dict[str, str]] | None = None,
                    replication_factor: int | None = None, existing: dict[str, TopicInfo] | None = None
                    ) -> tuple[dict[str, int], dict[str, str]]:
        """As `ensure`, topic by topic: (partition counts of the topics made or found, {topic: why not} of
        those the destination would not create or grow: a name too long, a collision, a refused config...)."""
        if existing is None:
            existing = describe_topics(self.admin, self.timeout)
        failures: dict[str, str] = {}
        new_topics = [
            NewTopic(
                dest,
                self.wanted_partitions(src),
                replication_factor or self.creation.replication_factor_for(src.replication_factor),
                config=(extra_config or {}).get(dest, {}),
            )
            for dest, src in mapping.items()
            if dest not in existing
        ]
        if new_topics:
            for topic, future in self.admin.create_topics(new_topics, request_timeout=self.timeout).items():
                try:
                    future.result(self.timeout)
                    log.info("created destination topic", extra={"topic": topic})
                except KafkaException as exc:
                    if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                        failures[topic] = f"cannot create destination topic {topic}: {exc.args[0].str()}"
        to_grow = {
            dest: NewPartitions(dest, count)
            for dest, src in mapping.items()
            if dest in existing and (count := self.grown_count(src, existing[dest].partitions)) is not None
        }
        if to_grow:
            failures.update(self._grow(to_grow, {dest: existing[dest].partitions for dest in to_grow}))
        made = [t for t in mapping if t not in failures]
        grown = {t: g.new_total_count for t, g in to_grow.items() if t not in failures}
        counts = self._partition_counts(made, grown)
        created = {t.topic for t in new_topics} - set(failures)
        self._wait_until_served([(t, p) for t in created for p in range(counts.get(t, 0))]
                                + [(t, p) for t in grown for p in range(existing[t].partitions, grown[t])])
        return counts, failures

    def ensure_internal(self, topics: dict[str, dict[str, str]]) -> None:
        """The worker's own one-partition topics (offset syncs, positions, heartbeats, dead letters; topic -> its
        config), replicated as `topic-creation`'s internal-replication-factor says. A topic's config is given to
        it when new and set on it when it exists and differs (best effort: a destination that refuses it is
        logged, not fatal). All in one go: across a WAN each of these steps is a round trip or more, and the
        worker used to take them once per topic (bench.wan's logs: 0.4-0.6 s of start-up at 100 ms per topic)."""
        metadata = self.admin.list_topics(timeout=self.timeout)  # one request: the live brokers and the topics
        self.ensure({t: TopicInfo(t, 1, 1) for t in topics}, dict(topics),
                    internal_replication_factor(self.admin, self.creation, self.timeout, metadata), topics_in(metadata))
        configs = {t: config for t, config in topics.items() if config}
        if configs:
            self._align_configs(configs)

    def _align_configs(self, configs: dict[str, dict[str, str]]) -> None:
        resources = [ConfigResource(ConfigResource.Type.TOPIC, t) for t in configs]
        changes: dict[str, list[ConfigChange]] = {}
        errors: dict[str, str] = {}
        for resource, future in self.admin.describe_configs(resources, request_timeout=self.timeout).items():
            try:
                current = future.result(self.timeout)
            except KafkaException as exc:
                errors[resource.name] = exc.args[0].str()
                continue
            changes[resource.name] = [ConfigChange(name, current[name].value if name in current else None, value)
                                      for name, value in configs[resource.name].items()
                                      if name not in current or current[name].value != value]
        errors.update(apply_config_changes(self.admin, changes, self.timeout))
        for topic, error in errors.items():
            log.warning("topic config not set", extra={"topic": topic, "config": configs[topic], "error": error})
        for topic, topic_changes in changes.items():
            if topic_changes and topic not in errors:
                log.info("set topic config", extra={"topic": topic, "config": {c.name: c.new for c in topic_changes}})

    def _grow(self, to_grow: dict[str, NewPartitions], before: dict[str, int]) -> dict[str, str]:
        failures = {}
        for topic, future in self.admin.create_partitions(list(to_grow.values()), request_timeout=self.timeout).items():
            wanted = to_grow[topic].new_total_count
            try:
                future.result(self.timeout)
                log.info("grew destination topic", extra={"topic": topic, "partitions": wanted, "before": before[topic]})
            except KafkaException as exc:
                # Another worker grew it first ("already has N partitions"): success when the count is there.
                current = describe_topics(self.admin, self.timeout).get(topic)
                if current is None or current.partitions < wanted:
                    failures[topic] = f"cannot grow destination topic {topic}: {exc.args[0].str()}"
        return failures

    def _partition_counts(self, topics: list[str], grown: dict[str, int] | None = None) -> dict[str, int]:
        """Partition counts once every topic is visible, and every grown one with its new count, within
        `timeout` (at least 10 s): a broker creating or deleting thousands of partitions at the same time showed
        a new internal topic after more than the 10 s this once was (bench/width.py at 5,000 partitions)."""
        grown = grown or {}
        counts: dict[str, int] = {}
        waited_s = max(10.0, self.timeout)
        deadline = time.monotonic() + waited_s
        pause = pauses()
        while True:
            current = describe_topics(self.admin, self.timeout)
            counts = {t: current[t].partitions for t in topics if t in current}
            if len(counts) == len(topics) and all(counts[t] >= n for t, n in grown.items()):
                return counts
            if time.monotonic() >= deadline:
                break
            time.sleep(next(pause))
        missing = sorted(set(topics) - set(counts))
        if missing:
            raise TopicCreationError(f"destination topics not visible after creation: {', '.join(missing)}")
        short = sorted(t for t, n in grown.items() if counts[t] < n)
        raise TopicCreationError(f"destination topics not grown after create_partitions: {', '.join(short)}")

    def _wait_until_served(self, partitions: list[tuple[str, int]]) -> None:
        """Until each new partition's leader answers for it, within `timeout`; never fails.

        Metadata names a leader before that broker serves the partition: a node making thousands of them took
        20-30 s (bench.width at 5,000 partitions), and records copied into them meanwhile came back "Not leader
        for partition" and were retried, holding an exactly-once transaction back for all of them. A ListOffsets
        request is answered by the leader itself. Partitions still refused at the timeout are named in one
        line and copied into all the same (the producers retry them); other errors end their wait."""
        waited_s = max(10.0, self.timeout)
        deadline = time.monotonic() + waited_s
        waiting = [TopicPartition(t, p) for t, p in partitions]
        pause = pauses()
        while waiting and not self.stopping():
            futures = self.admin.list_offsets({tp: OffsetSpec.latest() for tp in waiting},
                                              request_timeout=self.timeout)
            waiting = [tp for tp, future in futures.items() if _not_served_yet(future, self.timeout)]
            if not waiting or time.monotonic() >= deadline:
                break
            time.sleep(next(pause))
        if waiting and not self.stopping():
            log.warning("new destination partitions not served by their leader yet: copied into all the same", extra={
                "partitions": len(waiting), "examples": [f"{tp.topic}[{tp.partition}]" for tp in waiting[:5]],
                "waited_s": waited_s})

    def max_message_bytes(self, topics: list[str]) -> dict[str, int]:
        """Each topic's max.message.bytes, the largest record batch its broker accepts."""
        result: dict[str, int] = {}
        deadline = time.monotonic() + self.timeout
        pause = pauses()
        while topics:
            resources = [ConfigResource(ConfigResource.Type.TOPIC, t) for t in topics]
            unknown = []
            for resource, future in self.admin.describe_configs(resources, request_timeout=self.timeout).items():
                try:
                    result[resource.name] = int(future.result(self.timeout)["max.message.bytes"].value)
                except KafkaException as exc:
                    # A topic just created: the broker asked may not have learnt of it yet (a cluster of several).
                    if exc.args[0].code() != KafkaError.UNKNOWN_TOPIC_OR_PART or time.monotonic() > deadline:
                        raise
                    unknown.append(resource.name)
            topics = unknown
            if topics:
                time.sleep(next(pause))
        return result


_NOT_SERVED_YET = (KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE,
                   KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError.REPLICA_NOT_AVAILABLE, KafkaError._TIMED_OUT)


def _not_served_yet(future, timeout: float) -> bool:
    try:
        future.result(timeout)
    except KafkaException as exc:
        return exc.args[0].code() in _NOT_SERVED_YET
    return False


def internal_replication_factor(admin, creation: TopicCreation, timeout: float, metadata=None) -> int:
    """`creation`'s internal replication factor for the destination `admin` talks to, by its live brokers (in
    `metadata` when the caller holds a fresh answer, else asked)."""
    brokers = len((metadata if metadata is not None else admin.list_topics(timeout=timeout)).brokers)
    factor = creation.internal_replication_factor_for(brokers)
    if 0 < factor < creation.internal_replication_factor:
        log.warning("fewer live destination brokers than the internal topics' replication factor",
                    extra={"brokers": brokers, "wanted": creation.internal_replication_factor, "replication_factor": factor})
    return factor


def topic_ids(admin, topics: list[str], timeout: float) -> dict[str, str]:
    """The current id of each of `topics`; a topic deleted meanwhile is left out."""
    if not topics:
        return {}
    ids = {}
    for topic, future in admin.describe_topics(TopicCollection(topics), request_timeout=timeout).items():
        try:
            ids[topic] = str(future.result(timeout).topic_id)
        except KafkaException:
            continue
    return ids
