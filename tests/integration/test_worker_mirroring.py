"""The mirror worker on the real stack: fidelity, topic selection, discovery, metrics, heartbeats."""

from __future__ import annotations

import json
import os
import signal
import time
import urllib.request
from pathlib import Path

import pytest

from tests.kafka_util import create_topic, produce, topic_exists
from tests.worker_util import (
    WorkerProcess, by_partition, committed_offsets, read_topic, record_tuple, wait_for_count, write_mirror_spec,
    write_properties,
)

pytestmark = pytest.mark.integration


@pytest.fixture
def mirror_files(stack, tmp_path):
    """Consumer/producer .properties for source -> destination, with a fresh group per test."""

    def make(group: str, **producer_extra) -> list[str]:
        consumer = write_properties(tmp_path / "source.properties", {
            "bootstrap.servers": stack["source"].kafka.bootstrap_servers, "group.id": group,
        })
        producer = write_properties(tmp_path / "destination.properties", {
            "bootstrap.servers": stack["destination"].kafka.bootstrap_servers, **producer_extra,
        })
        return ["--consumer.config", consumer, "--producer.config", producer]

    return make


def _keyed_records(tag: str, count: int, partitions: int) -> list[dict]:
    # Recent timestamps: the brokers enforce the default 7-day retention every few seconds.
    base_ms = int(time.time() * 1000) - 3_600_000
    records = []
    for i in range(count):
        record = {
            "key": f"{tag}-key-{i % 17}".encode(),
            "value": f"{tag}-value-{i}".encode(),
            "partition": i % partitions,
            "timestamp": base_ms + i,
            "headers": [("seq", str(i).encode()), ("tag", tag.encode())],
        }
        if i % 50 == 49:
            record["value"] = None  # tombstones are mirrored as tombstones
        records.append(record)
    return records


def test_prefix_mirror_is_faithful_per_partition_and_picks_up_new_topics(stack, topic_name, mirror_files, tmp_path):
    src, dst = stack["source"].kafka.bootstrap_servers, stack["destination"].kafka.bootstrap_servers
    base = topic_name("fid")
    topics = [f"{base}.a", f"{base}.b"]
    ignored, internal = f"other-{base}", f"{base}.x-internal"
    for topic in topics + [ignored, internal]:
        create_topic(src, topic, partitions=3)
    for topic in topics + [ignored, internal]:
        produce(src, topic, _keyed_records(topic, 300, 3))

    worker = WorkerProcess(
        [*mirror_files(f"g-{base}"), "--whitelist", f"{base}\\..*", "--prefix", "dc1.", "--preserve.partitions",
         "--metrics.port", "0"],
        tmp_path,
    )
    try:
        worker.wait_started()
        for topic in topics:
            mirrored = wait_for_count(dst, f"dc1.{topic}", 300)
            source = by_partition(read_topic(src, topic))
            destination = by_partition(mirrored)
            assert sorted(destination) == [0, 1, 2]
            for partition in range(3):
                assert [record_tuple(m) for m in destination[partition]] == [record_tuple(m) for m in source[partition]]

        # A topic created after start is mirrored within 30 s.
        late = f"{base}.late"
        started = time.monotonic()
        create_topic(src, late, partitions=2)
        produce(src, late, _keyed_records(late, 40, 2))
        assert len(wait_for_count(dst, f"dc1.{late}", 40, timeout=30)) == 40
        assert time.monotonic() - started < 30

        # Non-matching and internal topics are left alone.
        assert not topic_exists(dst, f"dc1.{ignored}") and not topic_exists(dst, ignored)
        assert not topic_exists(dst, f"dc1.{internal}")

        # Metrics: consumed and produced counters per topic, committed offsets; heartbeats on the destination.
        url = worker.wait_for_log("metrics endpoint")["url"]
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            text = urllib.request.urlopen(url, timeout=5).read().decode()
            produced = _metric(text, "mirror_records_produced_total", topics[0])
            if produced == 300:
                break
            time.sleep(1)
        assert _metric(text, "mirror_records_consumed_total", topics[0]) == 300
        assert produced == 300
        assert "mirror_replication_latency_seconds" in text
        # The default topic is shared by every mirror on the stack: this one's beats are keyed `mirror/ALIAS`.
        heartbeats = [json.loads(m.value()) for m in read_topic(dst, "mirror.heartbeats")
                      if (m.key() or b"").startswith(b"mirror/")]
        assert any(h["mirror"] == "mirror" and h["source"] == "source" for h in heartbeats)
    finally:
        assert worker.terminate() == 0, worker.stderr
    assert committed_offsets(src, f"g-{base}", topics[0], 3) == {0: 100, 1: 100, 2: 100}


