"""Failover then failback on the real stack: a reverse mirror (`reverse-of`) takes back only what was written
on the promoted cluster, starting at the failover point, and no record loops in either direction.

    east (old source)                               west (promoted)
    topic     a-*  --- forward mirror (dr. prefix) ---> dr.topic  a-* copies
                                                        dr.topic  b-*  (written after the failover)
    topic     b-*  <--- reverse mirror (reverse-of) --- dr.topic
    topic     c-*  (written after the failback) ------> dr.topic  c-*   (forward mirror resumed)
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from devstack.paths import ROOT
from mirror_worker.policy.provenance import PROVENANCE_HEADER, parse_provenance
from tests.catchup_util import catchup_summary, run_catchup
from tests.kafka_util import commit_offsets, create_topic, produce
from tests.worker_util import WorkerProcess, committed_offsets, read_topic, wait_for_count

pytestmark = [pytest.mark.integration, pytest.mark.spark]  # a consistency check and a catch-up start Spark

PARTITIONS = 3
BEFORE, AFTER_FAILOVER, AFTER_FAILBACK = 100, 40, 20


def _spec(path: Path, east: str, west: str, topic: str) -> Path:
    path.write_text(f"""
groups:
  - name: out
    source: {{name: east, kafka: {{bootstrap.servers: "{east}"}}}}
    destination: {{kafka: {{bootstrap.servers: "{west}"}}}}
    mirrors:
      - name: fwd-{topic}
        whitelist: "{topic}"
        prefix: "dr."
        preserve-partitions: true
        provenance-headers: true
        commit-interval-s: 1
  - name: back
    source: {{name: west, kafka: {{bootstrap.servers: "{west}"}}}}
    destination: {{kafka: {{bootstrap.servers: "{east}"}}}}
    mirrors:
      - name: back-{topic}
        reverse-of: fwd-{topic}
        commit-interval-s: 1
""")
    return path


def _records(prefix: str, count: int) -> list[dict]:
    return [{"value": f"{prefix}-p{p}-{i}".encode(), "partition": p} for i in range(count) for p in range(PARTITIONS)]


def _run_until(spec: Path, mirror: str, tmp_path: Path, done, name: str) -> WorkerProcess:
    """Run `mirror` until `done()` holds, then stop it cleanly (SIGTERM: flush, commit, exit 0)."""
    worker = WorkerProcess(["--config", str(spec), "--mirror", mirror], tmp_path, name=name)
    try:
        worker.wait_started(timeout=90)
        deadline = time.monotonic() + 120
        while not done():
            assert time.monotonic() < deadline, f"{name}: not done within 120 s; stderr: {worker.stderr[-2000:]}"
            time.sleep(0.5)
        assert worker.terminate() == 0, worker.stderr[-2000:]
        return worker
    finally:
        worker.stop_quietly()


def _values(bootstrap: str, topic: str) -> Counter:
    return Counter(m.value().decode() for m in read_topic(bootstrap, topic, timeout=30))


def _expected(*batches: tuple[str, int]) -> Counter:
    return Counter(r["value"].decode() for prefix, count in batches for r in _records(prefix, count))


def _consumer_group_moving_back(spec: Path, back: str, west: str, topic: str) -> dict[int, int]:
    """A group that read 20 b-* records per partition on west, translated back to east by translate-offsets:
    exactly its next record, b-*-20, at east offset 120 of each partition, with nothing to re-read."""
    group = f"app-back-{topic}"
    commit_offsets(west, f"dr.{topic}", group, {p: BEFORE + 20 for p in range(PARTITIONS)})
    result = subprocess.run([sys.executable, "-m", "mirror_worker", "translate-offsets", "--config", str(spec),
                             "--mirror", back, "--group", group], cwd=ROOT, capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    offsets = {o["partition"]: o["offset"] for o in document["offsets"]}
    assert offsets == {p: BEFORE + 20 for p in range(PARTITIONS)}, document
    assert {(o["method"], o["may_reread"]) for o in document["offsets"]} == {("failback", 0)}, document
    return offsets


def _consistency_check(spec: Path, mirror: str, tmp_path: Path) -> dict:
    """The verify DAG's job for `mirror` (spark_jobs/check/job.py); its JSON report."""
    report = tmp_path / f"check-{mirror}.json"
    result = subprocess.run([sys.executable, "-m", "spark_jobs.consistency_check", "--config", str(spec), "--mirror",
                             mirror, "--report", str(report)], cwd=ROOT, capture_output=True, text=True, timeout=480)
    assert report.exists(), result.stderr[-3000:]
    document = json.loads(report.read_text())
    assert result.returncode == 0, (mirror, document["totals"], result.stderr[-2000:])
    return document


