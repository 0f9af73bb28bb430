"""Catch-up planning without servers: every start goes through the worker's decide_start; a loss halts the
partition (no range) or, with reset, starts it at the earliest record; every client conf carries the
mirror's security settings."""

from __future__ import annotations

import argparse

import pytest

from mirror_worker.engine import data_loss
from spark_jobs.catchup import job as catchup
from spark_jobs.catchup import plan as catchup_plan
from spark_jobs.catchup.plan import plan_ranges
from spark_jobs.common.job_config import target_from_args
from spark_jobs.common.kafka_meta import KafkaMeta

WATERMARKS = {"t": {0: (20, 30)}}


def test_plan_ranges_uses_the_workers_decide_start():
    assert catchup_plan.decide_start is data_loss.decide_start


@pytest.mark.parametrize("case, position, topic_id_now, reset_to_earliest, halt, want_range, want_kind", [
    ("fresh, earliest", None, "id-1", True, True, ("t", 0, 20, 30), None),
    ("fresh, latest", None, "id-1", False, True, ("t", 0, 30, 30), None),
    ("resume", (25, "id-1"), "id-1", True, True, ("t", 0, 25, 30), None),
    ("resume at the end", (30, "id-1"), "id-1", True, True, ("t", 0, 30, 30), None),
    ("resume, commit without topic id", (22, ""), "id-1", True, True, ("t", 0, 22, 30), None),
    ("truncated, halt", (10, "id-1"), "id-1", True, True, None, "truncated"),
    ("truncated, reset", (10, "id-1"), "id-1", True, False, ("t", 0, 20, 30), "truncated"),
    ("beyond end, halt", (40, "id-1"), "id-1", True, True, None, "beyond_end"),
    ("beyond end, reset", (40, "id-1"), "id-1", True, False, ("t", 0, 20, 30), "beyond_end"),
    ("recreated, halt", (25, "id-old"), "id-1", True, True, None, "recreated"),
    ("recreated, reset", (25, "id-old"), "id-1", True, False, ("t", 0, 20, 30), "recreated"),
    ("explicit offset below low (no topic id)", (5, None), "id-1", True, True, None, "truncated"),
])
def test_plan_ranges(case, position, topic_id_now, reset_to_earliest, halt, want_range, want_kind):
    positions = {("t", 0): position} if position else {}
    plan = plan_ranges(WATERMARKS, positions, {"t": topic_id_now}, reset_to_earliest, halt)
    assert plan.ranges == ([want_range] if want_range else [])
    assert [loss.decision.verdict.value for loss in plan.losses] == ([want_kind] if want_kind else [])
    assert [loss.halted for loss in plan.halted] == ([True] if want_kind and halt else [])
    offset, topic_id = position or (None, None)
    expected = data_loss.decide_start(offset, topic_id, topic_id_now, 20, 30, reset_to_earliest, "t[0]")
    if want_range:
        assert want_range[2] == expected.offset


def test_a_failback_mirror_starts_a_partition_without_a_position_where_the_workers_rule_says():
    asked = []
    plan = plan_ranges({"t": {0: (20, 30), 1: (0, 5)}}, {("t", 1): (2, "id-1")}, {"t": "id-1"}, False, True,
                       lambda topic, partition, low, high: asked.append((topic, partition, low, high)) or 27)
    assert asked == [("t", 0, 20, 30)]  # partition 1 has a position: resumed there
    assert plan.ranges == [("t", 0, 27, 30), ("t", 1, 2, 5)]


def test_a_halted_loss_reports_the_partition_and_the_lost_range():
    plan = plan_ranges({"t": {0: (20, 30), 1: (0, 30)}}, {("t", 0): (10, "id"), ("t", 1): (10, "id")},
                       {"t": "id"}, True, True)
    assert plan.ranges == [("t", 1, 10, 30)]
    (loss,) = plan.losses
    assert loss.line() == ("data loss: t[0]: records 10..19 were deleted from the source (retention) before they were "
                           "mirrored; earliest offset now 20; t[0] not copied, its group offset not moved "
                           "(on_data_loss=halt)")
    assert loss.summary() == {
        "topic": "t", "partition": 0, "kind": "truncated", "position": 10, "earliest": 20, "lost": [10, 19],
        "action": "halt", "reason": "t[0]: records 10..19 were deleted from the source (retention) before they were "
                                    "mirrored; earliest offset now 20",
    }


