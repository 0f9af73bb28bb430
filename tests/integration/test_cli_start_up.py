"""The worker's first seconds against clusters nobody answers for (issue 44): one line per unreachable cluster,
naming it; librdkafka's repeated connection errors folded; a stop honoured at once during the wait.

No Kafka: every cluster is a closed local port. Marked integration as the other tests running the worker
as a subprocess are.
"""

from __future__ import annotations

import collections
import re
import signal
import time

import pytest

from tests.worker_util import WorkerProcess

pytestmark = pytest.mark.integration

SPEC = """\
groups:
  - name: g
    sources:
      - {name: east, kafka: {bootstrap.servers: "127.0.0.1:1"}}
      - {name: west, kafka: {bootstrap.servers: "127.0.0.1:3"}}
    destination: {kafka: {bootstrap.servers: "127.0.0.1:2"}}
    mirrors:
      - name: m
        whitelist: "orders"
        startup-timeout-s: TIMEOUT
"""


def _worker(tmp_path, timeout_s: int) -> WorkerProcess:
    spec = tmp_path / "mirrors.yaml"
    spec.write_text(SPEC.replace("TIMEOUT", str(timeout_s)))
    return WorkerProcess(["--config", str(spec), "--mirror", "m"], tmp_path)


def _kind(entry: dict) -> tuple:
    """A log line without what changes between two reports of one failure (times, client instance numbers)."""
    text = re.sub(r"\d+ms|#\w+-\d+", "N", f"{entry.get('msg')} {entry.get('error', '')}")
    return entry.get("logger"), entry.get("cluster"), text


def test_every_unreachable_cluster_is_named_on_its_own_line_and_repeated_errors_are_folded(tmp_path):
    worker = _worker(tmp_path, 4)
    try:
        assert worker.wait(90) == 2
    finally:
        worker.stop_quietly()
    lines = worker.stderr.strip().splitlines()
    assert [line.split(": ", 2)[1] for line in lines] == [
        "destination cluster unreachable within 4s", "source 'east' cluster unreachable within 4s",
        "source 'west' cluster unreachable within 4s"], lines
    # Before: ~20 client errors and as many librdkafka lines a second for each cluster. Folded, each kind of
    # failure is logged once (a summary of the repeats follows only once a minute).
    kinds = collections.Counter(_kind(entry) for entry in worker.logs())
    assert max(kinds.values()) == 1, kinds.most_common(3)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_during_the_start_up_wait_ends_the_worker_at_once_as_a_clean_stop(tmp_path, sig):
    worker = _worker(tmp_path, 120)
    try:
        worker.wait_for_log("client error", timeout=60)  # waiting for the clusters now
        stopped = time.monotonic()
        code = worker.terminate(timeout=60, sig=sig)
        took = time.monotonic() - stopped
    finally:
        worker.stop_quietly()
    assert code == 0, worker.stderr
    assert took < 10, f"exited {took:.1f}s after {sig.name}"  # a behaviour bound (the wait was 120 s), not a timing
    assert worker.stderr == ""
    assert any(e.get("msg") == "stopped before start" for e in worker.logs())
