"""The worker's librdkafka clients: their callbacks (errors, statistics, logs) and a bounded first contact."""

from __future__ import annotations

import functools
import json
import logging
import time
from collections.abc import Callable
from typing import Protocol

from confluent_kafka import KafkaError, KafkaException

from mirror_worker.clients.factory import librdkafka_log
from mirror_worker.clients.health import DESTINATION, ClientHealth
from mirror_worker.exceptions import ClusterRefusedError, UnreachableClusterError
from mirror_worker.metrics import MirrorMetrics

log = logging.getLogger("mirror_worker")


class Stoppable(Protocol):
    """What the callbacks need of the worker's run state (`engine.run_state.RunState`): a way to stop it."""

    def fail(self, reason: str) -> None: ...


def fatal_reason(what: str, err: KafkaError, instance: str | None) -> str:
    """Why the worker stops; a static member names its id: librdkafka's FENCED_INSTANCE_ID (another process
    joined with it) reaches the consumer as a bare `_FATAL` with the broker's text."""
    member = f" (static member {instance}: is its worker slot running twice?)" if instance else ""
    return f"{what}{member}: {err.str()}"


def error_text(exc: BaseException) -> str:
    """One line for a client failure: a KafkaException's error string, else the exception's own text."""
    if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
        return exc.args[0].str()
    return str(exc) or type(exc).__name__


def call_normalised(fn: Callable, *args):
    """`fn(*args)` for a confluent-kafka callback: what it raises reaches confluent-kafka normalised.

    An exception that a confluent-kafka method raised inside a callback (e.g. `committed()` in on_assign
    while the consumer closes) reaches the caller of poll()/consume()/close() as a bare `KafkaError`,
    not an exception: no `except` clause catches it, and a thread that ends on it cannot even print its
    traceback. Raised again from Python it is normalised and arrives as the `KafkaException` it was
    (tests/unit/mirror_worker/clients/test_callbacks.py)."""
    try:
        return fn(*args)
    except BaseException as exc:
        raise exc  # not a bare `raise`: re-raised from Python, the exception is normalised


def client_callback(fn: Callable) -> Callable:
    """`fn` made safe to hand to confluent-kafka as a callback (rebalance, error, statistics, delivery)."""

    @functools.wraps(fn)
    def guarded(*args):
        return call_normalised(fn, *args)

    return guarded


class ClientSettings:
    """Adds the worker's callbacks to client settings; remembers why a cluster refused a connection.

    `on_delivery_error` receives the error-only delivery reports of records produced without a
    per-run callback (heartbeats, offset syncs, positions); mirrored records bring their own.
    """

    def __init__(self, metrics: MirrorMetrics, label: dict, state: Stoppable,
                 on_delivery_error: Callable[[KafkaError, object], None], health: ClientHealth | None = None) -> None:
        self.metrics = metrics
        self.label = label
        self.state = state
        self.on_delivery_error = on_delivery_error
        self.health = health or ClientHealth(metrics, label)
        self.refused: str | None = None  # the last authentication or TLS failure reported by a client

    def client(self, settings: dict, stats_source: str | None = None, cluster: str | None = None) -> dict:
        """`stats_source`: the cluster (a source's name, or DESTINATION) whose health and lag this client's
        statistics report, when it has statistics.interval.ms; `cluster` (default: that one) names the cluster
        in the client's error lines."""
        name = cluster or stats_source
        out = {**settings, "logger": librdkafka_log,
               "error_cb": client_callback(lambda err: self._on_client_error(err, name))}
        if stats_source is not None and "statistics.interval.ms" in settings:
            interval_s = int(settings["statistics.interval.ms"]) / 1000
            out["stats_cb"] = client_callback(lambda stats_json: self._on_stats(stats_source, stats_json, interval_s))
        return out

    def producer(self, settings: dict, fitted: dict[str, str] | None = None) -> dict:
        """`fitted`: settings fitted to the destination topics (batch.size, message.max.bytes), they win."""
        return {**self.client(settings, DESTINATION), "delivery.report.only.error": True,
                "on_delivery": client_callback(self.on_delivery_error), **(fitted or {})}

    def cluster_id(self, client, what: str, timeout_s: float) -> str:
        """The cluster's id, within timeout_s; refused credentials or certificates fail at once."""
        deadline = time.monotonic() + timeout_s
        self.refused = None
        while True:
            try:
                return client.list_topics(timeout=max(0.1, min(2.0, deadline - time.monotonic()))).cluster_id or ""
            except KafkaException as exc:
                error = exc.args[0].str()
            client.poll(0)  # serves error_cb, which sees why the connection failed
            if self.refused:
                raise ClusterRefusedError(f"{what} cluster refused the connection: {self.refused}")
            if time.monotonic() >= deadline:
                raise UnreachableClusterError(f"{what} cluster unreachable within {timeout_s:.0f}s: {error}")

    def _on_client_error(self, err: KafkaError, cluster: str | None = None) -> None:
        if err.fatal():
            self.state.fail(f"fatal client error: {err.str()}")
        if err.code() in (KafkaError._AUTHENTICATION, KafkaError._SSL):
            self.refused = err.str()
        log.warning("client error", extra={**self.label, **({"cluster": cluster} if cluster else {}),
                                            "error": err.str(), "code": err.name()})

    def _on_stats(self, cluster: str, stats_json: str, interval_s: float) -> None:
        """The cluster's health as this client sees it; a consumer's: the per-partition lag of its assignment."""
        stats = json.loads(stats_json)
        self.health.report(cluster, stats, interval_s)
        if stats.get("type") != "consumer":
            return
        for topic, data in stats.get("topics", {}).items():
            for partition, pdata in data.get("partitions", {}).items():
                lag = pdata.get("consumer_lag", -1)
                if partition != "-1" and lag >= 0:
                    self.metrics.partition_lag.labels(source=cluster, topic=topic, partition=partition, **self.label).set(lag)
