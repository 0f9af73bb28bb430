"""What the worker's clients see of their clusters, from librdkafka's statistics: brokers they need and cannot
reach, partitions without a reachable leader, and the produce requests they sent again (the operator's view of
a broker failure or a network cut while it lasts; metrics.py names the series).

A client connects only to the brokers it needs (librdkafka's sparse connections): a broker it does not need
sits in INIT whether it is up or down, so a broker counts as down when the client needs it (it leads a
partition the client uses, or the client is trying to connect to it) and it is not UP. Each client reports on
its own; a cluster's figure is the union over its clients that reported recently (a closed client's last
report ages out).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from mirror_worker.metrics import MirrorMetrics

DESTINATION = "destination"
STATISTICS_INTERVAL_MS = "5000"  # the clients' default when the worker serves metrics, up to 1,000 partitions
# A report lists every partition the client knows: at 5,000 partitions 4.2 MB of JSON from the source consumer
# alone, ~0.19 CPU-s for librdkafka to build and ~0.05 more to parse here, per report. Past 1,000 partitions the
# interval grows with them (5 s more per 1,000), up to this; a named statistics.interval.ms wins.
STATISTICS_MAX_INTERVAL_MS = 60_000
STALE_AFTER_INTERVALS = 3  # a client whose last report is older than this many statistics intervals is gone


def statistics_interval_ms(partitions: int) -> str:
    """The statistics interval of a client that reports on `partitions` partitions (librdkafka's setting)."""
    base = int(STATISTICS_INTERVAL_MS)
    return str(min(STATISTICS_MAX_INTERVAL_MS, max(base, base * partitions // 1000)))


@dataclass(frozen=True)
class ClientView:
    """One statistics report of one client."""

    brokers_down: frozenset[int]  # node ids
    leaderless: frozenset[tuple[str, int]]  # (topic, partition) whose leader is unknown or down
    produce_retries: int  # since the client started (librdkafka's txretries, summed over brokers)


def client_view(stats: dict) -> ClientView:
    down = set()
    for broker in stats.get("brokers", {}).values():
        node = broker.get("nodeid", -1)
        if node < 0 or broker.get("state") == "UP":
            continue  # a bootstrap address or the internal broker; or reachable
        if broker.get("state") != "INIT" or broker.get("toppars"):
            down.add(node)
    leaderless = set()
    for topic, data in stats.get("topics", {}).items():
        for partition, pdata in data.get("partitions", {}).items():
            if partition != "-1" and (pdata.get("leader", -1) < 0 or pdata.get("leader") in down):
                leaderless.add((topic, int(partition)))
    retries = sum(b.get("txretries", 0) for b in stats.get("brokers", {}).values()) if stats.get("type") == "producer" else 0
    return ClientView(frozenset(down), frozenset(leaderless), retries)


class ClientHealth:
    """Each cluster's latest view per client, served to the metrics at scrape time."""

    def __init__(self, metrics: MirrorMetrics, label: dict, clock: Callable[[], float] = time.monotonic) -> None:
        self.metrics, self.label, self.clock = metrics, label, clock
        self._lock = threading.Lock()
        self._views: dict[str, dict[str, tuple[float, float, ClientView]]] = {}  # cluster -> client -> (at, ttl, view)
        self._retries: dict[str, int] = {}  # client -> txretries already counted

    def report(self, cluster: str, stats: dict, interval_s: float) -> None:
        """`cluster`: DESTINATION, or the source's name; `interval_s`: the client's statistics.interval.ms.
        Called on each client's statistics callback."""
        view = client_view(stats)
        client = stats.get("name", "")
        ttl = STALE_AFTER_INTERVALS * interval_s
        with self._lock:
            first = cluster not in self._views
            self._views.setdefault(cluster, {})[client] = (self.clock(), ttl, view)
            more = view.produce_retries - self._retries.get(client, 0)
            self._retries[client] = view.produce_retries
        if first:
            self._expose(cluster)
        if more > 0:
            self.metrics.delivery_retries.labels(mirror=self.label["mirror"]).inc(more)

    def brokers_down(self, cluster: str) -> int:
        return len(frozenset().union(*(v.brokers_down for v in self._fresh(cluster))))

    def partitions_without_leader(self, cluster: str) -> int:
        return len(frozenset().union(*(v.leaderless for v in self._fresh(cluster))))

    def _fresh(self, cluster: str) -> list[ClientView]:
        now = self.clock()
        with self._lock:
            return [view for at, ttl, view in self._views.get(cluster, {}).values() if now - at <= ttl]

    def _expose(self, cluster: str) -> None:
        m, mirror = self.metrics, self.label["mirror"]
        if cluster == DESTINATION:
            m.delivery_retries.labels(mirror=mirror)  # 0 from the producers' first report on, not absent
            brokers, leaderless = m.destination_brokers_down.labels(mirror=mirror), m.destination_leaderless.labels(mirror=mirror)
        else:
            brokers = m.source_brokers_down.labels(mirror=mirror, source=cluster)
            leaderless = m.source_leaderless.labels(mirror=mirror, source=cluster)
        brokers.set_function(lambda: self.brokers_down(cluster))
        leaderless.set_function(lambda: self.partitions_without_leader(cluster))

