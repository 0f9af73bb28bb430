"""Topics of a running worker: discovery, destination creation, partition growth, config sync. The other
periodic passes (ACL and group offset sync, heartbeats) are `engine.housekeeping`."""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from confluent_kafka import KafkaException

from mirror_worker.clients.callbacks import client_callback
from mirror_worker.config.model import MirrorConfig
from mirror_worker.engine.assignment import PartitionAssignment
from mirror_worker.exceptions import MirrorError
from mirror_worker.metrics import MirrorMetrics
from mirror_worker.policy.naming import check_mapping
from mirror_worker.policy.routing import Router
from mirror_worker.topics.admin import DestinationTopics, TopicInfo, describe_topics, outgrown_topics
from mirror_worker.topics.configs import (
    AppliedChanges,
    creation_configs,
    exclusion_pattern,
    sync_topic_configs,
)

if TYPE_CHECKING:
    from mirror_worker.engine.source_stream import SourceStream

log = logging.getLogger("mirror_worker")

# The lag sensor trusts the destination broker's append time of a heartbeat, not the stamp of the worker that sent it.
HEARTBEAT_TOPIC_CONFIG = {"message.timestamp.type": "LogAppendTime"}


class TopicManagement:
    """Which source topics are mirrored, and their destination topics kept in step.

    `max_bytes` ({destination topic: max.message.bytes}) is kept here and read by the hot path.
    `before_subscribe(stream, added topics)` runs before the consumer sees new topics (schema sync).
    """

    def __init__(self, config: MirrorConfig, streams: list[SourceStream], admin, destination: DestinationTopics,
                 router: Router, assignment: PartitionAssignment, metrics: MirrorMetrics, label: dict,
                 before_subscribe: Callable[[SourceStream, list[str]], None],
                 producers: Callable[[], list] = list, fit_batches: Callable[[Iterable[int]], None] = lambda _: None,
                 fit_partitions: Callable[[], None] = lambda: None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.config = config
        self.streams = streams
        self.admin = admin
        self.destination = destination
        self.router = router
        self.topic_filter = config.topic_filter()
        self.exclusions = exclusion_pattern(config.config_sync_exclude)
        self.assignment = assignment
        self.metrics = metrics
        self.label = label
        self.before_subscribe = before_subscribe
        self.producers = producers  # every producer of mirrored records, now (they are replaced at times)
        self.fit_batches = fit_batches  # called with the destination limits whenever they may have shrunk
        # Called at the end of every refresh, in the main loop (never from a rebalance callback, as follow_growth
        # is): the producers' bytes follow the partitions found (engine/mirrored_producers.py fit_partitions).
        self.fit_partitions = fit_partitions
        self.clock = clock
        self.max_bytes: dict[str, int] = {}
        self.not_mirrored: dict[tuple[str, str], str] = {}  # (source, topic) -> why its destination topic is missing
        self.empty_since: dict[str, float] = {}  # source -> since when its topic filter selects nothing
        self.selecting_nothing: set[str] = set()  # sources reported selecting no topic
        self.limits_unknown: str | None = None  # why new topics' timestamp limits cannot be raised (said once)
        self.applied = AppliedChanges()  # config changes set and not read back yet: reported once
        assignment.before_assign = self.follow_growth

    def refresh(self) -> None:
        """Mirror newly matching source topics: create their destination topics, then subscribe."""
        assignment = self.assignment
        for stream in self.streams:
            visible = describe_topics(stream.consumer)
            selected = self.topic_filter.select(visible)
            check_mapping(selected, self.router.policy, self.topic_filter, stream.same_cluster_as_destination)
            current = {t: visible[t] for t in selected}
            self._note_selection(stream, len(current))
            assignment.check_topic_ids(stream, list(current))
            changed = {t: info for t, info in current.items() if stream.topics.get(t) != info}
            if changed:
                # A topic whose destination topic cannot be made is left out (and tried again next time).
                for topic in self._follow_sources(stream, changed):
                    current.pop(topic)
            if set(current) != set(stream.topics):
                added, removed = set(current) - set(stream.topics), set(stream.topics) - set(current)
                self.before_subscribe(stream, sorted(added))
                log.info("subscription changed", extra={
                    **self.label, "source": stream.alias, "added": sorted(added), "removed": sorted(removed),
                })
                if current:
                    stream.consumer.subscribe(
                        sorted(current),
                        on_assign=client_callback(lambda c, p, s=stream: assignment.on_assign(s, p)),
                        on_revoke=client_callback(lambda c, p, s=stream: assignment.on_revoke(s, p)),
                        on_lost=client_callback(lambda c, p, s=stream: assignment.on_lost(s, p)),
                    )
                else:
                    stream.consumer.unsubscribe()
            stream.topics = current
        self.fit_partitions()

    def _follow_sources(self, stream: SourceStream, changed: dict[str, TopicInfo]) -> set[str]:
        """Create or grow the destination topics of new or changed source topics, and route to them.
        Returns the source topics not mirrored: their destination topic could not be created or grown."""
        remote = self.router.policy.remote_topic
        mapping = {remote(t): info for t, info in changed.items()}
        counts, failures = self.destination.ensure_each(mapping, self._creation_configs(stream, list(changed)))
        refused = {t for t in changed if remote(t) in failures}
        for topic in changed:
            self._note_creation(stream, topic, failures.get(remote(topic)))
        changed = {t: info for t, info in changed.items() if t not in refused}
        mapping = {remote(t): info for t, info in changed.items()}
        if not changed:
            return refused
        # Read before the sync: a limit the sync sets is held as set, a read right after it may still give the old.
        self.max_bytes.update(self.destination.max_message_bytes(list(mapping)))
        self.sync_configs({stream.alias: list(changed)})
        self.fit_batches(self.max_bytes.values())  # before any record of these topics is produced
        changed_counts = [t for t, c in counts.items() if self.router.destination_partitions.get(t) != c]
        for topic, count in counts.items():
            self.router.set_destination_partitions(topic, count)
        self._refresh_producer_metadata(changed_counts)
        self._check_partition_room(changed, counts)
        return refused

    def _note_creation(self, stream: SourceStream, topic: str, error: str | None) -> None:
        """Report a topic that is not mirrored because of its destination topic, once per reason; the others go on."""
        key = (stream.alias, topic)
        labels = {**self.label, "source": stream.alias, "topic": topic}
        if error is None:
            if self.not_mirrored.pop(key, None) is not None:
                self.metrics.topics_not_mirrored.remove(self.label["mirror"], stream.alias, topic)
                log.info("topic mirrored again", extra=labels)
            return
        if self.not_mirrored.get(key) == error:
            return
        self.not_mirrored[key] = error
        self.metrics.topics_not_mirrored.labels(**labels).set(1)
        self.metrics.errors.labels(kind="topic_creation", **self.label).inc()
        log.error("topic not mirrored", extra={**labels, "reason": error})
        print(f"mirror_worker: topic {topic} of source {stream.alias!r} not mirrored (tried again at each topic "
              f"refresh): {error}", file=sys.stderr, flush=True)

    def _note_selection(self, stream: SourceStream, count: int) -> None:
        """A topic filter that selects nothing is said, once it has selected nothing for a discovery interval."""
        self.metrics.topics_selected.labels(**self.label, source=stream.alias).set(count)
        now = self.clock()
        if count:
            self.empty_since.pop(stream.alias, None)
            if stream.alias in self.selecting_nothing:
                self.selecting_nothing.discard(stream.alias)
                self.metrics.selects_nothing.labels(**self.label, source=stream.alias).set(0)
                log.info("topic filter selects topics again", extra={**self.label, "source": stream.alias,
                                                                     "topics": count})
            return
        since = self.empty_since.setdefault(stream.alias, now)
        if now - since >= self.config.topic_refresh_interval_s and stream.alias not in self.selecting_nothing:
            self.selecting_nothing.add(stream.alias)
            self.metrics.selects_nothing.labels(**self.label, source=stream.alias).set(1)
            log.warning("topic filter selects no topic", extra={
                **self.label, "source": stream.alias, "whitelist": self.config.whitelist,
                "blacklist": self.config.blacklist, "seconds": round(now - since, 1)})

    def follow_growth(self, stream: SourceStream, keys) -> None:
        """Partitions assigned beyond what this worker knows of their topics: the source grew since the
        last refresh, so the destination grows first (a record of an unknown partition cannot be produced)."""
        topics = outgrown_topics(keys, stream.topics)
        if not topics:
            return
        # Called from the consumer's on_assign, i.e. inside its consume(): never a metadata request on that
        # consumer. Its end clears confluent-kafka's call state for the consumer, and the next callback that
        # consume() serves (a log line, an error) then aborts the process. The stream's admin client is
        # another handle (tests/integration/test_partition_growth.py).
        visible = describe_topics(stream.admin)
        grown = {t: visible[t] for t in topics if t in visible}
        if grown:
            self._follow_sources(stream, grown)
            stream.topics = {**stream.topics, **grown}

    def _refresh_producer_metadata(self, topics: list[str]) -> None:
        """Make every producer see the current partitions of `topics` before anything is routed to them.

        librdkafka refreshes a producer's topic metadata every topic.metadata.refresh.interval.ms (5 minutes
        by default): after a topic was created or grown, produce() to a new partition fails with
        "Unknown partition" until then. A metadata request for the topic updates the producer's view.
        """
        if not topics:
            return
        for producer in self.producers():
            for topic in topics:
                try:
                    producer.list_topics(topic, timeout=self.config.startup_timeout_s)
                except KafkaException as exc:
                    log.warning("producer metadata refresh failed", extra={
                        **self.label, "topic": topic, "error": exc.args[0].str()})

    def _creation_configs(self, stream: SourceStream, topics: list[str]) -> dict[str, dict[str, str]]:
        """{destination topic: the configs it is created with} (topics/configs.py creation_configs); why the
        timestamp limits cannot be raised is said once per reason."""
        remote = self.router.policy.remote_topic
        configs, why = creation_configs(stream.admin, self.admin, {t: remote(t) for t in topics},
                                        bool(self.config.config_sync_interval_ms), self.exclusions)
        if why is not None and why != self.limits_unknown:
            log.warning("destination timestamp limits not raised at topic creation", extra={**self.label, "reason": why})
        self.limits_unknown = why
        return configs

    def sync_configs(self, only: dict[str, list[str]] | None = None) -> None:
        """Set on each destination topic the source configs it lacks or holds differently (SET only)."""
        if not self.config.config_sync_interval_ms:
            return
        for stream in self.streams:
            topics = sorted(stream.topics) if only is None else only.get(stream.alias, [])
            if not topics:
                continue
            mapping = {t: self.router.policy.remote_topic(t) for t in topics}
            try:
                changes, errors = sync_topic_configs(stream.admin, self.admin, mapping, self.exclusions)
            except KafkaException as exc:
                errors, changes = {"*": exc.args[0].str()}, {}
            # The hot path refuses records above the limit it holds: it holds the value set, a topic-level value
            # in force at once, never one read back (a busy destination may still give the old: AppliedChanges).
            resized = {t: int(c.new) for t, topic_changes in changes.items() for c in topic_changes
                       if c.name == "max.message.bytes"}
            if resized:
                self.max_bytes.update(resized)
                self.fit_batches(self.max_bytes.values())
            read = set() if "*" in errors else set(mapping.values()) - set(errors)
            for topic, topic_changes in self.applied.news(read, changes).items():
                labels = {**self.label, "source": stream.alias, "topic": topic}
                for change in topic_changes:
                    self.metrics.configs_synced.labels(**labels).inc()
                    log.info("topic config synced", extra={
                        **labels, "config": change.name, "old": change.old, "new": change.new,
                    })
            for topic, error in errors.items():
                self.metrics.errors.labels(kind="config_sync", **self.label).inc()
                log.warning("topic config sync failed", extra={
                    **self.label, "source": stream.alias, "topic": topic, "error": error,
                })

    def _check_partition_room(self, sources: dict[str, TopicInfo], counts: dict[str, int]) -> None:
        if not (self.config.preserve_partitions or self.config.exactly_once):
            return
        for topic, info in sources.items():
            remote = self.router.policy.remote_topic(topic)
            if counts.get(remote, 0) < info.partitions:
                raise MirrorError(
                    f"destination topic {remote} has {counts.get(remote, 0)} partitions, fewer than source "
                    f"{topic}'s {info.partitions}: "
                    f"{'--exactly.once' if self.config.exactly_once else '--preserve.partitions'} "
                    "needs a destination partition per source partition"
                )


def internal_topics(config) -> dict[str, dict[str, str]]:
    """The worker's own destination topics and their configs, made at start in one go (topics/admin.py
    ensure_internal): exactly-once's positions, the offset syncs, the heartbeats, the dead letters."""
    topics: dict[str, dict[str, str]] = {}
    if config.exactly_once:
        topics[config.positions_topic] = {"cleanup.policy": "compact"}
    if config.writes_offset_syncs:
        topics[config.offset_syncs_topic] = {"cleanup.policy": "compact"}
    # The destination broker stamps each heartbeat as it appends it: the lag sensor then judges a heartbeat's
    # age by that broker's clock and its own, never by this worker's (a clock ahead would hide a dead
    # mirror, one behind would page forever). See docs/concepts/guarantees.md.
    topics[config.heartbeat_topic] = dict(HEARTBEAT_TOPIC_CONFIG)
    if config.dead_letter_topic:
        # Made before any record can be refused: a dead-letter topic that does not exist turns the first
        # refused record into a failed delivery and the worker into an exit-and-restart loop.
        topics[config.dead_letter_topic] = {}
    return topics
