"""Breadth in Airflow (issue #42, item 5), the part that fits the suite: a spec of 100 mirrors (one topic each,
every tenth four) on the session's stack. Airflow's DagBag parses their 100 DAG files with no import error (so
none exceeded core.dagbag_import_timeout, which DagBag enforces per file) and finds their 400 DAGs; the
dashboard's overview, through its route on the session's api-server with a bearer token, lists all 100 mirrors
and, within a few views, shows every one's lag measured. How long each takes: bench/airflow_breadth.py."""

from __future__ import annotations

import time
import uuid

import pytest
import requests
import yaml

from bench.airflow_breadth import breadth_spec, dag_ids, mirror_names, topics_of
from bench.harness import create_topics
from tests.airflow_support import dashboard_spec

pytestmark = pytest.mark.integration

MIRRORS = 100
VIEWS_S = 180  # the page's budget is 1 s; the rest of the 100 measurements finish in the background


def _wide(name: str) -> bool:
    return int(name[1:]) % 10 == 0


@pytest.fixture(scope="module")
def breadth(stack, tmp_path_factory):
    """(names, spec file, DAGs folder) of 100 mirrors whose topics exist on the stack's source."""
    from mirror_airflow.dag_factory import render

    names, prefix = mirror_names(MIRRORS), f"br-{uuid.uuid4().hex[:8]}"
    source = stack["source"].kafka.bootstrap_servers
    create_topics(source, [topic for name in names for topic in topics_of(name, _wide(name), prefix)], 1)
    root = tmp_path_factory.mktemp("breadth")
    spec = root / "mirrors.yaml"
    spec.write_text(yaml.safe_dump(breadth_spec(source, stack["destination"].kafka.bootstrap_servers, names, prefix)))
    render(spec, root / "dags")
    return names, spec, root / "dags"


def test_a_hundred_mirrors_dag_files_parse_without_import_errors(breadth, airflow_db, monkeypatch):
    from airflow.dag_processing.dagbag import DagBag

    names, spec, dags = breadth
    monkeypatch.setenv("KAFKA_MIRROR_SPEC", str(spec))
    bag = DagBag(dag_folder=str(dags))
    assert bag.import_errors == {}
    assert set(bag.dag_ids) == dag_ids(names)
    assert len(bag.dagbag_stats) == MIRRORS and {stat.dag_num for stat in bag.dagbag_stats} == {4}
    run_worker = bag.get_dag("mirror__b007").get_task("run_worker")
    assert (run_worker.pool, run_worker.pool_slots) == ("default_pool", 1)  # what each running mirror holds


def test_the_dashboard_overview_lists_and_measures_all_hundred(breadth, airflow_api_server):
    names, spec, _ = breadth
    base, password = airflow_api_server
    dashboard_spec().write_text(spec.read_text())
    token = requests.post(f"{base}/auth/token", json={"username": "admin", "password": password}, timeout=120)
    token.raise_for_status()
    session = requests.Session()
    session.headers["Authorization"] = f"Bearer {token.json()['access_token']}"

    page = session.get(f"{base}/mirror-dashboard/", timeout=120)
    assert page.status_code == 200
    assert page.text.count("data-state=") == MIRRORS
    deadline, views = time.monotonic() + VIEWS_S, []
    while True:
        answer = session.get(f"{base}/mirror-dashboard/api/mirrors", timeout=120)
        assert answer.status_code == 200, answer.text[:500]
        mirrors = answer.json()["mirrors"]
        assert [m["name"] for m in mirrors] == names
        unmeasured = [m["name"] for m in mirrors if m["total_lag"] is None]
        views.append(len(unmeasured))
        if not unmeasured:
            break
        assert time.monotonic() < deadline, f"lag never measured for {unmeasured[:5]} (unmeasured per view: {views})"
        time.sleep(3)
    # No DAG of these mirrors is in the metadata DB: the state says so, and the lag is still shown.
    assert {m["state"] for m in mirrors} == {"unknown"}
    wide = next(m for m in mirrors if m["name"] == "b010")
    assert len(wide["partitions"]) == 4 and wide["total_lag"] == 0
