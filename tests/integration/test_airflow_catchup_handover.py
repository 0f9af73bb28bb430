"""The catch-up hand-over on the real stack: stop_mirror refuses while the mirror's group has an active
member (a running worker) and names the DAG to pause; once the worker stopped it lets the copy go."""

from __future__ import annotations

import json
import uuid

import pytest

from tests.airflow_support import ROOT  # noqa: F401
from tests.kafka_util import create_topic, produce
from tests.worker_util import WorkerProcess

pytestmark = pytest.mark.integration


def test_stop_mirror_waits_for_the_group_to_empty(stack, topic_name, tmp_path, monkeypatch):
    from mirror_airflow.operators.handover import StopMirrorOperator

    monkeypatch.delenv("AIRFLOW_CONN_AIRFLOW_API", raising=False)
    src, dst = stack["source"].kafka.bootstrap_servers, stack["destination"].kafka.bootstrap_servers
    topic, name, group = topic_name("ho"), f"ho{uuid.uuid4().hex[:8]}", f"ho-group-{uuid.uuid4().hex[:8]}"
    create_topic(src, topic, partitions=2)
    produce(src, topic, [{"value": b"x", "partition": i % 2} for i in range(10)])
    spec = tmp_path / "mirrors.yaml"
    spec.write_text(json.dumps({"groups": [{
        "name": "it", "source": {"kafka": {"bootstrap.servers": src}},
        "destination": {"kafka": {"bootstrap.servers": dst}},
        "mirrors": [{"name": name, "whitelist": topic, "prefix": "ho.", "group-id": group}],
    }]}))
    op = StopMirrorOperator(task_id="stop_mirror", spec_path=str(spec), mirror_name=name,
                            lifecycle_dag_id=f"mirror__{name}", wait_timeout_s=5)
    worker = WorkerProcess(["--config", str(spec), "--mirror", name], tmp_path)
    try:
        worker.wait_started(timeout=120)
        with pytest.raises(RuntimeError, match=rf"still has 1 active member.*pause DAG mirror__{name}"):
            op.execute({})
        assert worker.terminate(60) == 0
        assert op.execute({}) == {"paused_here": False}
    finally:
        worker.stop_quietly()
