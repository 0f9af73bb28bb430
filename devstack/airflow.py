"""Airflow on the local stack: `airflow standalone` (scheduler, dag-processor, api-server, triggerer)
as a stack service, so `make stack-down` stops it with the rest.

Layout under its root (the stack's root unless a test gives its own):
    airflow/                          AIRFLOW_HOME: airflow.db (SQLite), logs/, the admin's password file
    services/airflow/                 node.json (ports), server.log (every component's output), pid
    mirrors.yaml                      KAFKA_MIRROR_SPEC: the mirror spec the DAGs read (written by the caller)

Airflow reads the DAGs from <repo>/dags (tests: a folder of their own), plugins from <repo>/plugins,
and imports `mirror_worker` and `spark_jobs` as installed in its environment (`make setup`: editable). Only when it runs on the stack's
own root is it the stack's `airflow` service and writes the `airflow` entry of stack.json.
"""

from __future__ import annotations

import json
import os
import secrets
import sys
import time
from pathlib import Path

import requests

from devstack import paths
from devstack.errors import SetupMissingError, StackError, StartupTimeoutError
from devstack.net import free_port
from devstack.process import ManagedProcess, descendants, rss_mib
from devstack.stack import Stack

USERNAME = "admin"
COMPONENTS = ("metadatabase", "scheduler", "dag_processor", "triggerer")
PASSWORD_FILE_NAME = "simple_auth_manager_passwords.json.generated"


