"""`make run`'s demo without servers: its verify DAG is unpaused only once the demo's orders are mirrored, so
its first consistency check has records to compare (before, it ran at once and reported 0 records "ok")."""

from __future__ import annotations

import pytest

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
