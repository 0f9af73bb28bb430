"""Issue 46 item 7 on a real api-server (the session's `airflow_api_server`, whose auth manager narrows
SimpleAuthManager's viewers per DAG: tests/airflow_auth.py): the mirror dashboard shows each part of a mirror
only to users Airflow lets read the DAG it belongs to.

A real worker mirrors into a compacted destination topic that refuses a record without a key, so its partition
halts; its log lines are in `run_worker`'s task log where Airflow keeps them, the lag sensor's verdict in the
dashboard's store and a verification report in the report folder, each where their DAG's task puts it.
`lifecycle-only` may read `mirror__NAME` alone: it sees the mirror halted, but not the verdict, the report or
the halt reason, and is refused the report page. `every-part` may read the lag and verify DAGs and the task
logs too, and sees all three. Before, read access on `mirror__NAME` showed everything.
"""

from __future__ import annotations

import json
import shutil
import time
import uuid

import pytest
import requests

from devstack.net import free_port
from tests.airflow_support import HOME, api_password, auth_rules_file, dashboard_spec
from tests.kafka_util import create_topic, produce
from tests.worker_util import WorkerProcess, write_mirror_spec

pytestmark = pytest.mark.integration

VERDICT = "verdict-mark: lag within limits"
REASON = "destination refused the record"


def _session(base: str, user: str) -> requests.Session:
    token = requests.post(f"{base}/auth/token", json={"username": user, "password": api_password(user)}, timeout=120)
    token.raise_for_status()
    session = requests.Session()
    session.headers["Authorization"] = f"Bearer {token.json()['access_token']}"
    return session


def _halted_view(session: requests.Session, url: str, timeout: float = 90.0) -> dict:
    """The mirror's JSON once the dashboard sees the worker's halted partition."""
    deadline, view = time.monotonic() + timeout, {}
    while time.monotonic() < deadline:
        answer = session.get(url, timeout=120)
        assert answer.status_code == 200, answer.text[:500]
        view = answer.json()
        if view["halted"]:
            return view
        time.sleep(2)
    raise AssertionError(f"the dashboard never showed the halted partition: {view.get('state')} {view.get('notes')}")


def test_each_part_of_a_mirror_needs_read_access_on_its_dag(stack, airflow_api_server, topic_name, tmp_path):
    from mirror_airflow.dag_ids import lag_dag_id, lifecycle_dag_id, verify_dag_id
    from mirror_airflow.dashboard.store import HistoryStore, Verdict
    from mirror_airflow.reports import new_report_path

    base, _ = airflow_api_server
    src, dst = stack["source"].kafka.bootstrap_servers, stack["destination"].kafka.bootstrap_servers
    topic, name = topic_name("perm"), f"perm-{uuid.uuid4().hex[:8]}"
    lifecycle, lag, verify = lifecycle_dag_id(name), lag_dag_id(name), verify_dag_id(name)
    create_topic(src, topic, partitions=1)
    create_topic(dst, f"m.{topic}", partitions=1, config={"cleanup.policy": "compact"})
    produce(src, topic, [{"key": f"k{i}".encode(), "value": b"kept", "partition": 0} for i in range(3)]
            + [{"key": None, "value": b"refused: no key", "partition": 0}])
    spec = write_mirror_spec(tmp_path / "mirrors.yaml", stack, name, topic, "m.",
                             **{"metrics-port": free_port(), "commit-interval-s": 1})
    auth_rules_file().write_text(json.dumps({
        "lifecycle-only": {"dags": [lifecycle], "logs": []},
        "every-part": {"dags": [lifecycle, lag, verify], "logs": [lifecycle]},
    }))
    # What the lag DAG's sensor and the verify DAG's check leave behind, where they leave it.
    HistoryStore(HOME / "dashboard-history.sqlite").add_verdict(name, Verdict(time.time(), "OK", VERDICT, 0, "lag sensor"))
    report = new_report_path(None, name, "check")
    report.write_text(json.dumps({"status": "ok", "totals": {"checked": 3}}))
    report.with_suffix(".html").write_text("<html>report-mark</html>")
    task_log = HOME / "logs" / f"dag_id={lifecycle}" / "run_id=manual__perm" / "task_id=run_worker" / "attempt=1.log"
    task_log.parent.mkdir(parents=True)

    worker = WorkerProcess(["--config", str(spec)], tmp_path)
    try:
        halted = worker.wait_for_log("partition halted", timeout=90)
        assert REASON in halted["reason"], halted
        shutil.copy(worker.stdout_path, task_log)  # the worker's lines, as the task relays them into its log
        dashboard_spec().write_text(spec.read_text())
        url = f"{base}/mirror-dashboard/api/mirrors/{name}"

        narrow = _session(base, "lifecycle-only")
        view = _halted_view(narrow, url)
        assert view["state"] == "halted"
        assert view["verdicts"] == [] and view["report"] is None
        assert [h["reason"] for h in view["halted"]] == ["not shown"]
        assert view["hidden"] == [f"lag sensor verdicts not shown: no read access to DAG {lag}",
                                  f"verification report not shown: no read access to DAG {verify}",
                                  f"halt reasons not shown: no access to the task logs of DAG {lifecycle}"]
        page = narrow.get(f"{base}/mirror-dashboard/mirrors/{name}", timeout=120).text
        assert VERDICT not in page and REASON not in page and 'id="report"' not in page
        assert narrow.get(f"{base}/mirror-dashboard/mirrors/{name}/report", timeout=120).status_code == 403
        listed = narrow.get(f"{base}/mirror-dashboard/api/mirrors", timeout=120).json()["mirrors"]
        assert [m["name"] for m in listed] == [name] and VERDICT not in json.dumps(listed)

        wide = _session(base, "every-part")
        view = _halted_view(wide, url)
        assert [v["summary"] for v in view["verdicts"]] == [VERDICT]
        assert view["report"]["status"] == "ok" and view["hidden"] == []
        assert [REASON in h["reason"] for h in view["halted"]] == [True], view["halted"]
        assert wide.get(f"{base}/mirror-dashboard/mirrors/{name}/report", timeout=120).text == "<html>report-mark</html>"
    finally:
        worker.stop_quietly()
