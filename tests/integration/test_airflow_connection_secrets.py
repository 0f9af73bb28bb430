"""Issue 46 item 1 with a real Airflow: a Kafka connection stored in Airflow's metadata DB (with Airflow's own
CLI, as anyone who may edit connections could store it) that names the host's secrets, `${env:...}` in the
login and `${file:/etc/...}` in an extra, fails the task that uses it with one line, and nothing is read:
the fernet key and the file's content appear nowhere in what the task printed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tests.airflow_support import HOME, dags_folder, load_dag_file

pytestmark = pytest.mark.integration

AIRFLOW = str(Path(sys.executable).parent / "airflow")
NOWHERE = {"bootstrap.servers": "127.0.0.1:1"}  # never reached: the connection is refused before any client


def _add_connection(conn_id: str, body: dict) -> None:
    done = subprocess.run([AIRFLOW, "connections", "add", conn_id, "--conn-json", json.dumps(body)],
                          env=os.environ.copy(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]


def test_a_connection_naming_the_hosts_secrets_fails_in_one_line_and_reads_nothing(airflow_db, tmp_path,
                                                                                  monkeypatch, capfd):
    from airflow.utils.state import TaskInstanceState

    monkeypatch.delenv("MIRROR_SECRETS_DIRS", raising=False)
    fernet = os.environ["AIRFLOW__CORE__FERNET_KEY"]
    root_entry = next(line for line in Path("/etc/passwd").read_text().splitlines() if line.startswith("root:"))
    suffix = uuid.uuid4().hex[:8]
    refused = {
        f"kafka_env_{suffix}": ({"conn_type": "kafka", "login": "${env:AIRFLOW__CORE__FERNET_KEY}",
                                 "password": "Conn-Pw-4821",
                                 "extra": {**NOWHERE, "security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN"}},
                                "login: placeholders are not resolved here (the login is shown in clear)"),
        f"kafka_file_{suffix}": ({"conn_type": "kafka",
                                  "extra": {**NOWHERE, "ssl.key.password": "${file:/etc/passwd:root}"}},
                                 "ssl.key.password: placeholders are off in an Airflow connection: the host names "
                                 "no secrets directory (MIRROR_SECRETS_DIRS)"),
    }
    for conn_id, (body, _) in refused.items():
        _add_connection(conn_id, body)
    spec = tmp_path / "mirrors.yaml"
    spec.write_text(json.dumps({"groups": [{
        "name": "g", "source": {"name": "source", "kafka": NOWHERE},
        "destination": {"kafka": {"bootstrap.servers": "127.0.0.1:2"}},
        "mirrors": [{"name": "m", "whitelist": "t"}]}]}))
    dag_id = f"connection_secrets_{suffix}"
    dag_file = dags_folder() / f"{dag_id}.py"
    dag_file.write_text(
        "from airflow.sdk import DAG\n"
        "from mirror_airflow.operators.topics import DiscoverTopicsOperator\n"
        f"with DAG(dag_id={dag_id!r}, schedule=None) as dag:\n"
        f"    for conn_id in {sorted(refused)!r}:\n"
        f"        DiscoverTopicsOperator(task_id=conn_id, spec_path={str(spec)!r}, mirror_name='m',\n"
        "                               source_conn_id=conn_id, retries=0)\n")
    capfd.readouterr()
    run = load_dag_file(dag_file).test()
    out, err = capfd.readouterr()
    logs = "".join(p.read_text(errors="replace") for p in (HOME / "logs").rglob("*") if p.is_file() and dag_id in str(p))
    printed = out + err + logs

    assert {ti.task_id: ti.state for ti in run.get_task_instances()} == dict.fromkeys(refused, TaskInstanceState.FAILED)
    for conn_id, (_, line) in refused.items():
        assert f"Airflow connection {conn_id!r}: {line}" in printed, printed[-3000:]
    assert fernet not in printed and root_entry.split(":", 1)[1] not in printed
