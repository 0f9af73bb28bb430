"""A worker started while a catch-up copies its mirror's backlog (at-least-once) mirrors nothing until the
catch-up has finished: the catch-up holds `<group>.catchup` (mirror_worker/engine/catchup_lease.py), the worker
sees it when its partitions are assigned and exits; started again afterwards, it resumes at the ranges'
ends. Before the lease, the worker copied from the same committed offsets as the catch-up: every record
of the backlog it reached was written twice."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from devstack.paths import ROOT
from tests.integration.test_catchup import PARTITIONS, _produce
from tests.kafka_util import create_topic
from tests.worker_util import (
    WorkerProcess, committed_offsets, loss_and_duplicates, read_topic, wait_for_count, write_mirror_spec,
)

pytestmark = [pytest.mark.integration, pytest.mark.spark]

def test_a_worker_started_during_a_catchup_mirrors_nothing_until_it_ends(stack, topic_name, tmp_path):
    src, dst = stack["source"].kafka.bootstrap_servers, stack["destination"].kafka.bootstrap_servers
    topic = topic_name("lease")
    group = f"g-{topic}"
    create_topic(src, topic, partitions=PARTITIONS)
    spec = write_mirror_spec(tmp_path / "mirrors.yaml", stack, "leased", topic, prefix="z.",
                             **{"preserve-partitions": "true", "group-id": group})
    total = 60_000
    _produce(src, topic, 0, total)
    stdout, stderr = tmp_path / "catchup.stdout", tmp_path / "catchup.stderr"
    with stdout.open("w") as out, stderr.open("w") as err:
        # Spark copies every range (--driver-copy-limit 0): the driver alone would copy 60,000 records before
        # the early worker has even joined, and the test would not race them.
        catchup = subprocess.Popen([sys.executable, "-m", "spark_jobs.catchup", "--config", str(spec), "--mirror",
                                    "leased", "--driver-copy-limit", "0"], cwd=ROOT, stdout=out, stderr=err,
                                   stdin=subprocess.DEVNULL)
    early = late = None
    try:
        # The ranges are logged once the catch-up holds its lease and found the group idle, while Spark
        # starts (seconds; nothing is copied before it is up): the worker started now joins while the
        # catch-up runs, whatever the copy's speed.
        deadline = time.monotonic() + 180
        while f"range {topic}[0]" not in stdout.read_text() and time.monotonic() < deadline:
            assert catchup.poll() is None, stderr.read_text()[-3000:]
            time.sleep(0.1)
        early = WorkerProcess(["--config", str(spec), "--mirror", "leased"], tmp_path, "early")
        code = early.wait(90)
        overlapped = catchup.poll() is None
        assert catchup.wait(300) == 0, stderr.read_text()[-3000:]
        assert committed_offsets(src, group, topic, PARTITIONS) == {p: total // PARTITIONS for p in range(PARTITIONS)}

        late = WorkerProcess(["--config", str(spec), "--mirror", "leased"], tmp_path, "late")
        mirrored = wait_for_count(dst, f"z.{topic}", total, timeout=240)
        time.sleep(3)  # a second copy of anything would show up now
        mirrored = read_topic(dst, f"z.{topic}", timeout=60)
        assert late.terminate() == 0, late.stderr[-2000:]
    finally:
        if catchup.poll() is None:
            catchup.kill()
        for worker in (early, late):
            if worker is not None:
                worker.stop_quietly()
    assert overlapped, "the catch-up ended before the early worker exited: the test did not race them"
    assert code == 1, early.stderr[-2000:]
    assert f"a catch-up is copying the backlog of consumer group {group!r}" in early.stderr
    source = read_topic(src, topic, timeout=60)
    missing, duplicates, ordered = loss_and_duplicates(source, mirrored)
    assert (len(missing), duplicates, ordered) == (0, 0, True)
