"""MirrorWorkerOperator's supervision of a real child process (a small script in the worker's role):
bounded stop and pause stop by SIGTERM -> success, a crash -> failure with stderr, on_kill stops it."""

from __future__ import annotations

import sys
import threading
import time

import pytest

from tests.airflow_support import ROOT  # noqa: F401

import mirror_airflow.operators.worker as operators
from mirror_airflow.exceptions import WorkerFailedError

# Stands in for `python -m mirror_worker`: JSON lines on stdout, SIGTERM -> "flush" and exit 0.
GRACEFUL = """
import json, signal, sys, time
stop = False
def on_term(*_):
    global stop
    stop = True
signal.signal(signal.SIGTERM, on_term)
print(json.dumps({"msg": "mirror started"}), flush=True)
while not stop:
    time.sleep(0.05)
print(json.dumps({"msg": "stopped", "committed": True}), flush=True)
sys.exit(0)
"""
CRASH = "import sys; print('mirror_worker: destination unreachable', file=sys.stderr); sys.exit(3)"


class ScriptWorker(operators.MirrorWorkerOperator):
    def __init__(self, *, script: str, **kwargs):
        super().__init__(spec_path="/unused.yaml", mirror_name="m", poll_interval_s=0.1, **kwargs)
        self.script = script

    def worker_argv(self) -> list[str]:
        return [sys.executable, "-c", self.script]


class FakeApi:
    def __init__(self, paused_after: int):
        self.calls, self.paused_after = 0, paused_after

    def is_paused(self, dag_id: str) -> bool:
        self.calls += 1
        return self.calls > self.paused_after


def test_bounded_run_stops_the_worker_gracefully(capfd):
    op = ScriptWorker(script=GRACEFUL, task_id="w", stop_after_s=1)
    summary = op.execute({"params": {}})
    assert summary["exit_code"] == 0 and summary["reason"] == "stop: stop_after_s reached"
    out, err = capfd.readouterr()
    assert 'worker: {"msg": "stopped", "committed": true}' in out + err  # the worker's log reached the task log


def test_stop_after_s_from_the_dag_param():
    op = ScriptWorker(script=GRACEFUL, task_id="w")
    assert op.execute({"params": {"stop_after_s": 1}})["reason"] == "stop: stop_after_s reached"


def test_pause_seen_through_the_api_stops_the_worker(monkeypatch):
    api = FakeApi(paused_after=2)
    monkeypatch.setattr(operators, "api_from_connection", lambda conn_id, log: api)
    op = ScriptWorker(script=GRACEFUL, task_id="w", pause_check_interval_s=0.2)
    summary = op.execute({"params": {}})
    assert summary == {**summary, "exit_code": 0, "reason": "stop: DAG paused"}
    assert api.calls == 3


def test_api_errors_do_not_stop_a_healthy_worker(monkeypatch):
    class Down:
        def is_paused(self, dag_id):
            raise ConnectionError("api down")

    monkeypatch.setattr(operators, "api_from_connection", lambda conn_id, log: Down())
    op = ScriptWorker(script=GRACEFUL, task_id="w", pause_check_interval_s=0.2, stop_after_s=1.5)
    assert op.execute({"params": {}})["reason"] == "stop: stop_after_s reached"


def test_a_crash_fails_the_task_with_the_workers_error():
    op = ScriptWorker(script=CRASH, task_id="w")
    with pytest.raises(WorkerFailedError, match="exited with code 3: mirror_worker: destination unreachable"):
        op.execute({"params": {}})


def test_on_kill_stops_the_worker_gracefully():
    op = ScriptWorker(script=GRACEFUL, task_id="w")
    result: dict = {}
    thread = threading.Thread(target=lambda: result.update(op.execute({"params": {}})))
    thread.start()
    deadline = time.monotonic() + 30
    while op._worker is None and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.5)
    op.on_kill()
    thread.join(30)
    assert op._worker.proc.returncode == 0  # SIGTERM handled: the worker's graceful path


def test_the_worker_stops_gracefully_when_the_task_process_is_killed(tmp_path):
    """kill -9 of the task process: the kernel's parent-death signal (SIGTERM) still reaches the worker."""
    import os
    import signal
    import subprocess

    marker, started = tmp_path / "stopped", tmp_path / "started"
    worker_script = GRACEFUL.replace(
        'print(json.dumps({"msg": "mirror started"}), flush=True)', f'open({str(started)!r}, "w").close()'
    ).replace(  # before any output: the dead task's pipe makes the worker's next print raise
        'print(json.dumps({"msg": "stopped"', f'open({str(marker)!r}, "w").close()\nprint(json.dumps({{"msg": "stopped"'
    )
    task_script = f"""
import tests.airflow_support
from tests.unit.mirror_airflow.operators.test_worker_supervision import ScriptWorker
ScriptWorker(script={worker_script!r}, task_id="w").execute({{"params": {{}}}})
"""
    task = subprocess.Popen([sys.executable, "-c", task_script], cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while not started.exists():
            assert task.poll() is None and time.monotonic() < deadline, "the worker did not start"
            time.sleep(0.2)
        os.kill(task.pid, signal.SIGKILL)
        task.wait(10)
        deadline = time.monotonic() + 30
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert marker.exists(), "the orphaned worker did not get its SIGTERM"
    finally:
        if task.poll() is None:
            task.kill()


# A worker still starting: no SIGTERM handler yet, so SIGTERM ends it by the default action (exit -15).
STARTING = "import time; time.sleep(60)"


def test_a_pause_that_ends_a_worker_still_starting_is_a_clean_stop(monkeypatch):
    monkeypatch.setattr(operators, "api_from_connection", lambda conn_id, log: FakeApi(paused_after=0))
    op = ScriptWorker(script=STARTING, task_id="w", pause_check_interval_s=0.2)
    summary = op.execute({"params": {}})
    assert summary["exit_code"] == 0 and summary["reason"] == "stop: DAG paused"


def test_a_worker_killed_by_someone_else_still_fails_the_task():
    script = "import os, signal, time; time.sleep(0.3); os.kill(os.getpid(), signal.SIGTERM); time.sleep(5)"
    op = ScriptWorker(script=script, task_id="w")
    with pytest.raises(WorkerFailedError):
        op.execute({"params": {}})
