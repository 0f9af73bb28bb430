"""Issue #17 h: exactly-once positions and the destination's offsets retention.

A private destination broker (offsets.retention.minutes=1, checked every second) stands in for a week of
`offsets.retention.minutes`. Two mirrors copy a topic each; one stays up and idles, the other is stopped.
Once the stopped mirror's positions have expired, the idle mirror still has its own, and a restart of it
copies nothing twice; the stopped mirror's restart halts its partitions with a clear error instead of
starting again from the source group or the reset policy.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition

from mirror_worker.exactly_once.positions import POSITIONS_GROUP
from tests.kafka_util import create_topic, private_kafka, produce
from tests.worker_util import WorkerProcess, loss_and_duplicates, read_topic, wait_for_count, write_mirror_spec

pytestmark = pytest.mark.integration

PARTITIONS = 2


@pytest.fixture(scope="module")
def short_retention_destination(tmp_path_factory):
    with private_kafka(tmp_path_factory.mktemp("short-retention"), **{
        "offsets.retention.minutes": "1", "offsets.retention.check.interval.ms": "1000",
    }) as node:
        yield node


def _spec(path: Path, stack, dst: str, name: str, topic: str) -> list[str]:
    write_mirror_spec(path, stack, name, topic, prefix="r.", destination=dst, delivery="exactly-once",
                      **{"commit-interval-s": 1})
    return ["--config", str(path), "--mirror", name]


def _positions(dst: str, mirror: str, topic: str) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": dst, "group.id": POSITIONS_GROUP,
                         "isolation.level": "read_committed"})
    try:
        committed = consumer.committed([TopicPartition(f"r.{topic}", p) for p in range(PARTITIONS)], timeout=10)
        return {tp.partition: tp.offset for tp in committed}
    finally:
        consumer.close()


def _records(topic: str, tag: str, count: int) -> list[dict]:
    return [{"value": f"{topic}-{tag}-{i}".encode(), "partition": i % PARTITIONS} for i in range(count)]


def test_positions_outlive_retention_while_idle_and_an_expired_one_halts(stack, short_retention_destination,
                                                                         tmp_path, topic_name):
    src, dst = stack["source"].kafka.bootstrap_servers, short_retention_destination.bootstrap_servers
    idle_topic, stopped_topic = topic_name("eos-idle"), topic_name("eos-stopped")
    idle_args = _spec(tmp_path / "idle.yaml", stack, dst, "idle", idle_topic)
    stopped_args = _spec(tmp_path / "stopped.yaml", stack, dst, "stopped", stopped_topic)
    for topic in (idle_topic, stopped_topic):
        create_topic(src, topic, partitions=PARTITIONS)
        produce(src, topic, _records(topic, "first", 40))
    workers = [WorkerProcess(idle_args, tmp_path, "idle"), WorkerProcess(stopped_args, tmp_path, "stopped")]
    try:
        idle, stopped = workers
        for worker, topic in ((idle, idle_topic), (stopped, stopped_topic)):
            worker.wait_started(90)
            assert len(wait_for_count(dst, f"r.{topic}", 40, timeout=90)) == 40
        time.sleep(2)  # the last transaction commits
        assert _positions(dst, "stopped", stopped_topic) == {0: 20, 1: 20}
        assert stopped.terminate() == 0, stopped.stderr[-2000:]

        # More than one retention period: the stopped mirror's positions expire (the broker's doing).
        deadline = time.monotonic() + 180
        while _positions(dst, "stopped", stopped_topic) != {0: -1001, 1: -1001}:
            assert time.monotonic() < deadline, "the broker never expired the stopped mirror's positions"
            time.sleep(2)
        time.sleep(5)
        assert idle.proc.poll() is None, idle.stderr[-2000:]
        assert _positions(dst, "idle", idle_topic) == {0: 20, 1: 20}

        # The idle mirror, restarted, goes on from its positions: nothing twice.
        assert idle.terminate() == 0, idle.stderr[-2000:]
        produce(src, idle_topic, _records(idle_topic, "second", 10))
        workers.append(idle := WorkerProcess(idle_args, tmp_path, "idle-again"))
        idle.wait_started(90)
        wait_for_count(dst, f"r.{idle_topic}", 50, timeout=90)
        time.sleep(3)
        missing, duplicates, _ = loss_and_duplicates(read_topic(src, idle_topic), read_topic(dst, f"r.{idle_topic}"))
        assert (missing, duplicates) == ([], 0)

        # The stopped mirror, restarted: its positions are gone, so its partitions halt; nothing is copied.
        produce(src, stopped_topic, _records(stopped_topic, "second", 10))
        workers.append(stopped := WorkerProcess(stopped_args, tmp_path, "stopped-again"))
        stopped.wait_for_log("start positions", 90)
        deadline = time.monotonic() + 30
        while len([e for e in stopped.logs() if e.get("msg") == "partition halted"]) < PARTITIONS:
            assert time.monotonic() < deadline, f"no halt: {stopped.stderr[-2000:]}"
            time.sleep(0.5)
        halts = sorted(e["partition"] for e in stopped.logs() if e.get("msg") == "partition halted")
        assert halts == [0, 1]
        for partition in range(PARTITIONS):
            assert f"partition {stopped_topic}[{partition}] of source 'east' halted" in stopped.stderr
        assert "exactly-once position is gone" in stopped.stderr
        time.sleep(3)
        assert len(read_topic(dst, f"r.{stopped_topic}")) == 40
        assert stopped.proc.poll() is None
        assert stopped.terminate() == 0, stopped.stderr[-2000:]
    finally:
        for worker in workers:
            worker.stop_quietly()
