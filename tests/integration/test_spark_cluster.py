"""The Spark jobs on a standalone cluster (devstack/spark_cluster.py: a master, two 1-core workers whose Python
has nothing of the project), submitted as Airflow submits them: the catch-up DAG's and the verify DAG's
operators through dag.test(), the Spark connection `spark://`, the cluster's client configuration on
SPARK_CONF_DIR. The event log shows where the tasks ran; the records and the report show the results."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from devstack.paths import ROOT
from tests.airflow_support import dags_folder
from tests.catchup_util import catchup_summary, run_catchup
from tests.e2e.waits import group_members, wait_until
from tests.kafka_util import create_topic
from tests.worker_util import (
    WorkerProcess, committed_offsets, loss_and_duplicates, read_topic, wait_for_count, write_mirror_spec,
)

pytestmark = [pytest.mark.integration, pytest.mark.spark]

RECORDS, PARTITIONS = 120_000, 4


def submit_to(cluster, monkeypatch) -> None:
    """Airflow's Spark connection at the cluster's master; spark-submit reads the cluster's client settings."""
    host, port = cluster.master_url.removeprefix("spark://").split(":")
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT",
                       json.dumps({"conn_type": "spark", "host": f"spark://{host}", "port": int(port)}))
    monkeypatch.setenv("SPARK_CONF_DIR", str(cluster.conf_dir))
    monkeypatch.delenv("AIRFLOW_CONN_AIRFLOW_API", raising=False)


def tasks_on_executors(cluster, app_name: str | None = None,
                       app_id: str | None = None) -> tuple[dict[str, str], list[dict]]:
    """(executor id -> its worker's web UI address, the task-end events) of an application (by name or id), from its
    event log; asserts the application ran on the cluster's master with the cluster's Python for its executors."""
    app = cluster.application(app_name, app_id=app_id)
    events = cluster.events(app["id"])
    environment = next(e for e in events if e["Event"] == "SparkListenerEnvironmentUpdate")  # at the start
    properties = dict(environment["Spark Properties"])
    assert properties["spark.master"] == cluster.master_url
    assert properties["spark.pyspark.python"] == str(cluster.python)
    executors = {e["Executor ID"]: e["Executor Info"]["Log Urls"]["stdout"].split("/logPage")[0]
                 for e in events if e["Event"] == "SparkListenerExecutorAdded"}
    return executors, [e for e in events if e["Event"] == "SparkListenerTaskEnd"]


def assert_ran_on_workers(cluster, executors: dict[str, str], tasks: list[dict]) -> None:
    workers = {w["webuiaddress"] for w in cluster.state()["workers"]}
    succeeded = [t for t in tasks if t["Task End Reason"]["Reason"] == "Success"]
    assert succeeded, tasks
    ran_on = {t["Task Info"]["Executor ID"] for t in succeeded}
    assert ran_on <= set(executors), (ran_on, executors)  # never "driver": every task on an executor
    assert {executors[e] for e in ran_on} <= workers, (executors, workers)


def succeeded_in(cluster, app_name: str, job_description: str) -> list[dict]:
    """The successful task-end events of the application's jobs whose description starts so."""
    events = cluster.events(cluster.application(app_name)["id"])
    stages = {stage for e in events if e["Event"] == "SparkListenerJobStart"
              and (e.get("Properties") or {}).get("spark.job.description", "").startswith(job_description)
              for stage in e["Stage IDs"]}
    return [e for e in events if e["Event"] == "SparkListenerTaskEnd" and e["Stage ID"] in stages
            and e["Task End Reason"]["Reason"] == "Success"]


class ExecutorKiller:
    """kill -9 one executor JVM of the application once its job of that description has started (its start is in
    the event log, which Spark flushes at a job's start) and `ready()` says so: the executor dies mid-job."""

    def __init__(self, cluster, app_name: str, job_description: str, ready=lambda: True) -> None:
        self.cluster, self.app_name, self.job_description, self.ready = cluster, app_name, job_description, ready
        self.killed: int | None = None
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _job_started(self) -> bool:
        try:
            app = self.cluster.application(self.app_name)
            [log] = [p for p in self.cluster.event_dir.iterdir() if p.name.split(".")[0] == app["id"]]
            lines = log.read_text().splitlines()
        except Exception:  # not submitted yet
            return False
        return any('"SparkListenerJobStart"' in line and f'"spark.job.description":"{self.job_description}' in line
                   for line in lines)

    @staticmethod
    def _running_a_task(pid: int) -> bool:
        """The executor's log (its stderr, in its working directory) has a task started and not finished."""
        try:
            log = (Path(os.readlink(f"/proc/{pid}/cwd")) / "stderr").read_text()
        except OSError:
            return False
        return log.count("Running task ") > log.count("Finished task ")

    def _run(self) -> None:
        while not self.stopped.wait(0.02):
            if self._job_started() and self.ready():
                for pid in self.cluster.executor_pids():
                    if self._running_a_task(pid):
                        os.kill(pid, signal.SIGKILL)
                        self.killed = pid
                        return

    def stop(self) -> int | None:
        self.stopped.set()
        self.thread.join(10)
        return self.killed


