"""Faults on the wire: Toxiproxy toxics on the proxies in front of the brokers, through its HTTP API.

`devstack/toxiproxy.py` runs the server and makes one proxy per broker (`KafkaCluster.proxy_name`). A toxic
acts on one direction of a proxy's connections: `downstream` (broker to client) or `upstream` (client to
broker); a round-trip time of R ms is R/2 ms of latency on each.
"""

from __future__ import annotations

from devstack.kafka_cluster import KafkaCluster
from devstack.toxiproxy import ToxiproxyServer

BOTH = ("upstream", "downstream")


class Proxy:
    """One proxy (one broker's clients' listener)."""

    def __init__(self, server: ToxiproxyServer, name: str) -> None:
        self.server, self.name = server, name

    def add(self, toxic: str, streams: tuple[str, ...] = BOTH, toxicity: float = 1.0, **attributes) -> None:
        for stream in streams:
            self.server.api("POST", f"/proxies/{self.name}/toxics", {
                "name": f"{toxic}-{stream}", "type": toxic, "stream": stream, "toxicity": toxicity,
                "attributes": attributes,
            })

    def latency(self, ms: int, jitter_ms: int = 0, streams: tuple[str, ...] = BOTH) -> None:
        """Every chunk of data waits `ms` (± `jitter_ms`) in each direction of `streams`."""
        self.add("latency", streams, latency=ms, jitter=jitter_ms)

    def bandwidth(self, kib_per_s: int, streams: tuple[str, ...] = ("downstream",)) -> None:
        self.add("bandwidth", streams, rate=kib_per_s)

    def black_hole(self, close_after_ms: int = 0) -> None:
        """Connections stay open but nothing passes (a silent network cut); closed after `close_after_ms`
        when given. New connections are accepted and swallowed too."""
        self.add("timeout", ("upstream",), timeout=close_after_ms)

    def reset_peer(self, after_ms: int = 0) -> None:
        """Connections are reset (TCP RST) `after_ms` after they carry data."""
        self.add("reset_peer", ("upstream",), timeout=after_ms)

    def slow_close(self, delay_ms: int) -> None:
        self.add("slow_close", ("downstream",), delay=delay_ms)

    def cut(self) -> None:
        """The proxy closes its connections and refuses new ones (the broker looks down to clients)."""
        self.server.api("POST", f"/proxies/{self.name}", {"enabled": False})

    def restore(self) -> None:
        """Enabled again, every toxic removed."""
        for toxic in self.server.api("GET", f"/proxies/{self.name}/toxics") or []:
            self.server.api("DELETE", f"/proxies/{self.name}/toxics/{toxic['name']}")
        self.server.api("POST", f"/proxies/{self.name}", {"enabled": True})


def proxies(cluster: KafkaCluster) -> list[Proxy]:
    """The proxy of every broker of `cluster` (a fault on all of them cuts the cluster off)."""
    return [Proxy(cluster.proxy, cluster.proxy_name(node.node_id)) for node in cluster.nodes]


def reset(server: ToxiproxyServer) -> None:
    """Every proxy enabled, every toxic removed (between tests)."""
    server.api("POST", "/reset")
