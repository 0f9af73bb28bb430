"""mirror_airflow as an Airflow provider: its get_provider_info() passes Airflow's schema, and with the
official Kafka provider installed both providers load, the `kafka` connection type staying the official
provider's (our KafkaHook builds on it and declares no second one).

ProvidersManager is a process-wide singleton that reads installed distributions, so the check runs in a
fresh interpreter. When the package is not installed (`make setup` installs it editable), the test gives
that interpreter the distribution metadata pip would write from pyproject.toml (name, version, entry
points): what is checked is still the pyproject's entry point and the package's own code.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from importlib.metadata import PackageNotFoundError, distribution

from tests.airflow_support import PLUGINS, ROOT

PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
PACKAGE = PYPROJECT["project"]["name"]

PROBE = """
import json, sys
from airflow.providers_manager import ProvidersManager

manager = ProvidersManager()
ours, official = sys.argv[1], "apache-airflow-providers-apache-kafka"
found = {name: manager.providers[name] for name in (ours, official) if name in manager.providers}
hook = manager.hooks.get("kafka")
print(json.dumps({
    "providers": {name: info.version for name, info in found.items()},
    "kafka_hook": [hook.hook_class_name, hook.package_name] if hook else None,
    "our_connection_types": [h.connection_type for h in manager.hooks.values() if h and h.package_name == ours],
    "notifications": sorted(n for n in manager.notification if n.startswith("mirror_airflow.")),
    "triggers": sorted(t.trigger_class_name for t in manager.trigger if t.package_name == ours),
}))
"""


def _installed() -> bool:
    try:
        distribution(PACKAGE)
    except PackageNotFoundError:
        return False
    return True


def _metadata_dir(tmp_path):
    """What an install of this pyproject writes for discovery: METADATA and entry_points.txt."""
    project = PYPROJECT["project"]
    dist_info = tmp_path / f"{PACKAGE.replace('-', '_')}-{project['version']}.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {PACKAGE}\nVersion: {project['version']}\n")
    groups = project["entry-points"]
    (dist_info / "entry_points.txt").write_text("".join(
        f"[{group}]\n" + "".join(f"{name} = {target}\n" for name, target in points.items())
        for group, points in groups.items()))
    return tmp_path


def test_the_entry_point_names_get_provider_info():
    assert not PACKAGE.startswith("apache-airflow-providers-")  # reserved for the ASF's
    assert PYPROJECT["project"]["entry-points"]["apache_airflow_provider"] == {
        "provider_info": "mirror_airflow.get_provider_info:get_provider_info"}
    assert PYPROJECT["tool"]["setuptools"]["packages"]["find"]["where"] == [".", "plugins"]


def test_provider_info_passes_airflows_schema_and_names_importable_modules():
    import importlib
    from importlib.resources import files

    import jsonschema

    from mirror_airflow.get_provider_info import get_provider_info

    info = get_provider_info()
    schema = json.loads(files("airflow").joinpath("provider_info.schema.json").read_text())
    jsonschema.validate(info, schema)
    assert info["package-name"] == PACKAGE and info["versions"] == [PYPROJECT["project"]["version"]]
    assert "connection-types" not in info  # `kafka` is the official provider's, `http` the http provider's
    for role in ("hooks", "operators", "sensors", "triggers"):
        for module in info[role][0]["python-modules"]:
            importlib.import_module(module)
    for path in info["notifications"]:
        module, name = path.rsplit(".", 1)
        assert callable(getattr(importlib.import_module(module), name))


def test_our_kafka_hook_builds_on_the_official_one():
    from airflow.providers.apache.kafka.hooks.base import KafkaBaseHook

    from mirror_airflow.hooks.kafka import KafkaHook

    assert issubclass(KafkaHook, KafkaBaseHook)
    assert KafkaHook.conn_type == "kafka" and KafkaHook("k").kafka_conn_id == "k"
    assert KafkaHook(kafka_config_id="k2").kafka_conn_id == "k2"  # as Airflow builds hooks (conn_name_attr)
    assert KafkaHook().kafka_conn_id == "kafka_default"


def test_both_providers_load_and_kafka_connections_stay_the_official_providers(tmp_path):
    pythonpath = [str(PLUGINS), str(ROOT)]
    if not _installed():
        pythonpath.insert(0, str(_metadata_dir(tmp_path)))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(pythonpath)}
    done = subprocess.run([sys.executable, "-c", PROBE, PACKAGE], capture_output=True, text=True, env=env,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["providers"] == {PACKAGE: PYPROJECT["project"]["version"],
                                  "apache-airflow-providers-apache-kafka": "2.1.0"}
    assert found["kafka_hook"] == ["airflow.providers.apache.kafka.hooks.base.KafkaBaseHook",
                                   "apache-airflow-providers-apache-kafka"]
    assert found["our_connection_types"] == []
    assert found["notifications"] == ["mirror_airflow.notifications.alerts.EmailNotifier",
                                      "mirror_airflow.notifications.alerts.SlackWebhookNotifier",
                                      "mirror_airflow.notifications.alerts.WebhookNotifier"]
    assert found["triggers"] == ["mirror_airflow.triggers.lag"]


def test_a_kafka_connection_gets_the_official_hook_from_the_task_sdk():
    from airflow.sdk import Connection

    connection = Connection(conn_id="k", conn_type="kafka", extra=json.dumps({"bootstrap.servers": "h:1"}))
    hook = connection.get_hook()
    assert f"{type(hook).__module__}.{type(hook).__name__}" == "airflow.providers.apache.kafka.hooks.base.KafkaBaseHook"
