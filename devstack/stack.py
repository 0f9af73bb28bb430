"""The local stack: a Kafka cluster and a schema registry for each of `source` and `destination`.

Layout under the stack root:
    stack.json                        the contract other parts read (see ../shared/DESIGN.md)
    <cluster>/kafka/                  server.properties, node.json (ports), data/, server.log, pid
    <cluster>/registry/               node.json (port), server.log, pid
"""

from __future__ import annotations

import json
import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from devstack.kafka import KafkaNode
from devstack.process import ManagedProcess, rss_mib
from devstack.registry import RegistryNode

CLUSTERS = ("source", "destination")


@dataclass
class Cluster:
    name: str
    kafka: KafkaNode
    registry: RegistryNode

    def contract(self) -> dict:
        return {"bootstrap_servers": self.kafka.bootstrap_servers, "schema_registry_url": self.registry.url}


class Stack:
    def __init__(self, root: Path, kafka_heap_mb: int = 384, registry_heap_mb: int = 128) -> None:
        self.root = Path(root).resolve()
        self.clusters = {
            name: Cluster(
                name,
                KafkaNode(name, self.root / name / "kafka", heap_mb=kafka_heap_mb),
                RegistryNode(name, self.root / name / "registry", heap_mb=registry_heap_mb),
            )
            for name in CLUSTERS
        }

    @property
    def stack_json(self) -> Path:
        return self.root / "stack.json"

    def __getitem__(self, cluster: str) -> Cluster:
        return self.clusters[cluster]

    def processes(self) -> list[ManagedProcess]:
        return [node.process for c in self.clusters.values() for node in (c.kafka, c.registry)]

    def service(self, name: str) -> ManagedProcess:
        """A process run on top of the stack (the demo mirror, Airflow); `down` stops it too."""
        return ManagedProcess(name, self.root / "services" / name)

    def services(self) -> list[ManagedProcess]:
        directory = self.root / "services"
        return [self.service(p.name) for p in sorted(directory.iterdir())] if directory.is_dir() else []

    def is_up(self) -> bool:
        return self.stack_json.is_file() and all(p.is_running() for p in self.processes())

    def up(self, timeout: float = 180.0) -> bool:
        """Start whatever is not running and wait for all of it; False when all was already up."""
        if self.is_up():
            return False
        started = time.monotonic()
        self.root.mkdir(parents=True, exist_ok=True)
        self.stack_json.unlink(missing_ok=True)
        nodes = [node for c in self.clusters.values() for node in (c.kafka, c.registry)]
        try:
            # Format storage one at a time (each is a short JVM), then start every server at once.
            for cluster in self.clusters.values():
                cluster.kafka.configure()
            for node in nodes:
                node.start()
            with ThreadPoolExecutor(len(nodes)) as pool:
                for future in [pool.submit(n.wait_ready, timeout) for n in nodes]:
                    future.result()
        except BaseException:
            self.down()
            raise
        self._write_stack_json()
        self.startup_seconds = time.monotonic() - started
        return True

    def down(self) -> None:
        """Stop every process the stack started (whole process groups) and wait for their ports."""
        for service in self.services():
            service.stop()
        nodes = [node for c in self.clusters.values() for node in (c.registry, c.kafka)]
        with ThreadPoolExecutor(len(nodes)) as pool:
            for future in [pool.submit(n.stop) for n in nodes]:
                future.result()
        self.stack_json.unlink(missing_ok=True)

    def contract(self) -> dict:
        return {name: cluster.contract() for name, cluster in self.clusters.items()}

    def _write_stack_json(self) -> None:
        tmp = self.stack_json.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(self.contract(), indent=2) + "\n")
        os.replace(tmp, self.stack_json)

    def status(self) -> list[dict]:
        """One row per component: cluster, component, running, pid, address, rss_mib."""
        rows = []
        for cluster in self.clusters.values():
            for component, node, address in (
                ("kafka", cluster.kafka, _safe(lambda n=cluster.kafka: n.bootstrap_servers)),
                ("registry", cluster.registry, _safe(lambda n=cluster.registry: n.url)),
            ):
                pid = node.process.pid()
                rows.append({
                    "cluster": cluster.name,
                    "component": component,
                    "running": pid is not None,
                    "pid": pid,
                    "address": address,
                    "rss_mib": round(rss_mib(pid), 1) if pid else 0.0,
                })
        for service in self.services():
            pid = service.pid()
            rows.append({
                "cluster": "-", "component": service.name, "running": pid is not None, "pid": pid,
                "address": None, "rss_mib": round(rss_mib(pid), 1) if pid else 0.0,
            })
        return rows


def _safe(get) -> str | None:
    try:
        return get()
    except (FileNotFoundError, KeyError, ValueError):
        return None
