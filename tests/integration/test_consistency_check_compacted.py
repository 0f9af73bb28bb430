"""The consistency check's compacted mode on the real stack: a compacted source and a destination that
kept only the latest record of each key (as compaction leaves it). Record by record the older versions
are "missing"; `--mode compacted` compares the latest value per key and counts exactly what differs, and
the default `--mode auto` picks that mode for a topic whose cleanup.policy is compact."""

from __future__ import annotations

import pytest

import subprocess
import sys
import time

from devstack.paths import ROOT
from tests.integration.test_consistency_check import BASE_MS, KEEP, SCRIPT, Run, run_check
from tests.kafka_util import create_topic, produce
from tests.worker_util import write_mirror_spec

pytestmark = [pytest.mark.integration, pytest.mark.spark]

PARTITIONS, KEYS, VERSIONS = 3, 20, 3
COMPACT = {"cleanup.policy": "compact", "retention.ms": "-1"}


def check_mirror(stack, tmp_path, name: str, whitelist: str, prefix: str, **settings) -> Run:
    """The check of one mirror of a spec (as the verify DAG runs it), with the job's default mode; `settings`:
    the mirror's extra keys (write_mirror_spec's)."""
    spec = write_mirror_spec(tmp_path / "mirrors.yaml", stack, name, whitelist, prefix, source_name=None, **settings)
    report, started = tmp_path / f"{name}.json", time.monotonic()
    proc = subprocess.run([sys.executable, *SCRIPT, "--config", str(spec), "--mirror", name, "--report", str(report)],
                          cwd=ROOT, capture_output=True, text=True, timeout=480)
    return Run(proc, report, time.monotonic() - started)


def test_a_compacted_topic_is_checked_by_its_latest_value_per_key(stack, topic_name, tmp_path):
    src, dst = stack["source"].kafka.bootstrap_servers, stack["destination"].kafka.bootstrap_servers
    topic = topic_name("compacted")
    create_topic(src, topic, partitions=PARTITIONS, config=COMPACT)
    create_topic(dst, f"c.{topic}", partitions=PARTITIONS, config=COMPACT)
    versions = [{"partition": p, "key": f"k{p}-{k}".encode(), "value": f"v{p}-{k}-{n}".encode()}
                for n in range(VERSIONS) for p in range(PARTITIONS) for k in range(KEYS)]
    deleted = {"partition": 2, "key": b"k2-5", "value": None}            # a tombstone is k2-5's latest record
    produce(src, topic, versions + [deleted])
    latest = [r for r in versions if r["value"].endswith(f"-{VERSIONS - 1}".encode())]
    copy = [r for r in latest if r["key"] not in (b"k0-3", b"k2-5")]   # k0-3 never copied, k2-5 deleted
    copy = [{**r, "value": b"changed"} if r["key"] == b"k1-7" else r for r in copy]  # k1-7's latest differs
    produce(dst, f"c.{topic}", copy)

    records = run_check(stack, tmp_path, "--topics", topic, "--prefix", "c.", "--mode", "records", name="records")
    assert records.rc == 1, records.stderr[-2000:]
    assert records.report["mode"] == "records" and records.report["totals"]["missing"] > KEYS * PARTITIONS

    keys = run_check(stack, tmp_path, "--topics", topic, "--prefix", "c.", "--mode", "compacted", name="keys")
    assert keys.rc == 1, keys.stderr[-2000:]
    assert keys.report["mode"] == "compacted"
    counts = {p: (c["source_count"], c["destination_count"], c["missing"], c["altered"])
              for p in range(PARTITIONS) for c in [keys.counts(topic, p)]}
    assert counts == {0: (KEYS, KEYS - 1, 1, 0), 1: (KEYS, KEYS, 0, 1), 2: (KEYS, KEYS - 1, 0, 0)}
    offset = lambda p, k: (VERSIONS - 1) * KEYS + k  # noqa: E731 - the latest version's offset in its partition
    assert keys.report["examples"]["missing"] == [f"{topic}:0:{offset(0, 3)}"]
    assert keys.report["examples"]["altered"] == [f"{topic}:1:{offset(1, 7)}"]


