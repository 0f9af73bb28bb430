"""`make run`'s demo without servers: its verify DAG is unpaused only once the demo's orders are mirrored, so
its first consistency check has records to compare (before, it ran at once and reported 0 records "ok")."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException

from devstack import demo


class FakeApi:
    def __init__(self) -> None:
        self.paused: dict[str, bool] = {dag_id: True for dag_id in demo.demo_dag_ids()}

    def wait_for_dags(self, dag_ids, timeout) -> None:
        assert set(dag_ids) <= set(self.paused)

    def dag(self, dag_id: str) -> dict | None:
        return {"dag_id": dag_id, "is_paused": self.paused[dag_id]} if dag_id in self.paused else None

    def set_paused(self, dag_id: str, paused: bool) -> dict:
        self.paused[dag_id] = paused
        return self.dag(dag_id)


class FakeAirflow:
    startup_seconds, url = None, "http://127.0.0.1:1"

    def __init__(self, stack) -> None:
        pass

    def is_running(self) -> bool:
        return True

    def wait_ready(self) -> None:
        pass

    def api(self) -> FakeApi:
        return API


API = FakeApi()


@pytest.fixture
def api(monkeypatch) -> FakeApi:
    global API
    API = FakeApi()
    monkeypatch.setattr(demo, "Airflow", FakeAirflow)
    monkeypatch.setattr(demo, "ensure_topic", lambda *args, **kwargs: None)
    stack = {"source": type("Cluster", (), {"kafka": type("Kafka", (), {"bootstrap_servers": "s:1"})})()}
    demo.run_with_demo(stack, out=lambda line: None)
    return API


def test_airflow_starts_with_every_demo_dag_unpaused_but_verify(api):
    assert {dag_id for dag_id, paused in api.paused.items() if not paused} == {
        "mirror__demo", "mirror__demo__lag", "mirror__demo__catchup"}
    assert api.paused[demo.VERIFY_DAG] is True


def test_verify_is_released_once_the_orders_are_mirrored_and_not_before(api):
    lines: list[str] = []
    assert demo.release_verify(api, caught_up=False, out=lines.append) is False
    assert api.paused[demo.VERIFY_DAG] is True
    assert "left paused" in lines[-1]
    assert demo.release_verify(api, caught_up=True, out=lines.append) is True
    assert api.paused[demo.VERIFY_DAG] is False
    assert "mirror__demo__verify unpaused" in lines[-1]


class FakeMetadata:
    def __init__(self) -> None:
        self.topics = {demo.TOPIC: type("Topic", (), {"partitions": {0: None, 1: None, 2: None}})()}


class FakeAdmin:
    def list_topics(self, topic, timeout):
        return FakeMetadata()


def test_a_group_look_up_that_times_out_while_the_worker_starts_is_asked_again(monkeypatch):
    # CI of stop 51: under load one describe of the group timed out (_TIMED_OUT) and `make run` exited 1.
    answers = iter([KafkaException(KafkaError(KafkaError._TIMED_OUT)), set(),
                    {(demo.TOPIC, 0), (demo.TOPIC, 1), (demo.TOPIC, 2)}])

    def held(admin, group, timeout):
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer
        return answer

    monkeypatch.setattr(demo, "admin_client", lambda conf: FakeAdmin())
    monkeypatch.setattr(demo, "held_partitions", held)
    monkeypatch.setattr(demo.time, "sleep", lambda seconds: None)
    lines: list[str] = []
    assert demo.wait_for_worker("s:1", "g", timeout=60, out=lines.append) is True
    assert lines[-1].startswith("  joined after")


def test_a_group_look_up_refused_for_good_still_fails_the_demo(monkeypatch):
    def held(admin, group, timeout):
        raise KafkaException(KafkaError(KafkaError.GROUP_AUTHORIZATION_FAILED))

    monkeypatch.setattr(demo, "admin_client", lambda conf: FakeAdmin())
    monkeypatch.setattr(demo, "held_partitions", held)
    with pytest.raises(KafkaException):
        demo.wait_for_worker("s:1", "g", timeout=60, out=lambda line: None)
