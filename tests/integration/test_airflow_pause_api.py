"""The pause check against a real Airflow REST API (`airflow api-server`, SimpleAuthManager, JWT; the
session's `airflow_api_server`): pausing the DAG stops the supervised worker gracefully within one check
interval. The task talks to the API as `mirror-tasks`, the least-privileged user docker-compose.yaml gives the
tasks (role user): enough to read and pause the DAG, refused the connections (and so their secrets)."""

from __future__ import annotations

import json
import threading
import time

import pytest

import requests

from tests.airflow_support import API_USERS, api_password, dags_folder, sync_dag_file
from tests.unit.mirror_airflow.operators.test_worker_supervision import GRACEFUL, ScriptWorker

pytestmark = pytest.mark.integration


def test_pausing_the_dag_stops_the_worker_through_the_rest_api(airflow_api_server, tmp_path, monkeypatch):
    from airflow.sdk import DAG

    from mirror_airflow.hooks.airflow_api import AirflowApi

    base, _ = airflow_api_server
    user, password = "mirror-tasks", api_password("mirror-tasks")
    assert API_USERS[user] == "user"
    dag_id = "pause_api_probe"
    dag_file = dags_folder() / f"{dag_id}.py"
    dag_file.write_text("from airflow.sdk import DAG\ndag = DAG(dag_id=%r, schedule=None)\n" % dag_id)
    sync_dag_file(dag_file, dag_id)

    host, port = base.removeprefix("http://").split(":")
    monkeypatch.setenv("AIRFLOW_CONN_AIRFLOW_API", json.dumps(
        {"conn_type": "http", "host": host, "port": int(port), "login": user, "password": password}))
    api = AirflowApi(base, user, password)
    api.set_paused(dag_id, False)
    assert api.is_paused(dag_id) is False
    token = requests.post(f"{base}/auth/token", json={"username": user, "password": password}, timeout=60).json()
    refused = requests.get(f"{base}/api/v2/connections", headers={"Authorization": f"Bearer {token['access_token']}"},
                           timeout=60)
    assert refused.status_code == 403, refused.text[:300]

    with DAG(dag_id=dag_id, schedule=None):
        op = ScriptWorker(script=GRACEFUL, task_id="run_worker", pause_check_interval_s=2)
    result: dict = {}
    thread = threading.Thread(target=lambda: result.update(op.execute({"params": {}})), daemon=True)
    thread.start()
    time.sleep(5)  # a few checks that see the DAG running
    assert thread.is_alive() and op._worker.proc.poll() is None
    paused_at = time.monotonic()
    api.set_paused(dag_id, True)
    thread.join(60)
    assert not thread.is_alive()
    assert result["reason"] == "stop: DAG paused" and result["exit_code"] == 0
    assert time.monotonic() - paused_at < 15
