"""The mirror loop of one worker process: consume, route, produce, flush, commit.

At-least-once rests on one rule, kept by `OffsetLedger`: offsets are committed from a checkpoint taken
*before* a producer flush that completed with no delivery error. Everything else (backpressure, topic
discovery, rebalances, shutdown) is arranged around that rule and never commits past it.

`MirrorWorker` wires its parts at start-up and keeps the loop, the hot path (`_mirror`), backpressure,
the client callbacks and shutdown. The parts, each built from explicit collaborators:

    CommitCycle          worker_commits.py     flush or commit transactions, then commit offsets, offset syncs
    PartitionAssignment  worker_assignment.py  rebalance callbacks, start positions, data loss, rewinds
    TopicManagement      worker_topics.py      discovery, creation, growth, config sync, heartbeats
    SchemaGate           worker_schemas.py     per source: schema-id map, ids first seen mid-stream, conflicts
    Halts                worker_halts.py       a refused record: dead letter or halt its partition
    Backpressure         backpressure.py       queue.size records in flight, the wait for room, holding the consumers
    ClientSettings       clients.py            client callbacks (errors, statistics), a bounded first contact
    open_streams         worker_streams.py     one consumer per source cluster: its settings, admin, transactions
"""

from __future__ import annotations

import logging
import time

from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient

from mirror_worker.acl_admin import worker_acl_sync
from mirror_worker.backpressure import Backpressure
from mirror_worker.catchup_lease import CatchupCheck
from mirror_worker.client_config import (
    DEFAULT_BATCH_SIZE, connection_settings, fitted_batch_size,
)
from mirror_worker.config import MirrorConfig
from mirror_worker.delivery import RunDelivery
from mirror_worker.exactly_once import (
    KEEPALIVE_MAX_S, PartitionTransactions, keepalive_interval_s, offsets_retention_ms, positions_group,
)
from mirror_worker import wire_format
from mirror_worker.clients import ClientSettings, fatal_reason
from mirror_worker.consume import take_available
from mirror_worker.exceptions import FatalMirrorError
from mirror_worker.failback import FailbackStart, worker_failback_start
from mirror_worker.group_offset_sync import worker_group_syncs
from mirror_worker.metrics import MirrorMetrics
from mirror_worker.offset_syncs import OffsetSyncWriter
from mirror_worker.provenance import PROVENANCE_HEADER, mirrored_headers, parse_provenance, provenance_value
from mirror_worker.routing import Router
from mirror_worker.run_state import RunState
from mirror_worker.source_stream import SourceStream
from mirror_worker.topics import DestinationTopics, TopicInfo
from mirror_worker.worker_assignment import PartitionAssignment
from mirror_worker.worker_commits import CommitCycle
from mirror_worker.worker_halts import Halts
from mirror_worker.worker_streams import attach_schema_gates, open_streams
from mirror_worker.worker_topics import TopicManagement

__all__ = ["MirrorWorker", "PROVENANCE_HEADER", "parse_provenance", "provenance_value", "take_available"]

log = logging.getLogger("mirror_worker")


