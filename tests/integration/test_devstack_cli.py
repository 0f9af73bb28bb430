"""`make stack-up` / `stack-status` / `stack-down` through the same CLI, on a stack of its own."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from devstack import CLUSTERS, Stack
from devstack.net import is_listening
from devstack.paths import ROOT
from devstack.process import is_alive

pytestmark = pytest.mark.integration


def _devstack(root, *args):
    return subprocess.run(
        [sys.executable, "-m", "devstack", "--root", str(root), *args],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )


def test_up_twice_status_and_down_leave_nothing_behind(tmp_path):
    root = tmp_path / "stack"
    up = _devstack(root, "up")
    assert up.returncode == 0, up.stderr
    assert "stack started" in up.stdout

    contract = json.loads((root / "stack.json").read_text())
    assert set(contract) == set(CLUSTERS)
    for cluster in CLUSTERS:
        assert set(contract[cluster]) == {"bootstrap_servers", "schema_registry_url"}
        assert contract[cluster]["bootstrap_servers"].startswith("127.0.0.1:")
        assert contract[cluster]["schema_registry_url"].endswith("/apis/ccompat/v7")

    stack = Stack(root)
    pids = [p.pid() for p in stack.processes()]
    ports = [stack[c].kafka.port for c in CLUSTERS] + [stack[c].registry.port for c in CLUSTERS]
    assert all(pids) and all(is_listening(p) for p in ports)

    again = _devstack(root, "up")
    assert again.returncode == 0 and "already running" in again.stdout
    assert [p.pid() for p in stack.processes()] == pids  # no second stack

    status = _devstack(root, "status")
    assert status.returncode == 0 and status.stdout.count("running pid") == 4

    down = _devstack(root, "down")
    assert down.returncode == 0, down.stderr
    assert not (root / "stack.json").exists()
    for pid in pids:
        assert not is_alive(pid), f"pid {pid} still alive after stack-down"
    assert not [p for p in ports if is_listening(p)]
    assert _devstack(root, "status").returncode == 1

