"""devstack.airflow without starting Airflow: the spec `make run` writes for it (devstack.demo), the environment
it starts with, and the `airflow` entry of stack.json. (tests/e2e/ starts the real one.)"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import yaml

from devstack import Stack
from devstack.airflow import Airflow, _set_contract_entry
from devstack.demo import stack_spec
from devstack.paths import ROOT
from mirror_worker.config.spec import load_entries

PORTS = {"source": (19001, 19002), "destination": (29001, 29002)}


def _configured_stack(root: Path) -> Stack:
    """A stack whose nodes have their ports assigned (as `configure()` leaves them), none running."""
    stack = Stack(root)
    for name, (broker, registry) in PORTS.items():
        for node, ports in ((stack[name].kafka, {"broker_port": broker}), (stack[name].registry, {"port": registry})):
            node.home.mkdir(parents=True)
            (node.home / "node.json").write_text(json.dumps(ports))
    return stack


def test_the_demo_spec_keeps_the_mirrors_and_points_at_the_stack(tmp_path):
    stack = _configured_stack(tmp_path)
    spec = tmp_path / "mirrors.yaml"
    spec.write_text(stack_spec(stack))

    entries = {e.name: e for e in load_entries(spec)}
    template = {e.name for e in load_entries(ROOT / "config" / "mirrors.yaml")}
    assert set(entries) == template  # dags/ holds one file per mirror of the template
    demo = entries["demo"].config
    assert demo.sources[0].consumer["bootstrap.servers"] == "127.0.0.1:19001"
    assert demo.metrics_port  # the dashboard reads the worker's halts and schema conflicts from it
    raw = yaml.safe_load(spec.read_text())
    for group in raw["groups"]:
        assert group["destination"]["kafka"]["bootstrap.servers"] == "127.0.0.1:29001"
        if group["destination"].get("schema-registry-url"):
            assert group["destination"]["schema-registry-url"] == "http://127.0.0.1:29002/apis/ccompat/v7"


def test_environment_configures_one_self_contained_airflow(tmp_path):
    stack = _configured_stack(tmp_path / "stack")
    airflow = Airflow(stack, root=tmp_path / "af", spec=tmp_path / "af" / "mirrors.yaml", dags_folder=tmp_path / "dags")
    airflow.home.mkdir(parents=True)
    airflow.ensure_password()
    env = airflow.environment({"api_port": 40001, "worker_log_port": 40002, "trigger_log_port": 40003})

    assert env["PATH"].split(":")[0] == str(Path(sys.executable).parent)  # standalone runs `airflow` from PATH
    assert env["AIRFLOW_HOME"] == str(airflow.home)
    assert env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] == f"sqlite:///{airflow.home / 'airflow.db'}"
    assert env["AIRFLOW__CORE__EXECUTOR"] == "LocalExecutor"
    assert env["AIRFLOW__CORE__DAGS_FOLDER"] == str((tmp_path / "dags").resolve())
    assert env["AIRFLOW__CORE__PLUGINS_FOLDER"] == str(ROOT / "plugins")
    assert env["KAFKA_MIRROR_SPEC"] == str(airflow.spec)
    assert env["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"] == "http://127.0.0.1:40001/execution/"
    api = json.loads(env["AIRFLOW_CONN_AIRFLOW_API"])
    assert (api["host"], api["port"], api["login"], api["password"]) == ("127.0.0.1", 40001, "admin", airflow.password)
    assert json.loads(env["AIRFLOW_CONN_SPARK_DEFAULT"])["host"] == "local[*]"
    # Secrets and password survive a restart: tokens and the login stay valid.
    again = airflow.environment({"api_port": 40001, "worker_log_port": 40002, "trigger_log_port": 40003})
    assert again["AIRFLOW__API_AUTH__JWT_SECRET"] == env["AIRFLOW__API_AUTH__JWT_SECRET"]
    assert json.loads(airflow.password_file.read_text()) == {"admin": airflow.password}


def test_only_an_airflow_on_the_stack_root_is_the_stack_service(tmp_path):
    stack = Stack(tmp_path / "stack")
    assert Airflow(stack).process.home == stack.service("airflow").home
    assert Airflow(stack, root=tmp_path / "own").process.home == tmp_path / "own" / "services" / "airflow"


def test_the_contract_entry_is_added_and_removed_keeping_the_rest(tmp_path):
    stack = Stack(tmp_path)
    clusters = {"source": {"bootstrap_servers": "a"}, "destination": {"bootstrap_servers": "b"}}
    stack.stack_json.write_text(json.dumps(clusters))
    entry = {"url": "http://127.0.0.1:1", "username": "admin", "password_file": "/x"}

    _set_contract_entry(stack, entry)
    assert json.loads(stack.stack_json.read_text()) == {**clusters, "airflow": entry}
    _set_contract_entry(stack, None)
    assert json.loads(stack.stack_json.read_text()) == clusters
