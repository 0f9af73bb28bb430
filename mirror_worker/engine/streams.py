"""The source streams of a worker process: one consumer per source cluster, with its settings and the
parts that hang off it (admin client, exactly-once transactions, schema gate). Built once at start-up.

`consumer_settings` is where the worker's choices about a source consumer are made (assignor, static
membership, isolation level, who resets positions, fetch sizes for the source's round trip and, across a WAN,
its records' size, which `far_sources_record_bytes` samples); `open_streams` makes the clients from them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from confluent_kafka import KafkaException

from mirror_worker.clients import factory
from mirror_worker.clients.callbacks import ClientSettings
from mirror_worker.clients.health import statistics_interval_ms
from mirror_worker.clients.log_ends import reads_committed
from mirror_worker.clients.record_sizes import SAMPLE_CONSUMER, sampled_record_bytes
from mirror_worker.config.fetch_sizes import LIBRDKAFKA_QUEUED_MIN_MESSAGES, fetch_sizes_for, is_near
from mirror_worker.config.librdkafka import assignment_strategy, connection_settings
from mirror_worker.config.membership import membership_settings
from mirror_worker.config.model import MirrorConfig, SourceCluster
from mirror_worker.engine.halts import Halts
from mirror_worker.engine.schema_gate import SchemaGate
from mirror_worker.engine.source_stream import SourceStream
from mirror_worker.exactly_once.stream_transaction import StreamTransaction
from mirror_worker.metrics import MirrorMetrics
from mirror_worker.topics.admin import describe_topics

log = logging.getLogger("mirror_worker")


def consumer_settings(cfg: MirrorConfig, source: SourceCluster, stream_index: int,
                      round_trip_s: float | None = None, partitions: int | None = None,
                      record_bytes: float | None = None) -> tuple[dict, str]:
    """The source consumer's settings, and the reset policy the worker applies itself (see below).

    The source's own settings win over the worker's defaults (assignor, fetch sizes for the source's round trip
    `round_trip_s` and its records' sampled size `record_bytes`, the statistics interval for the `partitions` it
    mirrors), not over what the worker's guarantees need (static member id aside: isolation, the reset policy)."""
    settings = {"group.id": cfg.group_id, **assignment_strategy(source.consumer, cfg.exactly_once),
                **fetch_sizes_for(round_trip_s, source.consumer, partitions, record_bytes), **source.consumer,
                **membership_settings(cfg.static_membership, cfg.group_id, source.name, cfg.worker_slot, stream_index)}
    if cfg.metrics_port is not None:
        settings.setdefault("statistics.interval.ms", statistics_interval_ms(partitions or 0))
    if cfg.exactly_once:
        settings["isolation.level"] = "read_committed"
    reset_policy = settings.get("auto.offset.reset", "latest")
    # The worker picks every start position itself (see PartitionAssignment); a fetch that falls off the log
    # later must surface as an error, never as librdkafka's silent reset.
    settings["auto.offset.reset"] = "error"
    return settings, reset_policy


def selected_topics(cfg: MirrorConfig, client, timeout_s: float) -> dict[str, int] | None:
    """The partition count of each topic the mirror's topic filter selects on the source `client` talks to; None
    when it does not answer."""
    try:
        visible = describe_topics(client, timeout_s)
    except KafkaException:
        return None
    return {topic: visible[topic].partitions for topic in cfg.topic_filter().select(visible)}


def selected_partitions(cfg: MirrorConfig, admin, timeout_s: float) -> int | None:
    """How many partitions the mirror's topic filter selects on the source `admin` talks to; None when it does
    not answer (the statistics interval then stays the default; discovery proper comes later)."""
    topics = selected_topics(cfg, admin, timeout_s)
    return None if topics is None else sum(topics.values())


# The sample's bound: a few round trips of a far source's answers, never the whole start-up's patience.
SAMPLE_TIMEOUT_ROUND_TRIPS = 20
SAMPLE_TIMEOUT_MIN_S = 2.0


def samples_records(source: SourceCluster, round_trip_s: float | None) -> bool:
    """Whether a source's records are sampled at start: measured across a WAN, its fetch.max.bytes not named."""
    return round_trip_s is not None and not is_near(round_trip_s) and "fetch.max.bytes" not in source.consumer