def lost_executor_failures(cluster, app_name: str) -> list[dict]:
    """The task-end events of the application whose executor was lost under them."""
    events = cluster.events(cluster.application(app_name)["id"])
    return [e for e in events if e["Event"] == "SparkListenerTaskEnd"
            and e["Task End Reason"]["Reason"] == "ExecutorLostFailure"]


def _progress_consumer(bootstrap: str):
    from confluent_kafka import Consumer

    return Consumer({"bootstrap.servers": bootstrap, "group.id": "sc-progress"})


def _ends(consumer, topic: str) -> list[int]:
    from confluent_kafka import TopicPartition

    return [consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=5)[1] for p in range(PARTITIONS)]


def written_per_partition(bootstrap: str, topic: str) -> list[int]:
    consumer = _progress_consumer(bootstrap)
    try:
        return _ends(consumer, topic)
    finally:
        consumer.close()


def written(bootstrap: str, topic: str) -> int:
    return sum(written_per_partition(bootstrap, topic))


class BothExecutorsMidCopy:
    """Two destination partitions part-written (each task copies one partition, 2 one-core executors): whichever
    executor is killed now has records of its running task on the destination, which its retry writes again.
    Killing on the total alone once picked an executor whose task had just started and written nothing.

    One consumer for every look: a new one per look (~100 ms to connect) once missed the window in which both
    tasks were part-way (the catch-up finished first, nothing was killed)."""

    def __init__(self, bootstrap: str, topic: str, per_partition: int, at_least: int = 1_000) -> None:
        self.topic, self.per_partition, self.at_least = topic, per_partition, at_least
        self.consumer = _progress_consumer(bootstrap)

    def __call__(self) -> bool:
        from confluent_kafka import KafkaException

        try:
            ends = _ends(self.consumer, self.topic)
        except KafkaException:  # the destination topic is not there yet
            return False
        return sum(self.at_least <= n < self.per_partition for n in ends) >= 2

    def close(self) -> None:
        self.consumer.close()


def backlog(stack, topic: str, records: int) -> None:
    """`records` small records (values v0, v1, ...: unique) over PARTITIONS partitions, in bulk."""
    from confluent_kafka import Producer

    src = stack["source"].kafka.bootstrap_servers
    create_topic(src, topic, partitions=PARTITIONS)
    producer = Producer({"bootstrap.servers": src, "acks": "all", "enable.idempotence": True, "linger.ms": 20,
                         "queue.buffering.max.messages": records + 1})
    errors: list = []
    for i in range(records):
        producer.produce(topic, key=f"k{i}".encode(), value=f"v{i}".encode(), partition=i % PARTITIONS,
                         on_delivery=lambda err, _msg: err and errors.append(err))
        if i % 10_000 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0 and not errors, errors[:3]


