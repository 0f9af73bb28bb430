"""The verify DAG's spark-submit on the real stack: a destination missing records fails the task with
the report's summary, and the mirror's webhook notifier sends it. The mirror also has a compacted topic,
which the check compares by its latest value per key with no configuration in the spec (--mode auto)."""

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

    src, dst = stack["source"].kafka.bootstrap_servers, stack["destination"].kafka.bootstrap_servers
    stem = topic_name("verify")
    topic, compacted = f"{stem}-orders", f"{stem}-latest"
    create_topic(src, topic, partitions=2)
    create_topic(dst, f"v.{topic}", partitions=2)
    for bootstrap, name in ((src, compacted), (dst, f"v.{compacted}")):
        create_topic(bootstrap, name, partitions=1, config={"cleanup.policy": "compact"})
    versions = [{"key": f"k{i % 5}".encode(), "value": f"v{i}".encode(), "partition": 0} for i in range(15)]
    produce(src, compacted, versions)
    produce(dst, f"v.{compacted}", versions[-5:])  # only each key's latest version, as compaction leaves it
    base = int(time.time() * 1000) - 60_000
    records = [{"key": f"k{i}".encode(), "value": f"v{i}".encode(), "partition": i % 2, "timestamp": base + i}
               for i in range(40)]
    produce(src, topic, records)
    produce(dst, f"v.{topic}", [r for i, r in enumerate(records) if i not in (7, 8)])  # two records lost

    receiver = Receiver()
    try:
        run, name = _run_verify(src, dst, stem, tmp_path, receiver, monkeypatch)

        assert run.get_task_instance("consistency_check").state == TaskInstanceState.FAILED
        reports = list((tmp_path / "reports" / name).glob("check-*.json"))
        assert len(reports) == 1
        report = json.loads(reports[0].read_text())
        assert report["status"] == "inconsistent" and report["totals"]["missing"] == 2
        missing = {t: sum(p["missing"] for p in report["partitions"] if p["topic"] == t) for t in (topic, compacted)}
        assert missing == {topic: 2, compacted: 0}  # record by record, the 10 overwritten versions would be missing
        assert {t: m["mode"] for t, m in report["modes"].items()} == {topic: "records", compacted: "compacted"}
        assert len(receiver.bodies) == 1, receiver.bodies
        detail = receiver.bodies[0]["detail"]
        assert f"mirror '{name}' is inconsistent: inconsistent:" in detail and "missing=2" in detail, detail
        assert f"; latest value per key: {compacted} (report" in detail, detail
    finally:
        receiver.close()


def test_verify_dag_over_topics_without_records_is_skipped_saying_nothing_to_check(
        stack, topic_name, tmp_path, airflow_db, monkeypatch):
    """A demo's first verify before its first record: the task is skipped (not green), no alert is sent,
    and the report says "nothing to check"."""
    from airflow.utils.state import TaskInstanceState

    src, dst = stack["source"].kafka.bootstrap_servers, stack["destination"].kafka.bootstrap_servers
    stem = topic_name("verify-empty")
    create_topic(src, f"{stem}-orders", partitions=2)
    create_topic(dst, f"v.{stem}-orders", partitions=2)
    _wait_for_group_coordinator(src, f"{stem}-probe")
    receiver = Receiver()
    try:
        run, name = _run_verify(src, dst, stem, tmp_path, receiver, monkeypatch)

        assert run.get_task_instance("consistency_check").state == TaskInstanceState.SKIPPED
        (report,) = [json.loads(p.read_text()) for p in (tmp_path / "reports" / name).glob("check-*.json")]
        assert report["status"] == "nothing to check" and report["totals"]["checked"] == 0
        assert receiver.bodies == []
    finally:
        receiver.close()


def _run_verify(src: str, dst: str, stem: str, tmp_path, receiver: Receiver, monkeypatch):
    """The verify DAG of a mirror of `stem-.*` (prefix `v.`, reports under tmp_path/reports, alerts to
    `receiver`), run once with dag.test(); (the DAG run, the mirror's name)."""
    from mirror_airflow.dag_factory import mirror_dags, render

    name = f"verify{uuid.uuid4().hex[:8]}"
    spec = {"groups": [{
        "name": "it",
        "source": {"kafka": {"bootstrap.servers": src}},
        "destination": {"kafka": {"bootstrap.servers": dst}},
        "mirrors": [{"name": name, "whitelist": f"{stem}-.*", "prefix": "v.", "preserve-partitions": True,
                     "airflow": {"verify-report-dir": str(tmp_path / "reports"),
                                 "alerts": {"webhook-url": f"{receiver.url}/a"}}}],
    }]}
    path = tmp_path / "mirrors.yaml"
    path.write_text(json.dumps(spec))
    monkeypatch.setenv("KAFKA_MIRROR_SPEC", str(path))
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps({"conn_type": "spark", "host": "local[2]"}))
    render(path, dags_folder())
    return mirror_dags(name, path)[f"mirror__{name}__verify"].test(), name


def _wait_for_group_coordinator(bootstrap: str, group: str, timeout: float = 60) -> None:
    """On a young cluster (this test first in its session) __consumer_offsets is still being created, and the
    check's first committed-offsets request fails with NOT_COORDINATOR; a mirror's worker has committed by then."""
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    deadline = time.monotonic() + timeout
    try:
        while True:
            try:
                consumer.committed([TopicPartition("__probe", 0)], timeout=10)
                return
            except KafkaException:
                if time.monotonic() > deadline:
                    raise
                time.sleep(1)
    finally:
        consumer.close()
