"""What a mirror selects and makes on the destination: a topic it cannot make stops alone, and a selection
that cannot be what was meant is refused or said, never silent."""

from __future__ import annotations

import subprocess
import sys
import time
import urllib.request

import pytest

from devstack.paths import ROOT
from mirror_airflow.dashboard.gather import mirror_state
from mirror_airflow.dashboard.sources import parse_metrics
from tests.kafka_util import create_topic, produce
from tests.worker_util import WorkerProcess, wait_for_count, write_mirror_spec, write_properties

pytestmark = pytest.mark.integration


def _status(worker: WorkerProcess, mirror: str):
    """What the dashboard reads from the worker's metrics endpoint."""
    url = worker.wait_for_log("metrics endpoint")["url"]
    return parse_metrics(urllib.request.urlopen(url, timeout=5).read().decode(), mirror)


def _state(status) -> str:
    return mirror_state(paused=False, worker=status, evaluation=None, latest_verdict=None, window_s=600,
                        now=time.time())[0]


def _run(args: list[str], timeout: float = 30) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mirror_worker", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout, stdin=subprocess.DEVNULL)


def test_a_topic_whose_destination_topic_cannot_be_created_stops_alone(stack, topic_name, tmp_path):
    """A 245-character topic with an 11-character prefix (256 > 249) beside a normal one. Before: the creation
    error escaped refresh(), the worker exited 1 at every start and the normal topic was never mirrored."""
    dst = stack["destination"].kafka.bootstrap_servers
    base = topic_name("uncreatable")
    normal, long = f"{base}-ok", f"{base}-" + "x" * (245 - len(base) - 1)
    for topic in (normal, long):
        create_topic(stack["source"].kafka.bootstrap_servers, topic)
        produce(stack["source"].kafka.bootstrap_servers, topic, [{"value": f"{i}".encode()} for i in range(10)])
    prefix = "dc1.source."
    spec = write_mirror_spec(tmp_path / "mirrors.yaml", stack, f"m-{base}", f"{base}-.*", prefix, **{"metrics-port": 0})
    worker = WorkerProcess(["--config", str(spec)], tmp_path)
    try:
        worker.wait_started()
        assert len(wait_for_count(dst, prefix + normal, 10)) == 10
        entry = worker.wait_for_log("topic not mirrored")
        assert entry["topic"] == long and entry["reason"].startswith(f"cannot create destination topic {prefix}{long}")
        assert f"topic {long} of source 'east' not mirrored" in worker.stderr
        status = _status(worker, f"m-{base}")
        assert status.not_mirrored == (("east", long),)
        assert _state(status) == "halted"
        time.sleep(11)  # one more topic refresh: tried again, not reported again
        assert [e["msg"] for e in worker.logs()].count("topic not mirrored") == 1
        assert worker.proc.poll() is None
    finally:
        assert worker.terminate() == 0, worker.stderr


def test_a_comma_inside_a_repetition_is_refused(stack, tmp_path):
    """Before: `t[0-9]{1,2}` became `t[0-9]{1|2}` (a comma means |), selected nothing, and ran on silently."""
    consumer = write_properties(tmp_path / "source.properties", {
        "bootstrap.servers": stack["source"].kafka.bootstrap_servers, "group.id": "comma"})
    producer = write_properties(tmp_path / "destination.properties", {
        "bootstrap.servers": stack["destination"].kafka.bootstrap_servers})
    result = _run(["--consumer.config", consumer, "--producer.config", producer, "--whitelist", "t[0-9]{1,2}"])
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "mirror_worker: whitelist: the comma in {1,2} would split the regex in two (a comma means |, as in "
        "MirrorMaker): write the repetition without one, e.g. [0-9][0-9]? for [0-9]{1,2}"]


@pytest.mark.parametrize("key, value", [("enabled", '"false"'), ("preserve-partitions", '"yes"')])
def test_a_quoted_boolean_in_the_spec_is_refused(stack, tmp_path, key, value):
    """Before: `enabled: "false"` counted as enabled (bool of a non-empty string) and the mirror ran."""
    spec = write_mirror_spec(tmp_path / "mirrors.yaml", stack, "quoted", "nothing-matches-this", **{key: value})
    result = _run(["--config", str(spec)])
    assert result.returncode == 2
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("mirror_worker: ") and f"mirror 'quoted': {key}:" in line, line


def test_a_mirror_that_selects_no_topic_says_so(stack, topic_name, tmp_path):
    """Before: a whitelist that matches nothing ran on without a word, the lag sensor green."""
    base = topic_name("later")
    spec = write_mirror_spec(tmp_path / "mirrors.yaml", stack, f"m-{base}", f"{base}", "p.", **{
        "metrics-port": 0, "topic-refresh-interval-s": 1})
    worker = WorkerProcess(["--config", str(spec)], tmp_path)
    try:
        worker.wait_for_log("mirror started")
        entry = worker.wait_for_log("topic filter selects no topic", timeout=20)
        assert (entry["source"], entry["whitelist"]) == ("east", base)
        status = _status(worker, f"m-{base}")
        assert status.selects_nothing == ("east",) and _state(status) == "stalled"
        create_topic(stack["source"].kafka.bootstrap_servers, base)
        worker.wait_for_log("topic filter selects topics again", timeout=20)
        assert _status(worker, f"m-{base}").selects_nothing == ()
    finally:
        assert worker.terminate() == 0, worker.stderr