def far_sources_record_bytes(cfg: MirrorConfig, clients: ClientSettings) -> dict[str, float | None]:
    """The mean record size of each source sampled (samples_records), by name, every source at once: what its
    responses follow (config/fetch_sizes.py wan_fetch_max_bytes). Near sources are not asked."""
    far = [(s, clients.round_trips[s.name]) for s in cfg.sources if samples_records(s, clients.round_trips.get(s.name))]
    if not far:
        return {}

    def sample(entry: tuple[SourceCluster, float]) -> float | None:
        source, round_trip = entry
        timeout_s = min(cfg.startup_timeout_s, max(SAMPLE_TIMEOUT_MIN_S, SAMPLE_TIMEOUT_ROUND_TRIPS * round_trip))
        return sampled_record_bytes(
            lambda: factory.side_consumer(
                clients.client(connection_settings(source.consumer), cluster=source.name),
                cfg.group_id, SAMPLE_CONSUMER),  # never joins nor commits: the group's ACLs are the mirror's
            lambda consumer: selected_topics(cfg, consumer, timeout_s), timeout_s, source.name)

    with ThreadPoolExecutor(len(far), thread_name_prefix="record-sizes") as pool:
        return dict(zip((s.name for s, _ in far), pool.map(sample, far)))


def incremental(settings: dict) -> bool:
    """Whether the group's rebalances are incremental (cooperative assignor or KIP-848)."""
    return (settings.get("group.protocol") == "consumer"
            or "cooperative" in settings.get("partition.assignment.strategy", ""))


def open_streams(cfg: MirrorConfig, clients: ClientSettings, stream_index: int, producers: list,
                 cluster_id: Callable[[object, str], str], destination_cluster_id: str,
                 transactions: Callable[[SourceStream], StreamTransaction] | None = None,
                 streams: list[SourceStream] | None = None,
                 record_bytes: dict[str, float | None] | None = None) -> list[SourceStream]:
    """One stream per source cluster, appended to `streams` as each is made (a source that cannot be reached
    leaves the ones before it there, for the caller to close). `cluster_id(client, what)` waits (bounded) for
    the first contact; `transactions(stream)`, for exactly-once mirrors, makes its transactional producer;
    `record_bytes`: far sources' sampled record sizes, by name (far_sources_record_bytes)."""
    streams = [] if streams is None else streams
    record_bytes = record_bytes or {}
    for source in cfg.sources:
        round_trip = clients.round_trips.get(source.name)
        sampled = record_bytes.get(source.name)
        admin = factory.worker_admin_client(
            clients.client(connection_settings(source.consumer), cluster=source.name), f"source {source.name!r}")
        width = None
        # Counted at start, with the stream's own admin client (one metadata request), for the statistics interval
        # (clients/health.py) and a near source's response size (fetch_sizes_for).
        if cfg.metrics_port is not None or (is_near(round_trip) and "fetch.max.bytes" not in source.consumer):
            width = selected_partitions(cfg, admin, cfg.startup_timeout_s)
        settings, reset_policy = consumer_settings(cfg, source, stream_index, round_trip, width, sampled)
        log.info("source consumer sized for its round trip", extra={
            "mirror": cfg.name, "source": source.name,
            "round_trip_ms": None if round_trip is None else round(round_trip * 1000, 1),
            "record_bytes": None if sampled is None else round(sampled, 1),
            "max_partition_fetch_bytes": int(settings["max.partition.fetch.bytes"]),
            "fetch_max_bytes": int(settings["fetch.max.bytes"]),
            "queued_min_messages": int(settings.get("queued.min.messages", LIBRDKAFKA_QUEUED_MIN_MESSAGES)),
            "partitions": width, "statistics_interval_ms": settings.get("statistics.interval.ms")})
        consumer = factory.consumer(clients.client(settings, stats_source=source.name))
        source_id = cluster_id(consumer, f"source {source.name!r}")
        stream = SourceStream(source.name, consumer, source_id, source_id == destination_cluster_id,
                              producers=producers, reset_policy=reset_policy, width=width,
                              incremental_assignment=incremental(settings),
                              instance_id=settings.get("group.instance.id"), admin=admin,
                              reads_committed=reads_committed(settings))
        if transactions is not None:
            stream.transactions = transactions(stream)
            stream.producers = stream.transactions.producers
        streams.append(stream)
    return streams


def attach_schema_gates(cfg: MirrorConfig, streams: list[SourceStream], halts: Halts, metrics: MirrorMetrics,
                        label: dict) -> None:
    """A schema gate on each stream whose source has a registry, when the mirror syncs schemas."""
    if not cfg.syncs_schemas:
        return
    from mirror_worker.schemas.sync import syncers_for  # the registry client and fastavro: only when used

    syncers = syncers_for(cfg, on_register=metrics.schemas_registered.labels(**label).inc)
    for stream in streams:
        syncer = syncers.get(stream.alias)
        if syncer is not None:
            stream.schemas = SchemaGate(syncer, halts, metrics, label, stream.alias, cfg.schema_id_rewrite)
