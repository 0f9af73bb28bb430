"""The mirror loop of one worker process: consume, route, produce, flush, commit.

At-least-once rests on one rule, kept by `OffsetLedger`: offsets are committed from a checkpoint taken
*before* a producer flush that completed with no delivery error. Everything else (backpressure, topic
discovery, rebalances, shutdown) is arranged around that rule and never commits past it.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka import TopicCollection
from confluent_kafka.admin import AdminClient

from mirror_worker.client_config import connection_settings
from mirror_worker.config import MirrorConfig
from mirror_worker.data_loss import StartDecision, Verdict, decide_start
from mirror_worker.exactly_once import PartitionTransactions, ProducerFenced, TransactionAborted
from mirror_worker import wire_format
from mirror_worker.exceptions import (
    ClusterRefusedError, FatalMirrorError, MirrorError, SchemaConflict, UnknownSchemaId, UnreachableClusterError,
)
from mirror_worker.ledger import OffsetLedger
from mirror_worker.metrics import MirrorMetrics
from mirror_worker.naming import check_mapping
from mirror_worker.offset_syncs import OffsetSyncWriter
from mirror_worker.routing import Router
from mirror_worker.topic_configs import copied_configs, describe_explicit_configs, exclusion_pattern, sync_topic_configs
from mirror_worker.topics import DestinationTopics, TopicInfo, describe_topics

if TYPE_CHECKING:
    from mirror_worker.schema_sync import SchemaSyncer

log = logging.getLogger("mirror_worker")
librdkafka_log = logging.getLogger("mirror_worker.librdkafka")

PROVENANCE_HEADER = "mirror.source"
# A full producer queue waits this long for room before the consumers are paused (see _apply_backpressure).
PAUSE_AFTER_S = 1.0


def provenance_value(alias: str, cluster_id: str, topic: str, partition: int, offset: int) -> bytes:
    return f"{alias}:{cluster_id}:{topic}:{partition}:{offset}".encode()


def parse_provenance(value: bytes) -> tuple[str, str, str, int, int] | None:
    parts = value.decode(errors="replace").split(":")
    if len(parts) != 5:
        return None
    alias, cluster_id, topic, partition, offset = parts
    try:
        return alias, cluster_id, topic, int(partition), int(offset)
    except ValueError:
        return None


@dataclass
class SourceStream:
    """One source cluster: its consumer, ledger and the topics it mirrors."""

    alias: str
    consumer: Consumer
    cluster_id: str
    same_cluster_as_destination: bool
    ledger: OffsetLedger = field(default_factory=OffsetLedger)
    topics: dict[str, TopicInfo] = field(default_factory=dict)
    assigned: set[tuple[str, int]] = field(default_factory=set)
    stash: list = field(default_factory=list)
    # Handed to the producer since the last completed flush: topic -> [records, bytes, newest timestamp ms]
    pending: dict[str, list] = field(default_factory=dict)
    # Bumped by every revoke/loss: a batch fetched across one may hold records this worker no longer owns.
    rebalances: int = 0
    # Where the hot path finds a record's producer: the worker's shared list (indexed by Route.producer_index),
    # or, exactly-once, the transactional producer of each source partition (keyed by (topic, partition)).
    producers: list | dict = field(default_factory=list)
    transactions: PartitionTransactions | None = None
    reset_policy: str = "earliest"
    incremental_assignment: bool = False  # cooperative-sticky or the KIP-848 consumer protocol
    admin: AdminClient | None = None
    # Source topic ids, kept in commit metadata: a deleted-and-recreated topic is told from the old one.
    topic_ids: dict[str, str] = field(default_factory=dict)
    recreated: dict[str, str] = field(default_factory=dict)  # topic -> its id before it was recreated
    reported_loss: set[tuple[str, int]] = field(default_factory=set)
    schemas: SchemaSyncer | None = None  # when this source and the destination have registries
    schema_conflicts: dict[str, str] = field(default_factory=dict)  # topic -> why it is not mirrored


class MirrorWorker:
    def __init__(self, config: MirrorConfig, metrics: MirrorMetrics | None = None, clock=time.monotonic) -> None:
        self.config = config
        self.metrics = metrics or MirrorMetrics(config.name)
        self.clock = clock
        self.stop_event = threading.Event()
        self.batch_size = max(1, min(5000, config.queue_size // 4))
        self.fatal: str | None = None
        self.refused: str | None = None  # the last authentication or TLS failure reported by a client
        self.router = Router(
            config.naming_policy(), config.preserve_partitions, config.preserve_order, config.num_producers,
            producer_per_partition=config.exactly_once,
        )
        self.topic_filter = config.topic_filter()
        self.config_exclusions = exclusion_pattern(config.config_sync_exclude)
        self.max_bytes: dict[str, int] = {}
        self.streams: list[SourceStream] = []
        self.producers: list[Producer] = []
        self.heartbeat_producer: Producer | None = None
        self.destination_cluster_id = ""
        self._paused = False
        self.offset_sync_writer: OffsetSyncWriter | None = None
        self._closing_deadline: float | None = None
        self._label = {"mirror": config.name}

    # ---------------------------------------------------------------- start-up
    def start(self) -> None:
        """Connect (bounded wait), discover topics, create destination topics, subscribe."""
        cfg = self.config
        self.admin = AdminClient(self._client_settings(cfg.producer))
        self.destination_cluster_id = self._cluster_id(self.admin, "destination")
        if not cfg.exactly_once:
            for _ in range(cfg.num_producers):
                self.producers.append(Producer(self._producer_settings(cfg.producer)))
        if cfg.heartbeat_producer or cfg.exactly_once:
            # Exactly-once producers are transactional: heartbeats go through a plain one.
            self.heartbeat_producer = Producer(self._producer_settings(cfg.heartbeat_producer or cfg.producer))
        # Exactly-once keys positions by source partition on the destination topic: it needs the room.
        self.destination = DestinationTopics(
            self.admin, cfg.topic_creation, cfg.preserve_partitions or cfg.exactly_once
        )
        for source in cfg.sources:
            settings = {"group.id": cfg.group_id, **source.consumer}
            if cfg.metrics_port is not None:
                settings.setdefault("statistics.interval.ms", "5000")
            if cfg.exactly_once:
                settings["isolation.level"] = "read_committed"
            reset_policy = settings.get("auto.offset.reset", "latest")
            # The worker picks every start position itself (see _on_assign); a fetch that falls off the log
            # later must surface as an error, never as librdkafka's silent reset.
            settings["auto.offset.reset"] = "error"
            consumer = Consumer(self._client_settings(settings, stats_source=source.name))
            cluster_id = self._cluster_id(consumer, f"source {source.name!r}")
            stream = SourceStream(source.name, consumer, cluster_id, cluster_id == self.destination_cluster_id,
                                  producers=self.producers,
                                  reset_policy=reset_policy, incremental_assignment=_incremental(settings),
                                  admin=AdminClient(self._client_settings(connection_settings(source.consumer))))
            if cfg.exactly_once:
                stream.transactions = PartitionTransactions(
                    cfg.name, source.name, self._producer_settings(cfg.producer), connection_settings(cfg.producer),
                    self.router.policy.remote_topic, stream.topic_ids.get, cfg.startup_timeout_s,
                )
                stream.producers = stream.transactions.producers
            self.streams.append(stream)
        if cfg.syncs_schemas:  # the registry client and fastavro are only loaded by mirrors that use them
            from mirror_worker.schema_sync import syncers_for

            syncers = syncers_for(cfg, on_register=self.metrics.schemas_registered.labels(**self._label).inc)
            for stream in self.streams:
                stream.schemas = syncers.get(stream.alias)
        self._ensure_heartbeat_topic()
        if cfg.writes_offset_syncs:
            topic = cfg.offset_syncs_topic
            self.destination.ensure({topic: TopicInfo(topic, 1, 1)}, {topic: {"cleanup.policy": "compact"}})
            self.offset_sync_writer = OffsetSyncWriter(topic, self.admin, self.router.policy.remote_topic)
        self.refresh_topics()
        log.info("mirror started", extra={
            **self._label, "sources": [s.alias for s in self.streams], "group": cfg.group_id,
            "topics": sorted({t for s in self.streams for t in s.topics}),
        })

    def _cluster_id(self, client, what: str) -> str:
        """The cluster's id, within startup_timeout_s; refused credentials or certificates fail at once."""
        deadline = time.monotonic() + self.config.startup_timeout_s
        self.refused = None
        while True:
            try:
                return client.list_topics(timeout=max(0.1, min(2.0, deadline - time.monotonic()))).cluster_id or ""
            except KafkaException as exc:
                error = exc.args[0].str()
            client.poll(0)  # serves error_cb, which sees why the connection failed
            if self.refused:
                raise ClusterRefusedError(f"{what} cluster refused the connection: {self.refused}")
            if time.monotonic() >= deadline:
                raise UnreachableClusterError(
                    f"{what} cluster unreachable within {self.config.startup_timeout_s:.0f}s: {error}"
                )

    def _client_settings(self, settings: dict, stats_source: str | None = None) -> dict:
        out = {**settings, "logger": librdkafka_log, "error_cb": self._on_client_error}
        if stats_source is not None and "statistics.interval.ms" in settings:
            out["stats_cb"] = lambda stats_json: self._on_stats(stats_source, stats_json)
        return out

    def _producer_settings(self, settings: dict) -> dict:
        return {
            **self._client_settings(settings),
            "delivery.report.only.error": True,
            "on_delivery": self._on_delivery_error,
        }

    # ---------------------------------------------------------------- topics
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
                for topic, count in counts.items():
                    self.router.set_destination_partitions(topic, count)
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

    def _ensure_heartbeat_topic(self) -> None:
        topic = self.config.heartbeat_topic
        self.destination.ensure({topic: TopicInfo(topic, 1, 1)})

    # ---------------------------------------------------------------- rebalance callbacks
    def _on_assign(self, stream: SourceStream, partitions: list[TopicPartition]) -> None:
        keys = {(tp.topic, tp.partition) for tp in partitions}
        halts = self._assign_checked(stream, partitions)
        stream.assigned |= keys
        if self._paused:
            stream.consumer.pause(partitions)
        halts += [((tp.topic, tp.partition), tp.offset, stream.schema_conflicts[tp.topic])
                  for tp in partitions if tp.topic in stream.schema_conflicts]
        for (topic, partition), offset, reason in halts:
            self._halt(stream, topic, partition, offset, reason)
        log.info("partitions assigned", extra={**self._label, "source": stream.alias, "partitions": _fmt(keys)})

    def _on_revoke(self, stream: SourceStream, partitions: list[TopicPartition]) -> None:
        keys = {(tp.topic, tp.partition) for tp in partitions}
        # Commit what is done for the partitions that leave, so their next owner starts right there.
        self.checkpoint_and_commit(only=(stream, keys), deadline=self._shutdown_deadline())
        if stream.transactions is not None:
            stream.transactions.close(keys)
        stream.ledger.forget(keys)
        stream.assigned -= keys
        stream.rebalances += 1
        stream.stash = [m for m in stream.stash if (m.topic(), m.partition()) not in keys]
        log.info("partitions revoked", extra={**self._label, "source": stream.alias, "partitions": _fmt(keys)})

    def _on_lost(self, stream: SourceStream, partitions: list[TopicPartition]) -> None:
        keys = {(tp.topic, tp.partition) for tp in partitions}
        if stream.transactions is not None:
            stream.transactions.close(keys)
        stream.ledger.forget(keys)
        stream.assigned -= keys
        stream.rebalances += 1
        stream.stash = [m for m in stream.stash if (m.topic(), m.partition()) not in keys]
        log.warning("partitions lost (not committed)", extra={**self._label, "source": stream.alias, "partitions": _fmt(keys)})

    # ---------------------------------------------------------------- main loop
    def run(self) -> None:
        cfg = self.config
        now = self.clock()
        next_commit = now + cfg.commit_interval_s
        next_refresh = now + cfg.topic_refresh_interval_s
        next_config_sync = now + cfg.config_sync_interval_ms / 1000
        next_heartbeat = now
        timeout = 0.5 if len(self.streams) == 1 else 0.1
        while not self.stop_event.is_set() and self.fatal is None:
            now = self.clock()
            if now >= next_refresh:
                self.refresh_topics()
                next_refresh = now + cfg.topic_refresh_interval_s
            if cfg.config_sync_interval_ms and now >= next_config_sync:
                self.sync_topic_configs()
                next_config_sync = self.clock() + cfg.config_sync_interval_ms / 1000
            if now >= next_heartbeat:
                self.send_heartbeats()
                next_heartbeat = now + cfg.heartbeat_interval_s
            if now >= next_commit:
                self.metrics.in_flight.labels(**self._label).set(self._in_flight())
                self.checkpoint_and_commit()
                next_commit = self.clock() + cfg.commit_interval_s
            self._apply_backpressure()
            for stream in self.streams:
                if stream.stash:
                    batch, stream.stash = stream.stash, []
                    self._mirror(stream, batch)
                    if stream.stash:  # the producers are full again: nothing newer before these
                        continue
                if not stream.topics:
                    time.sleep(timeout)
                    continue
                rebalances = stream.rebalances
                batch = stream.consumer.consume(self.batch_size, timeout)
                if batch and stream.rebalances != rebalances:
                    batch = [m for m in batch if m.error() or (m.topic(), m.partition()) in stream.assigned]
                if batch:
                    self._mirror(stream, batch)
            for producer in self._all_producers():
                producer.poll(0)
        if self.fatal is not None:
            raise FatalMirrorError(self.fatal)

    def _mirror(self, stream: SourceStream, batch: list) -> None:
        """The hot path: hand every record of `batch` to its producer, in order, per partition.

        A batch holds runs of records of one partition: the route, producer and halt state are looked
        up once per run, and the ledger and the counts are updated once per run (with the offset of the
        run's last record handed over), not once per record.
        """
        route_of = self.router.route
        producers = stream.producers
        next_offsets = stream.ledger.next_offsets
        halted = stream.ledger.halted
        pending = stream.pending
        provenance = self.config.provenance_headers
        max_bytes = self.max_bytes
        id_map = stream.schemas.id_headers if stream.schemas is not None else None
        rewrite, magic, header_size = wire_format.rewrite, wire_format.MAGIC_BYTE, wire_format.HEADER_SIZE
        before = {topic: (c[0], c[1]) for topic, c in pending.items()}
        no_limit = 1 << 62
        # The current run: its partition, and what was handed over of it.
        topic = partition = None
        skip = False
        last = None  # the run's last record handed to the producer
        records = size_sum = newest = 0
        for msg in batch:
            err = msg.error()
            if err is not None:
                # Close the run first: error handling may move a partition's position (on_data_loss=reset).
                if last is not None:
                    _close_run(next_offsets, pending, topic, partition, last, records, size_sum, newest)
                    last = None
                    records = size_sum = newest = 0
                topic = partition = None
                self._on_consume_error(stream, msg, err)
                continue
            msg_partition = msg.partition()
            msg_topic = msg.topic()
            if msg_partition != partition or msg_topic != topic:
                if last is not None:
                    _close_run(next_offsets, pending, topic, partition, last, records, size_sum, newest)
                    last = None
                    records = size_sum = newest = 0
                topic, partition = msg_topic, msg_partition
                skip = bool(halted) and (topic, partition) in halted
                route = route_of(topic, partition)
                dest_topic, dest_partition = route.topic, route.partition
                produce = producers[route.producer_index].produce
                limit = max_bytes.get(dest_topic, no_limit)
            if skip:
                continue
            key = msg.key()
            value = msg.value()
            size = (len(key) if key else 0) + (len(value) if value else 0)
            headers = msg.headers()
            timestamp = msg.timestamp()[1]
            if timestamp < 0:  # TIMESTAMP_NOT_AVAILABLE: let the producer stamp it
                timestamp = 0
            if provenance or headers:
                headers = self._headers(stream, msg, headers, dest_topic)
                if headers is False:
                    skip = (topic, partition) in halted
                    continue
            refused = False
            if size > limit:
                refused = True
                self._refuse(stream, msg, f"record of {size} bytes exceeds destination {dest_topic} "
                                          f"max.message.bytes={limit}")
            elif id_map is not None:
                try:
                    if key and key[0] == magic and len(key) >= header_size:
                        key = rewrite(key, id_map)
                    if value and value[0] == magic and len(value) >= header_size:
                        value = rewrite(value, id_map)
                except KeyError:
                    rewritten = self._new_schema_ids(stream, msg)
                    refused = rewritten is None  # dead-lettered, or its partition (or topic) halted
                    if not refused:
                        key, value = rewritten
            if refused:
                skip = (topic, partition) in halted
                if skip:
                    continue
            else:
                try:
                    produce(dest_topic, value, key, dest_partition, timestamp=timestamp, headers=headers)
                except BufferError:
                    # queue.size records in flight: the rest of the batch waits, in order, in the stash,
                    # and the main loop waits for room before it fetches anything newer.
                    stream.stash[:0] = batch[batch.index(msg):]
                    break
                except KafkaException as exc:
                    self._refuse(stream, msg, exc.args[0].str())
                    skip = (topic, partition) in halted
                    if skip:
                        continue
            last = msg
            records += 1
            size_sum += size
            if timestamp > newest:
                newest = timestamp
        if last is not None:
            _close_run(next_offsets, pending, topic, partition, last, records, size_sum, newest)
        for topic, counts in pending.items():
            records, size = before.get(topic, (0, 0))
            if counts[0] > records:
                labels = {**self._label, "source": stream.alias, "topic": topic}
                self.metrics.records_consumed.labels(**labels).inc(counts[0] - records)
                self.metrics.bytes_consumed.labels(**labels).inc(counts[1] - size)

    # ---------------------------------------------------------------- schemas
    def _sync_schemas(self, stream: SourceStream, topics: list[str]) -> None:
        """Copy the subjects of newly mirrored topics before any of their records is produced."""
        if stream.schemas is None:
            return
        for topic in topics:
            try:
                stream.schemas.sync_topic(topic)
            except SchemaConflict as exc:
                self._schema_conflict(stream, topic, str(exc))
        self.metrics.schema_id_cache_size.labels(source=stream.alias, **self._label).set(len(stream.schemas.id_headers))

    def _new_schema_ids(self, stream: SourceStream, msg) -> tuple | None:
        """A key or value framed with a schema id not mapped yet: sync its subjects, then map it.

        Returns the rewritten (key, value), or None when the record was refused (unknown id: dead-lettered or
        its partition halted) or its topic halted (schema conflict). A registry that does not answer stops
        the worker (SchemaRegistryUnavailable): the next run resumes from the last commit.
        """
        topic, syncer = msg.topic(), stream.schemas
        self.metrics.schema_id_cache_misses.labels(source=stream.alias, **self._label).inc()
        if topic in stream.schema_conflicts:
            self._schema_conflict(stream, topic, stream.schema_conflicts[topic], at=msg)
            return None
        key, value = msg.key(), msg.value()
        try:
            for data in (key, value):
                if wire_format.is_framed(data) and data[:wire_format.HEADER_SIZE] not in syncer.id_headers:
                    syncer.destination_header(topic, wire_format.schema_id(data))
        except UnknownSchemaId as exc:
            self._refuse(stream, msg, f"unknown schema: {exc}")
            return None
        except SchemaConflict as exc:
            self._schema_conflict(stream, topic, str(exc), at=msg)
            return None
        finally:
            self.metrics.schema_id_cache_size.labels(source=stream.alias, **self._label).set(len(syncer.id_headers))
        return (wire_format.rewrite(key, syncer.id_headers) if wire_format.is_framed(key) else key,
                wire_format.rewrite(value, syncer.id_headers) if wire_format.is_framed(value) else value)

    def _schema_conflict(self, stream: SourceStream, topic: str, reason: str, at=None) -> None:
        """The topic's subjects cannot be synced: halt every partition of it this worker holds."""
        if topic not in stream.schema_conflicts:
            stream.schema_conflicts[topic] = reason
            labels = {**self._label, "source": stream.alias, "topic": topic}
            self.metrics.schema_conflicts.labels(**labels).set(1)
            log.error("schema conflict: topic not mirrored", extra={**labels, "error": reason})
            print(f"mirror_worker: {reason} (source {stream.alias!r}; the topic is not mirrored)",
                  file=sys.stderr, flush=True)
        if at is not None:
            self._halt(stream, topic, at.partition(), at.offset(), reason)
        ledger = stream.ledger
        for key in sorted(stream.assigned):
            if key[0] == topic and key not in ledger.halted:
                self._halt(stream, topic, key[1], ledger.next_offsets.get(key, ledger.committed.get(key, 0)), reason)

    def _headers(self, stream: SourceStream, msg, headers, destination_topic: str):
        """Copy headers, check for a cycle, add provenance. False means: the record was refused."""
        out = []
        for name, value in headers or ():
            if name == PROVENANCE_HEADER:
                origin = parse_provenance(value) if value else None
                if origin and origin[1] and origin[1] == self.destination_cluster_id:
                    self._refuse(stream, msg, f"cycle: the record came from the destination cluster ({value.decode()})", force_halt=True)
                    return False
                if self.config.provenance_headers:
                    continue  # replaced by this hop's provenance below
            out.append((name, value))
        if self.config.provenance_headers:
            out.append((PROVENANCE_HEADER, provenance_value(
                stream.alias, stream.cluster_id, msg.topic(), msg.partition(), msg.offset())))
        return out

    def _on_consume_error(self, stream: SourceStream, msg, err: KafkaError) -> None:
        if err.code() == KafkaError._AUTO_OFFSET_RESET and msg.topic() and msg.partition() is not None:
            topic, partition = msg.topic(), msg.partition()
            position = stream.ledger.next_offsets.get((topic, partition), stream.ledger.committed.get((topic, partition)))
            recreated = self._fetch_topic_ids(stream, [topic])
            low, high = stream.consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
            decision = decide_start(position, recreated.get(topic), stream.topic_ids.get(topic), low, high, True,
                                    f"{topic}[{partition}]")
            if decision.verdict is Verdict.RESUME:  # librdkafka saw a log that moved; ours is inside it now
                decision = StartDecision(Verdict.TRUNCATED, low, f"{topic}[{partition}]: {err.str()}")
            self._on_data_loss(stream, topic, partition, position, decision)
            return
        self.metrics.errors.labels(kind="consume", **self._label).inc()
        if err.fatal():
            self.fatal = f"source {stream.alias!r} consumer failed: {err.str()}"
        log.warning("consume error", extra={**self._label, "source": stream.alias, "error": err.str(), "topic": msg.topic()})

    def _refuse(self, stream: SourceStream, msg, reason: str, force_halt: bool = False) -> None:
        """A record the destination will not take: dead-letter it (opt-in) or halt its partition."""
        topic, partition, offset = msg.topic(), msg.partition(), msg.offset()
        labels = {**self._label, "source": stream.alias, "topic": topic}
        self.metrics.records_consumed.labels(**labels).inc()
        if self.config.dead_letter_topic and not force_halt:
            headers = list(msg.headers() or []) + [
                (PROVENANCE_HEADER, provenance_value(stream.alias, stream.cluster_id, topic, partition, offset)),
                ("mirror.error", reason.encode()),
            ]
            try:
                stream.producers[self.router.route(topic, partition).producer_index].produce(
                    self.config.dead_letter_topic, msg.value(), msg.key(), headers=headers)
                self.metrics.dead_lettered.labels(**labels).inc()
                log.error("record dead-lettered", extra={**labels, "partition": partition, "offset": offset, "reason": reason})
                return
            except (KafkaException, BufferError) as exc:
                reason = f"{reason}; dead-letter topic refused it too: {exc}"
        self._halt(stream, topic, partition, offset, reason)

    def _halt(self, stream: SourceStream, topic: str, partition: int, offset: int, reason: str) -> None:
        """Stop one partition at `offset`: nothing at or after it is committed by this run."""
        labels = {**self._label, "source": stream.alias, "topic": topic}
        stream.ledger.halt((topic, partition), offset, reason)
        stream.consumer.pause([TopicPartition(topic, partition)])
        self.metrics.halted_partitions.labels(partition=str(partition), **labels).set(1)
        self.metrics.errors.labels(kind="halt", **self._label).inc()
        log.error("partition halted", extra={**labels, "partition": partition, "offset": offset, "reason": reason})
        print(f"mirror_worker: partition {topic}[{partition}] of source {stream.alias!r} halted at offset {offset}: {reason}",
              file=sys.stderr, flush=True)

    # ---------------------------------------------------------------- backpressure
    def _in_flight(self) -> int:
        return sum(len(p) for p in self._all_producers())

    def _all_producers(self) -> list[Producer]:
        if not self.config.exactly_once:
            return self.producers
        return [p for stream in self.streams for p in stream.producers.values()]

    def _apply_backpressure(self) -> None:
        """Wait for room in the producers while a stream holds records they refused (queue full).

        The consumers are paused only when the wait outlasts PAUSE_AFTER_S: librdkafka drops a paused
        partition's prefetched records, so pausing on every full queue would fetch everything twice.
        While paused, the consumers are still polled (nothing is fetched) to keep the group membership
        (max.poll.interval.ms); what they still hand out joins the stash, behind the refused records.
        """
        if not any(stream.stash for stream in self.streams):
            return
        room_at = max(1, self.config.queue_size - self.batch_size // 2)
        started = last_log = self.clock()
        try:
            while True:
                for producer in self._all_producers():
                    producer.poll(0.002)
                if self._in_flight() <= room_at or self.stop_event.is_set() or self.fatal is not None:
                    break
                now = self.clock()
                if now - started < PAUSE_AFTER_S:
                    continue
                if not self._paused:
                    self._pause_all(True)
                    self.metrics.backpressure_pauses.labels(**self._label).inc()
                for stream in self.streams:
                    msg = stream.consumer.poll(0)
                    if msg is not None:
                        stream.stash.append(msg)
                if now - last_log > 10:
                    log.warning("destination slow: consumption paused", extra={**self._label, "in_flight": self._in_flight()})
                    last_log = now
        finally:
            self.metrics.backpressure_seconds.labels(**self._label).inc(self.clock() - started)
            if self._paused:
                self._pause_all(False)

    def _pause_all(self, pause: bool) -> None:
        self._paused = pause
        for stream in self.streams:
            partitions = [
                TopicPartition(t, p) for t, p in stream.assigned if pause or (t, p) not in stream.ledger.halted
            ]
            if partitions:
                (stream.consumer.pause if pause else stream.consumer.resume)(partitions)

    # ---------------------------------------------------------------- flush + commit
    def _shutdown_deadline(self) -> float | None:
        if self._closing_deadline is not None:
            return self._closing_deadline
        return self.clock() + self.config.shutdown_timeout_s if self.stop_event.is_set() else None

    def _flush(self, deadline: float | None) -> bool:
        """Wait until every producer delivered everything; False if the deadline came first."""
        last_log = self.clock()
        while True:
            remaining = 0
            for producer in self._all_producers():
                remaining += producer.flush(0.5)
            if remaining == 0:
                return True
            now = self.clock()
            if self.fatal is not None:
                return False
            if deadline is None and self.stop_event.is_set():
                deadline = now + self.config.shutdown_timeout_s
            if deadline is not None and now >= deadline:
                return False
            if now - last_log > 10:
                log.warning("waiting for the destination to acknowledge", extra={**self._label, "in_flight": remaining})
                last_log = now

    def checkpoint_and_commit(self, only: tuple[SourceStream, set] | None = None, deadline: float | None = None) -> bool:
        if self.config.exactly_once:
            return self._commit_transactions(only, deadline)
        checkpoints = [(stream, stream.ledger.checkpoint(), stream.pending) for stream in self.streams]
        for stream in self.streams:
            stream.pending = {}
        if not self._flush(deadline) or self.fatal is not None:
            # Nothing handed over since these checkpoints is known to be delivered: commit nothing.
            for stream, _, pending in checkpoints:
                _merge_pending(stream, pending)
            return False
        for stream, checkpoint, pending in checkpoints:
            self._count_delivered(stream, pending)
            if only is not None and only[0] is not stream:
                continue
            owned = only[1] if only is not None else stream.assigned
            # Only partitions this worker still owns: a commit for others would race their new owner.
            offsets = {k: v for k, v in stream.ledger.committable(checkpoint).items() if k in owned}
            if offsets:
                self._commit(stream, offsets)
                self._write_offset_syncs(stream, offsets)
        return True

    def _write_offset_syncs(self, stream: SourceStream, positions: dict) -> None:
        """Right after a completed flush or transaction commit, before anything else is produced."""
        if self.offset_sync_writer is None:
            return
        producer = self.producers[0] if self.producers else self.heartbeat_producer
        try:
            syncs, errors = self.offset_sync_writer.write(producer, stream.alias, positions, stream.topic_ids)
        except (KafkaException, BufferError) as exc:
            syncs, errors = [], {"*": str(exc)}
        if errors:
            # Not fatal: translation uses the syncs written before (or after) this one.
            self.metrics.errors.labels(kind="offset_sync", **self._label).inc()
            log.warning("offset syncs not written", extra={**self._label, "source": stream.alias, "errors": errors})
        for sync in syncs:
            self.metrics.offset_syncs.labels(source=stream.alias, topic=sync.topic, **self._label).inc()

    def _count_delivered(self, stream: SourceStream, pending: dict) -> None:
        now_ms = time.time() * 1000
        for topic, (records, size, newest) in pending.items():
            labels = {**self._label, "source": stream.alias, "topic": topic}
            self.metrics.records_produced.labels(**labels).inc(records)
            self.metrics.bytes_produced.labels(**labels).inc(size)
            if newest:
                self.metrics.replication_latency.labels(**labels).set(max(0.0, (now_ms - newest) / 1000))

    # ---------------------------------------------------------------- exactly-once
    def _assign_checked(self, stream: SourceStream, partitions: list[TopicPartition]) -> list:
        """Start each partition at its position, unless records between it and the log were lost.

        Positions: exactly-once, the destination's (after fencing the partitions' previous owners); else,
        or before the first exactly-once commit, the source group's. Returns the partitions to halt.
        """
        keys = [(tp.topic, tp.partition) for tp in partitions]
        positions = stream.transactions.open(keys) if stream.transactions is not None else {}
        missing = [TopicPartition(t, p) for t, p in keys if positions.get((t, p)) is None]
        if missing:
            for tp in stream.consumer.committed(missing, timeout=self.config.startup_timeout_s):
                if tp.offset >= 0:
                    positions[(tp.topic, tp.partition)] = (tp.offset, tp.metadata)
        recreated = self._fetch_topic_ids(stream, sorted({t for t, _ in keys}))
        reset_to_earliest = stream.reset_policy in ("earliest", "smallest", "beginning")
        halts = []
        for tp in partitions:
            key = (tp.topic, tp.partition)
            position, position_topic_id = positions.get(key) or (None, None)
            low, high = stream.consumer.get_watermark_offsets(tp, timeout=self.config.startup_timeout_s)
            if tp.topic in recreated and position_topic_id in (None, "", recreated[tp.topic]):
                # Seen recreated while this worker ran; the broker dropped the old topic's offsets with it.
                position, position_topic_id = position or 0, recreated[tp.topic]
            decision = decide_start(position, position_topic_id, stream.topic_ids.get(tp.topic), low, high,
                                    reset_to_earliest, f"{tp.topic}[{tp.partition}]")
            tp.offset = decision.offset
            stream.ledger.forget([key])
            stream.ledger.mark_committed({key: position if decision.lost and self._halts_on_loss else decision.offset})
            if decision.lost:
                self._report_data_loss(stream, tp.topic, tp.partition, decision)
                if self._halts_on_loss:
                    halts.append((key, position, decision.reason))
        log.info("start positions", extra={
            **self._label, "source": stream.alias,
            "positions": sorted(f"{tp.topic}[{tp.partition}]@{tp.offset}" for tp in partitions),
        })
        # A first sync per partition before this worker produces any of its records: a consumer that
        # committed anywhere from here on translates, even before the first commit of this worker.
        halted = {key for key, _, _ in halts}
        self._write_offset_syncs(stream, {(tp.topic, tp.partition): tp.offset for tp in partitions
                                          if (tp.topic, tp.partition) not in halted})
        if stream.incremental_assignment:
            stream.consumer.incremental_assign(partitions)
        else:
            stream.consumer.assign(partitions)
        return halts

    # ---------------------------------------------------------------- data loss
    @property
    def _halts_on_loss(self) -> bool:
        return self.config.on_data_loss == "halt"

    def _fetch_topic_ids(self, stream: SourceStream, topics: list[str]) -> dict[str, str]:
        """Refresh the ids of `topics`; returns {topic: previous id} of those recreated since last seen.

        A recreated topic stays marked for the rest of this run, so its partitions halt whenever assigned.
        """
        if not topics:
            return {}
        futures = stream.admin.describe_topics(TopicCollection(topics), request_timeout=self.config.startup_timeout_s)
        for topic, future in futures.items():
            try:
                topic_id = str(future.result().topic_id)
            except KafkaException:
                continue  # deleted meanwhile: the subscription change handles it
            old = stream.topic_ids.get(topic)
            if old is not None and old != topic_id and topic not in stream.recreated:
                stream.recreated[topic] = old
                log.error("source topic deleted and recreated", extra={
                    **self._label, "source": stream.alias, "topic": topic, "old_id": old, "new_id": topic_id,
                })
            stream.topic_ids[topic] = topic_id
        return {t: old for t, old in stream.recreated.items() if t in topics}

    def _check_topic_ids(self, stream: SourceStream, topics: list[str]) -> None:
        """A topic deleted and recreated between two looks: its assigned partitions lost their records."""
        for topic, old in self._fetch_topic_ids(stream, topics).items():
            for t, partition in sorted(stream.assigned):
                key = (t, partition)
                if t != topic or key in stream.ledger.halted or key in stream.reported_loss:
                    continue
                position = stream.ledger.next_offsets.get(key, stream.ledger.committed.get(key))
                decision = decide_start(position, old, stream.topic_ids[topic], 0, 0, True, f"{topic}[{partition}]")
                self._on_data_loss(stream, topic, partition, position, decision)

    def _report_data_loss(self, stream: SourceStream, topic: str, partition: int, decision: StartDecision) -> None:
        stream.reported_loss.add((topic, partition))
        labels = {**self._label, "source": stream.alias, "topic": topic}
        self.metrics.data_loss.labels(kind=decision.verdict.value, **labels).inc()
        action = "partition halted" if self._halts_on_loss else f"resuming at offset {decision.offset} (on_data_loss=reset)"
        log.error("source data lost before it was mirrored", extra={
            **labels, "partition": partition, "kind": decision.verdict.value, "reason": decision.reason, "action": action,
        })
        print(f"mirror_worker: data loss on source {stream.alias!r}: {decision.reason}; {action}",
              file=sys.stderr, flush=True)

    def _on_data_loss(self, stream: SourceStream, topic: str, partition: int, position: int | None,
                      decision: StartDecision) -> None:
        """A running partition's position fell off the source log: halt it, or (opt-in) jump to the log."""
        self._report_data_loss(stream, topic, partition, decision)
        key = (topic, partition)
        if self._halts_on_loss:
            self._halt(stream, topic, partition, position if position is not None else decision.offset, decision.reason)
            return
        stream.ledger.next_offsets[key] = decision.offset
        stream.stash = [m for m in stream.stash if (m.topic(), m.partition()) != key]
        stream.consumer.seek(TopicPartition(topic, partition, decision.offset))

    def _commit_transactions(self, only: tuple[SourceStream, set] | None, deadline: float | None) -> bool:
        """Commit every partition that progressed, its records and its position in one transaction."""
        all_committed = True
        for stream in self.streams:
            if only is not None and only[0] is not stream:
                continue
            owned = only[1] if only is not None else stream.assigned
            ledger = stream.ledger
            progressed = {
                key: offset for key, offset in ledger.committable(ledger.checkpoint()).items()
                if key in owned and key in stream.producers
            }
            pending, stream.pending = stream.pending, {}
            committed = {}
            for key, offset in progressed.items():
                timeout = self.config.shutdown_timeout_s if deadline is None else max(0.5, deadline - self.clock())
                try:
                    stream.transactions.commit(key, offset, timeout)
                except TransactionAborted as exc:
                    all_committed = False
                    self._rewind(stream, key, str(exc))
                    continue
                except ProducerFenced as exc:
                    self.fatal = f"exactly-once producer fenced by another worker: {exc}"
                    return False
                committed[key] = offset
            self._count_delivered(stream, pending)
            if committed:
                ledger.mark_committed(committed)
                self._write_offset_syncs(stream, committed)
                # Also on the source group, for lag monitoring; positions come from the destination.
                self._commit(stream, committed)
        return all_committed

    def _rewind(self, stream: SourceStream, key: tuple[str, int], reason: str) -> None:
        """An aborted transaction: re-send the partition from its last committed position."""
        start = stream.ledger.committed[key]
        stream.ledger.next_offsets.pop(key, None)
        stream.stash = [m for m in stream.stash if (m.topic(), m.partition()) != key]
        stream.consumer.seek(TopicPartition(key[0], key[1], start))
        self.metrics.errors.labels(kind="transaction_aborted", **self._label).inc()
        log.warning("transaction aborted, re-sending from the committed position", extra={
            **self._label, "source": stream.alias, "partition": f"{key[0]}[{key[1]}]", "offset": start, "error": reason,
        })

    def _commit(self, stream: SourceStream, offsets: dict) -> None:
        try:
            stream.consumer.commit(
                offsets=[TopicPartition(t, p, o, stream.topic_ids.get(t, "")) for (t, p), o in offsets.items()],
                asynchronous=False,
            )
        except KafkaException as exc:
            # Not fatal: the records are on the destination; the next owner re-mirrors from the last commit.
            self.metrics.errors.labels(kind="commit", **self._label).inc()
            log.warning("commit failed", extra={**self._label, "source": stream.alias, "error": exc.args[0].str()})
            return
        stream.ledger.mark_committed(offsets)
        for (topic, partition), offset in offsets.items():
            self.metrics.committed_offset.labels(source=stream.alias, topic=topic, partition=str(partition), **self._label).set(offset)

    # ---------------------------------------------------------------- heartbeats
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

    # ---------------------------------------------------------------- callbacks from librdkafka threads / poll
    def _on_delivery_error(self, err: KafkaError, msg) -> None:
        """Only errors are reported (delivery.report.only.error)."""
        self.metrics.errors.labels(kind="delivery", **self._label).inc()
        if msg.topic() in (self.config.heartbeat_topic, self.config.offset_syncs_topic):
            log.warning("heartbeat or offset sync delivery failed", extra={**self._label, "error": err.str()})
            return
        origin = None
        for name, value in msg.headers() or ():
            if name == PROVENANCE_HEADER and value:
                origin = parse_provenance(value)
        stream = next((s for s in self.streams if origin and s.alias == origin[0]), None)
        if origin is not None and stream is not None:
            _, _, topic, partition, offset = origin
            self._halt(stream, topic, partition, offset, f"destination refused the record: {err.str()}")
            return
        # Without provenance the failed record cannot be traced to its source offset: stop, commit nothing more.
        self.fatal = f"delivery to {msg.topic()}[{msg.partition()}] failed: {err.str()}"

    def _on_client_error(self, err: KafkaError) -> None:
        if err.fatal():
            self.fatal = f"fatal client error: {err.str()}"
        if err.code() in (KafkaError._AUTHENTICATION, KafkaError._SSL):
            self.refused = err.str()
        log.warning("client error", extra={**self._label, "error": err.str(), "code": err.name()})

    def _on_stats(self, source: str, stats_json: str) -> None:
        """Per-partition lag of this worker's assignment, from librdkafka's statistics."""
        stats = json.loads(stats_json)
        for topic, data in stats.get("topics", {}).items():
            for partition, pdata in data.get("partitions", {}).items():
                lag = pdata.get("consumer_lag", -1)
                if partition != "-1" and lag >= 0:
                    self.metrics.partition_lag.labels(
                        source=source, topic=topic, partition=partition, **self._label
                    ).set(lag)

    # ---------------------------------------------------------------- shutdown
    def close(self) -> None:
        """Flush, commit, leave the group. Bounded by shutdown_timeout_s."""
        self.stop_event.set()
        self._closing_deadline = self.clock() + self.config.shutdown_timeout_s
        committed = self.checkpoint_and_commit(deadline=self._closing_deadline)
        for stream in self.streams:
            if stream.transactions is not None:
                stream.transactions.close_all()
            try:
                stream.consumer.close()
            except (KafkaException, RuntimeError) as exc:
                log.warning("consumer close failed", extra={**self._label, "source": stream.alias, "error": str(exc)})
        if self.heartbeat_producer is not None:
            self.heartbeat_producer.flush(2)
        log.info("mirror stopped", extra={**self._label, "final_commit": committed})


def _close_run(next_offsets: dict, pending: dict, topic: str, partition: int, last, records: int, size: int,
               newest: int) -> None:
    """A run of one partition's records was handed over, up to and including `last`."""
    next_offsets[(topic, partition)] = last.offset() + 1
    counts = pending.get(topic)
    if counts is None:
        counts = pending[topic] = [0, 0, 0]
    counts[0] += records
    counts[1] += size
    if newest > counts[2]:
        counts[2] = newest


def _merge_pending(stream: SourceStream, pending: dict) -> None:
    for topic, (records, size, newest) in pending.items():
        counts = stream.pending.setdefault(topic, [0, 0, 0])
        counts[0] += records
        counts[1] += size
        counts[2] = max(counts[2], newest)


def _incremental(consumer_settings: dict) -> bool:
    return (consumer_settings.get("group.protocol") == "consumer"
            or "cooperative" in consumer_settings.get("partition.assignment.strategy", ""))


def _fmt(keys) -> list[str]:
    return sorted(f"{t}[{p}]" for t, p in keys)
