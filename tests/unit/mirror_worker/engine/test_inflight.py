"""The worker's in-flight sizes chosen at start (engine/inflight.py): logged, exported, applied to the producers."""

from __future__ import annotations

import logging

from mirror_worker.clients.health import DESTINATION
from mirror_worker.config.inflight import DEFAULT_INFLIGHT_BUDGET_BYTES, LOOPBACK_QUEUE_SIZE
from mirror_worker.config.model import build_mirror_config
from mirror_worker.engine.inflight import choose_inflight
from mirror_worker.engine.worker import MirrorWorker
from mirror_worker.metrics import MirrorMetrics


def _config(producer: dict | None = None, **settings):
    return build_mirror_config({"name": "m", "sources": [{"name": "east", "consumer": {"bootstrap.servers": "a:1"}}],
                                "producer": {"bootstrap.servers": "b:1", **(producer or {})}, "group_id": "g",
                                "whitelist": "t", **settings})


def _sample(metrics: MirrorMetrics, name: str, **labels) -> float | None:
    return metrics.registry.get_sample_value(name, {"mirror": "m", **labels})


def test_a_destination_50_ms_away_gets_more_records_in_flight_logged_and_exported(caplog):
    metrics = MirrorMetrics("m")
    with caplog.at_level(logging.INFO, logger="mirror_worker"):
        sizes = choose_inflight(_config(), {DESTINATION: 0.05, "east": 0.001}, DESTINATION, 0, metrics, {"mirror": "m"})
    assert sizes.queue_size == 67_500
    assert _sample(metrics, "mirror_inflight_budget_bytes") == DEFAULT_INFLIGHT_BUDGET_BYTES
    assert _sample(metrics, "mirror_inflight_limit", limit="queue_size") == 67_500
    assert _sample(metrics, "mirror_inflight_limit", limit="producer_queue_bytes") == sizes.producers_queue_bytes
    # The source 1 ms away gets responses of 4 MiB: one counted with its 16 MiB prefetch bound.
    assert _sample(metrics, "mirror_inflight_limit", limit="consumer_queue_bytes") == (16 + 4) * 1024 * 1024
    [record] = [r for r in caplog.records if r.getMessage() == "in-flight sized for the destination's round trip"]
    assert (record.round_trip_ms, record.queue_size, record.within_budget, record.named) == (50.0, 67_500, True, [])


def test_a_far_sources_sampled_record_size_is_what_the_budget_counts():
    """A far source's responses follow its records' sampled size: the budget counts the response it will get."""
    far = {DESTINATION: 0.001, "east": 0.05}
    unsampled = choose_inflight(_config(), far, DESTINATION, 0, MirrorMetrics("m"), {"mirror": "m"})
    sampled = choose_inflight(_config(), far, DESTINATION, 0, MirrorMetrics("m"), {"mirror": "m"}, {"east": 116})
    assert unsampled.consumer_queue_bytes == (16 + 16) * 1024 * 1024
    assert sampled.consumer_queue_bytes == 16 * 1024 * 1024 + 6_960_000  # 1.2M records/s of 116 B over 50 ms
    assert sampled.producers_queue_bytes > unsampled.producers_queue_bytes  # the rest of the budget


def test_the_budget_and_queue_size_named_in_the_config_win():
    config = _config(queue_size=12_000, inflight_budget_bytes=64 * 1024 * 1024)
    sizes = choose_inflight(config, {DESTINATION: 0.2}, DESTINATION, 0, MirrorMetrics("m"), {"mirror": "m"})
    assert (sizes.queue_size, sizes.budget_bytes) == (12_000, 64 * 1024 * 1024)


def test_the_worker_applies_the_sizes_to_its_loop_and_producers():
    worker = MirrorWorker(_config())
    assert worker.sizing.queue_size == LOOPBACK_QUEUE_SIZE == worker.backpressure.queue_size  # before start: the near size
    worker.resize(choose_inflight(worker.config, {DESTINATION: 0.1}, DESTINATION, 0, worker.metrics, {"mirror": "m"}))
    assert worker.backpressure.queue_size == 135_000 and worker.batch_size == worker.backpressure.batch_size == 5000
    fitted = worker.sizing.fitted()
    assert fitted["queue.buffering.max.messages"] == "135000"
    assert int(fitted["queue.buffering.max.kbytes"]) == worker.sizing.producer_queue_kbytes


def test_the_producers_byte_bound_stays_above_two_of_the_largest_records():
    worker = MirrorWorker(_config(inflight_budget_bytes=16 * 1024 * 1024))
    worker.resize(choose_inflight(worker.config, {DESTINATION: 0.001}, DESTINATION, 0, worker.metrics, {"mirror": "m"}))
    worker.sizing.message_max_bytes = 64 * 1024 * 1024  # a destination topic takes 64 MB records
    assert int(worker.sizing.fitted()["queue.buffering.max.kbytes"]) > 2 * 64 * 1024


def test_producer_settings_that_name_the_bounds_keep_them():
    worker = MirrorWorker(_config({"queue.buffering.max.messages": "5000", "queue.buffering.max.kbytes": "2048"}))
    worker.resize(choose_inflight(worker.config, {DESTINATION: 0.05}, DESTINATION, 0, worker.metrics, {"mirror": "m"}))
    fitted = worker.sizing.fitted()
    assert "queue.buffering.max.messages" not in fitted and "queue.buffering.max.kbytes" not in fitted
