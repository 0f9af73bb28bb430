"""Group offset sync on the real stack: a worker with provenance headers and `group-offset-sync-interval-ms`
keeps an idle group current as it commits further on the source, leaves a destination group with an active
member alone, never rewinds a destination group that is ahead, and reports each skip; then the
`sync-group-offsets` command, dry run and real, on the stopped mirror.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer

from devstack.paths import ROOT
from tests.kafka_util import commit_offsets, create_topic, produce
from tests.worker_util import WorkerProcess, committed_offsets, owned_partitions, write_mirror_spec

pytestmark = pytest.mark.integration

PARTITIONS = 2


def _produce(bootstrap: str, topic: str, first: int, count: int) -> None:
    produce(bootstrap, topic, [{"value": f"p{p}-{i}".encode(), "partition": p}
                               for i in range(first, first + count) for p in range(PARTITIONS)])


def _wait_committed(bootstrap: str, group: str, topic: str, expected: dict[int, int], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while (seen := committed_offsets(bootstrap, group, topic, PARTITIONS)) != expected:
        assert time.monotonic() < deadline, f"{group} on {topic}: {seen}, expected {expected}"
        time.sleep(0.3)


def _wait_skipped(worker: WorkerProcess, group: str, reason_start: str, timeout: float = 20.0) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for entry in worker.logs():
            if entry.get("msg") == "group offset skipped" and entry.get("group") == group \
                    and entry.get("reason", "").startswith(reason_start):
                return entry
        time.sleep(0.3)
    raise AssertionError(f"no skip of {group} ({reason_start}) logged within {timeout}s")


class ActiveConsumer:
    """A consumer of the destination topic in `group`, subscribed and polling in a thread (a live member)."""

    def __init__(self, bootstrap: str, topic: str, group: str) -> None:
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                                  "auto.offset.reset": "latest", "session.timeout.ms": 10_000})
        self.assigned = threading.Event()
        self.stop = threading.Event()
        self.consumer.subscribe([topic], on_assign=lambda c, partitions: self.assigned.set())
        self.thread = threading.Thread(target=self._poll, daemon=True)
        self.thread.start()

    def _poll(self) -> None:
        while not self.stop.is_set():
            self.consumer.poll(0.2)

    def close(self) -> None:
        self.stop.set()
        self.thread.join(10)
        self.consumer.close()


def _command(spec: Path, mirror: str, *extra: str) -> dict:
    result = subprocess.run([sys.executable, "-m", "mirror_worker", "sync-group-offsets", "--config", str(spec),
                             "--mirror", mirror, *extra], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    # The structured log lines come first on stdout (as sync-acls'), then the document.
    return json.loads(result.stdout[result.stdout.index("{\n"):])


def test_idle_groups_follow_active_ones_are_left_alone_and_nothing_is_rewound(stack, topic_name, tmp_path):
    src, dst = stack["source"].kafka.bootstrap_servers, stack["destination"].kafka.bootstrap_servers
    topic = topic_name("gs")
    remote = f"x.{topic}"
    idle, active, ahead = (f"app-{kind}-{topic}" for kind in ("idle", "active", "ahead"))
    mirror = f"gs-{topic}"
    spec = write_mirror_spec(tmp_path / "mirrors.yaml", stack, mirror, topic, prefix="x.", **{
        "preserve-partitions": "true", "provenance-headers": "true", "commit-interval-s": 1,
        "group-offset-sync-interval-ms": 1000, "group-offset-sync-groups": f'["app-.*-{topic}"]',
    })
    create_topic(src, topic, partitions=PARTITIONS)
    _produce(src, topic, 0, 100)
    worker = WorkerProcess(["--config", str(spec), "--mirror", mirror], tmp_path)
    member = None
    try:
        worker.wait_started()
        # A live member of `active` on the destination before its source commit exists.
        member = ActiveConsumer(dst, remote, active)
        assert member.assigned.wait(20), "the destination consumer was not assigned its partitions"
        # `ahead` already read further on the destination than its source commit translates to.
        commit_offsets(dst, remote, ahead, {0: 90, 1: 10})
        commit_offsets(src, topic, ahead, {0: 50, 1: 50})
        commit_offsets(src, topic, active, {0: 40, 1: 40})
        commit_offsets(src, topic, idle, {0: 20, 1: 30})
        # A clean mirror run of a new topic: destination offset = source offset.
        _wait_committed(dst, idle, remote, {0: 20, 1: 30})
        _wait_committed(dst, ahead, remote, {0: 90, 1: 50})   # moved forward where behind only
        skipped = _wait_skipped(worker, ahead, "destination offset 90 is ahead")
        assert (skipped["partition"], skipped["offset"], skipped["previous"]) == (0, 50, 90)
        _wait_skipped(worker, active, "group is STABLE with 1 active member(s)")
        # The idle group commits further on the source, also past what was mirrored at first.
        commit_offsets(src, topic, idle, {0: 60, 1: 70})
        _wait_committed(dst, idle, remote, {0: 60, 1: 70})
        _produce(src, topic, 100, 50)
        commit_offsets(src, topic, idle, {0: 140, 1: 150})
        _wait_committed(dst, idle, remote, {0: 140, 1: 150})
        assert committed_offsets(dst, active, remote, PARTITIONS) == {0: -1001, 1: -1001}  # never written
        assert committed_offsets(dst, ahead, remote, PARTITIONS) == {0: 90, 1: 50}           # never rewound
        assert worker.terminate() == 0
    finally:
        if member is not None:
            member.close()
        worker.stop_quietly()
    summaries = [e for e in worker.logs() if e.get("msg") == "group offsets synced"]
    assert summaries and all(e["dry_run"] is False for e in summaries)

    # The one-shot command on the stopped mirror: the dry run writes nothing, the real one moves `idle`.
    commit_offsets(src, topic, idle, {0: 145, 1: 150})
    document = _command(spec, mirror, "--dry-run")
    groups = {g["group"]: g for g in document["sources"][0]["groups"]}
    assert [(o["partition"], o["offset"], o["previous"]) for o in groups[idle]["would_write"]] == [(0, 145, 140)]
    assert [o["partition"] for o in groups[idle]["unchanged"]] == [1]
    assert [o["reason"] for o in groups[ahead]["skipped"]] == [
        "destination offset 90 is ahead of the translation 50: never rewound"]
    assert committed_offsets(dst, idle, remote, PARTITIONS) == {0: 140, 1: 150}
    document = _command(spec, mirror)
    groups = {g["group"]: g for g in document["sources"][0]["groups"]}
    assert [(o["partition"], o["offset"]) for o in groups[idle]["written"]] == [(0, 145)]
    assert committed_offsets(dst, idle, remote, PARTITIONS) == {0: 145, 1: 150}
    assert committed_offsets(dst, ahead, remote, PARTITIONS) == {0: 90, 1: 50}


def test_one_process_of_the_mirror_writes_a_groups_offsets_and_another_takes_over(stack, topic_name, tmp_path):
    """Two worker processes of one mirror: only the member that holds the mirror's first source partition
    syncs groups (the other says why not), so no stale read-then-write of one process can rewind what the
    other wrote; when the writer stops, the remaining process takes over."""
    src, dst = stack["source"].kafka.bootstrap_servers, stack["destination"].kafka.bootstrap_servers
    topic = topic_name("gw")
    remote, idle, mirror = f"x.{topic}", f"app-idle-{topic}", f"gw-{topic}"
    spec = write_mirror_spec(tmp_path / "mirrors.yaml", stack, mirror, topic, prefix="x.", **{
        "preserve-partitions": "true", "provenance-headers": "true", "commit-interval-s": 1,
        "group-offset-sync-interval-ms": 500, "group-offset-sync-groups": f'["app-.*-{topic}"]',
    })
    create_topic(src, topic, partitions=PARTITIONS)
    _produce(src, topic, 0, 100)
    workers = [WorkerProcess(["--config", str(spec), "--mirror", mirror], tmp_path, name=f"w{i}") for i in range(2)]
    try:
        workers[0].wait_started()
        workers[1].wait_started()
        deadline = time.monotonic() + 60
        while not all(owned_partitions(w) for w in workers):  # the partitions split between the two
            assert time.monotonic() < deadline, [w.owned() for w in workers]
            time.sleep(0.3)
        marks = [len(w.logs()) for w in workers]
        commit_offsets(src, topic, idle, {0: 20, 1: 30})
        _wait_committed(dst, idle, remote, {0: 20, 1: 30})
        commit_offsets(src, topic, idle, {0: 60, 1: 70})
        _wait_committed(dst, idle, remote, {0: 60, 1: 70})
        for worker, mark in zip(workers, marks):  # each process had its turns since the split
            while len(_summaries(worker, mark)) < 3:
                assert time.monotonic() < deadline + 60, worker.stderr[-2000:]
                time.sleep(0.3)
        syncing = [i for i, (w, mark) in enumerate(zip(workers, marks)) if any(e["groups"] for e in _summaries(w, mark))]
        assert len(syncing) == 1, f"processes {syncing} both synced group {idle}"
        writer, other = workers[syncing[0]], workers[1 - syncing[0]]
        assert f"{topic}[0]" in owned_partitions(writer)
        reasons = {e.get("not_writer") for e in _summaries(other, marks[1 - syncing[0]])}
        assert len(reasons) == 1 and next(iter(reasons)).startswith("another member of the mirror's group"), reasons

        assert writer.terminate() == 0
        _produce(src, topic, 100, 50)
        commit_offsets(src, topic, idle, {0: 140, 1: 150})
        _wait_committed(dst, idle, remote, {0: 140, 1: 150}, timeout=60)  # the remaining process writes now
        assert other.terminate() == 0
    finally:
        for worker in workers:
            worker.stop_quietly()


def _summaries(worker: WorkerProcess, after: int) -> list[dict]:
    return [e for e in worker.logs()[after:] if e.get("msg") == "group offsets synced"]
