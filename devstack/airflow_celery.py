"""Airflow with the CeleryExecutor on the local stack: the shape of `docker-compose.celery.yaml` without
Docker. Redis (Debian's redis-server) is the Celery broker and result backend; the api-server, scheduler
and dag-processor run one by one (`airflow standalone` forces LocalExecutor); each Celery worker runs in a
UTS namespace of its own (`unshare --uts`) under its own host name, so a task instance's hostname says
which worker ran it, as it would with one worker per host.

Every setting but the executor's comes from `devstack.airflow.Airflow.environment` (its credentials, DAGs
folder, spec and API connection): an `Airflow` that is never started itself holds them. No triggerer: the
lifecycle DAGs defer nothing.

Layout under `root`: airflow/ (AIRFLOW_HOME, as for `Airflow`), services/<component>/ (server.log, pid).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from devstack.airflow import Airflow, AirflowApi, airflow_bin, component_health
from devstack.errors import SetupMissingError, StackError, StartupTimeoutError
from devstack.net import free_port, is_listening
from devstack.process import ManagedProcess
from devstack.stack import Stack

COMPONENTS = ("api-server", "scheduler", "dag-processor")
HEALTHY = ("metadatabase", "scheduler", "dag_processor")


class CeleryAirflow:
    """Airflow on CeleryExecutor with `len(hostnames)` Celery workers, one per host name."""

    def __init__(self, stack: Stack, root: Path, spec: Path, dags_folder: Path,
                 hostnames: tuple[str, ...] = ("celery-host-1", "celery-host-2"), concurrency: int = 1) -> None:
        self.root = Path(root).resolve()
        if self.root == Path(stack.root).resolve():
            raise StackError("a Celery Airflow runs under a root of its own, not the stack's")
        self.settings = Airflow(stack, root=self.root, spec=spec, dags_folder=dags_folder)  # never started
        self.concurrency = concurrency
        services = self.root / "services"
        self.redis = ManagedProcess("redis", services / "redis")
        self.components = {name: ManagedProcess(f"airflow-{name}", services / f"airflow-{name}")
                           for name in COMPONENTS}
        self.workers = {host: ManagedProcess(f"celery-{host}", services / f"celery-{host}") for host in hostnames}
        self.started_at: float | None = None
        self.startup_seconds: float | None = None

    @property
    def _ports_file(self) -> Path:
        return self.root / "services" / "celery.json"

    @property
    def url(self) -> str:
        return self.settings.url

    def api(self) -> AirflowApi:
        return self.settings.api()

    def processes(self) -> list[ManagedProcess]:
        return [self.redis, *self.components.values(), *self.workers.values()]

    def start(self) -> None:
        """Redis, the metadata DB, then every component and worker in the background (`wait_ready` waits)."""
        for tool in ("redis-server", "unshare"):
            if shutil.which(tool) is None:
                raise SetupMissingError(f"{tool} is missing: run `make setup-test` (Debian redis-server, util-linux)")
        self.started_at = time.monotonic()
        self.settings.home.mkdir(parents=True, exist_ok=True)
        self.settings.ensure_password()  # before the environment, which carries it
        ports = {name: free_port() for name in ("api_port", "worker_log_port", "trigger_log_port", "redis_port")}
        for file in (self.settings.node_file, self._ports_file):
            file.parent.mkdir(parents=True, exist_ok=True)
            file.write_text(json.dumps(ports))
        self.redis.start(["redis-server", "--port", str(ports["redis_port"]), "--bind", "127.0.0.1", "--save", "",
                          "--appendonly", "no", "--dir", str(self.redis.home)])
        env = self.environment()
        migrate = subprocess.run([sys.executable, str(airflow_bin()), "db", "migrate"], env={**os.environ, **env},
                                 capture_output=True, text=True, timeout=600)
        if migrate.returncode != 0:
            raise StackError(f"airflow db migrate failed: {(migrate.stderr.strip().splitlines() or ['?'])[-1]}")
        for name, process in self.components.items():
            process.start([sys.executable, "-X", f"devstack_home={process.home}", str(airflow_bin()), name], env=env)
        for host, process in self.workers.items():
            # The worker's own pid file: the default (AIRFLOW_HOME/airflow-worker.pid) is one for every worker.
            command = [sys.executable, "-X", f"devstack_home={process.home}", str(airflow_bin()), "celery", "worker",
                       "--concurrency", str(self.concurrency), "--skip-serve-logs", "--without-mingle",
                       "--without-gossip", "--pid", str(process.home / "worker.pid")]
            # unshare runs the shell in a new UTS namespace; it names the host and execs the worker in place, so
            # the pid recorded is the worker's.
            process.start(["unshare", "--uts", "sh", "-c", 'hostname "$0" && exec "$@"', host, *command], env=env)

    def environment(self) -> dict[str, str]:
        """`Airflow.environment` with the CeleryExecutor on this Redis (after `start`)."""
        ports = json.loads(self._ports_file.read_text())
        redis = f"redis://127.0.0.1:{ports['redis_port']}"
        return {
            **self.settings.environment(ports),
            "AIRFLOW__CORE__EXECUTOR": "CeleryExecutor",
            "AIRFLOW__CELERY__BROKER_URL": f"{redis}/0",
            "AIRFLOW__CELERY__RESULT_BACKEND": f"{redis}/1",
            # As docker-compose.celery.yaml: a task is taken by a free worker, acknowledged when it ends.
            "AIRFLOW__CELERY__WORKER_PREFETCH_MULTIPLIER": "1",
            "AIRFLOW__CELERY__TASK_ACKS_LATE": "True",
        }

    def wait_ready(self, timeout: float = 600.0) -> None:
        """Until the api-server reports the DB, scheduler and dag-processor healthy and every worker is ready."""
        deadline = time.monotonic() + timeout
        health: dict = {}
        waiting: list[str] = []
        while time.monotonic() < deadline:
            for process in self.processes():
                if process.exited():
                    raise StackError(f"{process.name} exited during start-up ({process.exit_report()}); "
                                     f"see {process.log_file}")
            health = component_health(self.url) if is_listening(self.settings.port) else {}
            waiting = [c for c in HEALTHY if health.get(c, {}).get("status") != "healthy"]
            waiting += [f"celery@{host}" for host, process in self.workers.items() if not _worker_ready(process, host)]
            if not waiting:
                self.startup_seconds = time.monotonic() - (self.started_at or time.monotonic())
                return
            time.sleep(1)
        raise StartupTimeoutError(f"celery airflow not ready within {timeout:.0f}s: waiting for {', '.join(waiting)} "
                                  f"(logs under {self.root / 'services'})")

    def stop(self, timeout: float = 60.0) -> None:
        """Workers first (their tasks end with them), then the components, then Redis."""
        errors = []
        for process in [*self.workers.values(), *self.components.values(), self.redis]:
            try:
                process.stop(timeout)
            except StackError as exc:
                errors.append(str(exc))
        if errors:
            raise StackError("; ".join(errors))


def _worker_ready(process: ManagedProcess, host: str) -> bool:
    # Celery prints "celery@<host> ready." once its pool takes tasks.
    return process.log_file.is_file() and f"celery@{host} ready." in process.log_file.read_text(errors="replace")

