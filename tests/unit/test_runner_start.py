"""How --num.streams children start: forked from a parent with no other thread, spawned otherwise."""

import subprocess
import sys

from devstack import paths

SCRIPT = """
from confluent_kafka import Producer
from mirror_worker.runner import start_method
before = start_method()
producer = Producer({"bootstrap.servers": "127.0.0.1:9", "socket.timeout.ms": 1000})  # librdkafka's threads
print(before, start_method())
"""


def test_children_fork_from_a_single_threaded_parent_and_spawn_once_a_client_has_threads():
    # A fresh interpreter: pytest's own process may have threads of its own.
    out = subprocess.run([sys.executable, "-c", SCRIPT], cwd=paths.ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["fork", "spawn"]
