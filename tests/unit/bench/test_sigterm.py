"""A benchmark stopped by SIGTERM (`timeout`, a killed make) stops what it started.

The systems a benchmark measures run in sessions of their own (so that its stop reaches their whole process
group), which no signal to the benchmark reaches. Before, a SIGTERM ended the benchmark without its `finally`
blocks: a mirror it had launched went on running against brokers that were gone, using a share of the two
cores through the next benchmark's measurements. Real processes here; the stack is one already "running"
(bench_stack reuses it), so no broker starts.
"""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]

SCRIPT = """
import subprocess, sys, time
import bench.common as common

class RunningStack:
    def __init__(self, root):
        pass
    def is_up(self):
        return True

common.Stack = RunningStack
with common.bench_stack(kafka_only=True):
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True)
    try:
        print(child.pid, flush=True)
        time.sleep(120)
    finally:
        child.kill()
        child.wait()
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_sigterm_to_a_benchmark_runs_its_finally_blocks_and_stops_the_system_it_launched():
    bench = subprocess.Popen([sys.executable, "-c", SCRIPT], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    child = int(bench.stdout.readline())
    try:
        assert _alive(child)
        bench.send_signal(signal.SIGTERM)
        assert bench.wait(30) == 128 + signal.SIGTERM
        deadline = time.monotonic() + 10
        while _alive(child) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(child), "the launched system outlived the benchmark"
    finally:
        bench.kill()
        try:
            os.kill(child, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_the_previous_sigterm_handler_is_back_after_the_stack():
    import bench.common as common

    class RunningStack:
        def __init__(self, root):
            pass

        def is_up(self):
            return True

    before = signal.getsignal(signal.SIGTERM)
    original = common.Stack
    common.Stack = RunningStack
    try:
        with common.bench_stack(kafka_only=True):
            assert signal.getsignal(signal.SIGTERM) is not before
        assert signal.getsignal(signal.SIGTERM) is before
    finally:
        common.Stack = original
