"""Records deleted on the source before they were mirrored are detected and reported, never skipped silently."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.kafka_util import create_topic, produce
from tests.worker_util import WorkerProcess, read_topic, wait_for_count, write_properties

pytestmark = pytest.mark.integration


def _records(tag: str, count: int) -> list[dict]:
    return [{"key": f"k{i}".encode(), "value": f"{tag}-{i}".encode()} for i in range(count)]


def _worker(stack, tmp_path, topic: str, name: str, *extra: str) -> WorkerProcess:
    src, dst = stack["source"].kafka.bootstrap_servers, stack["destination"].kafka.bootstrap_servers
    consumer = write_properties(tmp_path / "source.properties", {
        "bootstrap.servers": src, "group.id": f"g-{topic}", "auto.offset.reset": "earliest",
    })
    producer = write_properties(tmp_path / "destination.properties", {"bootstrap.servers": dst})
    return WorkerProcess([
        "--consumer.config", consumer, "--producer.config", producer, "--whitelist", topic, "--prefix", "dl.",
        "--offset.commit.interval.ms", "500", *extra,
    ], tmp_path, name)


def _mirror_once(stack, tmp_path, topic: str, expected: int) -> None:
    worker = _worker(stack, tmp_path, topic, "first")
    try:
        got = wait_for_count(stack["destination"].kafka.bootstrap_servers, f"dl.{topic}", expected, timeout=60)
        assert len(got) == expected
        assert worker.terminate() == 0, worker.stderr[-2000:]
    finally:
        worker.stop_quietly()


def _loss_entries(worker: WorkerProcess, timeout: float = 60.0) -> list[dict]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        entries = [e for e in worker.logs() if e.get("msg") == "source data lost before it was mirrored"]
        if entries:
            return entries
        assert worker.proc.poll() is None, worker.stderr[-2000:]
        time.sleep(0.3)
    raise AssertionError(f"no data-loss report within {timeout}s: {worker.stderr[-2000:]}")


def _truncate(bootstrap: str, topic: str, before: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.delete_records([TopicPartition(topic, 0, before)]).values():
        assert future.result(30).low_watermark == before


def test_retention_truncation_past_the_position_halts_and_is_reported(stack, tmp_path, topic_name):
    src, dst = stack["source"].kafka.bootstrap_servers, stack["destination"].kafka.bootstrap_servers
    topic = topic_name("trunc")
    create_topic(src, topic, partitions=1)
    produce(src, topic, _records("a", 100))
    _mirror_once(stack, tmp_path, topic, 100)
    produce(src, topic, _records("b", 100))
    _truncate(src, topic, 150)  # what retention does to a lagging mirror: offsets 100..149 are gone

    worker = _worker(stack, tmp_path, topic, "halting")
    try:
        (entry,) = _loss_entries(worker)
        time.sleep(3)  # a skipping mirror would have copied 150..199 by now
        mirrored = read_topic(dst, f"dl.{topic}")
        assert worker.proc.poll() is None
    finally:
        worker.stop_quietly()
    assert entry["kind"] == "truncated" and entry["action"] == "partition halted"
    assert f"{topic}[0]: records 100..149 were deleted from the source" in entry["reason"]
    assert f"records 100..149 were deleted from the source (retention) before they were mirrored" in worker.stderr
    assert len(mirrored) == 100  # nothing after the gap was copied as if nothing happened


def test_truncation_with_opt_in_reset_resumes_at_the_earliest_record(stack, tmp_path, topic_name):
    src, dst = stack["source"].kafka.bootstrap_servers, stack["destination"].kafka.bootstrap_servers
    topic = topic_name("trunc-reset")
    create_topic(src, topic, partitions=1)
    produce(src, topic, _records("a", 50))
    _mirror_once(stack, tmp_path, topic, 50)
    produce(src, topic, _records("b", 100))
    _truncate(src, topic, 120)

    worker = _worker(stack, tmp_path, topic, "resetting", "--on.data.loss", "reset")
    try:
        (entry,) = _loss_entries(worker)
        mirrored = wait_for_count(dst, f"dl.{topic}", 80, timeout=60)
        assert worker.terminate() == 0, worker.stderr[-2000:]
    finally:
        worker.stop_quietly()
    assert entry["kind"] == "truncated" and entry["action"] == "resuming at offset 120 (on_data_loss=reset)"
    values = [m.value() for m in mirrored]
    assert values == [f"a-{i}".encode() for i in range(50)] + [f"b-{i}".encode() for i in range(70, 100)]


def _recreate(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.delete_topics([topic])[topic].result(30)
    deadline = time.monotonic() + 60
    while True:
        try:
            admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
            return
        except KafkaException:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def test_topic_recreated_under_a_running_mirror_is_detected_and_halts(stack, tmp_path, topic_name):
    src, dst = stack["source"].kafka.bootstrap_servers, stack["destination"].kafka.bootstrap_servers
    topic = topic_name("recreated")
    create_topic(src, topic, partitions=1)
    produce(src, topic, _records("old", 40))
    worker = _worker(stack, tmp_path, topic, "running")
    try:
        assert len(wait_for_count(dst, f"dl.{topic}", 40, timeout=60)) == 40
        _recreate(src, topic)
        # Fewer records than the old position first: a fetcher that carried on at offset 40 of the new
        # topic finds nothing before the worker's topic-id check (every topic refresh) sees the new topic.
        # Then more than the old position: offsets alone would carry on at 40 and skip new-0..new-39.
        produce(src, topic, _records("new", 10))
        entries = _loss_entries(worker, timeout=90)
        produce(src, topic, _records("newer", 50))
        time.sleep(3)
        mirrored = read_topic(dst, f"dl.{topic}")
        assert worker.proc.poll() is None
    finally:
        worker.stop_quietly()
    assert {e["kind"] for e in entries} <= {"recreated", "beyond_end"}
    assert entries[0]["action"] == "partition halted"
    assert any(e["msg"] == "source topic deleted and recreated" for e in worker.logs()) or \
        entries[0]["kind"] == "beyond_end"
    assert len(mirrored) == 40  # nothing of the new topic was taken for the continuation of the old one
