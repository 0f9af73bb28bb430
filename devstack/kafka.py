"""One Apache Kafka node in KRaft mode (combined broker + controller), run from the cached jars.

Alone it is a one-node cluster; devstack/kafka_cluster.py makes several of them one cluster (a quorum
of their controllers, inter-broker traffic on a listener of its own).
"""

from __future__ import annotations

import base64
import json
import logging
import subprocess
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from devstack import paths
from devstack.errors import SetupMissingError, StackError, StartupTimeoutError
from devstack.jdk import find_java
from devstack.net import free_port, is_listening, wait_closed
from devstack.process import ManagedProcess

# Broker settings for a one-node development cluster (kafka_cluster.py overrides the replication ones for
# several nodes). Internal topics get replication factor 1; auto-creation is off so that every topic on `destination` is one the mirror (or a test) created.
_BROKER_SETTINGS = {
    "process.roles": "broker,controller",
    "controller.listener.names": "CONTROLLER",
    "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
    "auto.create.topics.enable": "false",
    "num.partitions": "1",
    "offsets.topic.replication.factor": "1",
    "offsets.topic.num.partitions": "10",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "transaction.state.log.num.partitions": "10",
    "share.coordinator.state.topic.replication.factor": "1",
    "share.coordinator.state.topic.min.isr": "1",
    "group.initial.rebalance.delay.ms": "0",
    # Retention is enforced every 5 s so that tests of truncation do not wait minutes.
    "log.retention.check.interval.ms": "5000",
    "log.segment.delete.delay.ms": "1000",
}

_LOG4J2 = """\
Configuration:
  Appenders:
    Console:
      name: STDOUT
      PatternLayout:
        pattern: "[%d] %p %m (%c)%n"
  Loggers:
    Logger:
      - name: kafka
        level: INFO
      - name: org.apache.kafka
        level: WARN
      - name: state.change.logger
        level: WARN
    Root:
      level: INFO
      AppenderRef:
        - ref: STDOUT
"""


def new_cluster_id() -> str:
    """A Kafka cluster id (or directory id): 16 random bytes, URL-safe base64 without padding.

    Never one starting with "-" (as Kafka's own Uuid.randomUuid): the storage tool's command line
    would read it as an option ("argument --cluster-id/-t: expected one argument").
    """
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


@dataclass(frozen=True)
class Quorum:
    """The controllers every node of a multi-node cluster is formatted with (`--initial-controllers`)."""

    cluster_id: str
    voters: tuple[str, ...]  # "node-id@host:port:directory-id", one per controller

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(voter.split("@", 1)[1].rsplit(":", 1)[0] for voter in self.voters)


GC_FLAGS = {
    "serial": lambda _heap_mb: ["-Xms64m", "-XX:+UseSerialGC"],
    "g1": lambda heap_mb: [
        f"-Xms{heap_mb}m", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20", "-XX:InitiatingHeapOccupancyPercent=35",
        "-XX:+ExplicitGCInvokesConcurrent",
    ],
}


JIT_FLAGS = {"c2": [], "c1": ["-XX:TieredStopAtLevel=1"]}


