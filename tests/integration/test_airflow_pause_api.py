"""The pause check against a real Airflow REST API (`airflow api-server`, SimpleAuthManager, JWT):
pausing the DAG stops the supervised worker gracefully within one check interval."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import requests

from tests.airflow_support import ROOT, dags_folder
from tests.unit.test_airflow_worker_supervision import GRACEFUL, ScriptWorker

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def api_server(airflow_db, tmp_path_factory):
    """`airflow api-server` on a free port with user admin; yields (base url, password)."""
    from devstack.net import free_port

    port = free_port()
    home = Path(os.environ["AIRFLOW_HOME"])
    log = tmp_path_factory.mktemp("api") / "api-server.log"
    env = {**os.environ, "AIRFLOW__API__WORKERS": "1", "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin",
           "AIRFLOW__API__BASE_URL": f"http://127.0.0.1:{port}"}
    with open(log, "wb") as out:
        proc = subprocess.Popen([str(Path(sys.executable).parent / "airflow"), "api-server", "--apps", "core",
                                 "-H", "127.0.0.1", "-p", str(port)], env=env, cwd=ROOT, stdout=out,
                                stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 240
        while True:
            assert proc.poll() is None, log.read_text()[-3000:]
            try:
                if requests.get(f"{base}/api/v2/monitor/health", timeout=5).ok:
                    break
            except requests.RequestException:
                pass
            assert time.monotonic() < deadline, "api-server did not answer: " + log.read_text()[-3000:]
            time.sleep(1)
        passwords = json.loads((home / "simple_auth_manager_passwords.json.generated").read_text())
        yield base, passwords["admin"]
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def test_pausing_the_dag_stops_the_worker_through_the_rest_api(api_server, tmp_path, monkeypatch):
    from airflow.dag_processing.bundles.manager import DagBundlesManager
    from airflow.dag_processing.dagbag import DagBag, sync_bag_to_db
    from airflow.sdk import DAG

    from mirror_airflow.operators import AirflowApi

    base, password = api_server
    dag_id = "pause_api_probe"
    dag_file = dags_folder() / f"{dag_id}.py"
    dag_file.write_text("from airflow.sdk import DAG\ndag = DAG(dag_id=%r, schedule=None)\n" % dag_id)
    bag = DagBag(dag_folder=str(dag_file))
    assert dag_id in bag.dags, bag.import_errors
    DagBundlesManager().sync_bundles_to_db()
    sync_bag_to_db(bag, "dags-folder", None)  # what the dag-processor would do

    host, port = base.removeprefix("http://").split(":")
    monkeypatch.setenv("AIRFLOW_CONN_AIRFLOW_API", json.dumps(
        {"conn_type": "http", "host": host, "port": int(port), "login": "admin", "password": password}))
    api = AirflowApi(base, "admin", password)
    api.set_paused(dag_id, False)
    assert api.is_paused(dag_id) is False

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