def test_catchup_and_check_dags_run_on_the_cluster_executors(stack, spark_cluster, topic_name, tmp_path,
                                                             airflow_db, monkeypatch, capsys):
    from airflow.utils.state import DagRunState

    from mirror_airflow.dag_factory import mirror_dags, render

    src, dst = stack["source"].kafka.bootstrap_servers, stack["destination"].kafka.bootstrap_servers
    topic, name, group = topic_name("sc"), f"sc{uuid.uuid4().hex[:8]}", f"sc-group-{uuid.uuid4().hex[:8]}"
    backlog(stack, topic, RECORDS)
    path = write_mirror_spec(tmp_path / "mirrors.yaml", stack, name, topic, prefix="sc.", **{
        "group-id": group, "preserve-partitions": "true", "provenance-headers": "true"})
    monkeypatch.setenv("KAFKA_MIRROR_SPEC", str(path))
    monkeypatch.setenv("MIRROR_REPORT_DIR", str(tmp_path / "reports"))
    submit_to(spark_cluster, monkeypatch)
    render(path, dags_folder())
    dags = mirror_dags(name, path)

    # Every range to the executors: the driver copies nothing while Spark starts.
    run = dags[f"mirror__{name}__catchup"].test(run_conf={"topics": topic, "driver_copy_limit": "0"})

    states = {ti.task_id: ti.state for ti in run.get_task_instances()}
    assert run.state == DagRunState.SUCCESS, states
    copied = read_topic(dst, f"sc.{topic}", timeout=60)
    missing, duplicates, ordered = loss_and_duplicates(read_topic(src, topic, timeout=60), copied)
    assert (len(copied), len(missing), duplicates, ordered) == (RECORDS, 0, 0, True)
    assert sum(committed_offsets(src, group, topic, PARTITIONS).values()) == RECORDS
    [summary] = (tmp_path / "reports" / name).glob("catchup-*.json")
    summary = json.loads(summary.read_text())
    assert (summary["records"], summary["master"], summary["driver"]["records"]) == (
        RECORDS, spark_cluster.master_url, 0)
    executors, tasks = tasks_on_executors(spark_cluster, f"catchup-{name}")
    assert_ran_on_workers(spark_cluster, executors, tasks)
    # The task log links the application: its live UI (on, off a local master) and its event log, kept.
    app_id = spark_cluster.application(f"catchup-{name}")["id"]
    assert re.search(rf"Spark application {app_id} on {spark_cluster.master_url}: UI http://[\w.-]+:\d+, "
                     rf"event log {spark_cluster.event_dir.as_uri()}/{app_id}\b", capsys.readouterr().out)
    assert len(succeeded_in(spark_cluster, f"catchup-{name}", "catch-up ")) == PARTITIONS  # one per range

    run = dags[f"mirror__{name}__verify"].test()

    assert run.state == DagRunState.SUCCESS, {ti.task_id: ti.state for ti in run.get_task_instances()}
    [report] = (tmp_path / "reports" / name).glob("check-*.json")
    report = json.loads(report.read_text())
    assert report["status"] == "ok"
    assert {k: v for k, v in report["totals"].items() if v} == {"checked": RECORDS}, report["totals"]
    executors, tasks = tasks_on_executors(spark_cluster, f"consistency_check-{name}")
    assert_ran_on_workers(spark_cluster, executors, tasks)


def test_the_catchup_run_as_a_module_ships_its_code_to_the_cluster(stack, spark_cluster, topic_name, monkeypatch,
                                                                   tmp_path):
    """`python -m spark_jobs.catchup --master spark://...` (no spark-submit, no --py-files), the executors on the
    cluster's Python: before, every task failed four times with "No module named 'spark_jobs'"."""
    src, dst = stack["source"].kafka.bootstrap_servers, stack["destination"].kafka.bootstrap_servers
    topic = topic_name("sm")
    backlog(stack, topic, 2_000)
    monkeypatch.setenv("PYSPARK_PYTHON", str(spark_cluster.python))
    monkeypatch.setenv("SPARK_CONF_DIR", str(spark_cluster.conf_dir))
    # Its application is named mirror-catchup, as the other runs of the module on this cluster (test_package's):
    # found by the id it records.
    application = tmp_path / "application.json"
    monkeypatch.setenv("MIRROR_SPARK_APPLICATION_FILE", str(application))

    result = run_catchup("--master", spark_cluster.master_url, "--source.bootstrap.servers", src,
                         "--destination.bootstrap.servers", dst, "--topics", topic, "--group.id", f"g-{topic}",
                         "--prefix", "sm.", "--driver-copy-limit", "0")

    assert result.returncode == 0, result.stderr[-3000:]
    assert catchup_summary(result)["records"] == 2_000
    assert len(read_topic(dst, f"sm.{topic}")) == 2_000
    recorded = json.loads(application.read_text())
    assert spark_cluster.application(app_id=recorded["app_id"])["name"] == "mirror-catchup"
    executors, tasks = tasks_on_executors(spark_cluster, app_id=recorded["app_id"])
    assert_ran_on_workers(spark_cluster, executors, tasks)


KILL_RECORDS = 300_000


