"""Spark catch-up on the real stack: 100k+ records copied, handed over to the worker with no gap and
no overlap, a rerun copies nothing, and bad input exits 2 with one line."""

from __future__ import annotations

import json
import time

import pytest
from confluent_kafka import Producer

from tests.catchup_util import catchup_summary, run_catchup
from tests.kafka_util import create_topic, produce_at
from tests.worker_util import WorkerProcess, by_partition, committed_offsets, read_topic, wait_for_count, write_properties

pytestmark = [pytest.mark.integration, pytest.mark.spark]

PARTITIONS = 6


def _produce(bootstrap: str, topic: str, start: int, count: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1_000_000,
                         "enable.idempotence": True, "queue.buffering.max.messages": 500_000})
    for i in range(start, start + count):
        producer.produce(topic, f"value-{i:07d}".encode(), f"key-{i % 1000}".encode(), i % PARTITIONS,
                         headers=[("n", str(i).encode())])
        if i % 10_000 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0


def test_catchup_then_worker_continues_without_gap_or_overlap(stack, topic_name, tmp_path):
    src, dst = stack["source"].kafka.bootstrap_servers, stack["destination"].kafka.bootstrap_servers
    topic = topic_name("backlog")
    group = f"g-{topic}"
    create_topic(src, topic, partitions=PARTITIONS)
    _produce(src, topic, 0, 120_000)

    summary_file = tmp_path / "summary.json"
    # Spark copies every range (the driver copies none while Spark starts): the Spark-only path, its tasks'
    # progress lines and timings (ranges split with the driver: test_catchup_driver.py).
    result = run_catchup("--source.bootstrap.servers", src, "--destination.bootstrap.servers", dst,
                      "--topics", topic, "--group.id", group, "--prefix", "cu.", "--summary", str(summary_file),
                      "--progress-interval-s", "0.2", "--driver-copy-limit", "0")
    assert result.returncode == 0, result.stderr[-3000:]
    summary = catchup_summary(result)
    assert summary["records"] == 120_000
    assert json.loads(summary_file.read_text()) == summary
    assert [(r["partition"], r["start"], r["end"], r["copied"]) for r in summary["ranges"]] == [
        (p, 0, 20_000, 20_000) for p in range(PARTITIONS)]
    assert summary["spark_startup_s"] > 0 and 0 < summary["copy_phase_s"] < summary["seconds"]
    assert summary["copy_phase_msgs_per_s"] > summary["msgs_per_s"] > 0  # the copy phase leaves Spark's start-up out
    # Progress: a line per task when it is done (and while it runs), the whole job's from the driver.
    done = [json.loads(line.split("catchup: ", 1)[1]) for line in result.stderr.splitlines()
            if line.startswith("catchup: {") and '"partition done"' in line]
    assert sorted((e["partition"], e["copied"], e["offsets_left"]) for e in done) == [
        (p, 20_000, 0) for p in range(PARTITIONS)]
    overall = [json.loads(line.split(" spark_jobs.catchup ", 1)[1]) for line in result.stdout.splitlines()
               if '"event": "catch-up progress"' in line]
    assert overall and overall[-1]["offsets"] == 120_000 and 0 <= overall[-1]["copied"] <= 120_000
    assert committed_offsets(src, group, topic, PARTITIONS) == {p: 20_000 for p in range(PARTITIONS)}
    assert f"catchup: {topic}[0] copied 20000 records up to offset 20000" in result.stderr

    rerun = run_catchup("--source.bootstrap.servers", src, "--destination.bootstrap.servers", dst,
                     "--topics", topic, "--group.id", group, "--prefix", "cu.")
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert catchup_summary(rerun)["records"] == 0  # nothing copied twice

    _produce(src, topic, 120_000, 6_000)  # arrives after the catch-up: the worker's part
    consumer = write_properties(tmp_path / "source.properties", {"bootstrap.servers": src, "group.id": group})
    producer = write_properties(tmp_path / "destination.properties", {"bootstrap.servers": dst})
    worker = WorkerProcess(["--consumer.config", consumer, "--producer.config", producer, "--whitelist", topic,
                            "--prefix", "cu.", "--preserve.partitions"], tmp_path)
    try:
        mirrored = wait_for_count(dst, f"cu.{topic}", 126_000, timeout=180)
    finally:
        assert worker.terminate() == 0, worker.stderr

    source = by_partition(read_topic(src, topic, timeout=60))
    destination = by_partition(mirrored)
    for partition in range(PARTITIONS):
        expected = [(m.key(), m.value(), m.headers(), m.timestamp()) for m in source[partition]]
        got = [(m.key(), m.value(), m.headers(), m.timestamp()) for m in destination[partition]]
        assert got == expected  # record by record: nothing missing, nothing twice, same order