def _metric(text: str, name: str, topic: str) -> float:
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + "{") and f'topic="{topic}"' in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


def test_provenance_header_names_source_coordinates(stack, topic_name, mirror_files, tmp_path):
    src, dst = stack["source"].kafka.bootstrap_servers, stack["destination"].kafka.bootstrap_servers
    topic = topic_name("prov")
    create_topic(src, topic, partitions=2)
    produce(src, topic, [{"value": f"v{i}".encode(), "partition": i % 2, "headers": [("a", b"1")]} for i in range(10)])
    worker = WorkerProcess([*mirror_files(f"g-{topic}"), "--whitelist", topic, "--preserve.partitions",
                            "--provenance.headers"], tmp_path)
    try:
        worker.wait_started()
        mirrored = wait_for_count(dst, topic, 10)
    finally:
        assert worker.terminate() == 0
    for m in mirrored:
        headers = dict(m.headers())
        alias, cluster_id, source_topic, partition, offset = headers["mirror.source"].decode().split(":")
        assert (alias, source_topic, int(partition)) == ("source", topic, m.partition())
        assert int(offset) == m.offset() and cluster_id
        assert headers["a"] == b"1"


def test_several_source_clusters_into_one_destination(stack, topic_name, tmp_path):
    """`source` and (as a second source) `destination` itself, both into `destination` under a prefix."""
    src, dst = stack["source"].kafka.bootstrap_servers, stack["destination"].kafka.bootstrap_servers
    base = topic_name("multi")
    create_topic(src, f"{base}-one", partitions=2)
    create_topic(dst, f"{base}-two", partitions=2)
    produce(src, f"{base}-one", [{"value": f"one-{i}".encode(), "partition": i % 2} for i in range(50)])
    produce(dst, f"{base}-two", [{"value": f"two-{i}".encode(), "partition": i % 2} for i in range(60)])
    first = write_properties(tmp_path / "east.properties", {"bootstrap.servers": src, "group.id": f"g-{base}"})
    second = write_properties(tmp_path / "west.properties", {"bootstrap.servers": dst, "group.id": f"g-{base}"})
    producer = write_properties(tmp_path / "dest.properties", {"bootstrap.servers": dst})
    worker = WorkerProcess(["--consumer.config", first, "--consumer.config", second, "--producer.config", producer,
                            "--whitelist", f"{base}-.*", "--prefix", "agg.", "--preserve.partitions"], tmp_path)
    try:
        worker.wait_for_log("mirror started")
        one = wait_for_count(dst, f"agg.{base}-one", 50)
        two = wait_for_count(dst, f"agg.{base}-two", 60)
    finally:
        assert worker.terminate() == 0, worker.stderr
    assert sorted(m.value() for m in one) == sorted(f"one-{i}".encode() for i in range(50))
    assert sorted(m.value() for m in two) == sorted(f"two-{i}".encode() for i in range(60))


