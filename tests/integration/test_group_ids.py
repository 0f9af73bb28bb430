"""A mirror's consumer group is one id, used by the worker and by everything that checks it (the catch-up
lease, the lag sensor, stop_mirror, failover): settings that would give the worker another id, or one id
to several mirrors, are refused at start with one line naming the key (exit 2), on the real stack."""

from __future__ import annotations

import pytest

from tests.kafka_util import create_topic
from tests.worker_util import WorkerProcess, write_mirror_spec, write_properties

pytestmark = pytest.mark.integration


def _refused(worker: WorkerProcess) -> str:
    try:
        code = worker.wait(30)
    finally:
        worker.stop_quietly()
    line = worker.stderr.strip()
    assert (code, "\n" in line) == (2, False), line[-2000:]
    return line


def test_group_id_in_a_source_kafka_mapping_is_refused(stack, tmp_path, topic_name):
    topic = topic_name("gid")
    create_topic(stack["source"].kafka.bootstrap_servers, topic)
    spec = write_mirror_spec(tmp_path / "spec.yaml", stack, "gid", topic, source_kafka={"group.id": f"own-{topic}"})
    line = _refused(WorkerProcess(["--config", str(spec), "--mirror", "gid"], tmp_path))
    assert "source 'east' kafka: group.id:" in line and "group-id" in line, line


def _two_mirrors(stack, tmp_path, topic: str, settings: str = "", mirror_keys: str = ""):
    """A spec of two mirrors `one` and `two` of `topic` in one group; `settings` and `mirror_keys`: YAML flow
    entries for the group's settings and for each mirror."""
    src, dst = stack["source"].kafka.bootstrap_servers, stack["destination"].kafka.bootstrap_servers
    create_topic(src, topic)
    spec = tmp_path / "spec.yaml"
    spec.write_text(f"""
groups:
  - name: g
    source: {{name: east, kafka: {{bootstrap.servers: "{src}"}}}}
    destination: {{kafka: {{bootstrap.servers: "{dst}"}}}}
    settings: {{{settings}}}
    mirrors:
      - {{name: one, whitelist: "{topic}", prefix: "one.", {mirror_keys}}}
      - {{name: two, whitelist: "{topic}", prefix: "two.", {mirror_keys}}}
""")
    return spec


def test_group_id_in_group_settings_is_refused(stack, tmp_path, topic_name):
    topic = topic_name("gid")
    spec = _two_mirrors(stack, tmp_path, topic, settings=f"group-id: shared-{topic}")
    line = _refused(WorkerProcess(["--config", str(spec), "--mirror", "one"], tmp_path))
    assert "group settings: group-id:" in line, line


def test_two_mirrors_with_one_group_id_are_refused(stack, tmp_path, topic_name):
    topic = topic_name("gid")
    spec = _two_mirrors(stack, tmp_path, topic, mirror_keys=f"group-id: shared-{topic}")
    line = _refused(WorkerProcess(["--config", str(spec), "--mirror", "two"], tmp_path))
    assert f"group-id: shared-{topic} is also mirror 'one'" in line, line


def test_consumer_configs_with_different_group_ids_are_refused(stack, tmp_path, topic_name):
    src, dst = stack["source"].kafka.bootstrap_servers, stack["destination"].kafka.bootstrap_servers
    topic = topic_name("gid")
    create_topic(src, topic)
    east = write_properties(tmp_path / "east.properties", {"bootstrap.servers": src, "group.id": f"a-{topic}"})
    west = write_properties(tmp_path / "west.properties", {"bootstrap.servers": src, "group.id": f"b-{topic}"})
    producer = write_properties(tmp_path / "destination.properties", {"bootstrap.servers": dst})
    line = _refused(WorkerProcess(["--consumer.config", east, "--consumer.config", west, "--producer.config",
                                   producer, "--whitelist", topic, "--prefix", "m."], tmp_path))
    assert f"--consumer.config {west}: group.id:" in line, line