class Airflow:
    """One `airflow standalone` tied to a stack; `root` defaults to the stack's root."""

    def __init__(self, stack: Stack, root: Path | None = None, spec: Path | None = None,
                 dags_folder: Path | None = None) -> None:
        self.stack = stack
        self.root = Path(root or stack.root).resolve()
        self.home = self.root / "airflow"
        self.process = (
            stack.service("airflow") if self.root == stack.root
            else ManagedProcess("airflow", self.root / "services" / "airflow")
        )
        self.spec = Path(spec or self.root / "mirrors.yaml").resolve()
        # Tests give a folder of their own with the DAG files of their spec's mirrors.
        self.dags_folder = Path(dags_folder or paths.ROOT / "dags").resolve()
        self.started_at: float | None = None
        self.startup_seconds: float | None = None

    # --- addresses and credentials -------------------------------------------------------------
    @property
    def node_file(self) -> Path:
        return self.process.home / "node.json"

    @property
    def port(self) -> int:
        return json.loads(self.node_file.read_text())["api_port"]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def password_file(self) -> Path:
        return self.home / PASSWORD_FILE_NAME

    @property
    def password(self) -> str:
        return json.loads(self.password_file.read_text())[USERNAME]

    def contract(self) -> dict:
        """The `airflow` entry of stack.json."""
        return {"url": self.url, "username": USERNAME, "password_file": str(self.password_file)}

    # --- lifecycle -----------------------------------------------------------------------------
    def is_running(self) -> bool:
        return self.process.is_running()

    def start(self) -> bool:
        """Start Airflow in the background unless it runs already; False when it was running."""
        if self.is_running():
            return False
        if not self.spec.is_file():
            raise StackError(f"airflow: mirror spec {self.spec} does not exist (write it before starting)")
        self.home.mkdir(parents=True, exist_ok=True)
        self.ensure_password()
        ports = {name: free_port() for name in ("api_port", "worker_log_port", "trigger_log_port")}
        self.process.home.mkdir(parents=True, exist_ok=True)
        self.node_file.write_text(json.dumps(ports))
        # `-X` only tags the command line with the service home, which ManagedProcess uses to
        # recognise its pid; Python ignores unknown -X options.
        argv = [sys.executable, "-X", f"devstack_home={self.process.home}", str(airflow_bin()), "standalone"]
        self.started_at = time.monotonic()
        self.process.start(argv, env=self.environment(ports))
        return True

    def environment(self, ports: dict | None = None) -> dict[str, str]:
        """Everything that configures this Airflow; also what the CLI needs to talk to its database."""
        ports = ports or json.loads(self.node_file.read_text())
        api = f"http://127.0.0.1:{ports['api_port']}"
        venv_bin = str(airflow_bin().parent)
        return {
            # standalone runs its components as `airflow ...` from PATH.
            "PATH": os.pathsep.join([venv_bin, os.environ.get("PATH", "")]),
            "AIRFLOW_HOME": str(self.home),
            # standalone relays every component's output into server.log: unbuffered, so it is current.
            "PYTHONUNBUFFERED": "1",
            "KAFKA_MIRROR_SPEC": str(self.spec),
            "AIRFLOW__CORE__DAGS_FOLDER": str(self.dags_folder),
            "AIRFLOW__CORE__PLUGINS_FOLDER": str(paths.ROOT / "plugins"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
            "AIRFLOW__CORE__PARALLELISM": "4",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{USERNAME}:admin",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(self.password_file),
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{api}/execution/",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{self.home / 'airflow.db'}",
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__API__PORT": str(ports["api_port"]),
            "AIRFLOW__API__BASE_URL": api,
            "AIRFLOW__API__WORKERS": "1",
            "AIRFLOW__API__SECRET_KEY": self._secret("api_secret_key"),
            "AIRFLOW__API_AUTH__JWT_SECRET": self._secret("jwt_secret"),
            "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(ports["worker_log_port"]),
            "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(ports["trigger_log_port"]),
            # One parsing process on two shared cores; new DAG files are seen within seconds.
            "AIRFLOW__DAG_PROCESSOR__PARSING_PROCESSES": "1",
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
            "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "30",
            "AIRFLOW_CONN_AIRFLOW_API": json.dumps({
                "conn_type": "http", "host": "127.0.0.1", "port": ports["api_port"], "schema": "http",
                "login": USERNAME, "password": self.password,
            }),
            "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": "local[*]"}),
        }

    def wait_ready(self, timeout: float = 300.0) -> None:
        """Wait until the api-server answers and reports every component healthy."""
        deadline = time.monotonic() + timeout
        health: dict = {}
        while time.monotonic() < deadline:
            if self.process.exited():
                raise StackError(f"airflow exited during start-up ({self.process.exit_report()}); "
                                 f"see {self.process.log_file}")
            health = component_health(self.url)
            if all(health.get(c, {}).get("status") == "healthy" for c in COMPONENTS):
                if self.started_at is not None:
                    self.startup_seconds = time.monotonic() - self.started_at
                if self.root == self.stack.root:
                    _set_contract_entry(self.stack, self.contract())
                return
            time.sleep(1)
        raise StartupTimeoutError(
            f"airflow did not become healthy on {self.url} within {timeout:.0f}s "
            f"(last health: {health or 'no answer'}); see {self.process.log_file}"
        )

    def stop(self, timeout: float = 60.0) -> None:
        if self.root == self.stack.root:
            _set_contract_entry(self.stack, None)
        self.process.stop(timeout)

    def rss_mib(self) -> float:
        """Resident memory of the whole Airflow process tree (every component and task)."""
        pid = self.process.pid()
        return sum(rss_mib(p) for p in descendants(pid)) if pid else 0.0

    def api(self) -> AirflowApi:
        return AirflowApi(self.url, USERNAME, self.password)

    # --- files ---------------------------------------------------------------------------------
    def ensure_password(self) -> None:
        # Written before the first start so that AIRFLOW_CONN_AIRFLOW_API can carry it; Airflow
        # keeps an existing password file as it is.
        if not self.password_file.is_file():
            self.password_file.write_text(json.dumps({USERNAME: secrets.token_urlsafe(12)}) + "\n")
            self.password_file.chmod(0o600)

    def _secret(self, name: str) -> str:
        # Stable across restarts of this Airflow, so that issued tokens stay valid.
        file = self.home / ".secrets.json"
        values = json.loads(file.read_text()) if file.is_file() else {}
        if name not in values:
            values[name] = secrets.token_urlsafe(32)
            file.write_text(json.dumps(values))
            file.chmod(0o600)
        return values[name]


# How long one REST call may take. 30 s was too short on a loaded 2-core machine: in a `make test` whose other
# test groups were starting Kafka, Spark and a second Airflow, the api-server took 156 s to become healthy and
# then left its first /auth/token unanswered for 30 s (the browser test and the Celery test failed so, and
# passed when run alone).
REQUEST_TIMEOUT_S = 120