def test_record_too_large_halts_only_its_partition(stack, topic_name, mirror_files, tmp_path):
    src, dst = stack["source"].kafka.bootstrap_servers, stack["destination"].kafka.bootstrap_servers
    topic = topic_name("big")
    create_topic(src, topic, partitions=2)
    create_topic(dst, topic, partitions=2, config={"max.message.bytes": "2000"})
    records = [{"value": f"small-{i}".encode(), "partition": i % 2} for i in range(20)]
    records.insert(10, {"value": b"x" * 5000, "partition": 0})  # partition 0, offset 5
    produce(src, topic, records)
    group = f"g-{topic}"
    worker = WorkerProcess([*mirror_files(group), "--whitelist", topic, "--preserve.partitions"], tmp_path)
    try:
        worker.wait_started()
        mirrored = wait_for_count(dst, topic, 15)
        time.sleep(6)  # one more commit interval
        assert worker.proc.poll() is None  # the worker keeps mirroring the other partitions
        assert f"partition {topic}[0] of source 'source' halted at offset 5" in worker.stderr
        assert "exceeds destination" in worker.stderr and "max.message.bytes=2000" in worker.stderr
    finally:
        assert worker.terminate() == 0
    parts = by_partition(mirrored)
    assert [m.value() for m in parts[1]] == [f"small-{i}".encode() for i in range(1, 20, 2)]
    assert [m.value() for m in parts[0]] == [f"small-{i}".encode() for i in range(0, 10, 2)]  # up to the big one
    assert committed_offsets(src, group, topic, 2) == {0: 5, 1: 10}  # never past the halted record


def test_a_source_consumer_taking_records_over_4_mib_starts_on_a_source_of_many_partitions(stack, topic_name,
                                                                                           tmp_path):
    """A near source of more than 16 mirrored partitions gets 4 MiB fetch responses (config/fetch_sizes.py), a far one
    responses sized by its records, from 4 MiB: librdkafka refuses a consumer whose fetch.max.bytes is under its
    message.max.bytes, and the worker could not make its consumer when the source's settings took records of 10 MB.
    The response now never goes under the consumer's message.max.bytes."""
    src, dst = stack["source"].kafka.bootstrap_servers, stack["destination"].kafka.bootstrap_servers
    topic = topic_name("wide-large")
    create_topic(src, topic, partitions=20)
    produce(src, topic, [{"value": f"r-{i}".encode(), "partition": i % 20} for i in range(40)])
    consumer = write_properties(tmp_path / "source.properties", {
        "bootstrap.servers": src, "group.id": f"g-{topic}", "message.max.bytes": "10000000"})
    producer = write_properties(tmp_path / "destination.properties", {"bootstrap.servers": dst})
    worker = WorkerProcess(["--consumer.config", consumer, "--producer.config", producer, "--whitelist", topic,
                            "--preserve.partitions"], tmp_path)
    try:
        worker.wait_started()  # before: "Failed to create consumer: `fetch.max.bytes` must be >= `message.max.bytes`"
        mirrored = wait_for_count(dst, topic, 40)
        sized = worker.wait_for_log("source consumer sized for its round trip", timeout=5)
    finally:
        worker.terminate()
    assert sorted(m.value() for m in mirrored) == sorted(f"r-{i}".encode() for i in range(40))
    assert sized["partitions"] == 20 and sized["fetch_max_bytes"] == 10_000_000, sized


def test_dead_letter_topic_is_opt_in_for_refused_records(stack, topic_name, mirror_files, tmp_path):
    src, dst = stack["source"].kafka.bootstrap_servers, stack["destination"].kafka.bootstrap_servers
    topic, dlq = topic_name("big"), topic_name("dlq")
    create_topic(src, topic)
    create_topic(dst, topic, config={"max.message.bytes": "2000"})
    create_topic(dst, dlq, config={"max.message.bytes": "100000"})
    produce(src, topic, [{"value": b"a"}, {"value": b"y" * 5000}, {"value": b"b"}])
    worker = WorkerProcess([*mirror_files(f"g-{topic}"), "--whitelist", topic, "--dead.letter.topic", dlq], tmp_path)
    try:
        worker.wait_started()
        mirrored = wait_for_count(dst, topic, 2)
        dead = wait_for_count(dst, dlq, 1)
    finally:
        assert worker.terminate() == 0
    assert [m.value() for m in mirrored] == [b"a", b"b"]
    assert dead[0].value() == b"y" * 5000
    headers = dict(dead[0].headers())
    assert headers["mirror.source"].decode().endswith(f":{topic}:0:1")
    assert b"max.message.bytes=2000" in headers["mirror.error"]


