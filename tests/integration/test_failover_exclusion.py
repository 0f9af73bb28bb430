"""A failover and a catch-up exclude each other, on the real stack (the operators without Airflow's API,
the worker as a process): the failover's stop refuses while a catch-up holds the mirror's lease group and
says so; once it has stopped the mirror, the mirror is marked failed over on the destination, and nothing
copies from the old source again: the catch-up run's resume does not unpause, the catch-up's own stop
and the catch-up job refuse, and a worker started anyway exits without copying. Before, the stop waited only for the mirror's
group (empty during a catch-up) and the catch-up's resume unpaused the mirror the failover had stopped.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid

import pytest

from tests.airflow_support import ROOT
from tests.kafka_util import create_topic, produce
from tests.worker_util import WorkerProcess, read_topic

pytestmark = pytest.mark.integration


class _Ti:
    """The resume task's view of the catch-up run: its stop paused the lifecycle DAG."""

    def xcom_pull(self, task_ids=None, key=None):
        return {"paused_here": True}


def test_a_failover_and_a_catchup_exclude_each_other(stack, topic_name, tmp_path, monkeypatch):
    from confluent_kafka.admin import AdminClient

    from mirror_airflow.operators.handover import ResumeMirrorOperator, StopMirrorOperator
    from mirror_worker.dr.failover_mark import failed_over, mark_topic
    from mirror_worker.engine.catchup_lease import CatchupLease

    monkeypatch.delenv("AIRFLOW_CONN_AIRFLOW_API", raising=False)
    src, dst = stack["source"].kafka.bootstrap_servers, stack["destination"].kafka.bootstrap_servers
    topic, name = topic_name("fx"), f"fx{uuid.uuid4().hex[:8]}"
    group = f"fx-group-{name}"
    create_topic(src, topic, partitions=2)
    produce(src, topic, [{"value": b"x", "partition": i % 2} for i in range(10)])
    spec = tmp_path / "mirrors.yaml"
    spec.write_text(json.dumps({"groups": [{
        "name": "it", "source": {"kafka": {"bootstrap.servers": src}},
        "destination": {"kafka": {"bootstrap.servers": dst}},
        "mirrors": [{"name": name, "whitelist": topic, "prefix": "fx.", "group-id": group}],
    }]}))
    common = {"spec_path": str(spec), "mirror_name": name, "lifecycle_dag_id": f"mirror__{name}"}
    failover_stop = StopMirrorOperator(task_id="stop_mirror", failover=True, wait_timeout_s=4, **common)
    catchup_stop = StopMirrorOperator(task_id="stop_mirror", wait_timeout_s=4, **common)
    resume = ResumeMirrorOperator(task_id="resume_mirror", **common)
    destination = AdminClient({"bootstrap.servers": dst})

    with CatchupLease({"bootstrap.servers": src}, group, topic):
        with pytest.raises(RuntimeError, match=rf"a catch-up holds mirror group {group!r}.*lease group "
                                               rf"'{group}.catchup' has 1 active member.*after 4 s"):
            failover_stop.execute({})
        assert not failed_over(destination, group)  # nothing was failed over: the catch-up's resume may unpause
    assert failover_stop.execute({}) == {"paused_here": False}
    assert failed_over(destination, group) and mark_topic(group) in destination.list_topics(timeout=10).topics

    # The catch-up run that paused the mirror ends: its resume leaves the failed-over mirror stopped.
    assert resume.execute({"ti": _Ti()}) is False
    with pytest.raises(RuntimeError, match=rf"mirror group {group!r} was failed over"):
        catchup_stop.execute({})
    catchup = subprocess.run([sys.executable, "-m", "spark_jobs.catchup", "--config", str(spec), "--mirror", name],
                             cwd=ROOT, capture_output=True, text=True, timeout=120)  # refused before Spark starts
    assert catchup.returncode == 2 and f"mirror group {group!r} was failed over" in catchup.stderr, catchup.stderr
    worker = WorkerProcess(["--config", str(spec), "--mirror", name], tmp_path)
    try:
        assert worker.wait(90) != 0
        assert f"mirror group {group!r} was failed over" in worker.stderr, worker.stderr[-2000:]
    finally:
        worker.stop_quietly()
    assert read_topic(dst, f"fx.{topic}", timeout=5, idle=1) == []
