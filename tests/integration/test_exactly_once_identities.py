"""Exactly-once identities on the real stack: two mirrors that write different destination topics never
share a transactional id or a position, two that would write the same destination partition are refused at
start, and positions kept under the old (per mirror and alias) group are still found."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from tests.kafka_util import commit_offsets, create_topic, produce
from tests.worker_util import WorkerProcess, committed_offsets, read_topic, wait_for_count, write_properties

pytestmark = pytest.mark.integration

PARTITIONS = 2


def _datacenter(tmp_path: Path, folder: str, src: str, dst: str, topic: str, prefix: str) -> list[str]:
    """A mirror as a new user writes it: its own folder's `source.properties`, default --name and alias."""
    home = tmp_path / folder
    home.mkdir()
    consumer = write_properties(home / "source.properties", {
        "bootstrap.servers": src, "group.id": f"{folder}-{topic}", "auto.offset.reset": "earliest",
    })
    producer = write_properties(home / "destination.properties", {"bootstrap.servers": dst})
    return ["--consumer.config", consumer, "--producer.config", producer, "--whitelist", topic,
            "--prefix", prefix, "--preserve.partitions", "--exactly.once", "--offset.commit.interval.ms", "500"]


def _records(tag: str, count: int) -> list[dict]:
    return [{"key": f"k{i}".encode(), "value": f"{tag}-{i}".encode(), "partition": i % PARTITIONS}
            for i in range(count)]


def test_two_datacenters_into_one_cluster_do_not_fence_each_other(stack, tmp_path, topic_name):
    """dc1 and dc2 each mirror their `orders` (here: one topic of the stack's source, read by two mirrors with
    their own groups) into the aggregate cluster under their own prefix, both as `--name mirror`, alias
    `source`: each copies every record exactly once and neither is fenced or halted by the other."""
    src, dst = stack["source"].kafka.bootstrap_servers, stack["destination"].kafka.bootstrap_servers
    topic = topic_name("orders")
    create_topic(src, topic, partitions=PARTITIONS)
    produce(src, topic, _records("first", 100))
    dc1 = WorkerProcess(_datacenter(tmp_path, "dc1", src, dst, topic, "dc1."), tmp_path, "dc1")
    dc2 = None
    try:
        assert len(wait_for_count(dst, f"dc1.{topic}", 100, timeout=90)) == 100
        dc2 = WorkerProcess(_datacenter(tmp_path, "dc2", src, dst, topic, "dc2."), tmp_path, "dc2")
        assert len(wait_for_count(dst, f"dc2.{topic}", 100, timeout=90)) == 100, dc2.stderr[-2000:]
        produce(src, topic, _records("second", 100))
        for prefix, worker in (("dc1.", dc1), ("dc2.", dc2)):
            copied = wait_for_count(dst, f"{prefix}{topic}", 200, timeout=60)
            assert worker.proc.poll() is None, worker.stderr[-2000:]
            assert sorted(m.value() for m in copied) == sorted(r["value"] for r in _records("first", 100)
                                                                + _records("second", 100))
        assert not [e for w in (dc1, dc2) for e in w.logs() if e.get("msg") == "partition halted"]
        assert dc1.terminate() == 0, dc1.stderr[-2000:]
        assert dc2.terminate() == 0, dc2.stderr[-2000:]
    finally:
        for worker in (dc1, dc2):
            if worker is not None:
                worker.stop_quietly()


def test_a_second_mirror_into_the_same_destination_partitions_is_refused(stack, tmp_path, topic_name):
    src, dst = stack["source"].kafka.bootstrap_servers, stack["destination"].kafka.bootstrap_servers
    topic = topic_name("orders")
    create_topic(src, topic, partitions=PARTITIONS)
    produce(src, topic, _records("first", 50))
    first = WorkerProcess(_datacenter(tmp_path, "a", src, dst, topic, "agg.") + ["--name", "a"], tmp_path, "a")
    second = None
    try:
        assert len(wait_for_count(dst, f"agg.{topic}", 50, timeout=90)) == 50
        second = WorkerProcess(_datacenter(tmp_path, "b", src, dst, topic, "agg.") + ["--name", "b"], tmp_path, "b")
        assert second.wait(60) == 2, second.stderr[-2000:]
        line = second.stderr.strip()
        assert "\n" not in line
        assert f"agg.{topic}[" in line and f"group a-{topic}" in line and "exactly-once" in line, line
        assert first.proc.poll() is None, first.stderr[-2000:]
        assert len(read_topic(dst, f"agg.{topic}")) == 50  # nothing written twice
    finally:
        for worker in (first, second):
            if worker is not None:
                worker.stop_quietly()


def test_positions_of_the_old_group_are_found_after_an_upgrade(stack, tmp_path, topic_name):
    """A deployment mirrored with the old identities keeps its positions: the worker starts from them (and
    not from the source group or the reset policy), then commits them to the new group."""
    src, dst = stack["source"].kafka.bootstrap_servers, stack["destination"].kafka.bootstrap_servers
    topic = topic_name("orders")
    create_topic(src, topic, partitions=PARTITIONS)
    produce(src, topic, _records("old", 100))
    create_topic(dst, f"up.{topic}", partitions=PARTITIONS)
    # What the old worker left: positions 30 and 20 in its group kafka-mirror-eos.<mirror>.<alias>.
    commit_offsets(dst, f"up.{topic}", "kafka-mirror-eos.mirror.source", {0: 30, 1: 20})
    worker = WorkerProcess(_datacenter(tmp_path, "up", src, dst, topic, "up."), tmp_path, "up")
    try:
        copied = wait_for_count(dst, f"up.{topic}", 50, timeout=90)
        assert sorted(m.value() for m in copied) == sorted(
            r["value"] for i, r in enumerate(_records("old", 100)) if i // PARTITIONS >= (30, 20)[i % PARTITIONS])
        deadline = time.monotonic() + 30
        while committed_offsets(dst, "kafka-mirror-eos", f"up.{topic}", PARTITIONS) != {0: 50, 1: 50}:
            assert time.monotonic() < deadline, "the positions did not move into the new group"
            time.sleep(0.5)
        assert worker.terminate() == 0, worker.stderr[-2000:]
    finally:
        worker.stop_quietly()
