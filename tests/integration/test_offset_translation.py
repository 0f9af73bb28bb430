"""Consumer failover on the real stack: offset syncs, translate-offsets (library and CLI), --apply."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition

from devstack.paths import ROOT
from mirror_worker.config.spec import select_mirror
from mirror_worker.dr.offset_translation import read_offset_syncs, translate_group, translate_group_offsets
from tests.kafka_util import commit_offsets, create_topic, end_offsets, private_kafka, produce
from tests.worker_util import WorkerProcess, committed_offsets, wait_for_count, write_mirror_spec

pytestmark = pytest.mark.integration

PARTITIONS = 3
ROUND = 100  # records per partition per round


def _spec(path: Path, stack, mirror: str, topic: str, preserve: bool = True, delivery: str = "at-least-once",
          **settings) -> Path:
    return write_mirror_spec(path, stack, mirror, topic, prefix="dr.", **{
        "preserve-partitions": str(preserve).lower(), "commit-interval-s": 1, "delivery": delivery, **settings,
    })


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mirror_worker", "translate-offsets", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


def _produce_round(src: str, topic: str, round_index: int, headers=lambda p, i: []) -> None:
    now_ms = int(time.time() * 1000)
    produce(src, topic, [
        {"value": f"r{round_index}-p{p}-{i}".encode(), "partition": p, "timestamp": now_ms, "headers": headers(p, i)}
        for i in range(ROUND) for p in range(PARTITIONS)
    ])


def _wait_for_syncs(config, source_offset: int, timeout: float = 90.0) -> list:
    """Until every partition has a sync at `source_offset` (the mirror caught up and committed)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        syncs = read_offset_syncs(config)
        if {s.partition for s in syncs if s.source_offset == source_offset} == set(range(PARTITIONS)):
            return syncs
        time.sleep(1.0)
    raise AssertionError(f"no offset sync at {source_offset} for every partition within {timeout}s")


