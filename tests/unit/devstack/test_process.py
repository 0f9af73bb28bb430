"""ManagedProcess on real child processes: pid tracking, whole-group stop, no signal to a stranger."""

from __future__ import annotations

import base64
import contextlib
import os
import signal
import subprocess
import sys
import time

import pytest

from devstack.errors import StackError
from devstack.kafka import new_cluster_id
from devstack.process import ManagedProcess, is_alive


def _group_pids(pgid: int) -> list[int]:
    out = subprocess.run(["ps", "-o", "pid=", "-g", str(pgid)], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


def test_stop_terminates_the_whole_process_group(tmp_path):
    proc = ManagedProcess("sleeper", tmp_path)
    # The parent ignores SIGTERM, so only the SIGKILL escalation can stop it; its child does not.
    pid = proc.start(["bash", "-c", f"trap '' TERM; sleep 300 & wait # {tmp_path}"])
    deadline = time.monotonic() + 5
    while len(_group_pids(pid)) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    members = _group_pids(pid)
    assert proc.pid() == pid and len(members) == 2

    proc.stop(timeout=1.0)

    assert not proc.is_running()
    assert not any(is_alive(p) for p in members)
    assert not proc.pid_file.exists()


def test_stop_reaches_descendants_that_left_the_process_group(tmp_path):
    # As Airflow does for each task: the grandchild moves to a process group of its own.
    proc = ManagedProcess("tree", tmp_path)
    grandchild = tmp_path / "grandchild.pid"
    script = f"import os, time; os.setpgid(0, 0); open({str(grandchild)!r}, 'w').write(str(os.getpid())); time.sleep(300)"
    root = proc.start(["bash", "-c", f"{sys.executable} -c \"{script}\" & wait # {tmp_path}"])
    deadline = time.monotonic() + 10
    while not (grandchild.is_file() and grandchild.read_text()) and time.monotonic() < deadline:
        time.sleep(0.05)
    pid = int(grandchild.read_text())
    try:
        assert is_alive(pid) and os.getpgid(pid) != proc.pid()

        proc.stop(timeout=5.0)

        assert not is_alive(pid)
    finally:
        for group in (root, pid):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(group, signal.SIGKILL)


def test_pid_file_of_an_unrelated_process_is_not_trusted(tmp_path):
    proc = ManagedProcess("stranger", tmp_path)
    stranger = subprocess.Popen(["sleep", "30"])
    try:
        proc.pid_file.write_text(f"{stranger.pid}\n")
        assert proc.pid() is None
        proc.stop()  # must not signal the stranger
        assert stranger.poll() is None
    finally:
        stranger.kill()
        stranger.wait()


def test_start_refuses_a_command_that_does_not_name_its_home(tmp_path):
    with pytest.raises(StackError, match="must name its home"):
        ManagedProcess("anonymous", tmp_path).start(["sleep", "1"])


def test_cluster_id_is_16_bytes_urlsafe_base64_without_padding():
    ids = {new_cluster_id() for _ in range(2000)}  # about 30 would start with "-" if allowed
    assert len(ids) == 2000
    for cluster_id in ids:
        assert len(cluster_id) == 22 and "=" not in cluster_id and not cluster_id.startswith("-")
        assert len(base64.urlsafe_b64decode(cluster_id + "==")) == 16


def test_exited_follows_the_exit_status_of_a_process_started_here(tmp_path):
    proc = ManagedProcess("short", tmp_path)
    proc.start(["bash", "-c", f"sleep 0.5 # {tmp_path}"])
    assert not proc.exited()
    deadline = time.monotonic() + 10
    while not proc.exited() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert proc.exited() and not proc.is_running()
    assert "exited with status 0" in proc.exit_report()


def test_the_servers_a_test_process_left_running_are_killed_from_its_log_but_those_kept(tmp_path, monkeypatch):
    from devstack.process import STARTED_LOG_ENV, kill_started

    log = tmp_path / "started-gw3.log"
    monkeypatch.setenv(STARTED_LOG_ENV, str(log))
    left, kept, stopped = (ManagedProcess(name, tmp_path / name) for name in ("left", "stack/kept", "stopped"))
    pids = [process.start(["bash", "-c", f"sleep 300 # {process.home}"]) for process in (left, kept, stopped)]
    stopped.stop(timeout=1.0)  # its test's teardown ran: nothing to kill
    try:
        assert log.read_text().split() == [str(p.home) for p in (left, kept, stopped)]
        assert kill_started(log, keep=tmp_path / "stack") == [str(left.home)]
        assert not is_alive(pids[0]) and kept.is_running()
    finally:
        kept.stop(timeout=1.0)
        left.stop(timeout=1.0)