def test_a_reset_loss_says_where_the_copy_starts():
    (loss,) = plan_ranges(WATERMARKS, {("t", 0): (40, None)}, {}, True, False).losses
    assert loss.line().endswith("; copying t[0] from offset 20 (on_data_loss=reset)")
    assert loss.summary()["lost"] is None and loss.summary()["action"] == "reset"


def _args(**values) -> argparse.Namespace:
    base = dict(config=None, mirror=None, source_bootstrap=None, destination_bootstrap=None, topics=None, prefix=None,
                group_id=None)
    return argparse.Namespace(**{**base, **values})


def _secured_spec(tmp_path, on_data_loss: str = "halt"):
    secrets = tmp_path / "secrets.properties"
    secrets.write_text("source.password=Src-Secret-1\ndestination.password=Dst-Secret-2\n")
    spec = tmp_path / "mirrors.yaml"
    spec.write_text(f"""
groups:
  - name: g
    source:
      kafka:
        bootstrap.servers: "src:9093"
        security.protocol: SASL_SSL
        sasl.mechanism: SCRAM-SHA-512
        sasl.jaas.config: 'org.apache.kafka.common.security.scram.ScramLoginModule required username="reader" password="${{file:{secrets}:source.password}}";'
    destination:
      kafka:
        bootstrap.servers: "dst:9093"
        security.protocol: SASL_SSL
        sasl.mechanisms: SCRAM-SHA-256
        sasl.username: writer
        sasl.password: "${{file:{secrets}:destination.password}}"
    mirrors:
      - name: m
        whitelist: "orders"
        on-data-loss: {on_data_loss}
""")
    return target_from_args(_args(config=str(spec), mirror="m"))


def test_every_client_conf_carries_the_mirrors_security_settings_and_secrets(tmp_path):
    target = _secured_spec(tmp_path)
    source = {"bootstrap.servers": "src:9093", "security.protocol": "SASL_SSL", "sasl.mechanisms": "SCRAM-SHA-512",
              "sasl.username": "reader", "sasl.password": "Src-Secret-1"}
    destination = {"bootstrap.servers": "dst:9093", "security.protocol": "SASL_SSL",
                   "sasl.mechanisms": "SCRAM-SHA-256", "sasl.username": "writer", "sasl.password": "Dst-Secret-2"}
    assert target.connection("source") == source            # admin (group idle check), metadata reader
    assert target.connection("destination") == destination  # admin (destination topics)
    assert catchup.commit_conf(target) == {**source, "group.id": target.group_id, "enable.auto.commit": False}
    reader = catchup.reader_conf(target)  # the tasks' consumer: reads the range, commits its end
    assert reader.items() >= {**source, "group.id": target.group_id, "isolation.level": "read_committed",
                              "enable.auto.commit": False, "enable.partition.eof": True}.items()
    producer = catchup.producer_conf(target)
    assert producer.items() >= destination.items()
    assert (producer["acks"], producer["enable.idempotence"], producer["partitioner"]) == ("all", "true", "murmur2_random")
    assert producer["message.timeout.ms"] == "300000"  # bounded, unlike the worker's 0
    assert target.on_data_loss == "halt" and target.reset_to_earliest


def test_kafka_meta_clients_use_the_connection_settings(tmp_path, monkeypatch):
    target = _secured_spec(tmp_path, on_data_loss="reset")
    made = []

    class NoCluster:
        def __init__(self, conf):
            made.append(conf)

        def list_topics(self, timeout=None):
            return type("Metadata", (), {"topics": {}})()

        def close(self):
            pass

    monkeypatch.setattr("mirror_worker.clients.factory.Consumer", NoCluster)
    KafkaMeta(target.source_bootstrap, "source", target.source_settings).close()
    (conf,) = made
    assert conf.items() >= target.connection("source").items()
    assert target.on_data_loss == "reset"


def test_the_flags_path_gets_the_workers_producer_settings():
    target = target_from_args(_args(source_bootstrap="s:9092", destination_bootstrap="d:9092", topics="a"))
    producer = catchup.producer_conf(target)
    assert (producer["bootstrap.servers"], producer["acks"], producer["enable.idempotence"]) == ("d:9092", "all", "true")
    assert target.connection("source") == {"bootstrap.servers": "s:9092"}
