"""Catch-up on an exactly-once mirror, then the worker: every source record exactly once on the destination.

An exactly-once worker resumes from its positions on the destination (mirror_worker/exactly_once/transactions.py), not
from the source group: a catch-up that moved only the source group's offsets left the worker's older
position behind, and the worker copied the whole backlog a second time.
"""

from __future__ import annotations

import time

import pytest

from mirror_worker.exactly_once.positions import POSITIONS_GROUP
from tests.catchup_util import catchup_summary, run_catchup
from tests.kafka_util import create_topic, produce
from tests.worker_util import (
    WorkerProcess, by_partition, loss_and_duplicates, read_topic, wait_for_count, write_mirror_spec,
)

pytestmark = [pytest.mark.integration, pytest.mark.spark]

PARTITIONS = 3


def _records(start: int, count: int) -> list[dict]:
    return [{"key": f"k{i % 50}".encode(), "value": f"v-{i:06d}".encode(), "partition": i % PARTITIONS}
            for i in range(start, start + count)]


def _positions(bootstrap: str, mirror: str, topic: str) -> dict[int, int]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": POSITIONS_GROUP,
                         "isolation.level": "read_committed"})
    try:
        found = consumer.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=10)
        return {tp.partition: tp.offset for tp in found}
    finally:
        consumer.close()


def test_catchup_on_an_exactly_once_mirror_then_the_worker_copies_every_record_once(stack, topic_name, tmp_path):
    src, dst = stack["source"].kafka.bootstrap_servers, stack["destination"].kafka.bootstrap_servers
    topic = topic_name("eos-cu")
    create_topic(src, topic, partitions=PARTITIONS)
    spec = write_mirror_spec(tmp_path / "mirrors.yaml", stack, "eoscu", topic, prefix="x.",
                             **{"delivery": "exactly-once", "preserve-partitions": "true",
                                "group-id": f"g-{topic}"})
    args = ["--config", str(spec), "--mirror", "eoscu"]

    # 1. The worker mirrors a first batch: its positions on the destination are at 300 records.
    produce(src, topic, _records(0, 300))
    worker = WorkerProcess(args, tmp_path, "before")
    try:
        wait_for_count(dst, f"x.{topic}", 300, timeout=90)
        assert worker.terminate() == 0, worker.stderr[-2000:]
    finally:
        worker.stop_quietly()
    assert _positions(dst, "eoscu", f"x.{topic}") == {p: 100 for p in range(PARTITIONS)}

    # 2. A backlog builds while the mirror is stopped; the catch-up copies it.
    produce(src, topic, _records(300, 3_000))
    result = run_catchup("--config", str(spec), "--mirror", "eoscu")
    assert result.returncode == 0, result.stderr[-3000:]
    assert catchup_summary(result)["records"] == 3_000
    # The catch-up leaves the positions the worker resumes from where its copy ended.
    assert _positions(dst, "eoscu", f"x.{topic}") == {p: 1_100 for p in range(PARTITIONS)}

    # 3. The worker resumes and mirrors what arrives after: nothing copied twice, nothing skipped.
    produce(src, topic, _records(3_300, 300))
    worker = WorkerProcess(args, tmp_path, "after")
    try:
        wait_for_count(dst, f"x.{topic}", 3_600, timeout=120)
        time.sleep(3)  # a second copy of the backlog would show up now
        mirrored = read_topic(dst, f"x.{topic}")
        assert worker.terminate() == 0, worker.stderr[-2000:]
    finally:
        worker.stop_quietly()
    source = read_topic(src, topic)
    missing, duplicates, ordered = loss_and_duplicates(source, mirrored)
    assert (len(missing), duplicates, ordered) == (0, 0, True)
    src_parts, dst_parts = by_partition(source), by_partition(mirrored)
    for partition in range(PARTITIONS):
        assert [m.value() for m in dst_parts[partition]] == [m.value() for m in src_parts[partition]]
