"""A test process that crashes leaves no server running (tests/conftest.py, _kill_left_running).

pytest-timeout ends a test process whose test overran and cannot be interrupted (os._exit: no fixture teardown
runs). A CI run lost a fault-test process that way: the six brokers of its fault stack ran on for the rest of the
run, starved the other tests, a second process overran, and the run ran out of its 90 minutes. A nested run here
crashes a test process that started a server, as pytest-timeout would, and the controller kills that server.
"""

from __future__ import annotations

import os
import subprocess
import sys

from devstack import paths
from devstack.process import ManagedProcess

PROBE = '''
import os
from pathlib import Path

from devstack.process import ManagedProcess


def test_crashes():
    home = Path(os.environ["PROBE_HOME"])
    ManagedProcess("probe", home).start(["bash", "-c", f"sleep 300; : {home}"])
    os._exit(1)  # as pytest-timeout ends a test process it cannot interrupt
'''


def outer_run_left_out() -> dict[str, str]:
    """This environment without what the run this test is part of set for its own processes."""
    from devstack.process import STARTED_LOG_ENV
    from tests.conftest import SHARED_ENV

    return {k: v for k, v in os.environ.items() if k not in (STARTED_LOG_ENV, SHARED_ENV)}


def test_the_servers_of_a_crashed_test_process_are_killed(tmp_path):
    (tmp_path / "test_probe.py").write_text(PROBE)
    home = tmp_path / "server"
    server = ManagedProcess("probe", home)
    try:
        run = subprocess.run(
            [sys.executable, "-m", "pytest", "-p", "tests.conftest", "-p", "no:cacheprovider", "-n", "1", "-q",
             str(tmp_path / "test_probe.py")],
            cwd=paths.ROOT, env={**outer_run_left_out(), "PROBE_HOME": str(home)}, capture_output=True, text=True,
            timeout=120)
        assert "node down" in run.stdout, run.stdout[-2000:] + run.stderr[-2000:]
        assert f"killed a server left running by gw0: {home}" in run.stdout, run.stdout[-2000:]
        assert not server.is_running()
    finally:
        server.kill()
