"""The catch-up's producer takes the worker's batch fitting (config/librdkafka.py fitted_to_topics)."""

from types import SimpleNamespace

from mirror_worker.config.librdkafka import producer_settings
from spark_jobs.catchup.job import copy_settings
from spark_jobs.common.job_config import JobTarget


def _producer(settings: dict, limits: dict | None) -> dict:
    target = JobTarget("src:9092", "dst:9092", ("t",),
                       destination_settings=producer_settings({"bootstrap.servers": "dst:9092", **settings}, "test",
                                                              10_000))
    args = SimpleNamespace(no_commit=True, progress_interval_s=10.0)
    return copy_settings(target, args, ("src-id", "dst-id"), {}, None, limits).producer


def test_batches_grow_to_what_the_destination_topics_take_and_requests_carry_them():
    producer = _producer({}, {"mirror.t": 8_388_608})
    assert producer["batch.size"] == str(8_388_608 - 8_388_608 // 64)
    assert producer["message.max.bytes"] == str(8_388_608 + 64 * 1024)


def test_a_named_batch_size_is_only_lowered_and_a_named_message_max_bytes_kept():
    producer = _producer({"batch.size": "500000", "message.max.bytes": "2000000"}, {"mirror.t": 8_388_608})
    assert (producer["batch.size"], producer["message.max.bytes"]) == ("500000", "2000000")
    assert _producer({"batch.size": "500000"}, {"mirror.t": 65_536})["batch.size"] == str(65_536 - 1024)


def test_before_any_topic_is_known_the_default_batch():
    producer = _producer({}, None)
    assert producer["batch.size"] == "1032204"
    assert "message.max.bytes" not in producer
