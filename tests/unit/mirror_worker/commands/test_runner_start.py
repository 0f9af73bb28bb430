"""How --num.streams children start (forked from a parent with no other thread, spawned otherwise), and which
signals stop a worker cleanly."""

import signal
import subprocess
import sys

import pytest

from devstack import paths
from mirror_worker.commands import runner

SCRIPT = """
from confluent_kafka import Producer
from mirror_worker.commands.runner import start_method
before = start_method()
producer = Producer({"bootstrap.servers": "127.0.0.1:9", "socket.timeout.ms": 1000})  # librdkafka's threads
print(before, start_method())
"""


def test_children_fork_from_a_single_threaded_parent_and_spawn_once_a_client_has_threads():
    # A fresh interpreter: pytest's own process may have threads of its own.
    out = subprocess.run([sys.executable, "-c", SCRIPT], cwd=paths.ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["fork", "spawn"]


WATCH = """
import os, signal, threading
from mirror_worker.commands.runner import stop_with_parent
stopped = threading.Event()
signal.signal(signal.SIGTERM, lambda *_: stopped.set())
stop_with_parent(os.getppid() + 1_000_000, "m", interval_s=0.05)  # a parent that is already gone
print(stopped.wait(10))
"""


def test_a_child_whose_parent_is_gone_already_stops_by_the_pid_watch():
    # The parent-death signal covers a parent dying later; the watch covers one that died before it was set.
    out = subprocess.run([sys.executable, "-c", WATCH], cwd=paths.ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True"]



@pytest.fixture
def handlers():
    """The process's stop handlers, put back after the test."""
    saved = {stop: signal.getsignal(stop) for stop in runner._STOP_SIGNALS}
    yield
    for stop, handler in saved.items():
        signal.signal(stop, handler)


def _handler(_signum, _frame):
    pass


def test_a_hangup_stops_the_worker_like_a_sigterm(handlers):
    signal.signal(signal.SIGHUP, signal.SIG_DFL)  # as from a terminal (this run may be under nohup: SIG_IGN)
    runner._handle_stops(_handler)
    stops = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
    assert {stop: signal.getsignal(stop) for stop in stops} == dict.fromkeys(stops, _handler)


def test_a_worker_started_under_nohup_keeps_ignoring_hangups(handlers):
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    runner._handle_stops(_handler)
    assert signal.getsignal(signal.SIGHUP) == signal.SIG_IGN and signal.getsignal(signal.SIGTERM) is _handler
