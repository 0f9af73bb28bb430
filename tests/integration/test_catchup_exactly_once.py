"""Catch-up on an exactly-once mirror, then the worker: every source record exactly once on the destination.

An exactly-once worker resumes from its positions on the destination (mirror_worker/exactly_once.py), not
from the source group: a catch-up that moved only the source group's offsets left the worker's older
position behind, and the worker copied the whole backlog a second time.
"""

from __future__ import annotations

import time

import pytest

from mirror_worker.exactly_once import positions_group
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

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": positions_group(mirror, "east"),
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


def _fast_produce(bootstrap: str, topic: str, count: int) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1_000_000,
                         "enable.idempotence": True, "queue.buffering.max.messages": 500_000})
    for i in range(count):
        while True:
            try:
                producer.produce(topic, f"v-{i:07d}".encode(), f"k{i % 50}".encode(), i % PARTITIONS)
                break
            except BufferError:
                producer.poll(0.05)
        if i % 10_000 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0


def test_a_worker_started_during_an_exactly_once_catchup_leaves_no_gap_and_no_duplicate(stack, topic_name, tmp_path):
    """The worker's transactional ids are the catch-up's: the worker fences the catch-up's tasks (their open
    transactions are aborted) and resumes from the positions they committed."""
    import subprocess
    import sys

    from devstack.paths import ROOT

    src, dst = stack["source"].kafka.bootstrap_servers, stack["destination"].kafka.bootstrap_servers
    topic = topic_name("eos-race")
    create_topic(src, topic, partitions=PARTITIONS)
    spec = write_mirror_spec(tmp_path / "mirrors.yaml", stack, "eosrace", topic, prefix="y.",
                             **{"delivery": "exactly-once", "preserve-partitions": "true",
                                "group-id": f"g-{topic}"})
    total = 450_000
    _fast_produce(src, topic, total)
    stderr = tmp_path / "catchup.stderr"
    with stderr.open("w") as sink:
        catchup = subprocess.Popen([sys.executable, "spark_jobs/catchup.py", "--config", str(spec), "--mirror",
                                    "eosrace", "--progress-interval-s", "0.5"], cwd=ROOT, stdout=subprocess.DEVNULL,
                                   stderr=sink, stdin=subprocess.DEVNULL)
    worker = None
    try:
        deadline = time.monotonic() + 180
        while '"partition progress"' not in stderr.read_text() and time.monotonic() < deadline:
            assert catchup.poll() is None, stderr.read_text()[-3000:]
            time.sleep(0.2)
        worker = WorkerProcess(["--config", str(spec), "--mirror", "eosrace"], tmp_path, "racer")
        worker.wait_for_log("start positions", timeout=90)
        overlapped = catchup.poll() is None  # the worker took its partitions while the catch-up copied
        rc = catchup.wait(300)
        mirrored = wait_for_count(dst, f"y.{topic}", total, timeout=240)
        time.sleep(3)  # a second copy of anything would show up now
        mirrored = read_topic(dst, f"y.{topic}", timeout=60)
        assert worker.terminate() == 0, worker.stderr[-2000:]
    finally:
        if catchup.poll() is None:
            catchup.kill()
        if worker is not None:
            worker.stop_quietly()
    assert overlapped, "the catch-up ended before the worker started: the test did not race them"
    # Fenced mid-copy, the catch-up fails (its uncommitted part is aborted); it may also have committed first.
    assert rc in (0, 1), stderr.read_text()[-3000:]
    source = read_topic(src, topic, timeout=60)
    missing, duplicates, ordered = loss_and_duplicates(source, mirrored)
    assert (len(missing), duplicates, ordered) == (0, 0, True)
