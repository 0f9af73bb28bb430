"""The worker's in-flight sizes chosen at start, from the destination's measured round trip and the memory budget
(config/inflight.py): logged as "in-flight sized for the destination's round trip" and exported as
mirror_inflight_budget_bytes and mirror_inflight_limit{limit}; each producer's bytes again once the partitions it writes
to are counted ("producer bytes bounded by its partitions' batches")."""

from __future__ import annotations

import logging

from mirror_worker.config.inflight import BATCHES_PER_PARTITION, InflightSizes, inflight_sizes, within_budget
from mirror_worker.config.model import MirrorConfig
from mirror_worker.engine.streams import consumer_settings
from mirror_worker.metrics import MirrorMetrics

log = logging.getLogger("mirror_worker")


def producer_count(cfg: MirrorConfig) -> int:
    """The producers that share the budget: the mirrored records' (exactly-once: one transactional per source)."""
    return len(cfg.sources) if cfg.exactly_once else cfg.num_producers


def choose_inflight(cfg: MirrorConfig, round_trips: dict[str, float | None], destination: str, stream_index: int,
                    metrics: MirrorMetrics, label: dict,
                    record_bytes: dict[str, float | None] | None = None) -> InflightSizes:
    """The sizes for this worker process (`round_trips`: each cluster's, by name; `destination`: its key there;
    `record_bytes`: far sources' sampled record sizes, by name, which their responses follow)."""
    record_bytes = record_bytes or {}
    consumers = [consumer_settings(cfg, source, stream_index, round_trips.get(source.name),
                                   record_bytes=record_bytes.get(source.name))[0]
                 for source in cfg.sources]
    producers = producer_count(cfg)
    round_trip = round_trips.get(destination)
    sizes = inflight_sizes(round_trip, cfg.inflight_budget_bytes, cfg.queue_size, cfg.producer, consumers, producers)
    metrics.inflight_budget.labels(**label).set(sizes.budget_bytes)
    for limit, value in (("queue_size", sizes.queue_size), ("producer_queue_bytes", sizes.producers_queue_bytes),
                         ("consumer_queue_bytes", sizes.consumer_queue_bytes),
                         ("records_overhead_bytes", sizes.records_overhead_bytes)):
        metrics.inflight_limit.labels(limit=limit, **label).set(value)
    fits = within_budget(sizes, producers)
    log.log(logging.INFO if fits else logging.WARNING, "in-flight sized for the destination's round trip", extra={
        **label, "round_trip_ms": None if round_trip is None else round(round_trip * 1000, 1),
        "budget_bytes": sizes.budget_bytes, "queue_size": sizes.queue_size,
        "producer_queue_kbytes": sizes.producer_queue_kbytes, "producers": producers,
        "consumer_queue_bytes": sizes.consumer_queue_bytes, "records_overhead_bytes": sizes.records_overhead_bytes,
        "within_budget": fits,
        "named": sorted(k for k, v in sizes.named.items() if v),
    })
    return sizes


def export_producer_bytes(metrics: MirrorMetrics, label: dict, kbytes: list[int], partitions: int) -> None:
    """The mirrored records' producers' queue.buffering.max.kbytes as made (`kbytes`, one per producer setting; empty
    when named: choose_inflight exported it), bounded by BATCHES_PER_PARTITION batches for each partition they write
    to; `partitions`: the most any of them writes to, the count behind the largest bound (0: not counted, the
    budget's share)."""
    if not kbytes:
        return
    largest = max(kbytes) * 1024
    metrics.inflight_limit.labels(limit="producer_queue_bytes", **label).set(largest)
    log.info("producer bytes bounded by its partitions' batches", extra={
        **label, "producer_queue_kbytes": max(kbytes), "partitions": partitions,
        "batches_per_partition": BATCHES_PER_PARTITION})
