"""A Kafka cluster of several KRaft nodes behind Toxiproxy, as production runs it: for the fault tests.

Every node is broker and controller (a quorum of all of them); replication factor 3 for topics and internal
topics with `min.insync.replicas` 2 and no unclean leader election, so one node may die without losing a
record or refusing a write. Brokers replicate on a listener of their own (BROKER, direct); clients get
the address of the node's proxy on the PLAINTEXT listener, so every client connection passes a proxy
that a test can slow down or cut, while replication never does.

A cluster of one node (the WAN bench) keeps the devstack's one-node settings (replication factor 1, the
JVM's own thread pools): only the proxy in front and the direct listener beside it are the same.

Layout under `home`: cluster.json (cluster id), node-<id>/ (a KafkaNode each).
"""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from devstack.errors import StartupTimeoutError
from devstack.kafka import KafkaNode, Quorum, answers_metadata, new_cluster_id
from devstack.stack import CLUSTERS
from devstack.toxiproxy import ToxiproxyServer

INTER_BROKER_LISTENER = "BROKER"

_REPLICATED_SETTINGS = {
    "default.replication.factor": "3",
    "min.insync.replicas": "2",
    "unclean.leader.election.enable": "false",
    "offsets.topic.replication.factor": "3",
    "transaction.state.log.replication.factor": "3",
    "transaction.state.log.min.isr": "2",
    "share.coordinator.state.topic.replication.factor": "3",
    "share.coordinator.state.topic.min.isr": "2",
    # Small thread pools: two clusters of three share a 2-core machine with the tests.
    "num.network.threads": "2",
    "num.io.threads": "2",
    "background.threads": "2",
}


class KafkaCluster:
    def __init__(self, name: str, home: Path, proxy: ToxiproxyServer, size: int = 3, heap_mb: int = 256,
                 jit: str = "c2") -> None:
        self.name = name
        self.home = Path(home)
        self.proxy = proxy
        replicated = size > 1
        self.nodes = [
            KafkaNode(
                f"{name}.{node_id}", self.home / f"node-{node_id}", heap_mb=heap_mb,
                extra_listeners={INTER_BROKER_LISTENER: "PLAINTEXT"},
                extra_settings=_REPLICATED_SETTINGS if replicated else {},
                node_id=node_id, inter_broker_listener=INTER_BROKER_LISTENER,
                active_processors=1 if replicated else None, jit=jit,
            )
            for node_id in range(1, size + 1)
        ]

    def node(self, node_id: int) -> KafkaNode:
        return self.nodes[node_id - 1]

    def proxy_name(self, node_id: int) -> str:
        return f"{self.name}-{node_id}"

    @property
    def bootstrap_servers(self) -> str:
        """Every node's proxy: clients only ever reach the brokers through them."""
        proxies = self.proxy.proxies()
        return ",".join(proxies[self.proxy_name(node.node_id)]["listen"] for node in self.nodes)

    @property
    def direct_bootstrap_servers(self) -> str:
        """Every node's inter-broker listener, past the proxies: for clients no fault may touch (a bench's
        own producers and watchers). Its metadata names the same listener, so they never reach a proxy."""
        return ",".join(node.listener_bootstrap(INTER_BROKER_LISTENER) for node in self.nodes)

    def _cluster_id(self) -> str:
        state = self.home / "cluster.json"
        if not state.is_file():
            self.home.mkdir(parents=True, exist_ok=True)
            state.write_text(json.dumps({"cluster_id": new_cluster_id()}))
        return json.loads(state.read_text())["cluster_id"]

    def configure(self) -> None:
        """Ports and proxies for every node, then each node's config and storage (one short JVM each).
        The proxy server must be running: it binds each proxy's port before a node advertises it."""
        quorum = Quorum(self._cluster_id(), tuple(node.voter() for node in self.nodes))
        for node in self.nodes:
            listen = self.proxy.add_proxy(self.proxy_name(node.node_id), node.bootstrap_servers)
            node.configure(quorum, advertised=listen)

    def start(self) -> None:
        self.configure()
        for node in self.nodes:
            node.start()

    def wait_ready(self, timeout: float = 120.0) -> None:
        """Every node answers, and the cluster's metadata (through the proxies) names all of them."""
        deadline = time.monotonic() + timeout
        for node in self.nodes:
            node.wait_ready(max(1.0, deadline - time.monotonic()))
        while not answers_metadata(self.bootstrap_servers, brokers=len(self.nodes)):
            if time.monotonic() > deadline:
                raise StartupTimeoutError(
                    f"kafka cluster {self.name}: not all {len(self.nodes)} brokers registered within {timeout:.0f}s"
                )
            time.sleep(0.5)

    def stop(self) -> None:
        with ThreadPoolExecutor(len(self.nodes)) as pool:
            for future in [pool.submit(node.stop) for node in self.nodes]:
                future.result()


class FaultStack:
    """A `source` and a `destination` cluster of `size` nodes each, behind one Toxiproxy (the fault tests: 3
    nodes; bench.wan: 1). `jit`: the brokers' compiler (KafkaNode.jit)."""

    def __init__(self, root: Path, size: int = 3, heap_mb: int = 256, jit: str = "c2") -> None:
        self.root = Path(root).resolve()
        self.toxiproxy = ToxiproxyServer(self.root / "toxiproxy")
        self.clusters = {name: KafkaCluster(name, self.root / name, self.toxiproxy, size, heap_mb, jit)
                         for name in CLUSTERS}

    def __getitem__(self, cluster: str) -> KafkaCluster:
        return self.clusters[cluster]

    def up(self, timeout: float = 240.0) -> None:
        """The proxy server first (the brokers advertise its proxies), then every node at once."""
        started = time.monotonic()
        try:
            self.toxiproxy.start()
            self.toxiproxy.wait_ready()
            for cluster in self.clusters.values():
                cluster.configure()
            for cluster in self.clusters.values():
                cluster.start()
            for cluster in self.clusters.values():
                cluster.wait_ready(max(1.0, timeout - (time.monotonic() - started)))
        except BaseException:
            self.down()
            raise
        self.startup_seconds = time.monotonic() - started

    def down(self) -> None:
        with ThreadPoolExecutor(len(self.clusters)) as pool:
            for future in [pool.submit(cluster.stop) for cluster in self.clusters.values()]:
                future.result()
        self.toxiproxy.stop()
