"""Every bad input: one line on stderr naming the problem, exit 2, nothing produced."""

from __future__ import annotations

import subprocess
import sys

import pytest

from devstack.paths import ROOT
from tests.kafka_util import create_topic, topic_exists
from tests.worker_util import write_properties

pytestmark = pytest.mark.integration


def _run(args: list[str], timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mirror_worker", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout, stdin=subprocess.DEVNULL)


@pytest.fixture
def files(stack, tmp_path):
    consumer = write_properties(tmp_path / "source.properties", {
        "bootstrap.servers": stack["source"].kafka.bootstrap_servers, "group.id": "bad-input"})
    producer = write_properties(tmp_path / "destination.properties", {
        "bootstrap.servers": stack["destination"].kafka.bootstrap_servers})
    return {"consumer": consumer, "producer": producer, "dir": tmp_path}


CASES = {
    "invalid regex": (["--whitelist", "orders("],
                      "whitelist: invalid regex 'orders(': missing ), unterminated subpattern at position 6"),
    "both lists": (["--whitelist", "a", "--blacklist", "b"], "exactly one of --whitelist and --blacklist is required"),
    "neither list": ([], "exactly one of --whitelist and --blacklist is required"),
    "unknown flag": (["--whitelist", "a", "--num.stream", "2"], "unrecognized arguments: --num.stream 2"),
    "bad number": (["--whitelist", "a", "--queue.size", "lots"], "argument --queue.size: invalid int value: 'lots'"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_flags(files, case):
    extra, message = CASES[case]
    result = _run(["--consumer.config", files["consumer"], "--producer.config", files["producer"], *extra])
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [f"mirror_worker: {message}"]


def test_missing_config_file(files):
    result = _run(["--consumer.config", str(files["dir"] / "nope.properties"), "--producer.config", files["producer"],
                   "--whitelist", "a"])
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [f"mirror_worker: config file not found: {files['dir'] / 'nope.properties'}"]


def test_unreadable_config_file(files):
    result = _run(["--consumer.config", str(files["dir"]), "--producer.config", files["producer"], "--whitelist", "a"])
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [f"mirror_worker: config file unreadable: {files['dir']}: IsADirectoryError"]


def test_unknown_client_key(files):
    bad = write_properties(files["dir"] / "bad.properties", {"bootstrap.servers": "127.0.0.1:1", "lingr.ms": "5"})
    result = _run(["--consumer.config", files["consumer"], "--producer.config", bad, "--whitelist", "a"])
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [f"mirror_worker: --producer.config {bad}: unknown key lingr.ms"]


def test_unknown_spec_key_names_mirror_and_key(stack, tmp_path):
    spec = tmp_path / "mirrors.yaml"
    spec.write_text(_spec(stack["source"].kafka.bootstrap_servers, stack["destination"].kafka.bootstrap_servers,
                          "whitelist: orders\n        queue-sise: 10"))
    result = _run(["--config", str(spec), "--mirror", "m1"])
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [f"mirror_worker: {spec}: mirror 'm1': queue-sise: unknown key (did you mean queue-size?)"]


def test_unreachable_source_after_a_bounded_wait_produces_nothing(stack, tmp_path, topic_name):
    topic = topic_name("never")
    spec = tmp_path / "mirrors.yaml"
    spec.write_text(_spec("127.0.0.1:1", stack["destination"].kafka.bootstrap_servers,
                          f"whitelist: {topic}\n        startup-timeout-s: 3\n        heartbeat-topic: hb-{topic}"))
    result = _run(["--config", str(spec), "--mirror", "m1"])
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("mirror_worker: source 'source' cluster unreachable within 3s")
    assert not topic_exists(stack["destination"].kafka.bootstrap_servers, f"hb-{topic}")


def test_mirror_into_itself_is_refused(stack, tmp_path, topic_name):
    bootstrap = stack["source"].kafka.bootstrap_servers
    topic = topic_name("self")
    create_topic(bootstrap, topic)
    consumer = write_properties(tmp_path / "c.properties", {"bootstrap.servers": bootstrap, "group.id": "self"})
    producer = write_properties(tmp_path / "p.properties", {"bootstrap.servers": bootstrap})
    result = _run(["--consumer.config", consumer, "--producer.config", producer, "--whitelist", topic])
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"mirror_worker: mirror would write topic {topic!r} into itself (source and destination are the same cluster)"
    ]


def test_same_cluster_cycle_is_refused(stack, tmp_path, topic_name):
    bootstrap = stack["source"].kafka.bootstrap_servers
    topic = topic_name("loop")
    create_topic(bootstrap, topic)
    consumer = write_properties(tmp_path / "c.properties", {"bootstrap.servers": bootstrap, "group.id": "loop"})
    producer = write_properties(tmp_path / "p.properties", {"bootstrap.servers": bootstrap})
    result = _run(["--consumer.config", consumer, "--producer.config", producer, "--whitelist", f"{topic}|.*\\.{topic}",
                   "--prefix", "copy."])
    assert result.returncode == 2
    assert f"mirror would form a cycle: {topic!r} -> 'copy.{topic}'" in result.stderr
    assert not topic_exists(bootstrap, f"copy.{topic}")


def _spec(source: str, destination: str, mirror_settings: str) -> str:
    return f"""
groups:
  - name: g
    source: {{name: source, kafka: {{bootstrap.servers: "{source}"}}}}
    destination: {{kafka: {{bootstrap.servers: "{destination}"}}}}
    mirrors:
      - name: m1
        {mirror_settings}
"""