@dataclass
class KafkaNode:
    """A KRaft node with its data under `home`: a single-node cluster, or one node of a `Quorum`."""

    cluster: str
    home: Path
    heap_mb: int = 384
    # More listeners ({name: security protocol}, e.g. {"SASL_SSL": "SASL_SSL"}) next to PLAINTEXT, and
    # more broker settings (e.g. their SSL and SASL keys). PLAINTEXT is the clients' listener.
    extra_listeners: dict[str, str] = field(default_factory=dict)
    extra_settings: dict[str, str] = field(default_factory=dict)
    node_id: int = 1
    inter_broker_listener: str = "PLAINTEXT"  # or one of extra_listeners
    active_processors: int | None = None  # what the JVM sizes its thread pools by (-XX:ActiveProcessorCount)
    # "serial": the least CPU on two shared cores (tests, the demo); "g1": the collector and pause goal Kafka's
    # own start scripts set, with the whole heap at start as kafka-server-start.sh does (benchmarks).
    gc: str = "serial"
    # "c2": the JVM's default tiered compilation (benchmarks, the demo); "c1": the client compiler only, for the
    # test clusters: their brokers restart often and live minutes, so the optimising compiler's threads cost
    # more than they return (the C2 thread took ~36 % of a fault-stack broker's CPU in a full make test).
    jit: str = "c2"

    def __post_init__(self) -> None:
        self.process = ManagedProcess(f"kafka[{self.cluster}]", self.home)

    @property
    def _node_file(self) -> Path:
        return self.home / "node.json"

    @property
    def data_dir(self) -> Path:
        return self.home / "data"

    def _ports(self) -> dict:
        return json.loads(self._node_file.read_text())

    def _all_ports(self) -> list[int]:
        ports = self._ports()
        return [ports["broker_port"], ports["controller_port"], *ports.get("listeners", {}).values()]

    @property
    def port(self) -> int:
        return self._ports()["broker_port"]

    @property
    def bootstrap_servers(self) -> str:
        return f"127.0.0.1:{self.port}"

    def listener_bootstrap(self, name: str) -> str:
        """bootstrap.servers of one of the extra listeners."""
        return f"127.0.0.1:{self._ports()['listeners'][name]}"

    def is_configured(self) -> bool:
        return self._node_file.is_file() and (self.data_dir / "meta.properties").is_file()

    def cluster_id(self) -> str | None:
        """The id the storage was formatted with (meta.properties), None before that."""
        meta = self.data_dir / "meta.properties"
        if not meta.is_file():
            return None
        for line in meta.read_text().splitlines():
            if line.startswith("cluster.id="):
                return line.split("=", 1)[1].strip()
        return None

    def plan(self) -> dict:
        """This node's ports and metadata directory id: picked once (node.json), kept across restarts."""
        if self._node_file.is_file():
            return self._ports()
        self.home.mkdir(parents=True, exist_ok=True)
        planned = {"broker_port": free_port(), "controller_port": free_port(), "directory_id": new_cluster_id()}
        if self.extra_listeners:
            planned["listeners"] = {name: free_port() for name in self.extra_listeners}
        self._node_file.write_text(json.dumps(planned))
        return planned

    def voter(self) -> str:
        """This node as a controller of a `Quorum`."""
        planned = self.plan()
        return f"{self.node_id}@127.0.0.1:{planned['controller_port']}:{planned['directory_id']}"

    def configure(self, quorum: Quorum | None = None, advertised: str | None = None) -> None:
        """Pick ports, write the config and format the storage (once: a restart keeps all data).

        Without `quorum` the node is a cluster of its own (`--standalone`). `advertised`: the host:port
        clients are told for PLAINTEXT (a proxy in front of the node), instead of the node's own.
        """
        if self.is_configured():
            return
        planned = self.plan()
        broker_port, controller_port = planned["broker_port"], planned["controller_port"]
        extra = "".join(f",{name}://127.0.0.1:{port}" for name, port in planned.get("listeners", {}).items())
        settings = {
            **_BROKER_SETTINGS,
            "node.id": str(self.node_id),
            "inter.broker.listener.name": self.inter_broker_listener,
            "listeners": f"PLAINTEXT://127.0.0.1:{broker_port},CONTROLLER://127.0.0.1:{controller_port}{extra}",
            "advertised.listeners": f"PLAINTEXT://{advertised or f'127.0.0.1:{broker_port}'}{extra}",
            "listener.security.protocol.map": _BROKER_SETTINGS["listener.security.protocol.map"]
            + "".join(f",{name}:{protocol}" for name, protocol in self.extra_listeners.items()),
            "controller.quorum.bootstrap.servers": quorum.bootstrap_servers if quorum else f"127.0.0.1:{controller_port}",
            "log.dirs": str(self.data_dir),
            **self.extra_settings,
        }
        (self.home / "server.properties").write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
        (self.home / "log4j2.yaml").write_text(_LOG4J2)
        controllers = ("--initial-controllers", ",".join(quorum.voters)) if quorum else ("--standalone",)
        result = self._run_java(
            "kafka.tools.StorageTool", "format", *controllers, "--ignore-formatted",
            "-t", quorum.cluster_id if quorum else new_cluster_id(), "-c", str(self.home / "server.properties"),
        )
        if result.returncode != 0:
            raise StackError(f"kafka[{self.cluster}]: storage format failed: {result.stdout.strip()[-500:]}")

    def _java_argv(self, main_class: str, *args: str) -> list[str]:
        if not any(paths.KAFKA_LIBS.glob("kafka_2.13-*.jar")):
            raise SetupMissingError(f"Kafka jars missing in {paths.KAFKA_LIBS}: run `make setup`")
        return [
            find_java(17),
            f"-Xmx{self.heap_mb}m",
            *([f"-XX:ActiveProcessorCount={self.active_processors}"] if self.active_processors else []),
            *GC_FLAGS[self.gc](self.heap_mb),
            *JIT_FLAGS[self.jit],
            "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={self.home / 'log4j2.yaml'}",
            f"-Dkafka.logs.dir={self.home}",
            "-cp",
            f"{paths.KAFKA_LIBS}/*",
            main_class,
            *args,
        ]

    def _run_java(self, main_class: str, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            self._java_argv(main_class, *args), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True, check=False, stdin=subprocess.DEVNULL,
        )

    def start(self) -> None:
        self.configure()
        if self.process.is_running():
            return
        for port in self._all_ports():
            if is_listening(port):
                raise StackError(f"kafka[{self.cluster}]: port {port} is taken by another process")
        self.process.start(self._java_argv("kafka.Kafka", str(self.home / "server.properties")))

    def wait_ready(self, timeout: float = 90.0) -> None:
        """Wait until the broker answers a metadata request."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.process.is_running():
                raise StackError(
                    f"kafka[{self.cluster}] exited during start-up; see {self.process.log_file}"
                )
            if is_listening(self.port) and answers_metadata(self.bootstrap_servers, self.cluster_id()):
                return
            time.sleep(0.3)
        raise StartupTimeoutError(
            f"kafka[{self.cluster}] did not answer on {self.bootstrap_servers} within {timeout:.0f}s; "
            f"see {self.process.log_file}"
        )

    def stop(self, timeout: float = 30.0) -> None:
        self.process.stop(timeout)
        if self._node_file.is_file():
            for port in self._all_ports():
                wait_closed(port, 10.0)

    def kill(self) -> None:
        """Crash the broker (SIGKILL); the data stays for the next start."""
        self.process.kill()

    def restart(self, timeout: float = 90.0) -> None:
        self.stop()
        self.start()
        self.wait_ready(timeout)


def answers_metadata(bootstrap: str, cluster_id: str | None = None, brokers: int = 1) -> bool:
    """The broker at `bootstrap` answers, naming at least `brokers` brokers, and is of cluster `cluster_id`
    when given: another process that holds the port (this node then fails to bind it) must not pass for
    this node."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0, "logger": _silent_logger()})
    try:
        metadata = admin.list_topics(timeout=2)
    except Exception:  # KafkaException while the broker is still coming up
        return False
    return len(metadata.brokers) >= brokers and (cluster_id is None or metadata.cluster_id == cluster_id)


def _silent_logger() -> logging.Logger:
    logger = logging.getLogger("devstack.librdkafka")
    logger.addHandler(logging.NullHandler())
    logger.propagate = False
    return logger