def _commit_after_reading(src: str, topic: str, group: str, positions: dict[int, int]) -> None:
    """A source consumer reads each partition from the start up to `positions` and commits there."""
    consumer = Consumer({"bootstrap.servers": src, "group.id": group, "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in positions])
        read = {p: 0 for p in positions}
        deadline = time.monotonic() + 60
        while any(read[p] < positions[p] for p in positions) and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is None or msg.error():
                continue
            if msg.offset() < positions[msg.partition()]:
                read[msg.partition()] = msg.offset() + 1
        assert read == positions
        consumer.commit(offsets=[TopicPartition(topic, p, o) for p, o in positions.items()], asynchronous=False)
    finally:
        consumer.close()


def _source_offset(value: bytes) -> tuple[int, int]:
    """(partition, source offset) of a test record: round r, partition p, index i -> offset r*ROUND + i."""
    round_part, partition_part, index = value.decode().split("-")
    return int(partition_part[1:]), int(round_part[1:]) * ROUND + int(index)


def _read_from(dst: str, topic: str, starts: dict[int, int], group: str | None = None) -> dict[int, list[int]]:
    """Source offsets of everything read from `starts` (assigned) or from the group's offsets, to the end."""
    consumer = Consumer({"bootstrap.servers": dst, "group.id": group or f"reader-{time.monotonic_ns()}",
                         "enable.auto.commit": False, "auto.offset.reset": "error" if group else "earliest",
                         "enable.partition.eof": True})
    try:
        if group:
            consumer.subscribe([topic])
        else:
            consumer.assign([TopicPartition(topic, p, o) for p, o in starts.items()])
        read: dict[int, list[int]] = {p: [] for p in starts}
        done: set[int] = set()
        deadline = time.monotonic() + 60
        while len(done) < len(starts) and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is None:
                continue
            if msg.error():
                assert msg.error().code() == -191, msg.error().str()  # only _PARTITION_EOF
                done.add(msg.partition())
                continue
            partition, offset = _source_offset(msg.value())
            assert partition == msg.partition()
            read[partition].append(offset)
        assert len(done) == len(starts), "destination partitions not read to their end"
        return read
    finally:
        consumer.close()


def _check_resume(read: dict[int, list[int]], committed: dict[int, int], syncs, total: int) -> None:
    """Nothing at/after the committed position is missed; only records since the sync used are reread."""
    for partition, position in committed.items():
        usable = [s for s in syncs if s.partition == partition and s.source_offset <= position]
        last_sync = max(usable, key=lambda s: s.destination_offset)
        assert set(range(position, total)) <= set(read[partition]), f"partition {partition} missed records"
        reread = [o for o in read[partition] if o < position]
        assert all(o >= last_sync.source_offset for o in reread), f"partition {partition} reread before its sync"
        assert len(reread) <= position - last_sync.source_offset


@pytest.mark.parametrize("delivery", ["at-least-once", "exactly-once"])
def test_consumer_fails_over_with_translated_offsets(stack, topic_name, tmp_path, delivery):
    src, dst = stack["source"].kafka.bootstrap_servers, stack["destination"].kafka.bootstrap_servers
    topic = topic_name("fo")
    mirror, group = f"fo-{topic}", f"app-{topic}"
    spec = _spec(tmp_path / "mirrors.yaml", stack, mirror, topic, delivery=delivery)
    config = select_mirror(spec, mirror)
    create_topic(src, topic, partitions=PARTITIONS)
    worker = WorkerProcess(["--config", str(spec), "--mirror", mirror], tmp_path)
    try:
        worker.wait_started()
        _produce_round(src, topic, 0)
        _wait_for_syncs(config, ROUND)
        _produce_round(src, topic, 1)
        wait_for_count(dst, f"dr.{topic}", 2 * ROUND * PARTITIONS)
        syncs = _wait_for_syncs(config, 2 * ROUND)
        assert worker.terminate() == 0
    finally:
        worker.stop_quietly()

    # The application read part of the source and committed; then the source cluster is lost.
    committed = {0: 37, 1: ROUND, 2: ROUND + 50}
    _commit_after_reading(src, topic, group, committed)

    offsets = translate_group_offsets(config, group)
    assert set(offsets) == {(f"dr.{topic}", p) for p in range(PARTITIONS)}, (translate_group(config, group), syncs)
    _check_resume(_read_from(dst, f"dr.{topic}", {p: o for (_, p), o in offsets.items()}), committed, syncs, 2 * ROUND)

    applied = _cli("--config", str(spec), "--mirror", mirror, "--group", group, "--apply")
    assert applied.returncode == 0, applied.stderr
    document = json.loads(applied.stdout)
    assert document["applied"] is True and document["untranslated"] == []
    # This mirror writes no provenance header: the syncs' offsets stand, and every record from D may be re-read.
    assert all(o["method"] == "offset-sync" and 0 < o["may_reread"] <= o["end_offset"] - o["offset"]
               for o in document["offsets"]), document
    assert {(o["topic"], o["partition"]): o["offset"] for o in document["offsets"]} == offsets

    # The application restarts on the destination with its own group: it resumes from the applied offsets.
    consumer = Consumer({"bootstrap.servers": dst, "group.id": group, "auto.offset.reset": "error",
                         "enable.auto.commit": False})
    try:
        consumer.subscribe([f"dr.{topic}"])
        deadline = time.monotonic() + 60
        while not consumer.assignment() and time.monotonic() < deadline:
            consumer.poll(0.5)
        assert consumer.assignment()
        # While it is active, --apply is refused and names the group.
        refused = _cli("--config", str(spec), "--mirror", mirror, "--group", group, "--apply")
        assert refused.returncode == 1
        assert f"destination group {group!r} has 1 active member(s)" in refused.stderr
    finally:
        consumer.close()
    _check_resume(_read_from(dst, f"dr.{topic}", {p: 0 for p in range(PARTITIONS)}, group=group), committed, syncs,
                  2 * ROUND)

    # The application consumed on to the end there. A second run of the failover (the runbook's advice after a
    # failed run) translates the frozen source commits again: behind the group, which is left where it is
    # (it was moved back, issue 43 defect 5), unless --rewind says so, with what that re-reads.
    ends = end_offsets(dst, f"dr.{topic}", PARTITIONS)
    commit_offsets(dst, f"dr.{topic}", group, ends)
    again = _cli("--config", str(spec), "--mirror", mirror, "--group", group, "--apply")
    assert again.returncode == 0, again.stderr
    assert committed_offsets(dst, group, f"dr.{topic}", PARTITIONS) == ends
    kept = json.loads(again.stdout)["ahead_on_destination"]
    assert [(o["partition"], o["destination_offset"], o["translation"], o["action"]) for o in kept] == [
        (p, ends[p], offsets[(f"dr.{topic}", p)], "kept") for p in range(PARTITIONS)]
    rewound = _cli("--config", str(spec), "--mirror", mirror, "--group", group, "--apply", "--rewind")
    assert rewound.returncode == 0, rewound.stderr
    assert [o["records_read_again"] for o in json.loads(rewound.stdout)["ahead_on_destination"]] == [
        ends[p] - offsets[(f"dr.{topic}", p)] for p in range(PARTITIONS)]
    assert committed_offsets(dst, group, f"dr.{topic}", PARTITIONS) == {
        p: offsets[(f"dr.{topic}", p)] for p in range(PARTITIONS)}


def test_an_upstream_hops_provenance_headers_place_no_group(stack, topic_name, tmp_path):
    """Chain A -> B -> C, the B -> C mirror without provenance headers: its copies carry A -> B's `mirror.source`
    header unchanged. Those name another hop (alias, cluster): they place no group, the offset syncs do, and
    the method says so. translate-offsets --apply and sync-group-offsets (the worker's group offset sync)."""
    src, dst = stack["source"].kafka.bootstrap_servers, stack["destination"].kafka.bootstrap_servers
    topic = topic_name("up")
    mirror, group, synced = f"up-{topic}", f"app-{topic}", f"app-sync-{topic}"
    spec = _spec(tmp_path / "mirrors.yaml", stack, mirror, topic, **{"group-offset-sync-groups": f'["{synced}"]'})
    config = select_mirror(spec, mirror)
    create_topic(src, topic, partitions=PARTITIONS)
    _produce_round(src, topic, 0, lambda p, i: [("mirror.source", f"a:cluster-a:orders:{p}:{i}".encode())])
    worker = WorkerProcess(["--config", str(spec), "--mirror", mirror], tmp_path)
    try:
        worker.wait_started()
        wait_for_count(dst, f"dr.{topic}", ROUND * PARTITIONS)
        syncs = _wait_for_syncs(config, ROUND)
        assert worker.terminate() == 0
    finally:
        worker.stop_quietly()
    committed = {p: 10 for p in range(PARTITIONS)}
    commit_offsets(src, topic, group, committed)
    commit_offsets(src, topic, synced, committed)

    applied = _cli("--config", str(spec), "--mirror", mirror, "--group", group, "--apply")
    assert applied.returncode == 0, applied.stderr
    document = json.loads(applied.stdout)
    assert document["untranslated"] == [], document
    assert {(o["partition"], o["method"]) for o in document["offsets"]} == {
        (p, "offset-sync") for p in range(PARTITIONS)}, document
    _check_resume(_read_from(dst, f"dr.{topic}", {p: 0 for p in range(PARTITIONS)}, group=group), committed, syncs,
                  ROUND)

    result = subprocess.run([sys.executable, "-m", "mirror_worker", "sync-group-offsets", "--config", str(spec),
                             "--mirror", mirror], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    (plan,) = json.loads(result.stdout[result.stdout.index("{\n"):])["sources"][0]["groups"]
    assert {(o["partition"], o["method"]) for o in plan["written"]} == {(p, "offset-sync") for p in range(PARTITIONS)}
    _check_resume(_read_from(dst, f"dr.{topic}", {p: 0 for p in range(PARTITIONS)}, group=synced), committed, syncs,
                  ROUND)


def test_translation_refused_without_preserve_partitions(stack, topic_name, tmp_path):
    spec = _spec(tmp_path / "mirrors.yaml", stack, "np", topic_name("np"), preserve=False)
    result = _cli("--config", str(spec), "--mirror", "np", "--group", "g")
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "mirror_worker: mirror 'np': offset translation needs preserve-partitions (destination partition = source "
        "partition); with other routings a source partition spreads over several destination partitions"
    )


@pytest.fixture
def young_source(tmp_path_factory):
    """A one-node cluster just started: no group has committed there yet, so its group coordinator is not
    ready (no __consumer_offsets) when the command first asks."""
    with private_kafka(tmp_path_factory.mktemp("young-source")) as node:
        yield node


def test_a_group_with_no_commits_on_a_young_source_gets_one_line_not_a_crash(stack, young_source, tmp_path):
    """Before: the command read the group's commits with AdminClient.list_consumer_group_offsets, which crashes
    the process (SIGSEGV, exit -11) when the coordinator answers "not the coordinator" (a young cluster, or one
    whose coordinator moved: a broker restart during a failover), and printed nothing. A group with no commits
    also passed as an empty translation (exit 0; with --apply nothing written, and nothing said)."""
    spec = write_mirror_spec(tmp_path / "mirrors.yaml", stack, "young", "young-topic", prefix="dr.",
                             source=young_source.bootstrap_servers, **{"preserve-partitions": "true"})
    for apply in ((), ("--apply",)):
        result = _cli("--config", str(spec), "--mirror", "young", "--group", "never-committed", *apply)
        assert result.returncode == 1, (result.returncode, result.stderr)
        assert [line for line in result.stderr.splitlines() if not line.startswith("{")] == [
            "mirror_worker: group 'never-committed' has no committed offsets on source 'east' for the topics mirror "
            "'young' replicates: nothing to translate"], result.stderr
        assert result.stdout == ""