@pytest.mark.parametrize("delivery", ["at-least-once", "exactly-once"])
def test_a_lost_executor_is_retried_without_gaps_or_uncounted_copies(delivery, stack, spark_cluster, topic_name,
                                                                     tmp_path, airflow_db, monkeypatch):
    """kill -9 of an executor JVM while the catch-up's tasks copy (and, exactly once, while the check's digest
    tasks read): Spark retries the lost tasks. Exactly once, every record is on the destination once and the
    check counts them all; at least once none is missing and the summary counts what was written twice."""
    from airflow.utils.state import DagRunState

    from mirror_airflow.dag_factory import mirror_dags, render

    src, dst = stack["source"].kafka.bootstrap_servers, stack["destination"].kafka.bootstrap_servers
    topic, name, group = topic_name("sk"), f"sk{uuid.uuid4().hex[:8]}", f"sk-group-{uuid.uuid4().hex[:8]}"
    backlog(stack, topic, KILL_RECORDS)
    path = write_mirror_spec(tmp_path / "mirrors.yaml", stack, name, topic, prefix="sk.", **{
        "group-id": group, "preserve-partitions": "true", "provenance-headers": "true", "delivery": delivery})
    monkeypatch.setenv("KAFKA_MIRROR_SPEC", str(path))
    monkeypatch.setenv("MIRROR_REPORT_DIR", str(tmp_path / "reports"))
    submit_to(spark_cluster, monkeypatch)
    render(path, dags_folder())
    dags = mirror_dags(name, path)

    # Mid-copy. At least once, both executors' running tasks have written part of their ranges (what the retry
    # writes again is what the summary must count). Exactly once, a range reaches the destination in one short
    # burst (polls saw 0, then all of it), so the kill comes once a tenth of the backlog is there, as before.
    if delivery == "at-least-once":
        ready = BothExecutorsMidCopy(dst, f"sk.{topic}", KILL_RECORDS // PARTITIONS)
    else:
        ready = lambda: written(dst, f"sk.{topic}") >= KILL_RECORDS // 10  # noqa: E731
    killer = ExecutorKiller(spark_cluster, f"catchup-{name}", "catch-up ", ready=ready)
    try:
        run = dags[f"mirror__{name}__catchup"].test(run_conf={"topics": topic, "driver_copy_limit": "0"})
    finally:
        killed = killer.stop()
        if isinstance(ready, BothExecutorsMidCopy):
            ready.close()

    assert killed is not None
    assert run.state == DagRunState.SUCCESS, {ti.task_id: ti.state for ti in run.get_task_instances()}
    assert lost_executor_failures(spark_cluster, f"catchup-{name}")  # a task was running on it, and retried
    assert len(succeeded_in(spark_cluster, f"catchup-{name}", "catch-up ")) == PARTITIONS
    [summary] = (tmp_path / "reports" / name).glob("catchup-*.json")
    summary = json.loads(summary.read_text())
    copies = read_topic(dst, f"sk.{topic}", timeout=60)
    missing, duplicates, _ = loss_and_duplicates(read_topic(src, topic, timeout=60), copies)
    assert not missing
    assert sum(committed_offsets(src, group, topic, PARTITIONS).values()) == KILL_RECORDS
    if delivery == "at-least-once":
        assert summary["records"] == KILL_RECORDS and duplicates == summary["resent"] > 0, summary
        return
    assert (len(copies), duplicates, summary["resent"]) == (KILL_RECORDS, 0, None)

    killer = ExecutorKiller(spark_cluster, f"consistency_check-{name}", "digest pass")
    try:
        run = dags[f"mirror__{name}__verify"].test()
    finally:
        killed = killer.stop()

    assert killed is not None
    assert lost_executor_failures(spark_cluster, f"consistency_check-{name}")
    assert run.state == DagRunState.SUCCESS, {ti.task_id: ti.state for ti in run.get_task_instances()}
    [report] = (tmp_path / "reports" / name).glob("check-*.json")
    totals = json.loads(report.read_text())["totals"]
    assert {k: v for k, v in totals.items() if v} == {"checked": KILL_RECORDS}, totals


DRIVER_RECORDS = 120_000


@pytest.mark.parametrize("delivery", ["at-least-once", "exactly-once"])
def test_a_dead_driver_leaves_the_group_where_the_worker_resumes_without_a_gap(delivery, stack, spark_cluster,
                                                                                topic_name, tmp_path, monkeypatch):
    """The catch-up's driver host dies mid-copy (kill -9 of its process group: the Python driver and its JVM):
    Spark ends the application and its executors, nothing of the job writes or commits any more, its lease on the
    mirror group lapses, and the worker resumes where the tasks' commits (or exactly-once positions) left the
    mirror: no record missing; exactly once, none twice."""
    from mirror_worker.api import lease_group

    src, dst = stack["source"].kafka.bootstrap_servers, stack["destination"].kafka.bootstrap_servers
    topic, name, group = topic_name("sd"), f"sd{uuid.uuid4().hex[:8]}", f"sd-group-{uuid.uuid4().hex[:8]}"
    mirrored = f"sd.{topic}"
    backlog(stack, topic, DRIVER_RECORDS)
    spec = write_mirror_spec(tmp_path / "mirrors.yaml", stack, name, topic, prefix="sd.", **{
        "group-id": group, "preserve-partitions": "true", "provenance-headers": "true", "delivery": delivery})
    monkeypatch.setenv("PYSPARK_PYTHON", str(spark_cluster.python))
    monkeypatch.setenv("SPARK_CONF_DIR", str(spark_cluster.conf_dir))
    log = tmp_path / "driver.log"
    with log.open("w") as out:
        driver = subprocess.Popen(
            [sys.executable, "-m", "spark_jobs.catchup", "--config", str(spec), "--mirror", name,
             "--master", spark_cluster.master_url, "--driver-copy-limit", "0"],
            cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    progress = _progress_consumer(dst)
    try:
        # Mid-copy: the executors have written a tenth of the backlog.
        deadline = time.monotonic() + 300
        while _written_yet(progress, mirrored) < DRIVER_RECORDS // 10:
            assert driver.poll() is None, f"the catch-up ended before the kill: {log.read_text()[-3000:]}"
            assert time.monotonic() < deadline, f"no tenth of the backlog copied in 300 s: {log.read_text()[-3000:]}"
            time.sleep(0.05)
        os.killpg(driver.pid, signal.SIGKILL)
        killed_at = time.monotonic()
    finally:
        progress.close()
        driver.wait(30)
    at_kill = written(dst, mirrored)
    assert at_kill < DRIVER_RECORDS, "the copy finished before the kill: nothing to prove"

    # Nothing of the job goes on: the executors exit, and what is written stops growing.
    wait_until(lambda: not spark_cluster.executor_pids(), 120, "the executors of the dead driver's application exited",
               interval=0.5)
    executors_s = time.monotonic() - killed_at
    settled = written(dst, mirrored)
    time.sleep(5)
    assert written(dst, mirrored) == settled, "records still arrive after the executors exited"
    # Its lease on the mirror group lapses (its session timeout): a worker started now mirrors.
    wait_until(lambda: group_members(src, lease_group(group)) == 0, 60, "the dead catch-up's lease lapsed",
               interval=0.5)
    lease_s = time.monotonic() - killed_at
    if delivery == "at-least-once":
        committed = sum(committed_offsets(src, group, topic, PARTITIONS).values())
        assert committed <= settled

    worker = WorkerProcess(["--config", str(spec), "--mirror", name], tmp_path, "after-driver")
    try:
        wait_for_count(dst, mirrored, DRIVER_RECORDS, timeout=300)
        time.sleep(3)  # a copy beyond the backlog's end would show up now
        copies = read_topic(dst, mirrored, timeout=60)
        assert worker.terminate() == 0, worker.stderr[-3000:]
    finally:
        worker.stop_quietly()
    missing, duplicates, _ = loss_and_duplicates(read_topic(src, topic, timeout=60), copies)
    print(f"\n{delivery}: killed at {at_kill} written, {settled} once the executors exited ({executors_s:.1f} s "
          f"after the kill; the lease lapsed at {lease_s:.1f} s); the worker resumed: {len(copies)} copies, "
          f"{duplicates} duplicates")
    assert not missing, f"{len(missing)} records missing after the worker resumed"
    if delivery == "exactly-once":
        assert (len(copies), duplicates) == (DRIVER_RECORDS, 0)


def _written_yet(consumer, topic: str) -> int:
    """written() through one consumer kept for every look, 0 while the destination topic is not there yet. A new
    consumer per look (as written() makes) took long enough under a full run's load that the whole backlog was
    copied between the look that saw a tenth and the kill (stop 62's full run: "the copy finished before the
    kill"), as BothExecutorsMidCopy's looks once did."""
    from confluent_kafka import KafkaException

    try:
        return sum(_ends(consumer, topic))
    except KafkaException:
        return 0

