"""The mirror loop of one worker process: consume, route, produce, flush, commit.

At-least-once rests on one rule, kept by `OffsetLedger`: offsets are committed from a checkpoint taken
*before* a producer flush that completed with no delivery error. Everything else (backpressure, topic
discovery, rebalances, shutdown) is arranged around that rule and never commits past it.

`MirrorWorker` wires its parts at start-up and keeps the loop and shutdown. The
parts, each built from explicit collaborators:

    BatchMirror          engine/hot_path.py        the hot path: a batch's records to their producers, in order
    CommitCycle          engine/commits.py         flush or commit transactions, then commit offsets, offset syncs
    PartitionAssignment  engine/assignment.py      rebalance callbacks, start positions, data loss, rewinds
    TopicManagement      engine/topic_management.py discovery, creation, growth, config sync
    Housekeeping         engine/housekeeping.py    ACL sync, group offset sync, heartbeats
    SchemaGate           engine/schema_gate.py     per source: schema-id map, ids first seen mid-stream, conflicts
    Halts                engine/halts.py           a refused record: dead letter or halt its partition
    Backpressure         engine/backpressure.py    queue.size records in flight, the wait for room, holding the consumers
    choose_inflight      engine/inflight.py        queue.size and the producers' bytes, from the round trip and budget
    MirroredProducers    engine/mirrored_producers.py producers of mirrored records: made, sized, replaced when outgrown
    ClientSettings       clients/callbacks.py      client callbacks (errors, statistics), a bounded first contact
    ClientErrors         engine/client_errors.py   a consumer's errors, failed deliveries, refused records
    StallWatch           engine/stalls.py          partitions whose records wait while none is copied: log + gauge
    SourceContact        engine/source_contact.py  a source cluster that does not answer: log + mirror_errors
    open_streams         engine/streams.py         one consumer per source cluster: its settings, admin, transactions
"""

from __future__ import annotations

import logging
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

from confluent_kafka import KafkaException, Producer

from mirror_worker.clients import factory
from mirror_worker.clients.callbacks import ClientSettings, error_text
from mirror_worker.clients.coordinator_admin import IsolatingAdmin
from mirror_worker.clients.health import DESTINATION
from mirror_worker.config.inflight import LOOPBACK_QUEUE_SIZE, InflightSizes
from mirror_worker.config.librdkafka import connection_settings
from mirror_worker.config.model import MirrorConfig
from mirror_worker.dr.acl_admin import worker_acl_sync
from mirror_worker.dr.failback import FailbackStart, worker_failback_start
from mirror_worker.dr.failover_mark import refuse_if_failed_over
from mirror_worker.dr.group_admin import worker_group_syncs
from mirror_worker.dr.offset_syncs import OffsetSyncWriter
from mirror_worker.engine.assignment import PartitionAssignment
from mirror_worker.engine.backpressure import Backpressure
from mirror_worker.engine.cadence import FULL, Backlog, Cadence
from mirror_worker.engine.catchup_lease import CatchupCheck
from mirror_worker.engine.client_errors import ClientErrors
from mirror_worker.engine.commits import CommitCycle
from mirror_worker.engine.consume import take_available
from mirror_worker.engine.halts import Halts
from mirror_worker.engine.hot_path import BatchMirror
from mirror_worker.engine.housekeeping import Housekeeping
from mirror_worker.engine.inflight import choose_inflight
from mirror_worker.engine.mirrored_producers import MirroredProducers
from mirror_worker.engine.producer_set import ProducerSet
from mirror_worker.engine.producer_sizing import ProducerSizing
from mirror_worker.engine.run_state import RunState
from mirror_worker.engine.source_contact import SourceContact
from mirror_worker.engine.source_stream import SourceStream
from mirror_worker.engine.stalls import StallWatch, waiting_more_than
from mirror_worker.engine.streams import attach_schema_gates, far_sources_record_bytes, open_streams
from mirror_worker.engine.topic_management import TopicManagement, internal_topics
from mirror_worker.exactly_once.positions import (
    KEEPALIVE_MAX_S, POSITIONS_GROUP, Owner, keepalive_interval_s, offsets_retention_ms, worker_transactional_id,
)
from mirror_worker.exactly_once.stream_transaction import StreamTransaction
from mirror_worker.exceptions import FatalMirrorError
from mirror_worker.metrics import MirrorMetrics
from mirror_worker.policy.routing import Router
from mirror_worker.topics.admin import DestinationTopics, TopicCreationError

