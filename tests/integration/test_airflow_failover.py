"""The failover runbook DAG on the real stack, approved through Airflow's REST API as a person would.

A mirror with provenance headers runs (its lifecycle DAG's worker task, pause-checking the session's
`airflow api-server`); a source consumer group committed at 50 % fails over with `dag.test()` of
`mirror__NAME__failover`; the test answers the approval task through the HITL endpoint of that API-server
(shared metadata DB), after checking that the impact is what the approver is shown. Then: the lifecycle
DAG is paused and its worker stopped cleanly, the destination group sits at the translated offsets
(re-reading 0 records, missing none), and the report exists. A group active on the destination is
refused: the apply task fails with the one-line reason, the group keeps no offset, the report says so.
A rejected run changes nothing.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests
from confluent_kafka import Consumer, TopicPartition

from devstack.airflow import AirflowApi as TestsRestApi  # the tests' REST client (the product's is below)
from tests.airflow_support import dags_folder, sync_dag_file
from tests.e2e.waits import wait_until
from tests.kafka_util import create_topic, produce
from tests.worker_util import committed_offsets, wait_for_count

# dag.test() runs in the test's own thread and waits as long as its approval task is parked. Should a run hang
# there anyway (a full run's did, 10 minutes after the api-server's log fell silent), SIGALRM fails this test
# alone; the thread method ends the whole test process, and the Airflow group's tests queued behind it.
pytestmark = [pytest.mark.integration, pytest.mark.timeout(420, method="signal")]

PARTITIONS, PER_PARTITION = 3, 200
HALF = PER_PARTITION // 2


@dataclass
class RunningMirror:
    name: str
    spec: Path
    topic: str
    mirrored: str
    reports: Path
    base_url: str
    password: str
    worker: dict  # the worker task's outcome, once it returned
    thread: threading.Thread

    @property
    def lifecycle(self) -> str:
        return f"mirror__{self.name}"

    @property
    def failover(self) -> str:
        return f"mirror__{self.name}__failover"


@pytest.fixture(scope="module")
def mirror(stack, airflow_api_server, tmp_path_factory):
    from mirror_airflow.dag_factory import mirror_dags, render
    from mirror_airflow.hooks.airflow_api import AirflowApi

    base, password = airflow_api_server
    src, dst = stack["source"].kafka.bootstrap_servers, stack["destination"].kafka.bootstrap_servers
    suffix = uuid.uuid4().hex[:10]
    name, topic = f"fo{suffix}", f"fo-{suffix}"
    root = tmp_path_factory.mktemp("failover")
    spec = root / "mirrors.yaml"
    spec.write_text(json.dumps({"groups": [{
        "name": "it",
        "source": {"name": "source", "kafka": {"bootstrap.servers": src}},
        "destination": {"kafka": {"bootstrap.servers": dst}},
        "mirrors": [{"name": name, "whitelist": topic, "prefix": "fo.", "preserve-partitions": True,
                     "provenance-headers": True, "group-id": f"fo-mirror-{suffix}", "commit-interval-s": 1,
                     "airflow": {"pause-check-interval-s": 1, "verify-report-dir": str(root / "reports")}}],
    }]}))
    create_topic(src, topic, partitions=PARTITIONS)
    # The value names the source position: a destination reader tells what it read without headers.
    produce(src, topic, [{"value": f"{p}-{i}".encode(), "partition": p}
                         for i in range(PER_PARTITION) for p in range(PARTITIONS)])
    host, port = base.removeprefix("http://").split(":")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("KAFKA_MIRROR_SPEC", str(spec))
        patch.setenv("AIRFLOW_CONN_AIRFLOW_API", json.dumps(
            {"conn_type": "http", "host": host, "port": int(port), "login": "admin", "password": password}))
        render(spec, dags_folder())
        sync_dag_file(dags_folder() / f"mirror__{name}.py", f"mirror__{name}")
        api = AirflowApi(base, "admin", password)
        api.set_paused(f"mirror__{name}", False)
        # The lifecycle DAG's worker task, as the executor runs it: it stops when the DAG is paused.
        worker_task = mirror_dags(name, spec)[f"mirror__{name}"].get_task("run_worker")
        outcome: dict = {}
        thread = threading.Thread(target=lambda: outcome.update(worker_task.execute({"params": {}})), daemon=True)
        thread.start()
        running = RunningMirror(name, spec, topic, f"fo.{topic}", root / "reports", base, password, outcome, thread)
        try:
            wait_for_count(dst, running.mirrored, PARTITIONS * PER_PARTITION, timeout=120)
            yield running
        finally:
            api.set_paused(running.lifecycle, True)
            thread.join(60)


def _commit_on_source(src: str, topic: str, group: str, offset: int) -> None:
    consumer = Consumer({"bootstrap.servers": src, "group.id": group, "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[TopicPartition(topic, p, offset) for p in range(PARTITIONS)], asynchronous=False)
    finally:
        consumer.close()


class Approver:
    """A person on the Required actions page: waits for the approval task of `dag_id`, keeps what it
    shows, answers `choice` through the HITL endpoint (PATCH .../taskInstances/approve/-1/hitlDetails)."""

    def __init__(self, mirror: RunningMirror, choice: str = "Approve") -> None:
        self.api = TestsRestApi(mirror.base_url, "admin", mirror.password)
        self.dag_id, self.choice = mirror.failover, choice
        self.shown: dict = {}
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _call(self, method: str, path: str, attempts: int = 10, **kwargs) -> dict:
        """One API call, asked again on a 5xx, a timeout or a connection error. An approver that gives up leaves
        dag.test() waiting on a parked task for ever: in a loaded full run (stop 52) the thread's calls stopped
        12 s in and pytest-timeout ended the whole test process 10 minutes later; an error it gave up on (the
        tests' SQLite makes the api-server answer 'database is locked' under load) is the likely cause."""
        for attempt in range(attempts):
            try:
                response = self.api.request(method, path, **kwargs)
                if response.status_code < 500:
                    response.raise_for_status()
                    return response.json()
            except (requests.ConnectionError, requests.Timeout):
                if attempt == attempts - 1:
                    raise
            time.sleep(2)
        response.raise_for_status()
        return response.json()

    def _requested(self) -> dict:
        details = self._call("GET", f"/dags/{self.dag_id}/dagRuns/~/hitlDetails",
                             params={"response_received": "false"})["hitl_details"]
        return details[0] if details else {}

    def _run(self) -> None:
        task = None
        try:
            self.shown = wait_until(self._requested, 300, "no approval requested")
            ti = self.shown["task_instance"]
            task = f"/dags/{self.dag_id}/dagRuns/{ti['dag_run_id']}/taskInstances/{ti['task_id']}"

            def state() -> str:
                return self._call("GET", task)["state"]

            # Answer once the task is parked, as the Required actions page offers it. The tests' metadata DB is
            # SQLite, where Airflow's row locks are no-ops: an answer given between the operator writing its
            # request and the task parking was recorded but never resumed the task, and dag.test() waited for
            # ever (a full run hung on it for 20 minutes, 0.6 s between the request and the answer).
            wait_until(lambda: state() == "awaiting_input", 180, "the approval task never parked", interval=0.5)
            self._call("PATCH", f"{task}/{ti['map_index']}/hitlDetails", json={"chosen_options": [self.choice]})
            wait_until(lambda: state() != "awaiting_input", 60, "the answer did not resume the task", interval=0.5)
        except BaseException as exc:  # reported by result()
            self.error = exc
            if task is not None:  # dag.test() waits for ever on a parked task: end it failed instead
                self.end_failed(task)

    def end_failed(self, task: str, timeout: float = 180) -> None:
        """Set the task failed until it stays failed: a state set while the task is still on its way to parking
        (the parked wait above ran out on a loaded machine) would be overwritten when it parks."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                self.api.request("PATCH", task, json={"new_state": "failed"})
                time.sleep(2)
                if self._call("GET", task)["state"] == "failed":
                    time.sleep(3)
                    if self._call("GET", task)["state"] == "failed":
                        return
            except requests.RequestException:
                time.sleep(2)

    def result(self) -> dict:
        self.thread.join(10)
        if self.error:
            raise self.error
        return self.shown


def _run_failover(mirror: RunningMirror, groups: str, choice: str = "Approve"):
    from mirror_airflow.dag_factory import mirror_dags

    approver = Approver(mirror, choice)
    run = mirror_dags(mirror.name, mirror.spec)[mirror.failover].test(run_conf={"groups": groups})
    return run, approver.result()


def _source_offsets_read(dst: str, topic: str, group: str) -> dict[int, list[int]]:
    """Source offsets (from the values) of what `group` reads on the destination from its offsets to the end."""
    consumer = Consumer({"bootstrap.servers": dst, "group.id": group, "auto.offset.reset": "error",
                         "enable.auto.commit": False, "enable.partition.eof": True})
    read: dict[int, list[int]] = {p: [] for p in range(PARTITIONS)}
    try:
        consumer.subscribe([topic])
        done, deadline = set(), time.monotonic() + 60
        while len(done) < PARTITIONS and time.monotonic() < deadline:
            for msg in consumer.consume(500, 1.0):
                if msg.error():
                    assert msg.error().code() == -191, msg.error()  # _PARTITION_EOF
                    done.add(msg.partition())
                    continue
                read[msg.partition()].append(int(msg.value().split(b"-")[1]))
        assert len(done) == PARTITIONS, f"not every partition read to its end: {done}"
    finally:
        consumer.close()
    return read


def test_a_rejected_failover_changes_nothing(stack, mirror):
    """First in the file, while the mirror runs: after Reject it still runs and the group has no offset."""
    from airflow.utils.state import DagRunState, TaskInstanceState

    from mirror_airflow.hooks.airflow_api import AirflowApi

    src, dst = stack["source"].kafka.bootstrap_servers, stack["destination"].kafka.bootstrap_servers
    group = f"nope-{uuid.uuid4().hex[:8]}"
    _commit_on_source(src, mirror.topic, group, HALF)

    run, shown = _run_failover(mirror, group, choice="Reject")

    assert f"### Group `{group}`" in shown["body"]
    states = {ti.task_id: ti.state for ti in run.get_task_instances()}
    assert states == {"impact": TaskInstanceState.SUCCESS, "approve": TaskInstanceState.SUCCESS,
                      **dict.fromkeys(["stop_mirror", "apply_offsets", "report"], TaskInstanceState.SKIPPED)}
    assert run.state == DagRunState.SUCCESS
    assert AirflowApi(mirror.base_url, "admin", mirror.password).is_paused(mirror.lifecycle) is False
    assert mirror.thread.is_alive() and not mirror.worker  # the worker task still runs
    assert set(committed_offsets(dst, group, mirror.mirrored, PARTITIONS).values()) == {-1001}


def test_approved_failover_stops_the_mirror_and_applies_the_translated_offsets(stack, mirror):
    from airflow.utils.state import DagRunState, TaskInstanceState

    from mirror_airflow.hooks.airflow_api import AirflowApi

    src, dst = stack["source"].kafka.bootstrap_servers, stack["destination"].kafka.bootstrap_servers
    group = f"app-{uuid.uuid4().hex[:8]}"
    _commit_on_source(src, mirror.topic, group, HALF)

    run, shown = _run_failover(mirror, group)

    states = {ti.task_id: ti.state for ti in run.get_task_instances()}
    assert states == dict.fromkeys(["impact", "approve", "stop_mirror", "apply_offsets", "report"],
                                   TaskInstanceState.SUCCESS), states
    assert run.state == DagRunState.SUCCESS
    # What the approver saw: the group's impact, nothing to re-read, nothing left unmirrored.
    assert f"### Group `{group}`" in shown["body"], shown["body"]
    assert "- records a consumer may re-read: **0**" in shown["body"]
    assert "- records not mirrored yet (recovery point): **0**" in shown["body"]
    assert f"| {mirror.mirrored}[0] | {HALF} | {HALF} | provenance | 0 | 0 |" in shown["body"]
    impact = run.get_task_instance("impact").xcom_pull(task_ids="impact")
    assert [(p["may_reread"], p["not_mirrored"]) for p in impact["groups"][0]["partitions"]] == [(0, 0)] * PARTITIONS

    # The mirror was stopped the way a pause stops it: lifecycle DAG paused, worker out cleanly.
    assert AirflowApi(mirror.base_url, "admin", mirror.password).is_paused(mirror.lifecycle) is True
    mirror.thread.join(60)
    assert (mirror.worker["exit_code"], mirror.worker["reason"]) == (0, "stop: DAG paused")

    # The destination group sits at the translated offsets, from which it re-reads nothing and misses nothing.
    applied = run.get_task_instance("apply_offsets").xcom_pull(task_ids="apply_offsets")["applied"][0]
    translated = {o["partition"]: o["offset"] for o in applied["offsets"]}
    assert committed_offsets(dst, group, mirror.mirrored, PARTITIONS) == translated
    read = _source_offsets_read(dst, mirror.mirrored, group)
    assert {p: sorted(offsets) for p, offsets in read.items()} == {p: list(range(HALF, PER_PARTITION))
                                                                   for p in range(PARTITIONS)}
    report = run.get_task_instance("report").xcom_pull(task_ids="report")
    assert Path(report["report"]).parent == mirror.reports / mirror.name
    assert json.loads(Path(report["report"]).read_text())["status"] == "applied"
    assert Path(report["summary"]).read_text().startswith(f"# Failover of mirror `{mirror.name}`: applied\n")


def test_a_group_active_on_the_destination_is_refused(stack, mirror):
    from airflow.utils.state import DagRunState, TaskInstanceState

    src, dst = stack["source"].kafka.bootstrap_servers, stack["destination"].kafka.bootstrap_servers
    group = f"busy-{uuid.uuid4().hex[:8]}"
    _commit_on_source(src, mirror.topic, group, HALF)
    member = Consumer({"bootstrap.servers": dst, "group.id": group, "enable.auto.commit": False,
                       "auto.offset.reset": "latest"})
    try:
        member.subscribe([mirror.mirrored])
        deadline = time.monotonic() + 60
        while not member.assignment():  # a member holding partitions (heartbeats run in the background)
            assert time.monotonic() < deadline, "the destination consumer got no assignment"
            member.poll(0.5)

        run, shown = _run_failover(mirror, group)

        refusal = (f"destination group {group!r} has 1 active member(s): stop its consumers before applying "
                   "translated offsets")
        assert f"**REFUSED at apply**: destination group {group!r} has 1 active member(s)" in shown["body"]
        states = {ti.task_id: ti.state for ti in run.get_task_instances()}
        # The report is written, then fails too: it is the run's leaf, and the run must end failed.
        assert states["apply_offsets"] == states["report"] == TaskInstanceState.FAILED, states
        assert run.state == DagRunState.FAILED
        (path,) = [p for p in (mirror.reports / mirror.name).glob("failover-*.json")
                   if json.loads(p.read_text())["not_applied"]]
        report = json.loads(path.read_text())
        assert report["status"] == "nothing applied"
        assert report["not_applied"] == [{"group": group, "reason": refusal}]
        # Nothing written: no committed offset (librdkafka's OFFSET_INVALID) on any partition.
        assert set(committed_offsets(dst, group, mirror.mirrored, PARTITIONS).values()) == {-1001}
    finally:
        member.close()


FORGED = "All consumers already on the destination: nothing will be lost."


class RefusedApprover(Approver):
    """Someone not among the mirror's approvers (the tests' admin) answering the approval: Airflow's HITL endpoint
    must refuse it. Keeps the status it got, then ends the parked task failed (as an operator would, by hand)."""

    status: int | None = None

    def _run(self) -> None:
        task = None
        try:
            self.shown = wait_until(self._requested, 300, "no approval requested")
            ti = self.shown["task_instance"]
            task = f"/dags/{self.dag_id}/dagRuns/{ti['dag_run_id']}/taskInstances/{ti['task_id']}"
            wait_until(lambda: self._call("GET", task)["state"] == "awaiting_input", 180,
                       "the approval task never parked", interval=0.5)
            self.status = self.api.request("PATCH", f"{task}/{ti['map_index']}/hitlDetails",
                                           json={"chosen_options": ["Approve"]}).status_code
        except BaseException as exc:
            self.error = exc
        finally:
            if task is not None:
                self.end_failed(task)


def test_only_a_named_approver_may_answer_and_a_group_id_cannot_forge_the_text(stack, mirror, tmp_path):
    """Issue 46 item 6 on the real api-server: with `failover-approvers` the approval is assigned (the run's
    triggering user, dag.test()'s `dag_test`, is not among them), the admin's answer is refused, nothing is
    applied; a consumer group whose id holds a backtick and a newline shows as one escaped heading."""
    from airflow.utils.state import TaskInstanceState
    from markdown_it import MarkdownIt

    from mirror_airflow.dag_factory import mirror_dags

    src, dst = stack["source"].kafka.bootstrap_servers, stack["destination"].kafka.bootstrap_servers
    group = f"evil-{uuid.uuid4().hex[:8]}`\n**{FORGED}**"
    _commit_on_source(src, mirror.topic, group, HALF)
    spec = json.loads(mirror.spec.read_text())
    spec["groups"][0]["mirrors"][0]["airflow"]["failover-approvers"] = ["ops-b", "dag_test"]
    guarded = tmp_path / "mirrors.yaml"
    guarded.write_text(json.dumps(spec))

    approver = RefusedApprover(mirror)
    run = mirror_dags(mirror.name, guarded)[mirror.failover].test(run_conf={"groups": group})
    shown = approver.result()

    assert approver.status == 403
    assert shown["assigned_users"] == [{"id": "ops-b", "name": "ops-b"}]
    html = MarkdownIt("commonmark").enable("table").render(shown["body"])
    assert f"<strong>{FORGED}" not in html and "<h3>Group <code>evil-" in html
    states = {ti.task_id: ti.state for ti in run.get_task_instances()}
    assert states["approve"] == TaskInstanceState.FAILED and states["apply_offsets"] != TaskInstanceState.SUCCESS
    assert set(committed_offsets(dst, group, mirror.mirrored, PARTITIONS).values()) == {-1001}
