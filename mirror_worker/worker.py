"""The mirror loop of one worker process: consume, route, produce, flush, commit.

At-least-once rests on one rule, kept by `OffsetLedger`: offsets are committed from a checkpoint taken
*before* a producer flush that completed with no delivery error. Everything else (backpressure, topic
discovery, rebalances, shutdown) is arranged around that rule and never commits past it.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
import time

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from mirror_worker.client_config import connection_settings
from mirror_worker.config import MirrorConfig
from mirror_worker.data_loss import StartDecision, Verdict, decide_start
from mirror_worker.exactly_once import (
    KEEPALIVE_MAX_S, PartitionTransactions, keepalive_interval_s, offsets_retention_ms,
)
from mirror_worker import wire_format
from mirror_worker.exceptions import ClusterRefusedError, FatalMirrorError, UnreachableClusterError
from mirror_worker.metrics import MirrorMetrics
from mirror_worker.offset_syncs import OffsetSyncWriter
from mirror_worker.routing import Router
from mirror_worker.source_stream import SourceStream
from mirror_worker.topic_configs import exclusion_pattern
from mirror_worker.topics import DestinationTopics, TopicInfo
from mirror_worker.worker_assignment import AssignmentHandling
from mirror_worker.worker_commits import PAUSE_AFTER_S, CommitCycle
from mirror_worker.worker_schemas import SchemaHandling
from mirror_worker.worker_topics import TopicManagement

log = logging.getLogger("mirror_worker")
librdkafka_log = logging.getLogger("mirror_worker.librdkafka")

PROVENANCE_HEADER = "mirror.source"


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


class MirrorWorker(TopicManagement, AssignmentHandling, SchemaHandling, CommitCycle):
    """One worker process: start-up, the main loop and its hot path (`_mirror`), backpressure, shutdown.

    The rest of its methods live by concern beside it: worker_topics.py (discovery, creation, config
    sync, heartbeats), worker_assignment.py (rebalances, start positions, data loss), worker_schemas.py
    and worker_commits.py (flush, then commit offsets and write offset syncs).
    """

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
        self.positions_keepalive_s = KEEPALIVE_MAX_S
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
        if cfg.exactly_once:
            topic = cfg.positions_topic
            self.destination.ensure({topic: TopicInfo(topic, 1, 1)}, {topic: {"cleanup.policy": "compact"}})
            self.positions_keepalive_s = keepalive_interval_s(offsets_retention_ms(self.admin, cfg.startup_timeout_s))
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
                    cfg.positions_topic, self.clock,
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
                self.checkpoint_and_commit(from_loop=True)
                self.keep_positions_alive()
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

    # ---------------------------------------------------------------- headers, refused records, halts



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
                if self._hold_consumers():
                    self.metrics.backpressure_pauses.labels(**self._label).inc()
                if now - last_log > 10:
                    log.warning("destination slow: consumption paused", extra={**self._label, "in_flight": self._in_flight()})
                    last_log = now
        finally:
            self.metrics.backpressure_seconds.labels(**self._label).inc(self.clock() - started)
            if self._paused:
                self._pause_all(False)

    def _hold_consumers(self) -> bool:
        """While the loop waits on the destination: pause the consumers and poll them (nothing is fetched)
        so that the group keeps this worker past max.poll.interval.ms; what they still hand out joins the
        stash. Never from a rebalance callback. True when this call paused them."""
        paused_now = not self._paused
        if paused_now:
            self._pause_all(True)
        for stream in self.streams:
            msg = stream.consumer.poll(0)
            if msg is not None:
                stream.stash.append(msg)
        return paused_now

    def _pause_all(self, pause: bool) -> None:
        self._paused = pause
        for stream in self.streams:
            partitions = [
                TopicPartition(t, p) for t, p in stream.assigned if pause or (t, p) not in stream.ledger.halted
            ]
            if partitions:
                (stream.consumer.pause if pause else stream.consumer.resume)(partitions)

    # ---------------------------------------------------------------- callbacks from librdkafka threads / poll
    def _on_delivery_error(self, err: KafkaError, msg) -> None:
        """Only errors are reported (delivery.report.only.error)."""
        self.metrics.errors.labels(kind="delivery", **self._label).inc()
        if msg.topic() in (self.config.heartbeat_topic, self.config.offset_syncs_topic, self.config.positions_topic):
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




def _incremental(consumer_settings: dict) -> bool:
    return (consumer_settings.get("group.protocol") == "consumer"
            or "cooperative" in consumer_settings.get("partition.assignment.strategy", ""))


