"""Prometheus metrics of one worker process (served on --metrics.port when given)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server


class MirrorMetrics:
    def __init__(self, mirror: str) -> None:
        self.registry = CollectorRegistry()
        labels = ["mirror", "source", "topic"]
        self.mirror = mirror
        self.records_consumed = Counter("mirror_records_consumed", "Records read from a source", labels, registry=self.registry)
        self.bytes_consumed = Counter("mirror_bytes_consumed", "Key+value bytes read from a source", labels, registry=self.registry)
        self.records_produced = Counter(
            "mirror_records_produced", "Records confirmed written to the destination (acks=all)", labels, registry=self.registry
        )
        self.bytes_produced = Counter("mirror_bytes_produced", "Key+value bytes confirmed on the destination", labels, registry=self.registry)
        self.partition_lag = Gauge(
            "mirror_partition_lag", "Source high watermark minus the mirror's position", labels + ["partition"], registry=self.registry
        )
        self.committed_offset = Gauge(
            "mirror_committed_offset", "Last source offset committed by the mirror", labels + ["partition"], registry=self.registry
        )
        self.replication_latency = Gauge(
            "mirror_replication_latency_seconds",
            "Age of the newest mirrored record (now minus its source timestamp) at its last flush",
            labels, registry=self.registry,
        )
        self.halted_partitions = Gauge(
            "mirror_partition_halted", "1 when a partition is halted by an error", labels + ["partition"], registry=self.registry
        )
        self.stalled_partitions = Gauge(
            "mirror_partition_stalled",
            "1 while records wait in a partition and none was copied for stall-timeout-s", labels + ["partition"],
            registry=self.registry,
        )
        self.topics_not_mirrored = Gauge(
            "mirror_topic_not_mirrored",
            "1 while a selected source topic is not mirrored: its destination topic cannot be created or grown",
            labels, registry=self.registry,
        )
        self.topics_selected = Gauge(
            "mirror_topics_selected", "Source topics the mirror's whitelist or blacklist selects", ["mirror", "source"],
            registry=self.registry,
        )
        self.selects_nothing = Gauge(
            "mirror_selects_no_topic",
            "1 when the topic filter has selected no topic for longer than a discovery interval", ["mirror", "source"],
            registry=self.registry,
        )
        self.data_loss = Counter(
            "mirror_data_loss", "Source records lost before they were mirrored (retention, topic recreated), by kind",
            labels + ["kind"], registry=self.registry,
        )
        self.configs_synced = Counter(
            "mirror_topic_configs_synced", "Destination topic config entries set from the source topic's", labels,
            registry=self.registry,
        )
        self.acls_synced = Counter(
            "mirror_topic_acls_synced",
            "Read-side ACL bindings created on destination topics (topic: the destination's)",
            labels, registry=self.registry,
        )
        self.group_offsets_synced = Counter(
            "mirror_group_offsets_synced", "Destination group offsets moved forward to the translated source commit",
            ["mirror", "source", "group"], registry=self.registry,
        )
        self.group_offsets_skipped = Counter(
            "mirror_group_offsets_skipped",
            "Group offsets not written, by reason (group-active, destination-ahead, untranslated, write-failed)",
            ["mirror", "source", "group", "reason"], registry=self.registry,
        )
        self.offset_syncs = Counter(
            "mirror_offset_syncs", "Offset syncs (source offset -> destination offset) written", labels, registry=self.registry
        )
        self.errors = Counter("mirror_errors", "Errors by kind", ["mirror", "kind"], registry=self.registry)
        self.records_skipped = Counter(
            "mirror_records_skipped", "Records not mirrored on purpose (origin: they came from the destination)",
            labels + ["reason"], registry=self.registry,
        )
        self.records_restamped = Counter(
            "mirror_records_restamped",
            "Source records stamped at the epoch (CreateTime 0) produced 1 ms later (librdkafka reads 0 as now); "
            "a record sent again after an aborted transaction counts again",
            labels, registry=self.registry,
        )
        self.dead_lettered = Counter("mirror_records_dead_lettered", "Records sent to the dead-letter topic", labels, registry=self.registry)
        self.schemas_registered = Counter(
            "mirror_schemas_registered", "Schema versions registered on the destination registry", ["mirror"],
            registry=self.registry,
        )
        self.schema_id_cache_size = Gauge(
            "mirror_schema_id_cache_size", "Source schema ids mapped to destination ids", ["mirror", "source"],
            registry=self.registry,
        )
        self.schema_id_cache_misses = Counter(
            "mirror_schema_id_cache_misses", "Records whose schema id was not mapped yet", ["mirror", "source"],
            registry=self.registry,
        )
        self.schema_conflicts = Gauge(
            "mirror_schema_conflict", "1 when a topic's schemas conflict with the destination's (the topic halts)",
            labels, registry=self.registry,
        )
        self.backpressure_seconds = Counter(
            "mirror_backpressure_seconds", "Time spent waiting for room in the producers' queue (queue.size)",
            ["mirror"], registry=self.registry,
        )
        self.backpressure_pauses = Counter(
            "mirror_backpressure_pauses",
            "Waits for room long enough that the consumers were paused (the destination is slower than the source)",
            ["mirror"], registry=self.registry,
        )
        self.transaction_cycles = Counter(
            "mirror_transaction_cycles",
            "Exactly-once commit cycles by the spacing chosen after them: interval (an ordinary rate) or catch_up "
            "(every batch of a source came full since the last cycle: cycles spaced to take a tenth of the loop; "
            "engine/cadence.py)",
            ["mirror", "spacing"], registry=self.registry,
        )
        # A record is visible to read_committed readers up to an interval plus one such cycle after it arrived.
        self.transaction_cycle_seconds = Histogram(
            "mirror_transaction_cycle_seconds",
            "How long each exactly-once commit cycle counted by mirror_transaction_cycles took (every partition's "
            "transaction committed with its position)", ["mirror"], registry=self.registry,
            buckets=(0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0),
        )
        self.in_flight = Gauge("mirror_records_in_flight", "Records handed to producers, not yet acknowledged", ["mirror"], registry=self.registry)
        self.in_flight_max = Gauge(
            "mirror_records_in_flight_max", "Most records in flight seen after a batch was handed to the producers",
            ["mirror"], registry=self.registry,
        )

        # What the clients see of their clusters (clients/health.py), from librdkafka's statistics.
        self.destination_brokers_down = Gauge(
            "mirror_destination_brokers_down", "Destination brokers the worker's producers need and cannot reach",
            ["mirror"], registry=self.registry,
        )
        self.source_brokers_down = Gauge(
            "mirror_source_brokers_down", "Source brokers the worker's consumer needs and cannot reach",
            ["mirror", "source"], registry=self.registry,
        )
        self.destination_leaderless = Gauge(
            "mirror_destination_partitions_without_leader",
            "Destination partitions the producers write whose leader is unknown or unreachable", ["mirror"],
            registry=self.registry,
        )
        self.source_leaderless = Gauge(
            "mirror_source_partitions_without_leader",
            "Assigned source partitions whose leader is unknown or unreachable", ["mirror", "source"],
            registry=self.registry,
        )
        self.round_trip = Gauge(
            "mirror_cluster_round_trip_seconds", "A metadata request's round trip to the cluster, measured at start "
            "(the shortest of three): the source fetch sizes follow it", ["mirror", "cluster"], registry=self.registry,
        )
        self.inflight_budget = Gauge(
            "mirror_inflight_budget_bytes", "Bytes of in-flight data (source prefetch, producer queues, the queued "
            "records' overhead) the worker sized its queues within", ["mirror"], registry=self.registry,
        )
        self.inflight_limit = Gauge(
            "mirror_inflight_limit", "What the worker holds in flight, as sized at start: queue_size (records, every "
            "producer), producer_queue_bytes (each producer, as last made: at most three batches per partition), "
            "consumer_queue_bytes (every source's prefetch), "
            "records_overhead_bytes (what queue_size records cost beyond their bytes)",
            ["mirror", "limit"], registry=self.registry,
        )
        self.delivery_retries = Counter(
            "mirror_delivery_retries", "Produce requests sent to the destination again (librdkafka's txretries)",
            ["mirror"], registry=self.registry,
        )

    def forget_partitions(self, source: str, keys) -> None:
        """Partitions this worker no longer owns: their per-partition series belong to their next owner."""
        for gauge in (self.partition_lag, self.committed_offset, self.halted_partitions, self.stalled_partitions):
            for topic, partition in keys:
                try:
                    gauge.remove(self.mirror, source, topic, str(partition))
                except KeyError:
                    pass

    def serve(self, port: int) -> int:
        server, _thread = start_http_server(port, addr="127.0.0.1", registry=self.registry)
        return server.server_port
