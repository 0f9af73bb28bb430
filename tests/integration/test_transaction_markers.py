"""Issue #17 g: a transaction's commit marker takes an offset that no record has. The mirror's committed
position must step over it, or a partition idle after a transaction never reaches lag 0 and retention
deleting that segment looks like data loss."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from mirror_airflow.lag.measure import measure_partitions
from mirror_worker.config.spec import select_mirror
from tests.kafka_util import create_topic
from tests.worker_util import WorkerProcess, wait_for_count, write_mirror_spec

pytestmark = pytest.mark.integration

RECORDS = 10
DELIVERY = pytest.mark.parametrize("delivery", ["at-least-once", "exactly-once"])


def _transactional_write(bootstrap: str, topic: str, count: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"tx-{topic}-{uuid.uuid4().hex[:6]}"})
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(count):
        producer.produce(topic, f"tx-{i}".encode(), f"k{i}".encode())
    producer.commit_transaction(30)


def _mirror(stack, tmp_path, topic: str, delivery: str):
    name = f"m-{uuid.uuid4().hex[:8]}"
    spec = write_mirror_spec(tmp_path / f"{name}.yaml", stack, name, topic, prefix="tx.",
                             **{"delivery": delivery, "commit-interval-s": 0.5})
    return spec, select_mirror(spec, name)


def _sample(mirror, topic: str):
    [(_key, sample)] = [(k, s) for k, s in measure_partitions(mirror) if k[1] == topic]
    return sample


def _wait_caught_up(mirror, topic: str, high: int, timeout: float = 30.0):
    """The mirror's committed position once it reached `high`, or the last one seen."""
    deadline = time.monotonic() + timeout
    sample = _sample(mirror, topic)
    while sample.committed != high and time.monotonic() < deadline:
        time.sleep(0.5)
        sample = _sample(mirror, topic)
    return sample


def _caught_up_mirror(stack, tmp_path, topic_name, delivery: str):
    src, dst = stack["source"].kafka.bootstrap_servers, stack["destination"].kafka.bootstrap_servers
    topic = topic_name("txm")
    create_topic(src, topic, partitions=1)
    _transactional_write(src, topic, RECORDS)
    spec, mirror = _mirror(stack, tmp_path, topic, delivery)
    worker = WorkerProcess(["--config", str(spec), "--mirror", mirror.name], tmp_path, "first")
    try:
        worker.wait_started()
        assert len(wait_for_count(dst, f"tx.{topic}", RECORDS, timeout=60)) == RECORDS
        sample = _wait_caught_up(mirror, topic, RECORDS + 1)
        assert worker.terminate() == 0, worker.stderr[-2000:]
    finally:
        worker.stop_quietly()
    return topic, spec, mirror, sample


@DELIVERY
def test_idle_partition_after_a_transaction_shows_no_lag(stack, tmp_path, topic_name, delivery):
    _topic, _spec, _mirror_config, sample = _caught_up_mirror(stack, tmp_path, topic_name, delivery)
    # 10 records at offsets 0..9, the commit marker at 10: the end of the log is 11.
    assert sample.high == RECORDS + 1
    assert (sample.committed, sample.lag) == (RECORDS + 1, 0)


@DELIVERY
def test_retention_of_a_mirrored_transaction_is_not_data_loss(stack, tmp_path, topic_name, delivery):
    src = stack["source"].kafka.bootstrap_servers
    topic, spec, mirror, _sample_before = _caught_up_mirror(stack, tmp_path, topic_name, delivery)
    # What retention does to the mirrored segment: everything up to the end of the log is gone.
    admin = AdminClient({"bootstrap.servers": src})
    for future in admin.delete_records([TopicPartition(topic, 0, RECORDS + 1)]).values():
        assert future.result(30).low_watermark == RECORDS + 1

    worker = WorkerProcess(["--config", str(spec), "--mirror", mirror.name], tmp_path, "second")
    try:
        started = worker.wait_for_log("start positions")
        logs = worker.logs()
        assert worker.proc.poll() is None, worker.stderr[-2000:]
    finally:
        worker.stop_quietly()
    assert started["positions"] == [f"{topic}[0]@{RECORDS + 1}"]
    assert [e for e in logs if e.get("msg") in ("source data lost before it was mirrored", "partition halted")] == []
    assert "data loss" not in worker.stderr
