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
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer

from devstack.paths import ROOT
from tests.kafka_util import commit_offsets, create_topic, produce
from tests.worker_util import WorkerProcess, wait_for_count, write_mirror_spec

pytestmark = pytest.mark.integration

PARTITIONS = 6
PER_PARTITION = 2_000
FRACTIONS = (0.1, 0.5, 0.9)


def _mirrored_topic(stack, topic_name, tmp_path: Path, kind: str, commit_interval_s: float,
                    delivery: str = "at-least-once") -> tuple[str, str, Path]:
    """(source topic, mirror name, spec) of a new PARTITIONS-partition topic mirrored to x.<topic> with
    provenance headers and preserve-partitions."""
    topic = topic_name(kind)
    mirror = f"{kind}-{topic}"
    spec = write_mirror_spec(tmp_path / "mirrors.yaml", stack, mirror, topic, prefix="x.", **{
        "preserve-partitions": "true", "provenance-headers": "true", "commit-interval-s": commit_interval_s,
        "delivery": delivery,
    })
    create_topic(stack["source"].kafka.bootstrap_servers, topic, partitions=PARTITIONS)
    return topic, mirror, spec


def _produce_backlog(src: str, topic: str) -> None:
    # The value names the source position, so a destination reader can tell what it read without headers.
    produce(src, topic, [{"value": f"p{p}-{i}".encode(), "partition": p}
                         for i in range(PER_PARTITION) for p in range(PARTITIONS)])


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


def _fail_over(stack, spec: Path, mirror: str, topic: str, fraction: float,
               committed: dict[int, int] | None = None, name: str = "") -> tuple[int, int, dict]:
    """(records re-read, records missed, the report) for a group committed at `fraction` of every partition
    (or at `committed`)."""
    src, dst = stack["source"].kafka.bootstrap_servers, stack["destination"].kafka.bootstrap_servers
    group = f"app-{name or int(fraction * 100)}-{topic}"
    committed = committed or {p: int(PER_PARTITION * fraction) for p in range(PARTITIONS)}
    commit_offsets(src, topic, group, committed)
    document = _apply(spec, mirror, group)
    assert document["applied"] is True and document["untranslated"] == [], document
    read = _read_as_group(dst, f"x.{topic}", group)
    reread = sum(1 for p, offsets in read.items() for o in offsets if o < committed[p])
    missed = sum(len(set(range(committed[p], PER_PARTITION)) - set(read[p])) for p in range(PARTITIONS))
    return reread, missed, document


@pytest.mark.parametrize("delivery", ["at-least-once", "exactly-once"])
def test_groups_at_any_lag_reread_nothing_after_a_clean_run(stack, topic_name, tmp_path, delivery):
    src, dst = stack["source"].kafka.bootstrap_servers, stack["destination"].kafka.bootstrap_servers
    # Commits (and syncs) far apart: the whole backlog is mirrored between the sync at assignment and the
    # next. Exactly-once, records become readable at the first commit (so sooner), and the destination
    # partitions have transaction markers between the records (offsets with no record).
    topic, mirror, spec = _mirrored_topic(stack, topic_name, tmp_path, "xc", delivery=delivery,
                                          commit_interval_s=60 if delivery == "at-least-once" else 15)
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
        assert sum(o.get("may_reread", 0) for o in document["offsets"]) == 0, document
    print(f"\nclean {delivery} run, {PARTITIONS} partitions x {PER_PARTITION} records: "
          + "; ".join(f"group at {int(f * 100)}%: {r} re-read, {m} missed, method {meth}"
                      for f, (r, m, meth) in figures.items()))
    assert {f: (r, m) for f, (r, m, _) in figures.items()} == {f: (0, 0) for f in FRACTIONS}


def _produce_paced(src: str, topic: str, stop: threading.Event, errors: list) -> None:
    """PER_PARTITION records per partition in slices, so the worker is mid-run when it is killed."""
    producer = Producer({"bootstrap.servers": src, "acks": "all", "enable.idempotence": True, "linger.ms": 5})
    try:
        for first in range(0, PER_PARTITION, 100):
            if stop.is_set():
                return
            for i in range(first, first + 100):
                for p in range(PARTITIONS):
                    producer.produce(topic, f"p{p}-{i}".encode(), partition=p,
                                     on_delivery=lambda err, _m: err and errors.append(err))
            producer.poll(0)
            time.sleep(0.25)
        if producer.flush(30):
            errors.append("records left unflushed")
    except Exception as exc:  # reported by the test thread
        errors.append(exc)


def test_groups_miss_nothing_after_a_kill_9_and_restart(stack, topic_name, tmp_path):
    src, dst = stack["source"].kafka.bootstrap_servers, stack["destination"].kafka.bootstrap_servers
    topic, mirror, spec = _mirrored_topic(stack, topic_name, tmp_path, "xk", commit_interval_s=3)
    stop, errors = threading.Event(), []
    producer = threading.Thread(target=_produce_paced, args=(src, topic, stop, errors), daemon=True)
    args = ["--config", str(spec), "--mirror", mirror]
    first = WorkerProcess(args, tmp_path, name="first")
    second = None
    try:
        first.wait_started()
        producer.start()
        # Killed while records flow: what it produced since its last commit is sent again by the restart.
        half = PARTITIONS * PER_PARTITION // 2
        assert len(wait_for_count(dst, f"x.{topic}", half, timeout=120, read_timeout=30, interval=0.5)) >= half, \
            "the first worker mirrored too little"
        first.kill()
        second = WorkerProcess(args, tmp_path, name="second")
        second.wait_started(timeout=120)
        producer.join(120)
        assert not errors, errors[:3]
        records = wait_for_count(dst, f"x.{topic}", PARTITIONS * PER_PARTITION, timeout=180, distinct=True,
                                 read_timeout=30)
        assert len({m.value() for m in records}) == PARTITIONS * PER_PARTITION, \
            f"not every source record reached x.{topic} within 180.0s"
        assert second.terminate() == 0
    finally:
        stop.set()
        first.stop_quietly()
        if second is not None:
            second.stop_quietly()

    copies = Counter(m.value() for m in records)
    resent = sum(n - 1 for n in copies.values())
    # A group committed in the middle of each partition's re-sent range (or at 50 % where none).
    inside = {}
    for p in range(PARTITIONS):
        twice = sorted(int(v.decode().split("-")[1]) for v, n in copies.items()
                       if n > 1 and v.decode().startswith(f"p{p}-"))
        inside[p] = twice[len(twice) // 2] if twice else PER_PARTITION // 2
    figures = {}
    for name, fraction, committed in [("10", 0.1, None), ("50", 0.5, None), ("90", 0.9, None),
                                      ("resent", 0.0, inside)]:
        reread, missed, document = _fail_over(stack, spec, mirror, topic, fraction, committed, name)
        bound = sum(o["may_reread"] for o in document["offsets"])
        figures[name] = (reread, missed, bound)
        assert missed == 0, (name, document)
        # The mirror is stopped: the consumer reads to the report's end_offset, so the bound is exact.
        assert reread == bound <= resent, (name, reread, bound, resent, document)
        assert {o["method"] for o in document["offsets"]} <= {"provenance", "provenance-end"}, document
    print(f"\nkill -9 mid-run and restart, {PARTITIONS} partitions x {PER_PARTITION} records, {resent} records "
          "re-sent by the restarted worker: "
          + "; ".join(f"group at {n}{'' if n == 'resent' else '%'}: {r} re-read (report's bound {b}), {m} missed"
                      for n, (r, m, b) in figures.items()))
