"""One Confluent-API schema registry (Apicurio Registry, `/apis/ccompat/v7`), in-memory storage.

Apicurio Registry 2.4.2.Final, assembled by java/apicurio/pom.xml from Maven Central: no 3.x release
is complete on the Maven Central this project reaches (java/apicurio/NOTES.md says what is missing).
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from devstack import paths
from devstack.errors import SetupMissingError, StackError, StartupTimeoutError
from devstack.jdk import find_java
from devstack.net import free_port, is_listening, wait_closed
from devstack.process import ManagedProcess

CCOMPAT_PATH = "/apis/ccompat/v7"
REGISTRY_MIN_JAVA = 17


def registry_jar() -> Path:
    return paths.APICURIO_HOME / "quarkus-app" / "quarkus-run.jar"


@dataclass
class RegistryNode:
    cluster: str
    home: Path
    heap_mb: int = 128

    def __post_init__(self) -> None:
        self.process = ManagedProcess(f"registry[{self.cluster}]", self.home)

    @property
    def _node_file(self) -> Path:
        return self.home / "node.json"

    @property
    def port(self) -> int:
        return json.loads(self._node_file.read_text())["port"]

    @property
    def url(self) -> str:
        """The Confluent-compatible base URL, as SchemaRegistryClient wants it."""
        return f"http://127.0.0.1:{self.port}{CCOMPAT_PATH}"

    def configure(self) -> None:
        if self._node_file.is_file():
            return
        self.home.mkdir(parents=True, exist_ok=True)
        self._node_file.write_text(json.dumps({"port": free_port()}))

    def _argv(self) -> list[str]:
        jar = registry_jar()
        if not jar.is_file():
            raise SetupMissingError(f"schema registry missing at {jar}: run `make setup`")
        return [
            find_java(REGISTRY_MIN_JAVA),
            f"-Xmx{self.heap_mb}m",
            "-Xss512k",
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",
            "-XX:ReservedCodeCacheSize=48m",
            "-XX:MaxMetaspaceSize=160m",
            f"-Ddevstack.home={self.home}",
            f"-Djava.io.tmpdir={self.home}",
            "-Dquarkus.http.host=127.0.0.1",
            f"-Dquarkus.http.port={self.port}",
            # In-memory H2 storage: one connection is plenty for a development registry.
            "-D%prod.quarkus.datasource.jdbc.initial-size=1",
            "-D%prod.quarkus.datasource.jdbc.min-size=1",
            "-D%prod.quarkus.datasource.jdbc.max-size=16",
            "-Dregistry.auth.enabled=false",
            '-Dquarkus.log.category."io.apicurio".level=WARN',
            "-jar",
            str(jar),
        ]

    def start(self) -> None:
        self.configure()
        if self.process.is_running():
            return
        if is_listening(self.port):
            raise StackError(f"registry[{self.cluster}]: port {self.port} is taken by another process")
        self.process.start(self._argv())

    def wait_ready(self, timeout: float = 120.0) -> None:
        """Wait until `GET /subjects` answers with a JSON list."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.process.is_running():
                raise StackError(
                    f"registry[{self.cluster}] exited during start-up; see {self.process.log_file}"
                )
            if _answers_subjects(self.url):
                return
            time.sleep(0.5)
        raise StartupTimeoutError(
            f"registry[{self.cluster}] did not answer on {self.url}/subjects within {timeout:.0f}s; "
            f"see {self.process.log_file}"
        )

    def stop(self, timeout: float = 30.0) -> None:
        self.process.stop(timeout)
        if self._node_file.is_file():
            wait_closed(self.port, 10.0)


def _answers_subjects(base_url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{base_url}/subjects", timeout=2) as response:
            return response.status == 200 and isinstance(json.loads(response.read()), list)
    except (urllib.error.URLError, ConnectionError, TimeoutError, ValueError):
        return False
