"""A Spark standalone cluster from pyspark's own distribution: a master and workers (`spark-class
org.apache.spark.deploy.master.Master` / `...worker.Worker`), cores and memory capped, loopback ports picked free.

Layout under its home:
    cluster.json           ports (master, its web UI, each worker's)
    python/                the workers' Python: the environment's third-party packages, nothing of the project
    conf/spark-defaults.conf   the client side, for SPARK_CONF_DIR: that Python for the executors, the event log,
                           the cluster's shared secret (spark.authenticate.secret; the jobs turn authentication
                           and RPC encryption on when they have it: spark_jobs/common/cluster_security.py)
    auth-secret            that secret, which the master and the workers run with (spark.authenticate, RPC
                           encryption); the files holding it are the owner's only (0600)
    events/                the applications' event logs (Spark's history)
    master/, worker-N/     server.log, pid; a worker's executors run under worker-N/work/

The executors' Python sees the environment's site-packages through a plain path in a .pth file, which Python
adds to sys.path without running that folder's own .pth files: the editable install of the project (a finder
installed by one of them) is not there, and the workers run without PYTHONPATH. What the jobs import of the
project comes only with their submission (--py-files), as on hosts that never saw the repo.
"""

from __future__ import annotations

import json
import os
import secrets
import site
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from devstack.errors import SetupMissingError, StackError, StartupTimeoutError
from devstack.jdk import find_java
from devstack.net import free_port, wait_closed
from devstack.process import ManagedProcess, descendants

SPARK_MIN_JAVA = 17
MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
EXECUTOR_CLASS = "org.apache.spark.executor.CoarseGrainedExecutorBackend"
# What the client side of this process's environment must not pass on to the daemons (and so to the executors
# and their Python workers): a path to the project's checkout, or a Python chosen for the driver.
_SCRUBBED_ENV = ("PYTHONPATH", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "SPARK_CONF_DIR", "SPARK_HOME",
                 "PYTHONSAFEPATH", "PYSPARK_GATEWAY_PORT", "SPARK_MASTER")


# The authenticated cipher (Spark's default, AES/CTR, is not): both ends of a connection must use the same one.
CIPHER = {"spark.network.crypto.cipher": "AES/GCM/NoPadding"}


def _write_private(path: Path, text: str) -> None:
    """`text` in a file only its owner can read, from its creation on."""
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as file:
        file.write(text)
    os.chmod(path, 0o600)


def spark_home() -> Path:
    try:
        import pyspark
    except ImportError as exc:
        raise SetupMissingError("pyspark is not installed: run `make setup`") from exc
    home = Path(pyspark.__file__).resolve().parent
    if not (home / "bin" / "spark-class").is_file():
        raise SetupMissingError(f"pyspark at {home} has no bin/spark-class")
    return home