def _halted(worker: WorkerProcess) -> list:
    return [e for e in worker.logs() if e.get("msg") == "partition halted"]


def _failed_over(stack, topic_name, tmp_path: Path, kind: str) -> tuple[str, str, str, Path, str, str]:
    """(east, west, topic, spec, forward mirror, reverse mirror) once a-* records were mirrored east -> west by
    the forward mirror, it stopped (the failover DAG stops it before anyone moves), and producers wrote b-*
    records on west (the failover), into the topic consumers read there."""
    east, west = stack["source"].kafka.bootstrap_servers, stack["destination"].kafka.bootstrap_servers
    topic = topic_name(kind)
    spec = _spec(tmp_path / "mirrors.yaml", east, west, topic)
    forward, back = f"fwd-{topic}", f"back-{topic}"
    create_topic(east, topic, partitions=PARTITIONS)
    produce(east, topic, _records("a", BEFORE))
    _run_until(spec, forward, tmp_path, lambda: len(read_topic(west, f"dr.{topic}", timeout=30)) >= PARTITIONS * BEFORE,
               "forward-1")
    produce(west, f"dr.{topic}", _records("b", AFTER_FAILOVER))
    return east, west, topic, spec, forward, back


def test_failback_mirrors_back_only_new_records_from_the_failover_point_and_nothing_loops(stack, topic_name,
                                                                                          tmp_path):
    # 1-2. Mirrored forward, failed over, new records on west.
    east, west, topic, spec, forward, back = _failed_over(stack, topic_name, tmp_path, "fb")

    # 3. Failback: the reverse mirror takes only the b-* records home, into each one's own partition.
    want_east = _expected(("a", BEFORE), ("b", AFTER_FAILOVER))
    reverse = _run_until(spec, back, tmp_path, lambda: sum(_values(east, topic).values()) >= sum(want_east.values()),
                         "back-1")
    starts = {e["partition"]: e for e in reverse.logs() if e.get("msg") == "failback start"}
    assert {p: (e["offset"], e["last_copy"]) for p, e in starts.items()} == {
        f"dr.{topic}[{p}]": (BEFORE, BEFORE - 1) for p in range(PARTITIONS)}, starts
    # The scan reads what was written since the failover (and one window), not the topic.
    assert all(e["records_read"] <= AFTER_FAILOVER + BEFORE for e in starts.values()), starts
    time.sleep(2)  # anything the reverse mirror would wrongly copy late
    east_records = read_topic(east, topic, timeout=30)
    assert Counter(m.value().decode() for m in east_records) == want_east
    for m in east_records:
        if m.value().startswith(b"b-"):
            assert m.value().decode().split("-")[1] == f"p{m.partition()}"
            origin = parse_provenance(dict(m.headers())[PROVENANCE_HEADER])
            assert origin[0] == "west" and origin[2] == f"dr.{topic}", origin
    assert not _halted(reverse)
    moved_back = _consumer_group_moving_back(spec, back, west, topic)

    # 4. Producers are back on east. The forward mirror resumes at its own position: it skips the reverse
    #    mirror's b-* copies (they came from west) and takes only c-* across.
    produce(east, topic, _records("c", AFTER_FAILBACK))
    want_west = _expected(("a", BEFORE), ("b", AFTER_FAILOVER), ("c", AFTER_FAILBACK))
    resumed = _run_until(spec, forward, tmp_path,
                         lambda: sum(_values(west, f"dr.{topic}").values()) >= sum(want_west.values()), "forward-2")
    time.sleep(2)
    assert _values(west, f"dr.{topic}") == want_west
    assert not _halted(resumed)
    # Its position passed the skipped copies: a restart would not read them again.
    ends = {p: n for p, n in Counter(m.partition() for m in east_records).items()}
    assert committed_offsets(east, f"kafka-mirror.{forward}", topic, PARTITIONS) == {
        p: ends[p] + AFTER_FAILBACK for p in range(PARTITIONS)}

    # 5. The reverse mirror again (its group has positions now): the c-* copies came from east, so nothing
    #    goes back; its position moves past them.
    west_ends = Counter(m.partition() for m in read_topic(west, f"dr.{topic}", timeout=30))
    _run_until(spec, back, tmp_path, lambda: committed_offsets(west, f"kafka-mirror.{back}", f"dr.{topic}", PARTITIONS)
               == dict(west_ends), "back-2")
    assert _values(east, topic) == _expected(("a", BEFORE), ("b", AFTER_FAILOVER), ("c", AFTER_FAILBACK))

    # 6. The nightly check of each mirror of the pair: the records it skipped by design are no difference.
    for mirror in (forward, back):
        check = _consistency_check(spec, mirror, tmp_path)
        assert {k: check["totals"][k] for k in ("missing", "duplicated", "altered", "out_of_order")} == {
            "missing": 0, "duplicated": 0, "altered": 0, "out_of_order": 0}, (mirror, check["totals"])
    print(f"\nfailback: {PARTITIONS * AFTER_FAILOVER} records mirrored back from offset {BEFORE} of each partition; "
          f"{PARTITIONS * AFTER_FAILBACK} mirrored forward after it; 0 looped, 0 duplicated; a group at "
          f"{BEFORE + 20} per partition on west translates back to {moved_back} on east")


