"""Why a mirror has no lag verdict yet, read from a real Airflow metadata DB (the session's, shared with the
session's api-server): the dashboard's `sources.lag_run` sees a lag DAG Airflow has not parsed, then parsed and
paused, then with a run queued through the REST API as a person or the scheduler would queue it; the line the
page shows follows (issue 44 item 4: it said "the lag sensor has not run" while the run had been measuring)."""

from __future__ import annotations

import uuid

import pytest
import requests

from tests.airflow_support import dags_folder, sync_dag_file

pytestmark = pytest.mark.integration


def test_the_lag_dags_state_explains_a_missing_verdict(airflow_api_server):
    from mirror_airflow.dag_ids import lag_dag_id
    from mirror_airflow.dashboard.gather import no_verdict_why
    from mirror_airflow.dashboard.sources import lag_run

    base, password = airflow_api_server
    name = f"lagrun{uuid.uuid4().hex[:6]}"
    dag_id = lag_dag_id(name)
    assert "has not parsed" in no_verdict_why(name, lag_run(dag_id), 600)

    dag_file = dags_folder() / f"{dag_id}.py"
    dag_file.write_text("from airflow.sdk import DAG\ndag = DAG(dag_id=%r, schedule=None)\n" % dag_id)
    sync_dag_file(dag_file, dag_id)
    run = lag_run(dag_id)
    assert (run.paused, run.state) == (True, None)  # DAGs are created paused (the test home's default)
    assert "is paused" in no_verdict_why(name, run, 600)

    token = requests.post(f"{base}/auth/token", json={"username": "admin", "password": password}, timeout=120)
    session = requests.Session()
    session.headers["Authorization"] = f"Bearer {token.json()['access_token']}"
    assert session.patch(f"{base}/api/v2/dags/{dag_id}", json={"is_paused": False}, timeout=120).ok
    assert "has not run yet" in no_verdict_why(name, lag_run(dag_id), 600)
    queued = session.post(f"{base}/api/v2/dags/{dag_id}/dagRuns", json={"logical_date": None}, timeout=120)
    assert queued.ok, queued.text[:300]
    run = lag_run(dag_id)
    assert (run.paused, run.state) == (False, "queued")
    assert "is measuring" in no_verdict_why(name, run, 600) and "(10 min)" in no_verdict_why(name, run, 600)