@dataclass
class SparkCluster:
    home: Path
    workers: int = 2
    worker_cores: int = 1
    worker_memory: str = "1g"
    daemon_heap: str = "192m"

    def __post_init__(self) -> None:
        self.home = Path(self.home).resolve()
        self.master = ManagedProcess("spark-master", self.home / "master")
        self.worker_processes = [ManagedProcess(f"spark-worker-{i}", self.home / f"worker-{i}")
                                 for i in range(self.workers)]

    @property
    def _ports_file(self) -> Path:
        return self.home / "cluster.json"

    def _ports(self) -> dict:
        return json.loads(self._ports_file.read_text())

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self._ports()['master']}"

    @property
    def master_ui(self) -> str:
        return f"http://127.0.0.1:{self._ports()['master_ui']}"

    @property
    def python(self) -> Path:
        return self.home / "python" / "bin" / "python"

    @property
    def conf_dir(self) -> Path:
        """The clients' SPARK_CONF_DIR: spark-submit reads its spark-defaults.conf."""
        return self.home / "conf"

    @property
    def event_dir(self) -> Path:
        return self.home / "events"

    @property
    def secret(self) -> str:
        """The shared secret of the master, the workers and every application submitted to them."""
        return (self.home / "auth-secret").read_text().strip()

    @property
    def daemon_security(self) -> dict[str, str]:
        """The master's and the workers' RPC: authenticated with the secret, encrypted (AES-GCM)."""
        return {"spark.authenticate": "true", "spark.authenticate.secret": self.secret,
                "spark.network.crypto.enabled": "true", **CIPHER}

    def configure(self) -> None:
        if self._ports_file.is_file():
            return
        self.home.mkdir(parents=True, exist_ok=True)
        self.event_dir.mkdir(exist_ok=True)
        self._make_python()
        self.conf_dir.mkdir(exist_ok=True)
        _write_private(self.home / "auth-secret", secrets.token_hex(32))
        # The client side names the secret (and the daemons' cipher) only: the jobs turn the rest on.
        _write_private(self.conf_dir / "spark-defaults.conf", "".join(f"{k} {v}\n" for k, v in {
            "spark.pyspark.python": self.python,
            "spark.eventLog.enabled": "true",
            "spark.eventLog.dir": self.event_dir.as_uri(),
            "spark.eventLog.compress": "false",
            "spark.eventLog.rolling.enabled": "false",
            "spark.authenticate.secret": self.secret,
            **CIPHER,
        }.items()))
        ports = {"master": free_port(), "master_ui": free_port(),
                 "workers": [{"port": free_port(), "ui": free_port()} for _ in range(self.workers)]}
        self._ports_file.write_text(json.dumps(ports))

    def _make_python(self) -> None:
        """A virtual environment of the base interpreter whose only addition is this environment's
        site-packages as plain paths (see the module doc)."""
        target = self.home / "python"
        base = getattr(sys, "_base_executable", sys.executable)
        subprocess.run([base, "-m", "venv", "--without-pip", str(target)], check=True, capture_output=True)
        [own] = (target / "lib").glob("python3*/site-packages")
        (own / "kafka-mirror-cluster-libraries.pth").write_text("".join(f"{p}\n" for p in site.getsitepackages()))
        probe = subprocess.run([str(self.python), "-c", "import pyspark, confluent_kafka; import spark_jobs"],
                               capture_output=True, text=True, cwd=self.home,
                               env={k: v for k, v in os.environ.items() if k not in _SCRUBBED_ENV})
        if "No module named 'spark_jobs'" not in probe.stderr:
            raise StackError(f"spark cluster: its Python must have pyspark and confluent_kafka but not the project: "
                             f"{probe.stderr.strip()[-300:] or 'spark_jobs imported'}")

    def _env(self) -> dict[str, str | None]:
        java = Path(find_java(SPARK_MIN_JAVA)).resolve()
        daemon_conf = self.home / "daemon-conf"  # empty: nothing of a machine-wide Spark configuration
        daemon_conf.mkdir(exist_ok=True)
        return {**{name: None for name in _SCRUBBED_ENV},
                "JAVA_HOME": str(java.parents[1]), "SPARK_HOME": str(spark_home()),
                "SPARK_CONF_DIR": str(daemon_conf), "SPARK_DAEMON_MEMORY": self.daemon_heap,
                "SPARK_DAEMON_JAVA_OPTS": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
                "SPARK_NO_DAEMONIZE": "1", "SPARK_LOCAL_IP": "127.0.0.1"}

    def _spark_class(self) -> str:
        return str(spark_home() / "bin" / "spark-class")

    def up(self, timeout: float = 120.0) -> None:
        self.configure()
        ports = self._ports()
        env = self._env()
        try:
            if not self.master.is_running():
                self.master.start([self._spark_class(), MASTER_CLASS, "--host", "127.0.0.1",
                                   "--port", str(ports["master"]), "--webui-port", str(ports["master_ui"]),
                                   "--properties-file", str(self._daemon_properties(self.master.home))], env=env)
            for process, worker in zip(self.worker_processes, ports["workers"]):
                if process.is_running():
                    continue
                process.home.mkdir(parents=True, exist_ok=True)
                process.start([self._spark_class(), WORKER_CLASS, "--host", "127.0.0.1",
                               "--port", str(worker["port"]), "--webui-port", str(worker["ui"]),
                               "--cores", str(self.worker_cores), "--memory", self.worker_memory,
                               "--work-dir", str(process.home / "work"),
                               "--properties-file", str(self._daemon_properties(process.home)),
                               self.master_url], env={**env, "SPARK_LOCAL_DIRS": str(process.home / "local")})
            self.wait_ready(timeout)
        except BaseException:
            self.down()
            raise

    def __enter__(self) -> SparkCluster:
        self.up()  # stops what it started when it fails
        return self

    def __exit__(self, *exc_info) -> None:
        self.down()

    def _daemon_properties(self, home: Path) -> Path:
        path = home / "spark-daemon.conf"
        home.mkdir(parents=True, exist_ok=True)
        _write_private(path, "".join(f"{k} {v}\n" for k, v in {
            "spark.ui.showConsoleProgress": "false", **self.daemon_security}.items()))
        return path

    def state(self) -> dict:
        """The master's JSON view: workers, cores, applications (active and completed)."""
        with urllib.request.urlopen(f"{self.master_ui}/json/", timeout=5) as response:
            return json.loads(response.read())

    def wait_ready(self, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for process in (self.master, *self.worker_processes):
                if process.exited():
                    raise StackError(f"{process.name} exited during start-up; see {process.log_file}")
            try:
                if self.state().get("aliveworkers") == self.workers:
                    return
            except (urllib.error.URLError, ConnectionError, TimeoutError, ValueError):
                pass
            time.sleep(0.5)
        raise StartupTimeoutError(f"spark cluster: {self.workers} workers not registered with {self.master_url} "
                                  f"within {timeout:.0f}s; see {self.home}/*/server.log")

    def application(self, name: str | None = None, *, app_id: str | None = None) -> dict:
        """The one application of that name, or with that id, the master knows (running or completed). A job run
        without a launcher naming it has a fixed name (`mirror-catchup`, `consistency_check`), which a cluster
        shared by several tests sees more than once: those find theirs by the id the job recorded
        (spark_jobs.common.session.APPLICATION_FILE_ENV)."""
        if (name is None) == (app_id is None):
            raise ValueError("an application's name or its id, not both")
        state = self.state()
        apps = [a for a in state.get("activeapps", []) + state.get("completedapps", [])
                if (a.get("id") == app_id if app_id else a.get("name") == name)]
        if len(apps) != 1:
            raise StackError(f"spark cluster: {len(apps)} applications "
                             f"{f'with id {app_id}' if app_id else f'named {name!r}'}")
        return apps[0]

    def events(self, app_id: str) -> list[dict]:
        """An application's event log (Spark's listener events, one JSON object a line)."""
        [path] = [p for p in self.event_dir.iterdir() if p.name.split(".")[0] == app_id]
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    def executor_pids(self) -> list[int]:
        """The executor JVMs the workers run now (children of the worker daemons)."""
        found = []
        for process in self.worker_processes:
            pid = process.pid()
            for child in descendants(pid) if pid else []:
                try:
                    cmdline = Path(f"/proc/{child}/cmdline").read_bytes()
                except (FileNotFoundError, ProcessLookupError):
                    continue
                if EXECUTOR_CLASS.encode() in cmdline:
                    found.append(child)
        return found

    def down(self) -> None:
        for process in (*self.worker_processes, self.master):
            process.stop()
        if self._ports_file.is_file():
            wait_closed(self._ports()["master"], 10.0)