def test_num_streams_runs_worker_processes_in_one_group(stack, topic_name, mirror_files, tmp_path):
    src, dst = stack["source"].kafka.bootstrap_servers, stack["destination"].kafka.bootstrap_servers
    topic = topic_name("streams")
    create_topic(src, topic, partitions=4)
    produce(src, topic, [{"value": f"v{i}".encode(), "partition": i % 4} for i in range(2000)])
    group = f"g-{topic}"
    worker = WorkerProcess([*mirror_files(group), "--whitelist", topic, "--preserve.partitions", "--num.streams", "3",
                            "--max.procs", "2"], tmp_path)
    try:
        mirrored = wait_for_count(dst, topic, 2000)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            pids = set(worker.owned())
            if len(pids) == 2:
                break
            time.sleep(0.5)
        assert len(pids) == 2 and worker.pid not in pids  # --max.procs caps --num.streams
    finally:
        assert worker.terminate() == 0, worker.stderr
    assert sorted(m.value() for m in mirrored) == sorted(f"v{i}".encode() for i in range(2000))
    assert sum(committed_offsets(src, group, topic, 4).values()) == 2000


def test_num_streams_processes_stopped_while_they_start_stop_cleanly(stack, topic_name, mirror_files, tmp_path):
    """A stop sent to the parent and its children (as Airflow's to the process group, or Ctrl-C) as soon as
    the children exist: all exit cleanly, no traceback, none left behind. (The children are forked with
    the parent's handler installed; runner.run_processes blocks stops until a child has its own. This
    test rarely lands inside that window of a few ms, so it does not prove the blocking, only the stop.)"""
    topic = topic_name("streams-stop")
    create_topic(stack["source"].kafka.bootstrap_servers, topic, partitions=2)
    worker = WorkerProcess([*mirror_files(f"g-{topic}"), "--whitelist", topic, "--num.streams", "2",
                            "--max.procs", "2"], tmp_path)
    try:
        children = worker.wait_for_log("worker processes started", 30)["pids"]
        for pid in [worker.pid, *children]:
            os.kill(pid, signal.SIGTERM)
        assert worker.wait(30) == 0, worker.stderr
    finally:
        worker.stop_quietly()
    assert "Traceback" not in worker.stderr, worker.stderr
    for pid in children:
        assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2]


def _gone(pid: int) -> bool:
    return not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2]


def test_num_streams_children_stop_when_the_parent_is_killed(stack, topic_name, mirror_files, tmp_path):
    """kill -9 of the parent: its children stop too (they would otherwise go on mirroring where neither a
    pause nor the failover's stop, which signal the parent, reaches them)."""
    topic = topic_name("streams-orphans")
    create_topic(stack["source"].kafka.bootstrap_servers, topic, partitions=2)
    worker = WorkerProcess([*mirror_files(f"g-{topic}"), "--whitelist", topic, "--num.streams", "2",
                            "--max.procs", "2"], tmp_path)
    children = []
    try:
        children = worker.wait_for_log("worker processes started", 30)["pids"]
        worker.wait_for_log("partitions assigned", 60)
        worker.kill()
        deadline = time.monotonic() + 40  # a child's clean stop: within its shutdown timeout (25 s)
        while time.monotonic() < deadline and not all(_gone(pid) for pid in children):
            time.sleep(0.5)
        assert [pid for pid in children if not _gone(pid)] == []
        assert {e["pid"] for e in worker.logs() if e.get("msg") == "mirror stopped"} >= set(children)  # cleanly
    finally:
        for pid in children:
            if not _gone(pid):
                os.kill(pid, signal.SIGKILL)