def test_catchup_keeps_timestamps_ahead_of_the_destination_and_at_the_epoch(stack, topic_name, tmp_path):
    """Issue 43 defects 4 and 9, the catch-up's side: a source that takes any timestamp holds a record stamped two
    hours ahead, and one stamped at the epoch. The catch-up creates the destination topic as the worker does
    (taking what the source took: created at Kafka 4's default it refused the record and the job failed), and
    the epoch record goes out 1 ms after the epoch, not at the time it was copied."""
    src, dst = stack["source"].kafka.bootstrap_servers, stack["destination"].kafka.bootstrap_servers
    topic, accepts_any = topic_name("cutimes"), "9223372036854775807"
    create_topic(src, topic, partitions=1, config={"message.timestamp.after.max.ms": accepts_any})
    now_ms = int(time.time() * 1000)
    stamps = [now_ms, now_ms + 2 * 3_600_000, 0]
    produce_at(src, topic, 0, [(f"r-{i}", stamp) for i, stamp in enumerate(stamps)])
    result = run_catchup("--source.bootstrap.servers", src, "--destination.bootstrap.servers", dst,
                         "--topics", topic, "--group.id", f"g-{topic}", "--prefix", "cu.")
    assert result.returncode == 0, result.stderr[-3000:]
    mirrored = wait_for_count(dst, f"cu.{topic}", 3, timeout=60)
    assert [(m.value(), m.timestamp()[1]) for m in mirrored] == [
        (b"r-0", now_ms), (b"r-1", now_ms + 2 * 3_600_000), (b"r-2", 1)]


def test_catchup_refuses_while_the_mirror_runs(stack, topic_name, tmp_path):
    src, dst = stack["source"].kafka.bootstrap_servers, stack["destination"].kafka.bootstrap_servers
    topic = topic_name("busy")
    group = f"g-{topic}"
    # _produce writes to PARTITIONS partitions: with 2, a record for partition 2 failed at produce() whenever the
    # producer already knew the topic (a full run, 2026-12-01), and was dropped unseen when it did not.
    create_topic(src, topic, partitions=PARTITIONS)
    _produce(src, topic, 0, 100)
    consumer = write_properties(tmp_path / "source.properties", {"bootstrap.servers": src, "group.id": group})
    producer = write_properties(tmp_path / "destination.properties", {"bootstrap.servers": dst})
    worker = WorkerProcess(["--consumer.config", consumer, "--producer.config", producer, "--whitelist", topic],
                           tmp_path)
    try:
        worker.wait_started()
        worker.wait_for_log("partitions assigned")  # a member of the group: "mirror started" comes before the join
        result = run_catchup("--source.bootstrap.servers", src, "--destination.bootstrap.servers", dst,
                          "--topics", topic, "--group.id", group)
    finally:
        assert worker.terminate() == 0
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"catchup: mirror group {group!r} has 1 active member(s): stop the mirror's workers before a catch-up"
    ]


@pytest.mark.parametrize("case", ["unknown topic", "unreachable", "bad offsets", "bad timestamp", "missing group"])
def test_catchup_bad_input(stack, case):
    src, dst = stack["source"].kafka.bootstrap_servers, stack["destination"].kafka.bootstrap_servers
    args = {
        "unknown topic": (["--source.bootstrap.servers", src, "--destination.bootstrap.servers", dst,
                           "--topics", "no-such-topic-xyz", "--group.id", "g"],
                          "catchup: unknown topic 'no-such-topic-xyz' on the source cluster"),
        "unreachable": (["--source.bootstrap.servers", "127.0.0.1:1", "--destination.bootstrap.servers", dst,
                         "--topics", "t", "--group.id", "g"],
                        "catchup: source cluster unreachable at 127.0.0.1:1 within 10s"),
        "bad offsets": (["--source.bootstrap.servers", src, "--destination.bootstrap.servers", dst,
                         "--topics", "t", "--group.id", "g", "--from-offsets", "t:x:1"],
                        "catchup: bad --from-offsets entry 't:x:1': expected topic:partition:offset"),
        "bad timestamp": (["--source.bootstrap.servers", src, "--destination.bootstrap.servers", dst,
                           "--topics", "t", "--group.id", "g", "--from-timestamp", "yesterday"],
                          "catchup: bad timestamp 'yesterday': use epoch milliseconds or ISO-8601"),
        "missing group": (["--source.bootstrap.servers", src, "--destination.bootstrap.servers", dst, "--topics", "t"],
                          "catchup: --group.id is required (the mirror's consumer group), or --no-commit"),
    }[case]
    result = run_catchup(*args[0])
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(args[1]), result.stderr