def test_a_mirror_without_preserved_partitions_has_no_false_altered_records(stack, topic_name, tmp_path):
    """Records with the same key and timestamp in several source partitions, copied without provenance to one
    destination partition in another order than their offsets: each copy is matched by its content first
    (positional pairing by offset called all of them altered)."""
    src, dst = stack["source"].kafka.bootstrap_servers, stack["destination"].kafka.bootstrap_servers
    topic = topic_name("ties")
    create_topic(src, topic, partitions=PARTITIONS, config=KEEP)
    create_topic(dst, f"n.{topic}", partitions=1, config=KEEP)
    # Partition p holds 10 + p fillers, then "tie" records sharing one key and timestamp across partitions:
    # the ties' offsets grow with the partition, and the copy writes them in the opposite order.
    source = [{"partition": p, "key": f"f{p}-{i}".encode(), "value": f"f{p}-{i}".encode(), "timestamp": BASE_MS + i}
              for p in range(PARTITIONS) for i in range(10 + p)]
    ties = [{"partition": p, "key": b"tie", "value": f"tie-from-{p}".encode(), "timestamp": BASE_MS + 99}
            for p in range(PARTITIONS)]
    produce(src, topic, source + ties)
    copies = [{**r, "partition": 0} for r in source] + [{**r, "partition": 0} for r in reversed(ties)]
    copies[-1] = {**copies[-1], "value": b"tie-changed"}             # the copy of partition 0's tie differs
    produce(dst, f"n.{topic}", copies)
    run = check_mirror(stack, tmp_path, "ties", topic, "n.", **{"preserve-partitions": "false"})
    assert run.rc == 1, run.stderr[-2000:]
    assert {p: run.counts(topic, p)["altered"] for p in range(PARTITIONS)} == {0: 1, 1: 0, 2: 0}
    assert run.report["totals"]["missing"] == 0 and run.report["totals"]["duplicated"] == 0
    assert run.report["examples"]["altered"] == [f"{topic}:0:10"]


def test_auto_mode_checks_each_topic_of_a_mirror_in_the_mode_its_cleanup_policy_calls_for(stack, topic_name, tmp_path):
    """One mirror, one run with the default mode: a compacted topic whose keys were overwritten (the copy
    kept only their latest values, as compaction leaves them) and a normal topic that lost one record. Record
    by record the compacted topic's older versions read as missing; by key it is consistent."""
    src, dst = stack["source"].kafka.bootstrap_servers, stack["destination"].kafka.bootstrap_servers
    stem = topic_name("auto")
    compacted, normal = f"{stem}-compacted", f"{stem}-normal"
    create_topic(src, compacted, partitions=PARTITIONS, config=COMPACT)
    create_topic(dst, f"m.{compacted}", partitions=PARTITIONS, config=COMPACT)
    versions = [{"partition": p, "key": f"k{p}-{k}".encode(), "value": f"v{p}-{k}-{n}".encode(),
                 "timestamp": BASE_MS + 1000 * n + k} for n in range(VERSIONS) for p in range(PARTITIONS) for k in range(KEYS)]
    produce(src, compacted, versions)
    produce(dst, f"m.{compacted}", versions[-PARTITIONS * KEYS:])          # the latest version of every key
    create_topic(src, normal, partitions=PARTITIONS, config=KEEP)
    create_topic(dst, f"m.{normal}", partitions=PARTITIONS, config=KEEP)
    records = [{"partition": p, "key": f"n{p}-{i}".encode(), "value": f"n{p}-{i}".encode(), "timestamp": BASE_MS + i}
               for p in range(PARTITIONS) for i in range(KEYS)]
    produce(src, normal, records)
    produce(dst, f"m.{normal}", [r for r in records if r["key"] != b"n1-5"])   # partition 1, offset 5 lost

    run = check_mirror(stack, tmp_path, "mixed", f"{stem}-.*", "m.")

    assert run.rc == 1 and run.report is not None, run.stderr[-2000:]
    differences = ("missing", "duplicated", "altered", "out_of_order", "wrong_schema")
    assert {p: {k: run.counts(compacted, p)[k] for k in differences} for p in range(PARTITIONS)} == {
        p: dict.fromkeys(differences, 0) for p in range(PARTITIONS)}
    assert [run.counts(compacted, p)["source_count"] for p in range(PARTITIONS)] == [KEYS] * PARTITIONS  # keys
    assert run.counts(normal, 1)["missing"] == 1
    assert run.report["totals"] == {"checked": 2 * PARTITIONS * KEYS, "missing": 1, "duplicated": 0, "altered": 0,
                                    "out_of_order": 0, "wrong_schema": 0}
    assert run.report["examples"]["missing"] == [f"{normal}:1:5"]
    assert run.report["mode"] == "auto"
    assert run.report["modes"] == {
        compacted: {"mode": "compacted", "reason": "cleanup.policy=compact set on the topic: the latest value per key"},
        normal: {"mode": "records", "reason": "cleanup.policy not set on the topic (the broker's default): every record"}}
    html = run.report_path.with_suffix(".html").read_text()
    assert f"<td>{compacted}</td><td>compacted</td>" in html and f"<td>{normal}</td><td>records</td>" in html