@pytest.mark.parametrize("protocol", [{}, {"group.protocol": "consumer"}], ids=["classic", "kip848"])
def test_num_streams_processes_share_out_each_topic(stack, topic_name, tmp_path, protocol):
    """--num.streams 2 over a busy topic and an idle one: each process holds half of the busy topic, on the
    classic protocol and on KIP-848's. With the cooperative-sticky assignor (the default before), the
    process that joined second got the six partitions of the busy topic (first in name order) and the first
    kept the idle topic's six: one process copied everything (issue #14: two processes were 0.86x one at
    1 KiB); KIP-848's default assignor (uniform) did the same."""
    src = stack["source"].kafka.bootstrap_servers
    busy, idle = topic_name("a-busy"), topic_name("b-idle")
    create_topic(src, busy, partitions=6)
    create_topic(src, idle, partitions=6)
    produce(src, busy, [{"value": f"v{i}".encode(), "partition": i % 6} for i in range(3000)])
    consumer = write_properties(tmp_path / "source.properties", {"bootstrap.servers": src, "group.id": f"g-{busy}",
                                                                 **protocol})
    producer = write_properties(tmp_path / "destination.properties",
                                {"bootstrap.servers": stack["destination"].kafka.bootstrap_servers})
    worker = WorkerProcess(["--consumer.config", consumer, "--producer.config", producer, "--whitelist",
                            f"{busy}|{idle}", "--preserve.partitions", "--num.streams", "2", "--max.procs", "2"],
                           tmp_path)
    try:
        wait_for_count(stack["destination"].kafka.bootstrap_servers, busy, 3000)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # both processes have joined and the rebalance is over
            owned = worker.owned()
            if len(owned) == 2 and sum(len(parts) for parts in owned.values()) == 12:
                break
            time.sleep(0.5)
    finally:
        assert worker.terminate() == 0, worker.stderr
    busy_per_process = sorted(sum(p.startswith(f"{busy}[") for p in parts) for parts in owned.values())
    assert busy_per_process == [3, 3], owned


def test_preserve_order_and_fixed_topic_creation_from_the_spec(stack, topic_name, tmp_path):
    """4 source partitions into a destination created with 2 (topic-creation: fixed): each source
    partition lands whole and in order in partition (p mod 2)."""
    src, dst = stack["source"].kafka.bootstrap_servers, stack["destination"].kafka.bootstrap_servers
    topic = topic_name("order")
    create_topic(src, topic, partitions=4)
    produce(src, topic, [{"value": f"{i % 4}:{i // 4}".encode(), "partition": i % 4} for i in range(400)])
    spec = write_mirror_spec(tmp_path / "mirrors.yaml", stack, "ordered", topic, "o.", group_settings={
        "preserve-order": "true", "topic-creation": "{partitions: 2, replication-factor: 1}"})
    worker = WorkerProcess(["--config", str(spec), "--mirror", "ordered"], tmp_path)
    try:
        mirrored = wait_for_count(dst, f"o.{topic}", 400)
    finally:
        assert worker.terminate() == 0, worker.stderr
    parts = by_partition(mirrored)
    assert sorted(parts) == [0, 1]
    for dest_partition, messages in parts.items():
        seen: dict[int, list[int]] = {}
        for m in messages:
            source_partition, seq = map(int, m.value().decode().split(":"))
            assert source_partition % 2 == dest_partition
            seen.setdefault(source_partition, []).append(seq)
        assert seen == {sp: list(range(100)) for sp in range(dest_partition, 4, 2)}
    assert committed_offsets(src, "kafka-mirror.ordered", topic, 4) == {0: 100, 1: 100, 2: 100, 3: 100}
