"""Brokers down, partitions without a leader and produce retries from librdkafka's statistics (clients/health.py)."""

from __future__ import annotations

from prometheus_client import generate_latest

from mirror_worker.clients.health import DESTINATION, ClientHealth, client_view
from mirror_worker.metrics import MirrorMetrics
from tests.unit.fakes import FakeClock


def _broker(node: int, state: str, toppars: tuple = (), txretries: int = 0) -> tuple[str, dict]:
    return f"127.0.0.1:{9090 + node}/{node}", {
        "nodeid": node, "state": state, "txretries": txretries,
        "toppars": {f"t-{p}": {"topic": "t", "partition": p} for p in toppars},
    }


def _stats(name: str, brokers: list, leaders: dict[int, int], kind: str = "producer") -> dict:
    return {
        "name": name, "type": kind,
        "brokers": dict([("127.0.0.1:9092/bootstrap", {"nodeid": -1, "state": "INIT", "txretries": 0}), *brokers]),
        "topics": {"t": {"partitions": {**{str(p): {"leader": lead} for p, lead in leaders.items()}, "-1": {"leader": -1}}}},
    }


def test_a_broker_the_client_needs_and_cannot_reach_is_down():
    view = client_view(_stats("p", [
        _broker(1, "UP", (0,), txretries=4),
        _broker(2, "CONNECT", (1,), txretries=3),  # leads partition 1, unreachable
        _broker(3, "INIT"),                          # not needed: up or down, the client does not know
    ], {0: 1, 1: 2, 2: -1}))
    assert view.brokers_down == {2}
    assert view.leaderless == {("t", 1), ("t", 2)}
    assert view.produce_retries == 7


def test_a_needed_broker_waiting_to_connect_again_is_down():
    assert client_view(_stats("p", [_broker(1, "INIT", (0,))], {0: 1})).brokers_down == {1}
    assert client_view(_stats("p", [_broker(1, "TRY_CONNECT")], {0: 1})).brokers_down == {1}


def test_a_consumers_retries_are_not_delivery_retries():
    assert client_view(_stats("c", [_broker(1, "UP", txretries=5)], {}, kind="consumer")).produce_retries == 0


def _sample(metrics: MirrorMetrics, name: str) -> float | None:
    for line in generate_latest(metrics.registry).decode().splitlines():
        if line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    return None


def test_the_cluster_figure_is_the_union_of_its_clients_recent_reports():
    metrics, clock = MirrorMetrics("m"), FakeClock(step=0.0)
    health = ClientHealth(metrics, {"mirror": "m"}, clock)
    assert _sample(metrics, "mirror_destination_brokers_down") is None  # no statistics: no series
    health.report(DESTINATION, _stats("p1", [_broker(1, "DOWN", (0,), txretries=2)], {0: 1}), 5.0)
    health.report(DESTINATION, _stats("p2", [_broker(1, "DOWN", (0,)), _broker(2, "CONNECT", (1,))], {0: 1, 1: 2}), 5.0)
    assert _sample(metrics, "mirror_destination_brokers_down") == 2
    assert _sample(metrics, "mirror_delivery_retries_total") == 2  # p1's first report: counted from 0
    assert _sample(metrics, "mirror_destination_partitions_without_leader") == 2
    health.report(DESTINATION, _stats("p1", [_broker(1, "UP", (0,), txretries=10)], {0: 1}), 5.0)
    assert _sample(metrics, "mirror_delivery_retries_total") == 10  # deltas of each client's running total
    clock.now += 16  # p2 closed: its last report ages out
    health.report(DESTINATION, _stats("p1", [_broker(1, "UP", (0,), txretries=10)], {0: 1}), 5.0)
    assert _sample(metrics, "mirror_destination_brokers_down") == 0
    assert _sample(metrics, "mirror_destination_partitions_without_leader") == 0
    assert _sample(metrics, "mirror_delivery_retries_total") == 10
    health.report("eu", _stats("c", [_broker(4, "CONNECT", (0,))], {0: 4}, kind="consumer"), 5.0)
    assert _sample(metrics, "mirror_source_brokers_down") == 1


def test_a_client_error_line_names_its_cluster(caplog):
    """The worker's clients of several clusters share one error callback: each line says whose error it is."""
    import logging

    from confluent_kafka import KafkaError

    from mirror_worker.clients.callbacks import ClientSettings
    from mirror_worker.engine.run_state import RunState

    settings = ClientSettings(MirrorMetrics("m"), {"mirror": "m"}, RunState(5.0, FakeClock()), lambda *_: None)
    down = KafkaError(KafkaError._ALL_BROKERS_DOWN, "3/3 brokers are down")
    with caplog.at_level(logging.WARNING, logger="mirror_worker"):
        settings.client({"bootstrap.servers": "x:1"}, cluster="eu")["error_cb"](down)
        settings.client({"bootstrap.servers": "x:1"}, stats_source="destination")["error_cb"](down)
        settings.client({"bootstrap.servers": "x:1"})["error_cb"](down)
    assert [getattr(r, "cluster", None) for r in caplog.records if r.getMessage() == "client error"] == \
        ["eu", "destination", None]
