"""The worker's choices about a source consumer's settings (worker_streams.consumer_settings)."""

from mirror_worker.config.model import build_mirror_config
from mirror_worker.engine.streams import consumer_settings, incremental


def _config(consumer: dict | None = None, **settings):
    return build_mirror_config({"name": "m", "sources": [{"name": "east", "consumer": {
        "bootstrap.servers": "a:1", **(consumer or {})}}], "producer": {"bootstrap.servers": "b:1"}, "group_id": "g", "whitelist": "t",
        **settings})


def test_the_worker_picks_start_positions_itself_and_keeps_the_configured_reset_policy():
    config = _config({"auto.offset.reset": "earliest"})
    settings, reset_policy = consumer_settings(config, config.sources[0], 0)
    assert (settings["auto.offset.reset"], reset_policy) == ("error", "earliest")
    assert settings["group.id"] == config.group_id
    assert settings["partition.assignment.strategy"] == "roundrobin"
    assert "isolation.level" not in settings and "group.instance.id" not in settings
    assert not incremental(settings)


def test_a_source_naming_its_assignor_keeps_it():
    config = _config({"partition.assignment.strategy": "cooperative-sticky"})
    settings, _ = consumer_settings(config, config.sources[0], 0)
    assert settings["partition.assignment.strategy"] == "cooperative-sticky"
    assert incremental(settings)


def test_exactly_once_reads_committed_records_with_an_incremental_assignor():
    config = _config(delivery="exactly-once")
    settings, reset_policy = consumer_settings(config, config.sources[0], 0)
    assert settings["isolation.level"] == "read_committed"
    assert incremental(settings)
    assert reset_policy == "latest"  # librdkafka's default, when the source names none


def test_static_members_of_one_slot_get_an_id_per_stream_process():
    config = _config(**{"static_membership": True, "worker_slot": 3})
    ids = {consumer_settings(config, config.sources[0], index)[0]["group.instance.id"] for index in (0, 1)}
    assert len(ids) == 2


def test_statistics_only_when_metrics_are_served():
    config = _config()
    assert "statistics.interval.ms" not in consumer_settings(config, config.sources[0], 0)[0]
    config = _config(**{"metrics_port": 0})
    assert consumer_settings(config, config.sources[0], 0)[0]["statistics.interval.ms"] == "5000"


def test_only_a_far_source_whose_response_size_is_not_named_is_sampled():
    from mirror_worker.engine.streams import samples_records

    plain, named = _config().sources[0], _config({"fetch.max.bytes": "8388608"}).sources[0]
    assert samples_records(plain, 0.050)
    assert not samples_records(plain, 0.0008)  # near: its responses do not follow the records
    assert not samples_records(plain, None)  # no answer to the round trip: none to the sample either
    assert not samples_records(named, 0.050)


def test_the_sampled_record_size_reaches_the_consumer_settings():
    config = _config()
    small, _ = consumer_settings(config, config.sources[0], 0, 0.050, record_bytes=116)
    unsampled, _ = consumer_settings(config, config.sources[0], 0, 0.050)
    assert int(small["fetch.max.bytes"]) < int(unsampled["fetch.max.bytes"]) == 16 * 2**20
