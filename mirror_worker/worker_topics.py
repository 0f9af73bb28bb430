"""Topics of a running worker: discovery, destination creation, partition growth, config sync, heartbeats.

A part of MirrorWorker (worker.py), which holds the state these methods share.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
from typing import TYPE_CHECKING

from confluent_kafka import KafkaException, Producer

from mirror_worker.client_config import fitted_batch_size
from mirror_worker.exceptions import MirrorError
from mirror_worker.naming import check_mapping
from mirror_worker.topic_configs import copied_configs, describe_explicit_configs, sync_topic_configs
from mirror_worker.topics import TopicInfo, describe_topics

if TYPE_CHECKING:
    from mirror_worker.source_stream import SourceStream

log = logging.getLogger("mirror_worker")


class TopicManagement:
    """Which source topics are mirrored, and their destination topics kept in step."""

    def refresh_topics(self) -> None:
        """Mirror newly matching source topics: create their destination topics, then subscribe."""
        for stream in self.streams:
            visible = describe_topics(stream.consumer)
            selected = self.topic_filter.select(visible)
            check_mapping(selected, self.router.policy, self.topic_filter, stream.same_cluster_as_destination)
            current = {t: visible[t] for t in selected}
            self._check_topic_ids(stream, list(current))
            changed = {t: info for t, info in current.items() if stream.topics.get(t) != info}
            if changed:
                mapping = {self.router.policy.remote_topic(t): info for t, info in changed.items()}
                counts = self.destination.ensure(mapping, self._creation_configs(stream, list(changed)))
                self.sync_topic_configs({stream.alias: list(changed)})
                self.max_bytes.update(self.destination.max_message_bytes(list(mapping)))
                self._fit_batches()  # before any record of these topics is produced
                changed_counts = [t for t, c in counts.items() if self.router.destination_partitions.get(t) != c]
                for topic, count in counts.items():
                    self.router.set_destination_partitions(topic, count)
                self._refresh_producer_metadata(changed_counts)
                self._check_partition_room(changed, counts)
            if set(current) != set(stream.topics):
                added, removed = set(current) - set(stream.topics), set(stream.topics) - set(current)
                self._sync_schemas(stream, sorted(added))
                log.info("subscription changed", extra={
                    **self._label, "source": stream.alias, "added": sorted(added), "removed": sorted(removed),
                })
                if current:
                    stream.consumer.subscribe(
                        sorted(current),
                        on_assign=lambda c, p, s=stream: self._on_assign(s, p),
                        on_revoke=lambda c, p, s=stream: self._on_revoke(s, p),
                        on_lost=lambda c, p, s=stream: self._on_lost(s, p),
                    )
                else:
                    stream.consumer.unsubscribe()
            stream.topics = current

    def _refresh_producer_metadata(self, topics: list[str]) -> None:
        """Make every producer see the current partitions of `topics` before anything is routed to them.

        librdkafka refreshes a producer's topic metadata every topic.metadata.refresh.interval.ms (5 minutes
        by default): after a topic was created or grown, produce() to a new partition fails with
        "Unknown partition" until then. A metadata request for the topic updates the producer's view.
        """
        if not topics:
            return
        for producer in self._all_producers():
            for topic in topics:
                try:
                    producer.list_topics(topic, timeout=self.config.startup_timeout_s)
                except KafkaException as exc:
                    log.warning("producer metadata refresh failed", extra={
                        **self._label, "topic": topic, "error": exc.args[0].str()})

    def _creation_configs(self, stream: SourceStream, topics: list[str]) -> dict[str, dict[str, str]]:
        """{destination topic: the source's configs it is created with} (empty when config sync is off)."""
        if not self.config.config_sync_interval_ms:
            return {}
        remote = self.router.policy.remote_topic
        return {
            remote(topic): copied_configs(configs, self.config_exclusions)
            for topic, configs in describe_explicit_configs(stream.admin, topics).items()
        }

    def sync_topic_configs(self, only: dict[str, list[str]] | None = None) -> None:
        """Set on each destination topic the source configs it lacks or holds differently (SET only)."""
        if not self.config.config_sync_interval_ms:
            return
        for stream in self.streams:
            topics = sorted(stream.topics) if only is None else only.get(stream.alias, [])
            if not topics:
                continue
            mapping = {t: self.router.policy.remote_topic(t) for t in topics}
            try:
                changes, errors = sync_topic_configs(stream.admin, self.admin, mapping, self.config_exclusions)
            except KafkaException as exc:
                errors, changes = {"*": exc.args[0].str()}, {}
            resized = [t for t, topic_changes in changes.items() if any(c.name == "max.message.bytes" for c in topic_changes)]
            if resized:  # the hot path refuses records above the cached limit
                self.max_bytes.update(self.destination.max_message_bytes(resized))
                self._fit_batches()
            for topic, topic_changes in changes.items():
                labels = {**self._label, "source": stream.alias, "topic": topic}
                for change in topic_changes:
                    self.metrics.configs_synced.labels(**labels).inc()
                    log.info("topic config synced", extra={
                        **labels, "config": change.name, "old": change.old, "new": change.new,
                    })
            for topic, error in errors.items():
                self.metrics.errors.labels(kind="config_sync", **self._label).inc()
                log.warning("topic config sync failed", extra={
                    **self._label, "source": stream.alias, "topic": topic, "error": error,
                })

    def _fit_batches(self) -> None:
        """Keep the producers' batch.size within the smallest max.message.bytes of the destination topics.

        It only goes down. The producers are replaced once everything they hold was delivered (a flush, or
        exactly-once a commit of every partition's transaction), so no record is lost or reordered.
        """
        wanted = fitted_batch_size(self.batch_bytes, self.max_bytes.values())
        if wanted >= self.batch_bytes:
            return
        log.info("producer batch.size lowered to fit the destination topics", extra={
            **self._label, "batch_size": wanted, "smallest_max_message_bytes": min(self.max_bytes.values()),
        })
        self.batch_bytes = wanted
        if not self.config.exactly_once:
            if self.producers and self._flush(None):
                self.producers[:] = [Producer(self._producer_settings(self.config.producer)) for _ in self.producers]
            return
        self.checkpoint_and_commit()
        if self.fatal is not None:
            return
        for stream in self.streams:
            stream.transactions.producer_settings["batch.size"] = str(wanted)
            keys = list(stream.transactions.producers)
            stream.transactions.close(keys)
            stream.transactions.open(keys)

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

    def _ensure_own_topics(self) -> None:
        topic = self.config.heartbeat_topic
        self.destination.ensure({topic: TopicInfo(topic, 1, 1)})
        dead_letter = self.config.dead_letter_topic
        if dead_letter:
            # Made before any record can be refused: a dead-letter topic that does not exist turns the first
            # refused record into a failed delivery and the worker into an exit-and-restart loop.
            self.destination.ensure({dead_letter: TopicInfo(dead_letter, 1, 1)})

    def send_heartbeats(self) -> None:
        producer = self.heartbeat_producer or self.producers[0]
        now_ms = int(time.time() * 1000)
        for stream in self.streams:
            value = {
                "mirror": self.config.name,
                "source": stream.alias,
                "source_cluster_id": stream.cluster_id,
                "destination_cluster_id": self.destination_cluster_id,
                "worker": f"{socket.gethostname()}:{os.getpid()}",
                "timestamp_ms": now_ms,
                "assigned_partitions": len(stream.assigned),
            }
            try:
                producer.produce(
                    self.config.heartbeat_topic, json.dumps(value).encode(), f"{self.config.name}/{stream.alias}".encode(),
                    timestamp=now_ms,
                )
            except (BufferError, KafkaException) as exc:
                log.warning("heartbeat not sent", extra={**self._label, "error": str(exc)})
        producer.poll(0)

