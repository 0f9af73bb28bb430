"""The verify DAG's spark-submit on the real stack: a destination missing records fails the task with
the report's summary, and the mirror's webhook notifier sends it."""

from __future__ import annotations

import json
import time
import uuid

import pytest

from tests.airflow_support import dags_folder
from tests.http_receiver import Receiver
from tests.kafka_util import create_topic, produce

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def test_verify_dag_fails_on_an_inconsistent_mirror_and_alerts(stack, topic_name, tmp_path, airflow_db, monkeypatch):
    from airflow.utils.state import TaskInstanceState

    from mirror_airflow.dag_factory import mirror_dags, render

    src, dst = stack["source"].kafka.bootstrap_servers, stack["destination"].kafka.bootstrap_servers
    topic = topic_name("verify")
    create_topic(src, topic, partitions=2)
    create_topic(dst, f"v.{topic}", partitions=2)
    base = int(time.time() * 1000) - 60_000
    records = [{"key": f"k{i}".encode(), "value": f"v{i}".encode(), "partition": i % 2, "timestamp": base + i}
               for i in range(40)]
    produce(src, topic, records)
    produce(dst, f"v.{topic}", [r for i, r in enumerate(records) if i not in (7, 8)])  # two records lost

    receiver = Receiver()
    try:
        name = f"verify{uuid.uuid4().hex[:8]}"
        spec = {"groups": [{
            "name": "it",
            "source": {"kafka": {"bootstrap.servers": src}},
            "destination": {"kafka": {"bootstrap.servers": dst}},
            "mirrors": [{"name": name, "whitelist": topic, "prefix": "v.", "preserve-partitions": True,
                         "airflow": {"verify-report-dir": str(tmp_path / "reports"),
                                     "alerts": {"webhook-url": f"{receiver.url}/a"}}}],
        }]}
        path = tmp_path / "mirrors.yaml"
        path.write_text(json.dumps(spec))
        monkeypatch.setenv("KAFKA_MIRROR_SPEC", str(path))
        monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps({"conn_type": "spark", "host": "local[2]"}))
        render(path, dags_folder())

        run = mirror_dags(name, path)[f"mirror__{name}__verify"].test()

        assert run.get_task_instance("consistency_check").state == TaskInstanceState.FAILED
        reports = list((tmp_path / "reports" / name).glob("check-*.json"))
        assert len(reports) == 1
        report = json.loads(reports[0].read_text())
        assert report["status"] == "inconsistent" and report["totals"]["missing"] == 2
        assert len(receiver.bodies) == 1, receiver.bodies
        detail = receiver.bodies[0]["detail"]
        assert f"mirror '{name}' is inconsistent: inconsistent:" in detail and "missing=2" in detail, detail
    finally:
        receiver.close()