__all__ = ["MirrorWorker"]

log = logging.getLogger("mirror_worker")

# What a cluster that does not answer (or answers with an error) raises out of a periodic task.
_SIDE_TASK_ERRORS = (KafkaException, TimeoutError, TopicCreationError)


def _batch_size(queue_size: int) -> int:
    """The records the loop takes from a consumer at once: a quarter of what may be in flight, at most 5,000."""
    return max(1, min(5000, queue_size // 4))


class MirrorWorker:
    """One worker process: start-up wiring, the main loop, shutdown."""

    def __init__(self, config: MirrorConfig, metrics: MirrorMetrics | None = None, clock=time.monotonic,
                 stream_index: int = 0) -> None:
        self.config = config
        self.stream_index = stream_index  # this process among --num.streams: part of a static member's id
        self.metrics = metrics or MirrorMetrics(config.name)
        self.clock = clock
        self.state = RunState(config.shutdown_timeout_s, clock)
        self._label = {"mirror": config.name}
        # Records in flight across the producers: the configured queue_size, else sized at start() from the
        # destination's round trip (engine/inflight.py); until then (unit tests that only assemble) the near default.
        self.sizing = ProducerSizing(config.producer, config.queue_size or LOOPBACK_QUEUE_SIZE, self._label)
        self.batch_size = _batch_size(self.sizing.queue_size)
        self.backlog = Backlog()  # exactly-once: whether the loop is behind its sources (the cycles' spacing)
        self.router = Router(
            # Exactly-once: each source's one transactional producer (the stream's producers[0]).
            config.naming_policy(), config.preserve_partitions, config.preserve_order,
            1 if config.exactly_once else config.num_producers,
        )
        self.clients = ClientSettings(self.metrics, self._label, self.state,
                                      lambda err, msg: self.client_errors.delivery_error(err, msg))
        self.halts = Halts(self.metrics, self._label, config.dead_letter_topic,
                           lambda topic, partition: self.router.route(topic, partition).producer_index,
                           lambda run, err, msg: self.client_errors.refused_delivery(run, err, msg))
        self.client_errors = ClientErrors(
            config, self.metrics, self._label, self.state, self.halts,
            position_reset=lambda stream, topic, partition, reason: self.assignment.on_position_reset(
                stream, topic, partition, reason),
            request_purge=lambda: self.commits.request_purge())
        self.streams: list[SourceStream] = []
        self.producers: list[Producer] = []
        self.heartbeat_producer: Producer | None = None
        self.admin: IsolatingAdmin | None = None  # the destination's; built by start()
        self.destination_cluster_id = ""
        # Offsets move at commits: a partition is not stalled between two of them.
        stall_after_s = max(config.stall_timeout_s, 2 * config.commit_interval_s)
        self.producer_set = ProducerSet(self.producers, self.streams, config.exactly_once, self.metrics, self._label)
        self.stalls = StallWatch(self.streams, self.metrics, self._label, stall_after_s, clock,
                                 in_flight=self.producer_set.in_flight)
        self.backpressure = Backpressure(self.streams, self.producer_set.all, self.sizing.queue_size, self.batch_size,
                                         self.metrics, self._label, self.state, clock, on_wait=self.stalls.check,
                                         serve=self.producer_set.serve, on_pause=self.backlog.paused)
        # The mirrored records' producers, made and replaced with what self.sizing says (start() opens them).
        self.mirrored_producers = MirroredProducers(
            config, self.sizing, self.router, self.streams, self.producers, self.clients, self.metrics, self._label,
            self.state, flush=lambda: self.commits.flush(None), commit_all=self.checkpoint_and_commit,
            rewind=lambda stream, key, reason: self.assignment.rewind(stream, key, reason))
        self.positions_keepalive_s = KEEPALIVE_MAX_S  # exactly-once: set from the destination's retention
        # Built by start(): they need the clients.
        self.commits: CommitCycle
        self.assignment: PartitionAssignment
        self.topics: TopicManagement
        self.housekeeping: Housekeeping
        self.hot_path: BatchMirror
        self.failback: FailbackStart | None = None
        self.source_contact: SourceContact | None = None

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
        self.admin = factory.worker_admin_client(self.clients.client(cfg.producer, cluster=DESTINATION),
                                                 "the destination")
        self.destination_cluster_id = self.clients.reach_all(  # every cluster named that does not answer
            self.admin, {s.name: s.consumer for s in cfg.sources}, cfg.startup_timeout_s)
        # Exactly-once keys positions by source partition on the destination topic: it needs the room.
        destination = DestinationTopics(self.admin, cfg.topic_creation, cfg.preserve_partitions or cfg.exactly_once,
                                        stopping=self.state.stop_event.is_set)
        retention = None
        # Round trips that need nothing of each other, side by side: the worker's own topics made on the destination,
        # a far source's records sampled (a few round trips of the source's, engine/streams.py) and, exactly-once,
        # the destination brokers' offsets.retention.minutes (two).
        with ThreadPoolExecutor(2, thread_name_prefix="beside-start") as beside:
            sampling = beside.submit(far_sources_record_bytes, cfg, self.clients)
            if cfg.exactly_once:
                retention = beside.submit(offsets_retention_ms, self.admin, cfg.startup_timeout_s)
            destination.ensure_internal(internal_topics(cfg))
            record_bytes = sampling.result()
        if retention is not None:
            self.positions_keepalive_s = keepalive_interval_s(retention.result())
        self.resize(choose_inflight(cfg, self.clients.round_trips, DESTINATION, self.stream_index, self.metrics,
                                    self._label, record_bytes))
        if cfg.heartbeat_producer or cfg.exactly_once:
            # Exactly-once producers are transactional: heartbeats go through a plain one.
            self.heartbeat_producer = factory.producer(
                self.mirrored_producers.settings(cfg.heartbeat_producer or cfg.producer))
        transactions = None
        if cfg.exactly_once:
            def transactions(stream: SourceStream) -> StreamTransaction:
                return StreamTransaction(
                    cfg.name, stream.alias, self.mirrored_producers.settings(cfg.producer, stream.width or 0),
                    connection_settings(cfg.producer),
                    self.router.policy.remote_topic, stream.topic_ids.get, cfg.startup_timeout_s,
                    cfg.positions_topic, lambda topic: Owner(stream.cluster_id, topic, cfg.group_id),
                    worker_transactional_id(cfg.group_id, stream.alias, stream.instance_id or uuid.uuid4().hex[:12]),
                    self.clock, stopping=lambda: not self.state.running,
                )
        open_streams(cfg, self.clients, self.stream_index, self.producers, self._cluster_id,
                     self.destination_cluster_id, transactions, streams=self.streams, record_bytes=record_bytes)
        self.mirrored_producers.open()  # after the streams (which share self.producers): they counted the partitions
        attach_schema_gates(cfg, self.streams, self.halts, self.metrics, self._label)
        self.source_contact = SourceContact([(s.alias, s.admin) for s in self.streams], self.metrics, self._label,
                                            after_s=cfg.stall_timeout_s)
        self.source_contact.start()
        offset_sync_writer = None
        if cfg.writes_offset_syncs:
            offset_sync_writer = OffsetSyncWriter(cfg.offset_syncs_topic, self.admin, self.router.policy.remote_topic)
        self.assemble(self.admin, destination, offset_sync_writer)
        self.topics.refresh()
        log.info("mirror started", extra={
            **self._label, "sources": [s.alias for s in self.streams], "group": cfg.group_id,
            "topics": sorted({t for s in self.streams for t in s.topics}),
        })

    def assemble(self, admin, destination: DestinationTopics, offset_sync_writer: OffsetSyncWriter | None = None) -> None:
        """Build the parts around the clients and streams start() made (unit tests pass in-memory fakes)."""
        cfg = self.config
        self.commits = CommitCycle(
            self.streams, self.producer_set.all, self.metrics, self._label, self.state, self.clock, cfg.exactly_once,
            offset_sync_writer, lambda: self.producers[0] if self.producers else self.heartbeat_producer,
            hold_consumers=self.backpressure.hold_consumers, release_consumers=self.backpressure.release_consumers,
            positions_keepalive_s=self.positions_keepalive_s, on_wait=self.stalls.check,
        )
        lease = CatchupCheck(cfg.group_id, cfg.startup_timeout_s)  # a Spark catch-up holding the group

        def start_check(stream: SourceStream) -> None:
            lease(stream.admin)
            refuse_if_failed_over(admin, cfg.group_id, "mirroring", cfg.startup_timeout_s)
        self.failback = worker_failback_start(cfg, self.destination_cluster_id, self._label)
        self.assignment = PartitionAssignment(
            self.commits, self.halts, self.metrics, self._label, self.state, cfg.startup_timeout_s,
            cfg.on_data_loss == "halt", lambda: self.backpressure.paused, vanished_reason=self._vanished_reason,
            catchup_check=start_check, fresh_start=self.failback,
        )
        self.topics = TopicManagement(cfg, self.streams, admin, destination, self.router, self.assignment,
                                      self.metrics, self._label, before_subscribe=_sync_schemas,
                                      producers=self.producer_set.all, fit_batches=self.mirrored_producers.fit_batches,
                                      fit_partitions=self.mirrored_producers.fit_partitions, clock=self.clock)
        self.housekeeping = Housekeeping(cfg, self.streams, self.metrics, self._label,
                                         acl_sync=worker_acl_sync(cfg, admin, self.router.policy.remote_topic),
                                         group_syncs=worker_group_syncs(cfg, self.streams, admin))
        self.hot_path = BatchMirror(
            self.router, self.halts, self.backpressure, self.metrics, self._label, max_bytes=self.topics.max_bytes,
            destination_cluster_id=lambda: self.destination_cluster_id,
            on_refused_delivery=self.client_errors.refused_delivery, on_consume_error=self.client_errors.consume_error,
            provenance_headers=cfg.provenance_headers, rewrite_ids=cfg.schema_id_rewrite != "off",
            skip_origin=cfg.origin_records == "skip")

    def resize(self, sizes: InflightSizes) -> None:
        """Take the in-flight sizes chosen for the destination's round trip, before any producer is made."""
        self.sizing.resize(sizes)
        self.backpressure.queue_size = sizes.queue_size
        self.batch_size = self.backpressure.batch_size = _batch_size(sizes.queue_size)

    def _vanished_reason(self, stream: SourceStream, key: tuple[str, int]) -> str:
        return (f"its exactly-once position is gone from the destination (group {POSITIONS_GROUP}, "
                f"{self.router.policy.remote_topic(key[0])}[{key[1]}]) although one was committed "
                f"({self.config.positions_topic} says so): expired after offsets.retention.minutes, most likely "
                "because the mirror was stopped longer than that; not restarting from the source group or "
                "the reset policy (duplicates or loss): commit the right position in that group to resume")

    def _cluster_id(self, client, what: str) -> str:
        return self.clients.cluster_id(client, what, self.config.startup_timeout_s)

    # ---------------------------------------------------------------- main loop
    def run(self) -> None:
        cfg = self.config
        now = self.clock()
        next_refresh = now + cfg.topic_refresh_interval_s
        next_config_sync = now + cfg.config_sync_interval_ms / 1000
        next_acl_sync = next_group_sync = now  # the first right away: they should not wait behind a started mirror
        next_heartbeat = now
        timeout = 0.5 if len(self.streams) == 1 else 0.1
        # Exactly-once: transactions commit this often, so read_committed readers see records this late; the
        # source group's offsets (and offset syncs, position keep-alives) keep the commit interval. Spaced for
        # catch-up at most 3 commit intervals, and half the stall timeout (engine/cadence.py).
        cadence = Cadence(now, cfg.commit_interval_s, cfg.transaction_interval_ms / 1000 if cfg.exactly_once else None,
                          min(3 * cfg.commit_interval_s, self.stalls.stall_after_s / 2))
        while self.state.running:
            now = self.clock()
            if now >= next_refresh:
                self._side_task("topic_refresh", self.topics.refresh)
                next_refresh = now + cfg.topic_refresh_interval_s
            if cfg.config_sync_interval_ms and now >= next_config_sync:
                self._side_task("config_sync", self.topics.sync_configs)
                next_config_sync = self.clock() + cfg.config_sync_interval_ms / 1000
            if cfg.acl_sync_interval_ms and now >= next_acl_sync:
                self._side_task("acl_sync", self.housekeeping.sync_acls)
                next_acl_sync = self.clock() + cfg.acl_sync_interval_ms / 1000
            if cfg.group_offset_sync_interval_ms and now >= next_group_sync:
                self._side_task("group_offset_sync", self.housekeeping.sync_group_offsets)
                next_group_sync = self.clock() + cfg.group_offset_sync_interval_ms / 1000
            if now >= next_heartbeat:
                self._side_task("heartbeat", lambda: self.housekeeping.send_heartbeats(
                    self.heartbeat_producer or self.producers[0], self.destination_cluster_id))
                next_heartbeat = now + cfg.heartbeat_interval_s
            kind = cadence.due(now)
            if kind is not None:
                if kind == FULL:
                    self.metrics.in_flight.labels(**self._label).set(self.backpressure.in_flight())
                # Exactly-once, FULL: the transactions, then the source group's offsets and the offset syncs.
                self.checkpoint_and_commit(from_loop=True, source_group=kind == FULL)
                ended = self.clock()
                behind = False
                if cfg.exactly_once:
                    behind = self.backlog.cycle()
                    self.metrics.transaction_cycle_seconds.labels(**self._label).observe(ended - now)
                    self.metrics.transaction_cycles.labels(spacing="catch_up" if behind else "interval",
                                                           **self._label).inc()
                cadence.done(kind, now, ended, behind)
            self._consume_round(cadence.wait(self.clock(), timeout))
            if cadence.spaced and not any(waiting_more_than(s, self.batch_size) for s in self.streams):
                # The next cycle now, counted as not behind: the one round since the last cycle came full (what
                # arrived during it), and read as behind it spaced the next window again, at any rate.
                self.backlog.clear()
                cadence.caught_up(self.clock())
            self.stalls.check()
        if self.state.fatal is not None:
            raise FatalMirrorError(self.state.fatal)

    def _side_task(self, kind: str, task) -> None:
        """A periodic task beside the mirroring (discovery, syncs, heartbeats): a cluster that does not answer
        fails this round of it only, counted (mirror_errors{kind}) and logged; it runs again at its next
        interval. Errors of the mirror's own making (a mapping conflict, too few partitions) still stop it."""
        try:
            task()
        except _SIDE_TASK_ERRORS as exc:
            self.metrics.errors.labels(kind=kind, **self._label).inc()
            log.warning("periodic task failed, retried at its next interval", extra={
                **self._label, "task": kind, "error": error_text(exc)})

    def _consume_round(self, timeout: float) -> None:
        """Wait for room if needed, then per stream: the stash first, else one batch from the consumer."""
        self.backpressure.wait_for_room()
        for stream in self.streams:
            if stream.stash:
                batch, stream.stash = stream.stash, []
                self.hot_path.mirror(stream, batch)
                if stream.stash:  # the producers are full again: nothing newer before these
                    self.backlog.held_back(stream.alias)
                    continue
            if not stream.topics:
                time.sleep(timeout)
                continue
            rebalances = stream.rebalances
            batch = take_available(stream.consumer, self.batch_size, timeout)
            self.backlog.took(stream.alias, len(batch), self.batch_size)
            if batch and stream.rebalances != rebalances:
                batch = [m for m in batch if m.error() or (m.topic(), m.partition()) in stream.assigned]
            if batch:
                self.hot_path.mirror(stream, batch)
        self.producer_set.serve(0)

    def checkpoint_and_commit(self, deadline: float | None = None, from_loop: bool = False,
                              source_group: bool = True) -> bool:
        """One commit cycle; partitions whose transaction was aborted are rewound. True if it completed."""
        outcome = self.commits.checkpoint_and_commit(deadline=deadline, from_loop=from_loop, source_group=source_group)
        for stream, key, reason in outcome.aborted:
            self.assignment.rewind(stream, key, reason)
        return outcome.complete

    # ---------------------------------------------------------------- shutdown
    def close(self) -> None:
        """Flush, commit, leave the group. Bounded by shutdown_timeout_s."""
        deadline = self.state.close()
        if self.source_contact is not None:
            self.source_contact.stop()
        committed = self.checkpoint_and_commit(deadline=deadline)
        for stream in self.streams:
            if stream.transactions is not None:
                stream.transactions.close_all()
            try:
                stream.consumer.close()
            except (KafkaException, RuntimeError) as exc:
                log.warning("consumer close failed", extra={**self._label, "source": stream.alias, "error": str(exc)})
        self.housekeeping.close()
        for admin in [self.admin, *(stream.admin for stream in self.streams)]:
            if isinstance(admin, IsolatingAdmin):
                admin.close_coordinator_process()
        if self.failback is not None:
            self.failback.close()
        if self.heartbeat_producer is not None:
            self.heartbeat_producer.flush(2)
        log.info("mirror stopped", extra={**self._label, "final_commit": committed})


def _sync_schemas(stream: SourceStream, topics: list[str]) -> None:
    """Before a stream subscribes to new topics: their subjects, when the source syncs schemas."""
    if stream.schemas is not None:
        stream.schemas.sync_topics(stream, topics)
