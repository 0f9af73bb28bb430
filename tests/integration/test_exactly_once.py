"""Exactly-once mode on the real stack: repeated kill -9 mid-stream, and read_committed readers see every
source record exactly once, in order per partition."""

from __future__ import annotations

import random
import time

import pytest
from confluent_kafka import Consumer, TopicPartition

from mirror_worker.exactly_once.positions import POSITIONS_GROUP
from tests.integration.test_consistency_check import run_check, zero_counts
from tests.integration.test_worker_faults import LiveProducer
from tests.kafka_util import create_topic
from tests.worker_util import (
    WorkerProcess, by_partition, loss_and_duplicates, read_topic, wait_for_count, write_properties,
)

pytestmark = pytest.mark.integration

PARTITIONS = 4


def _positions(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "isolation.level": "read_committed"})
    try:
        result = consumer.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=10)
        return {tp.partition: tp.offset for tp in result}
    finally:
        consumer.close()


@pytest.mark.spark  # checked by the consistency check
def test_ten_kill9_leave_every_record_exactly_once_in_order(stack, tmp_path, topic_name):
    src, dst = stack["source"].kafka.bootstrap_servers, stack["destination"].kafka.bootstrap_servers
    topic = topic_name("eos")
    create_topic(src, topic, partitions=PARTITIONS)
    consumer = write_properties(tmp_path / "source.properties", {
        "bootstrap.servers": src, "group.id": f"g-{topic}", "auto.offset.reset": "earliest",
        "session.timeout.ms": "6000", "heartbeat.interval.ms": "1000",
    })
    producer = write_properties(tmp_path / "destination.properties", {"bootstrap.servers": dst})
    args = [
        "--consumer.config", consumer, "--producer.config", producer, "--whitelist", topic, "--name", "eos",
        "--preserve.partitions", "--exactly.once", "--offset.commit.interval.ms", "500",
    ]
    live = LiveProducer(src, topic, total=24_000, rate=300, tag="eos")
    live.start()
    rng = random.Random(7)
    kills = 0
    workers = []
    try:
        while kills < 10:
            worker = WorkerProcess(args, tmp_path, f"eos-{kills}")
            workers.append(worker)
            worker.wait_for_log("start positions", timeout=90)
            time.sleep(rng.uniform(1.0, 3.0))  # mid-stream: transactions open, records in flight
            assert worker.proc.poll() is None, worker.stderr[-2000:]
            worker.kill()
            kills += 1
        live.finish()
        final = WorkerProcess(args, tmp_path, "eos-final")
        workers.append(final)
        final.wait_for_log("start positions", timeout=90)
        source = read_topic(src, topic)
        assert len(source) == 24_000
        mirrored = wait_for_count(dst, topic, len(source), timeout=180)
        time.sleep(2)  # anything beyond the expected count would show up as a duplicate now
        mirrored = read_topic(dst, topic)
        assert final.terminate() == 0, final.stderr[-2000:]
    finally:
        for worker in workers:
            worker.stop_quietly()

    missing, duplicates, ordered = loss_and_duplicates(source, mirrored)
    assert (len(missing), duplicates, ordered) == (0, 0, True)
    # preserve.partitions: each destination partition is its source partition, record for record.
    src_parts, dst_parts = by_partition(source), by_partition(mirrored)
    for partition in range(PARTITIONS):
        assert [m.value() for m in dst_parts[partition]] == [m.value() for m in src_parts[partition]]
    # The positions on the destination say exactly how far each source partition was mirrored.
    ends = {p: len(src_parts[p]) for p in range(PARTITIONS)}
    assert _positions(dst, POSITIONS_GROUP, topic) == ends

    # The nightly proof agrees: the aborted mirror transactions' records and the markers they left on the
    # destination are neither missing nor duplicates, and every partition is in order.
    check = run_check(stack, tmp_path, "--topics", topic, name="eos-check")
    assert check.rc == 0, check.stderr[-2000:]
    assert check.report["status"] == "ok"
    for partition in range(PARTITIONS):
        assert check.counts(topic, partition) == zero_counts(ends[partition])


def test_exactly_once_resumes_from_destination_positions_not_source_group(stack, tmp_path, topic_name):
    """The source group's offsets are only for monitoring: rewinding them does not make a duplicate."""
    from tests.kafka_util import produce

    src, dst = stack["source"].kafka.bootstrap_servers, stack["destination"].kafka.bootstrap_servers
    topic = topic_name("eos-pos")
    create_topic(src, topic, partitions=PARTITIONS)
    group = f"g-{topic}"
    consumer = write_properties(tmp_path / "source.properties", {
        "bootstrap.servers": src, "group.id": group, "auto.offset.reset": "earliest",
    })
    producer = write_properties(tmp_path / "destination.properties", {"bootstrap.servers": dst})
    args = [
        "--consumer.config", consumer, "--producer.config", producer, "--whitelist", topic, "--name", "eos2",
        "--exactly.once", "--offset.commit.interval.ms", "500",
    ]
    produce(src, topic, [{"key": f"k{i}".encode(), "value": f"first-{i}".encode()} for i in range(400)])
    worker = WorkerProcess(args, tmp_path, "eos2-a")
    try:
        assert len(wait_for_count(dst, topic, 400, timeout=60)) == 400
        assert worker.terminate() == 0, worker.stderr[-2000:]
    finally:
        worker.stop_quietly()
    # Rewind the source group to the beginning, as an operator might by mistake.
    rewind = Consumer({"bootstrap.servers": src, "group.id": group, "enable.auto.commit": False})
    try:
        rewind.commit(offsets=[TopicPartition(topic, p, 0) for p in range(PARTITIONS)], asynchronous=False)
    finally:
        rewind.close()
    produce(src, topic, [{"key": f"k{i}".encode(), "value": f"second-{i}".encode()} for i in range(100)])
    worker = WorkerProcess(args, tmp_path, "eos2-b")
    try:
        mirrored = wait_for_count(dst, topic, 500, timeout=60)
        time.sleep(2)
        mirrored = read_topic(dst, topic)
        assert worker.terminate() == 0, worker.stderr[-2000:]
    finally:
        worker.stop_quietly()
    values = sorted(m.value() for m in mirrored)
    assert len(values) == 500 and len(set(values)) == 500
