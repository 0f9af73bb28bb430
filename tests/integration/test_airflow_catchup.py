"""The catch-up DAG on the real stack through dag.test(): stop_mirror (group empty), the Spark copy of the
backlog with the group's offsets committed at the range ends, resume_mirror (nothing to unpause)."""

from __future__ import annotations

import json
import uuid

import pytest

from tests.airflow_support import dags_folder
from tests.kafka_util import create_topic, produce
from tests.worker_util import committed_offsets, wait_for_count

pytestmark = [pytest.mark.integration, pytest.mark.spark]

RECORDS, PARTITIONS = 60, 2


def test_catchup_dag_copies_the_backlog_and_hands_over(stack, topic_name, tmp_path, airflow_db, monkeypatch):
    from airflow.utils.state import DagRunState

    from mirror_airflow.dag_factory import mirror_dags, render

    monkeypatch.delenv("AIRFLOW_CONN_AIRFLOW_API", raising=False)
    src, dst = stack["source"].kafka.bootstrap_servers, stack["destination"].kafka.bootstrap_servers
    topic, name, group = topic_name("cu"), f"cu{uuid.uuid4().hex[:8]}", f"cu-group-{uuid.uuid4().hex[:8]}"
    create_topic(src, topic, partitions=PARTITIONS)
    produce(src, topic, [{"key": f"k{i}".encode(), "value": f"v{i}".encode(), "partition": i % PARTITIONS}
                         for i in range(RECORDS)])
    path = tmp_path / "mirrors.yaml"
    path.write_text(json.dumps({"groups": [{
        "name": "it", "source": {"kafka": {"bootstrap.servers": src}},
        "destination": {"kafka": {"bootstrap.servers": dst}},
        "mirrors": [{"name": name, "whitelist": topic, "prefix": "cu.", "preserve-partitions": True,
                     "group-id": group}],
    }]}))
    monkeypatch.setenv("KAFKA_MIRROR_SPEC", str(path))
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps({"conn_type": "spark", "host": "local[2]"}))
    monkeypatch.setenv("MIRROR_REPORT_DIR", str(tmp_path / "reports"))
    render(path, dags_folder())

    run = mirror_dags(name, path)[f"mirror__{name}__catchup"].test(run_conf={"topics": topic})

    states = {ti.task_id: ti.state for ti in run.get_task_instances()}
    assert run.state == DagRunState.SUCCESS, states
    assert len(wait_for_count(dst, f"cu.{topic}", RECORDS, timeout=30)) == RECORDS
    # The hand-over point: the worker would resume exactly at the ends of the copied ranges.
    assert sum(committed_offsets(src, group, topic, PARTITIONS).values()) == RECORDS
    # The task kept the job's JSON summary (its log line and XCom come from it).
    [summary] = (tmp_path / "reports" / name).glob("catchup-*.json")
    assert json.loads(summary.read_text())["records"] == RECORDS
