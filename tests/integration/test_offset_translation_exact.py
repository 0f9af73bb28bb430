"""Failover at any lag on the real stack: translate-offsets --apply, then count what a consumer re-reads.

A 6-partition topic is mirrored with provenance headers and sparse syncs (the whole backlog is mirrored
between two syncs). Groups committed at 10 %, 50 % and 90 % of each partition fail over with --apply;
a consumer of the destination group then reads from the applied offsets to the end, and the test counts
records re-read (source offset below the committed one) and records missed (at or above it, not read).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition

from devstack.paths import ROOT
from tests.kafka_util import create_topic, produce
from tests.worker_util import WorkerProcess, read_topic, wait_for_count, write_mirror_spec

pytestmark = pytest.mark.integration

PARTITIONS = 6
PER_PARTITION = 2_000
FRACTIONS = (0.1, 0.5, 0.9)


def _spec(path: Path, stack, mirror: str, topic: str, commit_interval_s: float) -> Path:
    return write_mirror_spec(path, stack, mirror, topic, prefix="x.", **{
        "preserve-partitions": "true", "provenance-headers": "true", "commit-interval-s": commit_interval_s,
    })


def _produce_backlog(src: str, topic: str) -> None:
    # The value names the source position, so a destination reader can tell what it read without headers.
    produce(src, topic, [{"value": f"p{p}-{i}".encode(), "partition": p}
                         for i in range(PER_PARTITION) for p in range(PARTITIONS)])


def _commit_on_source(src: str, topic: str, group: str, positions: dict[int, int]) -> None:
    consumer = Consumer({"bootstrap.servers": src, "group.id": group, "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[TopicPartition(topic, p, o) for p, o in positions.items()], asynchronous=False)
    finally:
        consumer.close()


def _apply(spec: Path, mirror: str, group: str) -> dict:
    result = subprocess.run([sys.executable, "-m", "mirror_worker", "translate-offsets", "--config", str(spec),
                             "--mirror", mirror, "--group", group, "--apply"],
                            cwd=ROOT, capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def _read_as_group(dst: str, topic: str, group: str) -> dict[int, list[int]]:
    """Source offsets (from the values) of what `group` reads on the destination from its offsets to the end."""
    consumer = Consumer({"bootstrap.servers": dst, "group.id": group, "auto.offset.reset": "error",
                         "enable.auto.commit": False, "enable.partition.eof": True})
    try:
        consumer.subscribe([topic])
        read: dict[int, list[int]] = {p: [] for p in range(PARTITIONS)}
        done: set[int] = set()
        deadline = time.monotonic() + 90
        while len(done) < PARTITIONS and time.monotonic() < deadline:
            for msg in consumer.consume(1000, 1.0):
                if msg.error():
                    assert msg.error().code() == -191, msg.error().str()  # only _PARTITION_EOF
                    done.add(msg.partition())
                    continue
                partition, offset = msg.value().decode().split("-")
                assert int(partition[1:]) == msg.partition()
                read[msg.partition()].append(int(offset))
        assert len(done) == PARTITIONS, "destination partitions not read to their end"
        return read
    finally:
        consumer.close()


def _fail_over(stack, spec: Path, mirror: str, topic: str, fraction: float) -> tuple[int, int, dict]:
    """(records re-read, records missed, the report) for a group committed at `fraction` of every partition."""
    src, dst = stack["source"].kafka.bootstrap_servers, stack["destination"].kafka.bootstrap_servers
    group = f"app-{int(fraction * 100)}-{topic}"
    committed = {p: int(PER_PARTITION * fraction) for p in range(PARTITIONS)}
    _commit_on_source(src, topic, group, committed)
    document = _apply(spec, mirror, group)
    assert document["applied"] is True and document["untranslated"] == [], document
    read = _read_as_group(dst, f"x.{topic}", group)
    reread = sum(1 for p, offsets in read.items() for o in offsets if o < committed[p])
    missed = sum(len(set(range(committed[p], PER_PARTITION)) - set(read[p])) for p in range(PARTITIONS))
    return reread, missed, document


def test_groups_at_any_lag_reread_nothing_after_a_clean_run(stack, topic_name, tmp_path):
    src, dst = stack["source"].kafka.bootstrap_servers, stack["destination"].kafka.bootstrap_servers
    topic = topic_name("xc")
    mirror = f"xc-{topic}"
    spec = _spec(tmp_path / "mirrors.yaml", stack, mirror, topic, commit_interval_s=60)
    create_topic(src, topic, partitions=PARTITIONS)
    _produce_backlog(src, topic)
    worker = WorkerProcess(["--config", str(spec), "--mirror", mirror], tmp_path)
    try:
        worker.wait_started()
        assert len(wait_for_count(dst, f"x.{topic}", PARTITIONS * PER_PARTITION)) == PARTITIONS * PER_PARTITION
        assert worker.terminate() == 0
    finally:
        worker.stop_quietly()

    figures = {}
    for fraction in FRACTIONS:
        reread, missed, document = _fail_over(stack, spec, mirror, topic, fraction)
        figures[fraction] = (reread, missed, sorted({o.get("method", "offset-sync") for o in document["offsets"]}))
    print(f"\nclean run, {PARTITIONS} partitions x {PER_PARTITION} records: "
          + "; ".join(f"group at {int(f * 100)}%: {r} re-read, {m} missed, method {meth}"
                      for f, (r, m, meth) in figures.items()))
    assert {f: (r, m) for f, (r, m, _) in figures.items()} == {f: (0, 0) for f in FRACTIONS}