def test_a_catchup_of_the_reverse_mirror_starts_and_skips_as_its_worker_would(stack, topic_name, tmp_path):
    """The Spark catch-up of a failback backlog: the same start (after the forward mirror's last copy) and the
    same skip as the worker; the worker then resumes at the catch-up's positions with nothing left to copy."""
    east, west, topic, spec, _forward, back = _failed_over(stack, topic_name, tmp_path, "fbc")

    result = run_catchup("--config", str(spec), "--mirror", back)
    assert result.returncode == 0, result.stderr[-3000:]
    assert catchup_summary(result)["records"] == PARTITIONS * AFTER_FAILOVER  # none of the forward copies
    want_east = _expected(("a", BEFORE), ("b", AFTER_FAILOVER))
    assert _values(east, topic) == want_east
    group = f"kafka-mirror.{back}"
    assert committed_offsets(west, group, f"dr.{topic}", PARTITIONS) == {p: BEFORE + AFTER_FAILOVER
                                                                         for p in range(PARTITIONS)}

    # A forward copy after the catch-up's position (a forward mirror that ran again): skipped, position past it.
    late = next(m for m in read_topic(west, f"dr.{topic}", timeout=30) if m.partition() == 0)
    produce(west, f"dr.{topic}", [{"value": late.value(), "partition": 0, "headers": late.headers()}])
    result = run_catchup("--config", str(spec), "--mirror", back)
    assert result.returncode == 0, result.stderr[-3000:]
    assert catchup_summary(result)["records"] == 0
    assert committed_offsets(west, group, f"dr.{topic}", PARTITIONS)[0] == BEFORE + AFTER_FAILOVER + 1

    worker = _run_until(spec, back, tmp_path, lambda: True, "back")
    assert not [e for e in worker.logs() if e.get("msg") == "failback start"]  # positions from the catch-up
    time.sleep(2)
    assert _values(east, topic) == want_east
