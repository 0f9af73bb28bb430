"""A person fails a consumer group over in the Airflow UI: the failover DAG of the e2e mirror shows the
impact on the approval task's Required actions page, the person approves there, and the run stops the
mirror (its lifecycle DAG paused, the worker out of the group) and leaves the group at the translated
offsets on the destination, re-reading nothing (provenance headers). Screenshots in tests/artifacts/.

The file sorts after the other e2e tests on purpose: it leaves the e2e mirror paused.
"""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import Consumer, TopicPartition

from tests.e2e import ui
from tests.e2e.browser import screenshot
from tests.e2e.waits import group_members, wait_until
from tests.kafka_util import end_offsets, produce
from tests.worker_util import committed_offsets, read_topic

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1500)]

PER_PARTITION = 100
RUN_S = 420  # a lifecycle run reaching its worker, or a failover run's tasks, on two shared cores


def _xcom(api, dag_id: str, run_id: str, task_id: str, key: str = "return_value"):
    response = api.request("GET", f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/xcomEntries/{key}",
                           params={"deserialize": "true", "stringify": "false"})
    response.raise_for_status()
    return response.json()["value"]


def _state(api, dag_id: str, run_id: str, task_id: str) -> str | None:
    return {t["task_id"]: t["state"] for t in api.task_instances(dag_id, run_id)}.get(task_id)


def test_failover_approved_in_the_ui(stack, airflow, e2e_mirror, browser):
    source = stack["source"].kafka.bootstrap_servers
    destination = stack["destination"].kafka.bootstrap_servers
    mirror, api = e2e_mirror, airflow.api()
    failover = f"{mirror.dag_id}__failover"
    if api.dag(mirror.dag_id)["is_paused"]:
        api.set_paused(mirror.dag_id, False)

    # The mirror runs and has copied everything the source holds.
    produce(source, mirror.topic, [{"value": f"fo-{p}-{i}".encode(), "partition": p}
                                   for i in range(PER_PARTITION) for p in range(mirror.partitions)])
    ends = end_offsets(source, mirror.topic, mirror.partitions)
    wait_until(lambda: len(read_topic(destination, mirror.mirrored_topic)) >= sum(ends.values()), RUN_S,
               "the mirror copied the source")
    wait_until(lambda: group_members(source, mirror.group) > 0, RUN_S, "the mirror's worker in its group")

    group = f"e2e-app-{uuid.uuid4().hex[:8]}"
    half = {p: end // 2 for p, end in ends.items()}
    consumer = Consumer({"bootstrap.servers": source, "group.id": group, "enable.auto.commit": False})
    consumer.commit(offsets=[TopicPartition(mirror.topic, p, o) for p, o in half.items()], asynchronous=False)
    consumer.close()

    response = api.request("POST", f"/dags/{failover}/dagRuns", json={"logical_date": None, "conf": {"groups": group}})
    response.raise_for_status()
    run_id = response.json()["dag_run_id"]
    wait_until(lambda: _state(api, failover, run_id, "approve") == "awaiting_input", RUN_S,
               "the approval task waiting for input")

    # The approver's page: the impact, then Approve.
    ui.log_in(browser, airflow.url, "admin", airflow.password)
    ui.open_required_action(browser, airflow.url, failover, run_id, "approve", expect_text=group)
    page = browser.find_element("tag name", "body").text
    assert "records a consumer may re-read" in page and "records not mirrored yet" in page, page[:2000]
    screenshot(browser, "e2e-failover-1-impact")
    ui.choose(browser, "Approve")
    screenshot(browser, "e2e-failover-2-approved")

    run = wait_until(lambda: next((r for r in api.dag_runs(failover) if r["dag_run_id"] == run_id
                                   and r["state"] in ("success", "failed")), None), RUN_S, "the failover run ended")
    states = {t["task_id"]: t["state"] for t in api.task_instances(failover, run_id)}
    assert run["state"] == "success", states
    ui.open_required_action(browser, airflow.url, failover, run_id, "approve", expect_text=group)
    screenshot(browser, "e2e-failover-3-run-done")  # the run's grid: every task green
    # The fact first (the REST API), with what the stop task did when it is not so; then what a person sees.
    paused = api.dag(mirror.dag_id)["is_paused"]
    assert paused is True, api.task_log(failover, run_id, "stop_mirror")
    ui.open_dag(browser, airflow.url, mirror.dag_id)
    ui.wait_paused(browser, True, reload_s=20)
    screenshot(browser, "e2e-failover-4-mirror-paused")

    assert group_members(source, mirror.group) == 0
    impact = _xcom(api, failover, run_id, "impact")
    assert [p["may_reread"] for p in impact["groups"][0]["partitions"]] == [0] * mirror.partitions
    applied = _xcom(api, failover, run_id, "apply_offsets")["applied"][0]
    translated = {o["partition"]: o["offset"] for o in applied["offsets"]}
    assert committed_offsets(destination, group, mirror.mirrored_topic, mirror.partitions) == translated
    assert all(o["may_reread"] == 0 for o in applied["offsets"])
    report = _xcom(api, failover, run_id, "report")
    assert report["status"] == "applied"
    print(f"\nfailover report: {report['report']} ({report['summary']}); translated offsets {translated} "
          f"for source offsets {half}")