class AirflowApi:
    """The few public REST calls (`/api/v2`) that the demo and the tests need."""

    def __init__(self, url: str, username: str, password: str) -> None:
        self.url = url
        self._credentials = {"username": username, "password": password}
        self._session = requests.Session()

    def _authorize(self) -> None:
        response = self._session.post(f"{self.url}/auth/token", json=self._credentials, timeout=REQUEST_TIMEOUT_S)
        response.raise_for_status()
        self._session.headers["Authorization"] = f"Bearer {response.json()['access_token']}"

    def request(self, method: str, path: str, **kwargs) -> requests.Response:
        if "Authorization" not in self._session.headers:
            self._authorize()
        response = self._session.request(method, f"{self.url}/api/v2{path}", timeout=REQUEST_TIMEOUT_S, **kwargs)
        if response.status_code == 401:  # the token expired
            self._authorize()
            response = self._session.request(method, f"{self.url}/api/v2{path}", timeout=REQUEST_TIMEOUT_S, **kwargs)
        return response

    def dag(self, dag_id: str) -> dict | None:
        response = self.request("GET", f"/dags/{dag_id}")
        if response.status_code == 404:
            return None
        response.raise_for_status()
        return response.json()

    def import_errors(self) -> list[dict]:
        response = self.request("GET", "/importErrors")
        response.raise_for_status()
        return response.json()["import_errors"]

    def set_paused(self, dag_id: str, paused: bool) -> dict:
        response = self.request("PATCH", f"/dags/{dag_id}", json={"is_paused": paused})
        response.raise_for_status()
        return response.json()

    def dag_runs(self, dag_id: str) -> list[dict]:
        response = self.request("GET", f"/dags/{dag_id}/dagRuns", params={"order_by": "-start_date", "limit": 20})
        response.raise_for_status()
        return response.json()["dag_runs"]

    def task_instances(self, dag_id: str, run_id: str) -> list[dict]:
        response = self.request("GET", f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances")
        response.raise_for_status()
        return response.json()["task_instances"]

    def task_log(self, dag_id: str, run_id: str, task_id: str, try_number: int = 1) -> str:
        """A task try's log as text (the lines' events), for a test's failure message."""
        from urllib.parse import quote

        response = self.request("GET", f"/dags/{dag_id}/dagRuns/{quote(run_id, safe='')}/taskInstances/{task_id}"
                                       f"/logs/{try_number}", params={"full_content": "true"},
                                headers={"Accept": "application/json"})
        if not response.ok:
            return f"(log not available: HTTP {response.status_code})"
        content = response.json().get("content", "")
        if isinstance(content, list):
            return "\n".join(str(line.get("event", line)) if isinstance(line, dict) else str(line) for line in content)
        return str(content)

    def wait_for_dags(self, dag_ids: list[str], timeout: float) -> None:
        """Wait until every DAG is parsed; a file that failed to import is reported at once."""
        deadline = time.monotonic() + timeout
        missing = list(dag_ids)
        while time.monotonic() < deadline:
            missing = [d for d in dag_ids if self.dag(d) is None]
            if not missing:
                return
            errors = self.import_errors()
            if errors:
                details = "; ".join(f"{e['filename']}: {e['stack_trace'].strip().splitlines()[-1]}" for e in errors)
                raise StackError(f"airflow: DAG import errors: {details}")
            time.sleep(2)
        raise StartupTimeoutError(f"airflow: DAGs not parsed within {timeout:.0f}s: {', '.join(missing)}")


def airflow_bin() -> Path:
    executable = Path(sys.executable).parent / "airflow"
    if not executable.is_file():
        raise SetupMissingError(f"airflow is missing at {executable}: run `make setup`")
    return executable


def component_health(url: str) -> dict:
    try:
        response = requests.get(f"{url}/api/v2/monitor/health", timeout=5)
        return response.json() if response.status_code == 200 else {}
    except (requests.RequestException, ValueError):
        return {}


def _set_contract_entry(stack: Stack, entry: dict | None) -> None:
    """Add (or with None remove) the `airflow` entry of stack.json, keeping the rest."""
    if not stack.stack_json.is_file():
        return
    contract = json.loads(stack.stack_json.read_text())
    if entry is None:
        contract.pop("airflow", None)
    else:
        contract["airflow"] = entry
    tmp = stack.stack_json.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(contract, indent=2) + "\n")
    os.replace(tmp, stack.stack_json)

