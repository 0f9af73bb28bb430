"""librdkafka's statistics at width: the interval grows with the partitions a client reports on.

A report lists every partition the client knows (at 5,000 partitions 4.2 MB of JSON per report from the source
consumer alone); librdkafka building it cost ~0.19 CPU-s per report there, and parsing it in Python ~0.05 more
(a consumer alone, 40 s, 8 reports: 3.6 CPU-s without statistics, 5.1 with an empty callback, 5.8 with the
worker's). With --metrics.port at 5,000 partitions the worker peaked at 249 MiB and 27.3 CPU-s against 200 and
16.5 with statistics off (issue 42)."""

from __future__ import annotations

from types import SimpleNamespace

from mirror_worker.clients.health import STATISTICS_INTERVAL_MS, statistics_interval_ms
from mirror_worker.config.model import build_mirror_config
from mirror_worker.engine.streams import consumer_settings, selected_partitions


def test_five_seconds_up_to_a_thousand_partitions_then_five_more_per_thousand_at_most_a_minute():
    assert STATISTICS_INTERVAL_MS == "5000"
    assert [statistics_interval_ms(n) for n in (0, 6, 1000)] == ["5000"] * 3
    assert statistics_interval_ms(2000) == "10000" and statistics_interval_ms(5000) == "25000"
    assert statistics_interval_ms(50_000) == "60000"


def _config(**fields):
    return build_mirror_config({
        "name": "m", "sources": [{"name": "src", "consumer": {"bootstrap.servers": "a:1"}}],
        "producer": {"bootstrap.servers": "b:1"}, "whitelist": "orders.*", "group_id": "g", **fields})


def test_the_source_consumer_reports_as_often_as_its_width_allows_and_a_named_interval_wins():
    cfg = _config(metrics_port=0)
    assert consumer_settings(cfg, cfg.sources[0], 0, partitions=5000)[0]["statistics.interval.ms"] == "25000"
    assert consumer_settings(cfg, cfg.sources[0], 0)[0]["statistics.interval.ms"] == "5000"
    named = _config(metrics_port=0, sources=[{"name": "src", "consumer": {
        "bootstrap.servers": "a:1", "statistics.interval.ms": "1000"}}])
    assert consumer_settings(named, named.sources[0], 0, partitions=5000)[0]["statistics.interval.ms"] == "1000"
    assert "statistics.interval.ms" not in consumer_settings(_config(), _config().sources[0], 0, partitions=5000)[0]


class _Admin:
    def __init__(self, topics: dict[str, int], fail: bool = False) -> None:
        self.topics, self.fail = topics, fail

    def list_topics(self, timeout=None):
        if self.fail:
            from confluent_kafka import KafkaError, KafkaException
            raise KafkaException(KafkaError(KafkaError._TRANSPORT))
        return SimpleNamespace(topics={t: SimpleNamespace(error=None, partitions={
            p: SimpleNamespace(replicas=[1]) for p in range(n)}) for t, n in self.topics.items()})


def test_the_width_counted_is_what_the_filter_selects_and_an_unanswered_count_is_none():
    cfg = _config()
    admin = _Admin({"orders.a": 10, "orders.b": 3, "payments": 500, "__consumer_offsets": 50})
    assert selected_partitions(cfg, admin, 5.0) == 13
    assert selected_partitions(cfg, _Admin({}, fail=True), 5.0) is None