class MirrorWorker:
    """One worker process: start-up wiring, the main loop and its hot path (`_mirror`), backpressure, shutdown."""

    def __init__(self, config: MirrorConfig, metrics: MirrorMetrics | None = None, clock=time.monotonic,
                 stream_index: int = 0) -> None:
        self.config = config
        self.stream_index = stream_index  # this process among --num.streams: part of a static member's id
        self.metrics = metrics or MirrorMetrics(config.name)
        self.clock = clock
        self.state = RunState(config.shutdown_timeout_s, clock)
        self.batch_size = max(1, min(5000, config.queue_size // 4))
        self.router = Router(
            config.naming_policy(), config.preserve_partitions, config.preserve_order, config.num_producers,
            producer_per_partition=config.exactly_once,
        )
        self._label = {"mirror": config.name}
        self.clients = ClientSettings(self.metrics, self._label, self.state, self._on_delivery_error)
        self.halts = Halts(self.metrics, self._label, config.dead_letter_topic,
                           lambda topic, partition: self.router.route(topic, partition).producer_index,
                           self._on_refused_delivery)
        self.streams: list[SourceStream] = []
        self.producers: list[Producer] = []
        self.heartbeat_producer: Producer | None = None
        self.destination_cluster_id = ""
        self.backpressure = Backpressure(self.streams, self._all_producers, config.queue_size, self.batch_size,
                                         self.metrics, self._label, self.state, clock)
        self.positions_keepalive_s = KEEPALIVE_MAX_S  # exactly-once: set from the destination's retention
        # The mirrored records' producers' batch.size: at most the configured one, lowered by fit_batches.
        self.batch_bytes = int(config.producer.get("batch.size", DEFAULT_BATCH_SIZE))
        # Built by start(): they need the clients.
        self.commits: CommitCycle
        self.assignment: PartitionAssignment
        self.topics: TopicManagement
        self.failback: FailbackStart | None = None

    @property
    def stop_event(self):
        return self.state.stop_event

    @property
    def fatal(self) -> str | None:
        return self.state.fatal

    # ---------------------------------------------------------------- start-up
    def start(self) -> None:
        """Connect (bounded wait), discover topics, create destination topics, subscribe."""
        cfg = self.config
        self.admin = AdminClient(self.clients.client(cfg.producer))
        self.destination_cluster_id = self._cluster_id(self.admin, "destination")
        if not cfg.exactly_once:
            for _ in range(cfg.num_producers):
                self.producers.append(Producer(self._producer_settings(cfg.producer)))
        if cfg.heartbeat_producer or cfg.exactly_once:
            # Exactly-once producers are transactional: heartbeats go through a plain one.
            self.heartbeat_producer = Producer(self._producer_settings(cfg.heartbeat_producer or cfg.producer))
        # Exactly-once keys positions by source partition on the destination topic: it needs the room.
        destination = DestinationTopics(self.admin, cfg.topic_creation, cfg.preserve_partitions or cfg.exactly_once)
        if cfg.exactly_once:
            topic = cfg.positions_topic
            destination.ensure({topic: TopicInfo(topic, 1, 1)}, {topic: {"cleanup.policy": "compact"}})
            self.positions_keepalive_s = keepalive_interval_s(offsets_retention_ms(self.admin, cfg.startup_timeout_s))
        transactions = None
        if cfg.exactly_once:
            def transactions(stream: SourceStream) -> PartitionTransactions:
                return PartitionTransactions(
                    cfg.name, stream.alias, self._producer_settings(cfg.producer), connection_settings(cfg.producer),
                    self.router.policy.remote_topic, stream.topic_ids.get, cfg.startup_timeout_s,
                    cfg.positions_topic, self.clock,
                )
        open_streams(cfg, self.clients, self.stream_index, self.producers, self._cluster_id,
                     self.destination_cluster_id, transactions, streams=self.streams)
        attach_schema_gates(cfg, self.streams, self.halts, self.metrics, self._label)
        offset_sync_writer = None
        if cfg.writes_offset_syncs:
            topic = cfg.offset_syncs_topic
            destination.ensure({topic: TopicInfo(topic, 1, 1)}, {topic: {"cleanup.policy": "compact"}})
            offset_sync_writer = OffsetSyncWriter(topic, self.admin, self.router.policy.remote_topic)
        self.assemble(self.admin, destination, offset_sync_writer)
        self.topics.ensure_own_topics()
        self.topics.refresh()
        log.info("mirror started", extra={
            **self._label, "sources": [s.alias for s in self.streams], "group": cfg.group_id,
            "topics": sorted({t for s in self.streams for t in s.topics}),
        })

    def assemble(self, admin, destination: DestinationTopics, offset_sync_writer: OffsetSyncWriter | None = None) -> None:
        """Build the parts around the clients and streams start() made (unit tests pass in-memory fakes)."""
        cfg = self.config
        self.commits = CommitCycle(
            self.streams, self._all_producers, self.metrics, self._label, self.state, self.clock, cfg.exactly_once,
            offset_sync_writer, self.producers[0] if self.producers else self.heartbeat_producer,
            hold_consumers=self.backpressure.hold_consumers, release_consumers=self.backpressure.release_consumers,
            positions_keepalive_s=self.positions_keepalive_s,
        )
        lease = CatchupCheck(cfg.group_id, cfg.startup_timeout_s)  # a Spark catch-up holding the group
        self.failback = worker_failback_start(cfg, self.destination_cluster_id, self._label)
        self.assignment = PartitionAssignment(
            self.commits, self.halts, self.metrics, self._label, self.state, cfg.startup_timeout_s,
            cfg.on_data_loss == "halt", lambda: self.backpressure.paused, vanished_reason=self._vanished_reason,
            catchup_check=lambda stream: lease(stream.admin), fresh_start=self.failback,
        )
        self.topics = TopicManagement(cfg, self.streams, admin, destination, self.router, self.assignment,
                                      self.metrics, self._label, before_subscribe=_sync_schemas,
                                      producers=self._all_producers, fit_batches=self.fit_batches,
                                      acl_sync=worker_acl_sync(cfg, admin, self.router.policy.remote_topic),
                                      group_syncs=worker_group_syncs(cfg, self.streams, admin))

    def _vanished_reason(self, stream: SourceStream, key: tuple[str, int]) -> str:
        group = positions_group(self.config.name, stream.alias)
        return (f"its exactly-once position is gone from the destination (group {group}, "
                f"{self.router.policy.remote_topic(key[0])}[{key[1]}]) although one was committed "
                f"({self.config.positions_topic} says so): expired after offsets.retention.minutes, most likely "
                "because the mirror was stopped longer than that; not restarting from the source group or "
                "the reset policy (duplicates or loss): commit the right position in that group to resume")

    def _cluster_id(self, client, what: str) -> str:
        return self.clients.cluster_id(client, what, self.config.startup_timeout_s)

    def _producer_settings(self, settings: dict) -> dict:
        # The mirrored records' producers get the fitted batch.size (see fit_batches).
        return self.clients.producer(settings, self.batch_bytes if settings is self.config.producer else None)

    def fit_batches(self, limits) -> None:
        """Keep the producers' batch.size within the smallest max.message.bytes of the destination topics.

        It only goes down. The producers are replaced once everything they hold was delivered (a flush, or
        exactly-once a commit of every partition's transaction), so no record is lost or reordered.
        """
        limits = list(limits)
        wanted = fitted_batch_size(self.batch_bytes, limits)
        if wanted >= self.batch_bytes:
            return
        log.info("producer batch.size lowered to fit the destination topics", extra={
            **self._label, "batch_size": wanted, "smallest_max_message_bytes": min(limits),
        })
        self.batch_bytes = wanted
        if not self.config.exactly_once:
            if self.producers and self.commits.flush(None):
                self.producers[:] = [Producer(self._producer_settings(self.config.producer)) for _ in self.producers]
            return
        self.checkpoint_and_commit()
        if self.state.fatal is not None:
            return
        for stream in self.streams:
            stream.transactions.producer_settings["batch.size"] = str(wanted)
            keys = list(stream.transactions.producers)
            stream.transactions.close(keys)
            stream.transactions.open(keys)

    # ---------------------------------------------------------------- main loop
    def run(self) -> None:
        cfg = self.config
        now = self.clock()
        next_commit = now + cfg.commit_interval_s
        next_refresh = now + cfg.topic_refresh_interval_s
        next_config_sync = now + cfg.config_sync_interval_ms / 1000
        next_acl_sync = next_group_sync = now  # the first right away: they should not wait behind a started mirror
        next_heartbeat = now
        timeout = 0.5 if len(self.streams) == 1 else 0.1
        while self.state.running:
            now = self.clock()
            if now >= next_refresh:
                self.topics.refresh()
                next_refresh = now + cfg.topic_refresh_interval_s
            if cfg.config_sync_interval_ms and now >= next_config_sync:
                self.topics.sync_configs()
                next_config_sync = self.clock() + cfg.config_sync_interval_ms / 1000
            if cfg.acl_sync_interval_ms and now >= next_acl_sync:
                self.topics.sync_acls()
                next_acl_sync = self.clock() + cfg.acl_sync_interval_ms / 1000
            if cfg.group_offset_sync_interval_ms and now >= next_group_sync:
                self.topics.sync_group_offsets()
                next_group_sync = self.clock() + cfg.group_offset_sync_interval_ms / 1000
            if now >= next_heartbeat:
                self.topics.send_heartbeats(self.heartbeat_producer or self.producers[0], self.destination_cluster_id)
                next_heartbeat = now + cfg.heartbeat_interval_s
            if now >= next_commit:
                self.metrics.in_flight.labels(**self._label).set(self.backpressure.in_flight())
                self.checkpoint_and_commit(from_loop=True)
                self.commits.keep_positions_alive()
                next_commit = self.clock() + cfg.commit_interval_s
            self._consume_round(timeout)
        if self.state.fatal is not None:
            raise FatalMirrorError(self.state.fatal)

    def _consume_round(self, timeout: float) -> None:
        """Wait for room if needed, then per stream: the stash first, else one batch from the consumer."""
        self.backpressure.wait_for_room()
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
            batch = take_available(stream.consumer, self.batch_size, timeout)
            if batch and stream.rebalances != rebalances:
                batch = [m for m in batch if m.error() or (m.topic(), m.partition()) in stream.assigned]
            if batch:
                self._mirror(stream, batch)
        for producer in self._all_producers():
            producer.poll(0)

    def checkpoint_and_commit(self, deadline: float | None = None, from_loop: bool = False) -> bool:
        """One commit cycle; partitions whose transaction was aborted are rewound. True if it completed."""
        outcome = self.commits.checkpoint_and_commit(deadline=deadline, from_loop=from_loop)
        for stream, key, reason in outcome.aborted:
            self.assignment.rewind(stream, key, reason)
        return outcome.complete

    def _mirror(self, stream: SourceStream, batch: list) -> None:
        """The hot path: hand every record of `batch` to its producer, in order, per partition.

        A batch holds runs of records of one partition: the route, producer and halt state are looked
        up once per run, and the ledger and the counts are updated once per run (with the offset of the
        run's last record handed over), not once per record.
        """
        route_of = self.router.route
        producers = stream.producers
        handed_over = stream.ledger.handed_over  # called once per run, not per record
        halted = stream.ledger.halted
        pending = stream.pending
        provenance = self.config.provenance_headers
        max_bytes = self.topics.max_bytes
        schemas = stream.schemas
        id_map = schemas.id_headers if schemas is not None and self.config.schema_id_rewrite != "off" else None
        rewrite, magic, header_size = wire_format.rewrite, wire_format.MAGIC_BYTE, wire_format.HEADER_SIZE
        frame_keys = frame_values = watch = False
        refused_delivery = self._on_refused_delivery
        before = {topic: (c[0], c[1]) for topic, c in pending.items()}
        no_limit = 1 << 62
        # queue.size bounds the records in flight across every producer (exactly-once has one per partition).
        room = self.backpressure.room()
        # The current run: its partition, and what was handed over of it.
        topic = partition = None
        skip = False
        last = None  # the run's last record handed to the producer
        records = size_sum = newest = 0
        try:
            for msg in batch:
                err = msg.error()
                if err is not None:
                    # Close the run first: error handling may move a partition's position (on_data_loss=reset).
                    if last is not None:
                        _close_run(handed_over, pending, topic, partition, last, records, size_sum, newest)
                        last = None
                        records = size_sum = newest = 0
                    topic = partition = None
                    self._on_consume_error(stream, msg, err)
                    continue
                msg_partition = msg.partition()
                msg_topic = msg.topic()
                if msg_partition != partition or msg_topic != topic:
                    if last is not None:
                        _close_run(handed_over, pending, topic, partition, last, records, size_sum, newest)
                        last = None
                        records = size_sum = newest = 0
                    topic, partition = msg_topic, msg_partition
                    skip = bool(halted) and (topic, partition) in halted
                    route = route_of(topic, partition)
                    dest_topic, dest_partition = route.topic, route.partition
                    produce = producers[route.producer_index].produce
                    limit = max_bytes.get(dest_topic, no_limit)
                    on_delivery = RunDelivery(refused_delivery, stream, topic, partition, msg.offset())
                    if id_map is not None:
                        frame_keys, frame_values = schemas.fields(topic)
                        watch = not (frame_keys and frame_values)
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
                    self.halts.refuse(stream, msg, f"record of {size} bytes exceeds destination {dest_topic} "
                                                   f"max.message.bytes={limit}")
                elif id_map is not None:
                    if watch and ((not frame_keys and wire_format.is_framed(key))
                                  or (not frame_values and wire_format.is_framed(value))):
                        frame_keys, frame_values = schemas.recheck_framing(stream, topic, timestamp)
                        watch = not (frame_keys and frame_values)
                        skip = (topic, partition) in halted  # a subject found now may conflict
                        if skip:
                            continue
                    try:
                        if frame_keys and key and key[0] == magic and len(key) >= header_size:
                            key = rewrite(key, id_map)
                        if frame_values and value and value[0] == magic and len(value) >= header_size:
                            value = rewrite(value, id_map)
                    except KeyError:
                        rewritten = schemas.new_schema_ids(stream, msg, frame_keys, frame_values)
                        refused = rewritten is None  # dead-lettered, or its partition (or topic) halted
                        if not refused:
                            key, value = rewritten
                if refused:
                    skip = (topic, partition) in halted
                    if skip:
                        continue
                else:
                    if room <= 0:
                        # queue.size records in flight: the rest of the batch waits, in order, in the stash,
                        # and the main loop waits for room before it fetches anything newer.
                        stream.stash[:0] = batch[batch.index(msg):]
                        break
                    try:
                        produce(dest_topic, value, key, dest_partition, timestamp=timestamp, headers=headers,
                                on_delivery=on_delivery)
                    except BufferError:  # a producer's own queue.buffering.max.messages
                        stream.stash[:0] = batch[batch.index(msg):]
                        break
                    except KafkaException as exc:
                        self.halts.refuse(stream, msg, exc.args[0].str())
                        skip = (topic, partition) in halted
                        if skip:
                            continue
                    room -= 1
                last = msg
                records += 1
                size_sum += size
                if timestamp > newest:
                    newest = timestamp
        except BaseException:
            # The rest of the batch was neither handed over nor stashed, yet the consumer's position counts
            # it: the commits on the way out must not step over to that position (see CommitCycle).
            stream.interrupted = True
            raise
        finally:
            # Also when an exception (e.g. SchemaRegistryUnavailable) ends the batch: the position must
            # cover exactly what was handed over, since exactly-once commits the open transaction with it.
            if last is not None:
                _close_run(handed_over, pending, topic, partition, last, records, size_sum, newest)
        self.backpressure.note_in_flight()
        for topic, counts in pending.items():
            records, size = before.get(topic, (0, 0))
            if counts[0] > records:
                labels = {**self._label, "source": stream.alias, "topic": topic}
                self.metrics.records_consumed.labels(**labels).inc(counts[0] - records)
                self.metrics.bytes_consumed.labels(**labels).inc(counts[1] - size)

    # ---------------------------------------------------------------- headers, consume errors
    def _headers(self, stream: SourceStream, msg, headers, destination_topic: str):
        """Copy headers, check for a cycle, add provenance. False means: the record was refused."""
        provenance = provenance_value(stream.alias, stream.cluster_id, msg.topic(), msg.partition(), msg.offset()) \
            if self.config.provenance_headers else None
        out = mirrored_headers(headers, provenance, self.destination_cluster_id)
        if type(out) is bytes:
            if self.config.origin_records == "skip":  # a failback pair: the destination has this record
                self.metrics.records_skipped.labels(reason="origin", **self._label, source=stream.alias,
                                                    topic=msg.topic()).inc()
                return False
            self.halts.refuse(stream, msg, f"cycle: the record came from the destination cluster ({out.decode()})", force_halt=True)
            return False
        return out

    def _on_consume_error(self, stream: SourceStream, msg, err: KafkaError) -> None:
        if err.code() == KafkaError._AUTO_OFFSET_RESET and msg.topic() and msg.partition() is not None:
            self.assignment.on_position_reset(stream, msg.topic(), msg.partition(), err.str())
            return
        self.metrics.errors.labels(kind="consume", **self._label).inc()
        if err.fatal() or err.code() == KafkaError._FATAL:  # the latter: a fenced static member, see fatal_reason
            self.state.fail(fatal_reason(f"source {stream.alias!r} consumer failed", err, stream.instance_id))
        log.warning("consume error", extra={**self._label, "source": stream.alias, "error": err.str(), "topic": msg.topic()})

    def _all_producers(self) -> list[Producer]:
        if not self.config.exactly_once:
            return self.producers
        return [p for stream in self.streams for p in stream.producers.values()]

    # ---------------------------------------------------------------- callbacks from librdkafka threads / poll
    def _on_delivery_error(self, err: KafkaError, msg) -> None:
        """Records produced without a RunDelivery (heartbeats, offset syncs); only errors are reported."""
        self.metrics.errors.labels(kind="delivery", **self._label).inc()
        if msg.topic() in (self.config.heartbeat_topic, self.config.offset_syncs_topic, self.config.positions_topic):
            log.warning("heartbeat or offset sync delivery failed", extra={**self._label, "error": err.str()})
            return
        # Not a mirrored record (those carry their RunDelivery): nothing to tie it to, stop.
        self.state.fail(f"delivery to {msg.topic()}[{msg.partition()}] failed: {err.str()}")

    def _on_refused_delivery(self, run: RunDelivery, err: KafkaError, msg) -> None:
        """The destination refused a record of `run`: halt the run's source partition at the run's first offset.

        Never dead-lettered, even with --dead.letter.topic: the broker refuses a whole batch, so the records
        reported here include valid ones that only shared a batch with the bad one (measured: a null key on
        a compacted topic took the next record with it). A restart mirrors them again from the halt.
        """
        self.metrics.errors.labels(kind="delivery", **self._label).inc()
        reason = f"destination refused the record: {err.str()}"
        if msg.topic() == self.config.dead_letter_topic:
            reason = f"dead-letter topic refused a record: {err.str()}"
        if (run.topic, run.partition) not in run.stream.assigned:
            # Lost meanwhile (a revoke commits only after the flush that reports this): nothing of it is committed.
            log.error("record refused after its partition was lost", extra={
                **self._label, "source": run.stream.alias, "topic": run.topic, "partition": run.partition,
                "error": err.str()})
            return
        self.halts.halt(run.stream, run.topic, run.partition, run.first_offset, reason)

    # ---------------------------------------------------------------- shutdown
    def close(self) -> None:
        """Flush, commit, leave the group. Bounded by shutdown_timeout_s."""
        deadline = self.state.close()
        committed = self.checkpoint_and_commit(deadline=deadline)
        for stream in self.streams:
            if stream.transactions is not None:
                stream.transactions.close_all()
            try:
                stream.consumer.close()
            except (KafkaException, RuntimeError) as exc:
                log.warning("consumer close failed", extra={**self._label, "source": stream.alias, "error": str(exc)})
        self.topics.close()
        if self.failback is not None:
            self.failback.close()
        if self.heartbeat_producer is not None:
            self.heartbeat_producer.flush(2)
        log.info("mirror stopped", extra={**self._label, "final_commit": committed})


def _sync_schemas(stream: SourceStream, topics: list[str]) -> None:
    """Before a stream subscribes to new topics: their subjects, when the source syncs schemas."""
    if stream.schemas is not None:
        stream.schemas.sync_topics(stream, topics)


def _close_run(handed_over, pending: dict, topic: str, partition: int, last, records: int, size: int,
               newest: int) -> None:
    """A run of one partition's records was handed over, up to and including `last`."""
    handed_over((topic, partition), last.offset())
    counts = pending.get(topic)
    if counts is None:
        counts = pending[topic] = [0, 0, 0]
    counts[0] += records
    counts[1] += size
    if newest > counts[2]:
        counts[2] = newest
