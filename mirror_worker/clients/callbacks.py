"""The worker's librdkafka clients: their callbacks (errors, statistics, logs) and a bounded first contact."""

from __future__ import annotations

import functools
import json
import logging
import threading
from collections.abc import Callable
from typing import Protocol

from confluent_kafka import KafkaError, KafkaException

from mirror_worker.clients.factory import admin_client, librdkafka_log
from mirror_worker.clients.first_contact import Probe, first_contact
from mirror_worker.clients.fold import REPEATS_FIELD, RepeatFold, kind_of
from mirror_worker.clients.health import DESTINATION, ClientHealth
from mirror_worker.clients.round_trip import round_trip_s, round_trips
from mirror_worker.config.librdkafka import connection_settings
from mirror_worker.metrics import MirrorMetrics

log = logging.getLogger("mirror_worker")


class Stoppable(Protocol):
    """What the callbacks need of the worker's run state (`engine.run_state.RunState`): a way to stop it, and
    whether a stop was asked for (the first contact gives up waiting then)."""

    stop_event: threading.Event

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
        # The last authentication or TLS failure reported by each cluster's clients (by ClientSettings.client's
        # `cluster`), for the first contact to stop waiting on it.
        self.refused: dict[str | None, str] = {}
        self.repeats = RepeatFold()  # the client errors logged (clients/fold.py)
        # Each cluster's round trip measured at start, in seconds (None: no answer): by DESTINATION or source name.
        self.round_trips: dict[str, float | None] = {}

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

    def cluster_id(self, client, what: str, timeout_s: float, cluster: str | None = None) -> str:
        """The cluster's id, within timeout_s; refused credentials or certificates fail at once."""
        return self.cluster_ids([Probe(client, what, cluster)], timeout_s)[0]

    def reach_all(self, destination_admin, sources: dict[str, dict], timeout_s: float,
                  measure=round_trip_s) -> str:
        """The destination's cluster id, once it and every source ({name: consumer settings}) answered, in one
        wait, so that each cluster that does not is named. A source is asked through a short-lived admin client
        (its connections close on return); its stream's clients come later and find it answering. Then each
        cluster's round trip, over the connection just made, every cluster at once (`round_trips`, logged and
        exported)."""
        probes = [Probe(destination_admin, "destination", DESTINATION)] + [
            Probe(admin_client(self.client(connection_settings(settings), cluster=name), whole=True),
                  f"source {name!r}", name) for name, settings in sources.items()]
        destination_id = self.cluster_ids(probes, timeout_s)[0]
        self.round_trips.update(round_trips({probe.cluster: probe.client for probe in probes}, measure))
        for probe in probes:
            took = self.round_trips[probe.cluster]
            if took is not None:
                self.metrics.round_trip.labels(cluster=probe.cluster, **self.label).set(took)
        log.info("round trips measured", extra={**self.label, "round_trip_ms": {
            name: None if took is None else round(took * 1000, 1) for name, took in self.round_trips.items()}})
        return destination_id

    def cluster_ids(self, probes: list[Probe], timeout_s: float) -> list[str]:
        """Each probe's cluster id, all in one bounded wait that a stop ends (clients/first_contact.py)."""
        for probe in probes:
            self.refused.pop(probe.cluster, None)
        if any(p.cluster is None for p in probes):
            self.refused.clear()
        return first_contact(probes, timeout_s, self._refusal, self.state.stop_event.is_set)

    def _refusal(self, cluster: str | None) -> str | None:
        """Why `cluster` refused the connection; a probe that does not name its cluster takes any refusal."""
        return self.refused.get(cluster) if cluster is not None else next(iter(self.refused.values()), None)

    def _on_client_error(self, err: KafkaError, cluster: str | None = None) -> None:
        if err.fatal():
            self.state.fail(f"fatal client error: {err.str()}")
        if err.code() in (KafkaError._AUTHENTICATION, KafkaError._SSL):
            self.refused[cluster] = err.str()
        folded = self.repeats.admit((cluster, err.code(), kind_of(err.str())))
        if folded is None:
            return  # the same failure was logged less than a minute ago (clients/fold.py)
        log.warning("client error", extra={**self.label, **({"cluster": cluster} if cluster else {}),
                                            "error": err.str(), "code": err.name(),
                                            **({REPEATS_FIELD: folded} if folded else {})})

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
