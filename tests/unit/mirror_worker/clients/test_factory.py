"""One module builds every Kafka client of the three planes (mirror_worker/clients/factory.py)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from mirror_worker.clients import factory

ROOT = Path(__file__).resolve().parents[4]
PLANES = [ROOT / "mirror_worker", ROOT / "spark_jobs", ROOT / "plugins" / "mirror_airflow", ROOT / "dags"]
CLIENT_CLASSES = {"Consumer", "Producer", "AdminClient", "DeserializingConsumer", "SerializingProducer"}
# client_config.check_librdkafka makes clients that never connect: librdkafka judges settings there.
NOT_CLIENTS = {ROOT / "mirror_worker" / "config" / "librdkafka.py"}


def _constructions(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            name = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", None)
            if name in CLIENT_CLASSES:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno} {name}(...)")
    return found


def test_no_module_of_the_three_planes_builds_a_kafka_client_itself():
    built = [hit for plane in PLANES for path in sorted(plane.rglob("*.py"))
             if path != ROOT / "mirror_worker" / "clients" / "factory.py" and path not in NOT_CLIENTS
             for hit in _constructions(path)]
    assert built == []


def test_the_check_sees_a_construction(tmp_path):
    sample = ROOT / "mirror_worker" / "clients" / "factory.py"
    assert any("AdminClient(...)" in hit for hit in _constructions(sample))


@pytest.fixture
def made(monkeypatch):
    calls: list[tuple[str, dict]] = []
    for name in ("Consumer", "Producer", "AdminClient"):
        monkeypatch.setattr(factory, name, lambda conf, _n=name: calls.append((_n, conf)) or (_n, conf))
    return calls


SETTINGS = {"bootstrap.servers": "b:9092", "security.protocol": "SASL_SSL", "sasl.password": "pw",
            "acks": "all", "linger.ms": "5"}


def test_an_admin_client_takes_the_connection_only_unless_whole(made):
    factory.admin_client(SETTINGS)
    factory.admin_client(SETTINGS, {"error_cb": print}, whole=True)
    (kind, conf), (_, whole) = made
    assert kind == "AdminClient"
    assert set(conf) == {"bootstrap.servers", "security.protocol", "sasl.password", "logger"}
    assert whole["acks"] == "all" and whole["error_cb"] is print


def test_a_side_consumer_never_commits_by_itself_and_overrides_win(made):
    factory.side_consumer(SETTINGS, "g", {"isolation.level": "read_committed"})
    (_, conf), = made
    assert conf["group.id"] == "g" and conf["enable.auto.commit"] is False
    assert conf["isolation.level"] == "read_committed" and "acks" not in conf


def test_librdkafka_lines_go_to_the_log_unless_the_caller_has_its_own_logger(made):
    mine = object()
    factory.producer(SETTINGS)
    factory.consumer({**SETTINGS, "logger": mine})
    assert made[0][1]["logger"] is factory.librdkafka_log
    assert made[1][1]["logger"] is mine
