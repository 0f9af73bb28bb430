"""Thin operators of the lifecycle DAG: each validates in __init__ and does its work through the
worker's library code (spec loader, topic filter, naming policy, describe_topics, DestinationTopics).

Clients come from the mirror spec by default; a mirror's `airflow: {source-conn-id, destination-conn-id}`
makes the discover/ensure tasks use those Kafka connections instead (the worker always uses the spec).
"""

from __future__ import annotations

import enum
import os
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path

from airflow.sdk import BaseOperator

from mirror_airflow.exceptions import WorkerFailedError
from mirror_airflow.hooks import KafkaHook, connection_settings
from mirror_worker.membership import SLOT_FLAG

REPO_ROOT = Path(__file__).resolve().parents[2]


def repo_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of subprocesses that import mirror_worker / spark_jobs from the repo root."""
    path = os.environ.get("PYTHONPATH", "")
    parts = [str(REPO_ROOT)] + [p for p in path.split(os.pathsep) if p and p != str(REPO_ROOT)]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(parts), "PYTHONUNBUFFERED": "1", **(extra or {})}


class _MirrorOperator(BaseOperator):
    """Common part: which spec, which mirror, where the Kafka clients come from."""

    template_fields = ("spec_path", "mirror_name")
    ui_color = "#e8f1fb"

    def __init__(self, *, spec_path: str, mirror_name: str, source_conn_id: str | None = None,
                 destination_conn_id: str | None = None, **kwargs) -> None:
        super().__init__(**kwargs)
        if not spec_path or not mirror_name:
            raise ValueError(f"{self.task_id}: spec_path and mirror_name are required")
        self.spec_path = str(spec_path)
        self.mirror_name = mirror_name
        self.source_conn_id = source_conn_id
        self.destination_conn_id = destination_conn_id
        self._mirror = None

    @property
    def mirror(self):
        """The mirror's validated config, loaded when the task runs (never at parse time)."""
        if self._mirror is None:
            from mirror_worker.spec import select_mirror

            self._mirror = select_mirror(Path(self.spec_path), self.mirror_name)
        return self._mirror

    def source_admins(self) -> list[tuple[str, object]]:
        """(source name, admin client) per source cluster of the mirror."""
        from confluent_kafka.admin import AdminClient

        if self.source_conn_id:
            return [(self.mirror.sources[0].name, KafkaHook(self.source_conn_id).get_admin_client())]
        return [(s.name, AdminClient(connection_settings(s.consumer))) for s in self.mirror.sources]

    def destination_admin(self):
        from confluent_kafka.admin import AdminClient

        if self.destination_conn_id:
            return KafkaHook(self.destination_conn_id).get_admin_client()
        return AdminClient(connection_settings(self.mirror.producer))

    def selected_source_topics(self) -> dict:
        """Source topic -> TopicInfo (largest across the mirror's sources) for what the filter selects."""
        from mirror_worker.topics import describe_topics

        wanted = self.mirror.topic_filter()
        selected: dict = {}
        for source, admin in self.source_admins():
            topics = describe_topics(admin)
            for name in wanted.select(topics):
                info = topics[name]
                if name not in selected or info.partitions > selected[name].partitions:
                    selected[name] = info
            self.log.info("source %s: %d topic(s), %d selected", source, len(topics), len(wanted.select(topics)))
        return selected


class DiscoverTopicsOperator(_MirrorOperator):
    """XCom: {source topic: destination topic} for every source topic the mirror selects now."""

    def execute(self, context) -> dict[str, str]:
        policy = self.mirror.naming_policy()
        mapping = {name: policy.remote_topic(name) for name in sorted(self.selected_source_topics())}
        self.log.info("mirror %s selects %d topic(s): %s", self.mirror_name, len(mapping), mapping)
        return mapping


class EnsureDestinationTopicsOperator(_MirrorOperator):
    """Creates missing destination topics and grows too-small ones (DestinationTopics, idempotent)."""

    def __init__(self, *, discover_task_id: str = "discover", **kwargs) -> None:
        super().__init__(**kwargs)
        self.discover_task_id = discover_task_id

    def execute(self, context) -> dict[str, int]:
        from mirror_worker.topics import DestinationTopics

        mapping = context["ti"].xcom_pull(task_ids=self.discover_task_id) or {}
        if not mapping:
            self.log.info("no source topic selected yet: nothing to create (the worker picks new topics up)")
            return {}
        infos = self.selected_source_topics()
        wanted = {mapping[name]: infos[name] for name in mapping if name in infos}
        cfg = self.mirror
        destination = DestinationTopics(self.destination_admin(), cfg.topic_creation,
                                        cfg.preserve_partitions or cfg.exactly_once)
        counts = destination.ensure(wanted)
        self.log.info("destination topics ready: %s", counts)
        return counts


class SyncSchemasOperator(_MirrorOperator):
    """Copies the schemas of the mirrored topics to the destination registry (mirror_worker.schema_sync)."""

    def __init__(self, *, discover_task_id: str = "discover", **kwargs) -> None:
        super().__init__(**kwargs)
        self.discover_task_id = discover_task_id

    def execute(self, context):
        if not self.mirror.syncs_schemas:
            self.log.info("mirror %s has no schema registries configured: nothing to sync", self.mirror_name)
            return None
        from mirror_worker.schema_sync import sync_mirror_schemas

        topics = sorted(context["ti"].xcom_pull(task_ids=self.discover_task_id) or {})
        report = sync_mirror_schemas(self.mirror, topics)
        self.log.info("schema sync of %d topic(s): %s", len(topics), report.to_dict())
        if report.conflicts and self.mirror.schema_sync == "strict":
            topic, error = next(iter(report.conflicts.items()))
            raise RuntimeError(f"mirror {self.mirror_name!r}: schema conflicts on {len(report.conflicts)} topic(s), "
                               f"first {topic}: {error}")
        return report.to_dict()


# ------------------------------------------------------------------------------------ worker supervision
class Action(enum.Enum):
    CONTINUE = "continue"
    STOP_PAUSED = "stop: DAG paused"
    STOP_BOUNDED = "stop: stop_after_s reached"
    EXITED = "worker exited"


def next_action(returncode: int | None, paused: bool | None, elapsed_s: float, stop_after_s: float | None) -> Action:
    """What the supervisor does next. `paused` None: unknown (no API, or it did not answer)."""
    if returncode is not None:
        return Action.EXITED
    if paused:
        return Action.STOP_PAUSED
    if stop_after_s is not None and elapsed_s >= stop_after_s:
        return Action.STOP_BOUNDED
    return Action.CONTINUE


def pause_check_due(now: float, last_check: float | None, interval_s: float) -> bool:
    return last_check is None or now - last_check >= interval_s


class AirflowApi:
    """The DAG-paused question through Airflow's public REST API (`airflow_api` connection)."""

    def __init__(self, base_url: str, username: str | None, password: str | None, timeout_s: float = 10.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.username, self.password, self.timeout_s = username, password, timeout_s
        self._token: str | None = None

    @classmethod
    def from_connection(cls, conn) -> "AirflowApi":
        host = conn.host or "127.0.0.1"
        base = host if "://" in host else f"{conn.schema or 'http'}://{host}"
        if conn.port:
            base = f"{base}:{conn.port}"
        return cls(base, conn.login, conn.password)

    def _auth_headers(self, refresh: bool = False) -> dict[str, str]:
        import requests

        if self.username is None:
            # No credentials: a token exists only when the auth manager makes everyone admin.
            if self._token is None or refresh:
                response = requests.get(f"{self.base_url}/auth/token", timeout=self.timeout_s)
                self._token = response.json().get("access_token", "") if response.ok else ""
            return {"Authorization": f"Bearer {self._token}"} if self._token else {}
        if self._token is None or refresh:
            response = requests.post(f"{self.base_url}/auth/token", timeout=self.timeout_s,
                                     json={"username": self.username, "password": self.password or ""})
            response.raise_for_status()
            self._token = response.json()["access_token"]
        return {"Authorization": f"Bearer {self._token}"}

    def _request(self, method: str, path: str, **kwargs):
        import requests

        response = requests.request(method, f"{self.base_url}{path}", headers=self._auth_headers(),
                                    timeout=self.timeout_s, **kwargs)
        if response.status_code in (401, 403):
            response = requests.request(method, f"{self.base_url}{path}", headers=self._auth_headers(refresh=True),
                                        timeout=self.timeout_s, **kwargs)
        response.raise_for_status()
        return response.json()

    def is_paused(self, dag_id: str) -> bool:
        return bool(self._request("GET", f"/api/v2/dags/{dag_id}")["is_paused"])

    def set_paused(self, dag_id: str, paused: bool) -> bool:
        return bool(self._request("PATCH", f"/api/v2/dags/{dag_id}", json={"is_paused": paused})["is_paused"])


def api_from_connection(conn_id: str, log) -> AirflowApi | None:
    """The API client, or None (one warning) when the connection is not defined."""
    from airflow.sdk import BaseHook

    try:
        conn = BaseHook.get_connection(conn_id)
    except Exception as exc:  # AirflowNotFoundException (class location differs across Airflow versions)
        log.warning("Airflow connection %r not defined (%s): the pause check is off", conn_id, exc.__class__.__name__)
        return None
    return AirflowApi.from_connection(conn)


@dataclass
class _WorkerProcess:
    proc: subprocess.Popen
    stderr_tail: deque
    threads: list


def _parent_death_signal():
    """A preexec_fn making the worker get SIGTERM (a graceful stop) when the task process dies, even by
    SIGKILL; None off Linux. prctl is resolved here, in the parent: the child between fork and exec
    must not import or take locks (the task process has threads)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        prctl = ctypes.CDLL("libc.so.6", use_errno=True).prctl
    except OSError:
        return None
    return lambda: prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


class MirrorWorkerOperator(_MirrorOperator):
    """Runs `python -m mirror_worker --config SPEC --mirror NAME [--worker.slot N]` and supervises it.

    Pause check every `pause_check_interval_s` (<= 15 s) through the REST API (`api_conn_id`):
    paused -> SIGTERM, the worker flushes and commits, the task succeeds. `stop_after_s` (arg or DAG
    param) bounds the run the same way. A non-zero exit fails the task (Airflow retries restart it).
    """

    template_fields = (*_MirrorOperator.template_fields, "api_conn_id")
    ui_color = "#c6e5c6"

    def __init__(self, *, stop_after_s: float | None = None, api_conn_id: str = "airflow_api",
                 pause_check_interval_s: float = 10.0, stop_timeout_s: float = 45.0,
                 poll_interval_s: float = 1.0, worker_slot: int | None = None, **kwargs) -> None:
        super().__init__(**kwargs)
        if worker_slot is not None and (not isinstance(worker_slot, int) or worker_slot < 0):
            raise ValueError(f"{self.task_id}: worker_slot must be a non-negative integer, got {worker_slot!r}")
        if not 0 < pause_check_interval_s <= 15:
            raise ValueError(f"{self.task_id}: pause_check_interval_s must be in (0, 15], got {pause_check_interval_s}")
        if stop_after_s is not None and stop_after_s <= 0:
            raise ValueError(f"{self.task_id}: stop_after_s must be positive, got {stop_after_s}")
        if stop_timeout_s <= 0:
            raise ValueError(f"{self.task_id}: stop_timeout_s must be positive")
        self.stop_after_s = stop_after_s
        self.api_conn_id = api_conn_id
        self.pause_check_interval_s = pause_check_interval_s
        self.stop_timeout_s = stop_timeout_s
        self.poll_interval_s = poll_interval_s
        self.worker_slot = worker_slot
        self._worker: _WorkerProcess | None = None

    def worker_argv(self) -> list[str]:
        argv = [sys.executable, "-m", "mirror_worker", "--config", self.spec_path, "--mirror", self.mirror_name]
        return argv if self.worker_slot is None else [*argv, SLOT_FLAG, str(self.worker_slot)]

    def _bounded_run(self, context) -> float | None:
        if self.stop_after_s is not None:
            return float(self.stop_after_s)
        value = (context.get("params") or {}).get("stop_after_s")
        if value in (None, "", 0):
            return None
        value = float(value)
        if value <= 0:
            raise ValueError(f"param stop_after_s must be positive, got {value}")
        return value

    def _start(self) -> _WorkerProcess:
        argv = self.worker_argv()
        self.log.info("starting mirror worker: %s", " ".join(argv))
        proc = subprocess.Popen(argv, cwd=REPO_ROOT, env=repo_env(), stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, errors="replace",
                                bufsize=1, preexec_fn=_parent_death_signal())
        tail: deque = deque(maxlen=20)

        # The pipes must be drained whatever they carry, or a full pipe blocks the worker.
        def pump(stream, level, keep):
            for line in stream:
                line = line.rstrip("\n")
                if keep is not None:
                    keep.append(line)
                self.log.log(level, "worker: %s", line)

        import logging

        threads = [threading.Thread(target=pump, args=(proc.stdout, logging.INFO, None), daemon=True),
                   threading.Thread(target=pump, args=(proc.stderr, logging.WARNING, tail), daemon=True)]
        for thread in threads:
            thread.start()
        return _WorkerProcess(proc, tail, threads)

    def _stop(self, reason: str) -> int:
        """SIGTERM, then wait for the graceful stop (flush, commit); SIGKILL only past the timeout."""
        worker = self._worker
        if worker is None or worker.proc.poll() is not None:
            return worker.proc.returncode if worker else 0
        self.log.info("stopping mirror worker (pid %d): %s", worker.proc.pid, reason)
        worker.proc.send_signal(signal.SIGTERM)
        try:
            return worker.proc.wait(self.stop_timeout_s)
        except subprocess.TimeoutExpired:
            self.log.error("worker did not stop within %.0f s: killing it", self.stop_timeout_s)
            worker.proc.kill()
            return worker.proc.wait(10)

    def execute(self, context) -> dict:
        dag_id = self.dag_id
        stop_after = self._bounded_run(context)
        api = api_from_connection(self.api_conn_id, self.log)
        self._worker = self._start()
        started = time.monotonic()
        last_check: float | None = None
        paused: bool | None = None
        action = Action.CONTINUE
        try:
            while True:
                now = time.monotonic()
                if api is not None and pause_check_due(now, last_check, self.pause_check_interval_s):
                    last_check = now
                    try:
                        paused = api.is_paused(dag_id)
                    except Exception as exc:  # an API hiccup must not stop a healthy mirror
                        self.log.warning("pause check failed (%s: %s): worker keeps running", exc.__class__.__name__, exc)
                        paused = None
                action = next_action(self._worker.proc.poll(), paused, now - started, stop_after)
                if action is not Action.CONTINUE:
                    break
                time.sleep(self.poll_interval_s)
            code = self._worker.proc.returncode if action is Action.EXITED else self._stop(action.value)
        except BaseException:
            self._stop("task interrupted")
            raise
        finally:
            for thread in self._worker.threads:
                thread.join(5)
        tail = " | ".join(self._worker.stderr_tail)
        summary = {"exit_code": code, "reason": action.value, "seconds": round(time.monotonic() - started, 1)}
        # 0 is the worker's clean stop (flushed, committed) after SIGTERM/SIGINT, whoever sent it.
        if code != 0:
            raise WorkerFailedError(self.mirror_name, code, tail)
        self.log.info("mirror worker stopped cleanly: %s", summary)
        return summary

    def on_kill(self) -> None:
        self._stop("task killed")


# ------------------------------------------------------------------------------------ catch-up hand-over
def group_members(admin, group_id: str, timeout_s: float = 10.0) -> int:
    """Active members of a consumer group (0 when it is empty or unknown); waits for a coordinator."""
    from mirror_worker.groups import active_members

    return active_members(admin, group_id, timeout_s)


class StopMirrorForCatchupOperator(_MirrorOperator):
    """Hands the mirror's group over to Spark: pauses the lifecycle DAG (REST API) and waits until
    the group has no active member. Without `airflow_api` it only waits, and tells the user to pause.
    XCom: {"paused_here": bool} so the resume task unpauses only what this run paused."""

    def __init__(self, *, lifecycle_dag_id: str, api_conn_id: str = "airflow_api", wait_timeout_s: float = 180.0,
                 **kwargs) -> None:
        super().__init__(**kwargs)
        if wait_timeout_s <= 0:
            raise ValueError(f"{self.task_id}: wait_timeout_s must be positive")
        self.lifecycle_dag_id = lifecycle_dag_id
        self.api_conn_id = api_conn_id
        self.wait_timeout_s = wait_timeout_s

    def execute(self, context) -> dict:
        api = api_from_connection(self.api_conn_id, self.log)
        paused_here = False
        if api is not None and not api.is_paused(self.lifecycle_dag_id):
            api.set_paused(self.lifecycle_dag_id, True)
            paused_here = True
            self.log.info("paused %s: its worker stops within a pause check and a graceful stop", self.lifecycle_dag_id)
        group = self.mirror.group_id
        deadline = time.monotonic() + self.wait_timeout_s
        for source, admin in self.source_admins():
            while (members := group_members(admin, group)) > 0:
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"mirror group {group!r} on source {source!r} still has {members} active member(s) after "
                        f"{self.wait_timeout_s:.0f} s: pause DAG {self.lifecycle_dag_id} (or stop its worker) first"
                    )
                self.log.info("waiting for group %s to empty: %d active member(s)", group, members)
                time.sleep(2)
        return {"paused_here": paused_here}


class ResumeMirrorOperator(_MirrorOperator):
    """Unpauses the lifecycle DAG when the catch-up run paused it: the worker resumes at the range ends."""

    def __init__(self, *, lifecycle_dag_id: str, stop_task_id: str = "stop_mirror", api_conn_id: str = "airflow_api",
                 **kwargs) -> None:
        super().__init__(**kwargs)
        self.lifecycle_dag_id = lifecycle_dag_id
        self.stop_task_id = stop_task_id
        self.api_conn_id = api_conn_id

    def execute(self, context) -> bool:
        state = context["ti"].xcom_pull(task_ids=self.stop_task_id) or {}
        if not state.get("paused_here"):
            self.log.info("%s was not paused by this run: left as it is (unpause it to resume mirroring)",
                          self.lifecycle_dag_id)
            return False
        api = api_from_connection(self.api_conn_id, self.log)
        if api is None:
            raise RuntimeError(f"cannot unpause {self.lifecycle_dag_id}: connection {self.api_conn_id!r} is gone")
        api.set_paused(self.lifecycle_dag_id, False)
        self.log.info("unpaused %s: the worker resumes from the offsets the catch-up committed", self.lifecycle_dag_id)
        return True


# ------------------------------------------------------------------------------------ Spark jobs
def spark_env() -> dict[str, str]:
    """spark-submit and its Python workers run this interpreter, with the repo importable."""
    bin_dir = str(Path(sys.executable).parent)
    return {
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        "PYTHONPATH": str(REPO_ROOT),
        "PATH": os.pathsep.join([bin_dir, os.environ.get("PATH", "/usr/bin:/bin")]),
    }


def report_dir_default() -> Path:
    base = os.environ.get("MIRROR_REPORT_DIR") or Path(os.environ.get("AIRFLOW_HOME", Path.home() / "airflow")) / "mirror-reports"
    return Path(base)


def report_summary(report_path: Path) -> str | None:
    """One line from a consistency report: status and the non-zero totals."""
    import json

    try:
        report = json.loads(Path(report_path).read_text())
    except (OSError, ValueError):
        return None
    totals = report.get("totals") or {}
    counts = ", ".join(f"{k}={v}" for k, v in totals.items() if v)
    return f"{report.get('status', '?')}: {counts or 'nothing checked'} (report {report_path})"


def _spark_operator_base():
    from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

    return SparkSubmitOperator


class _MirrorSparkJob(_spark_operator_base()):
    """spark-submit of one of spark_jobs/ for a mirror of the spec, with the Kafka connector jars."""

    script = ""

    def __init__(self, *, spec_path: str, mirror_name: str, conn_id: str = "spark_default", **kwargs) -> None:
        if not spec_path or not mirror_name:
            raise ValueError("spec_path and mirror_name are required")
        kwargs.setdefault("driver_memory", "1g")
        kwargs.setdefault("conf", {"spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false"})
        super().__init__(application=str(REPO_ROOT / "spark_jobs" / self.script), conn_id=conn_id,
                         env_vars=spark_env(), name=f"{self.script.removesuffix('.py')}-{mirror_name}", **kwargs)
        self.spec_path = str(spec_path)
        self.mirror_name = mirror_name

    def job_args(self, context) -> list[str]:
        return ["--config", self.spec_path, "--mirror", self.mirror_name]

    def prepare(self, context) -> None:
        """Jars and arguments, decided when the task runs (the jars are looked up on the worker host)."""
        from spark_jobs.session import kafka_connector_jars

        self.jars = ",".join(kafka_connector_jars())
        self.application_args = self.job_args(context)

    def spark_submit_command(self, context) -> list[str]:
        """The exact argv this task runs (for tests and logs)."""
        self.prepare(context)
        return self._get_hook()._build_spark_submit_command(self.application)


class ConsistencyCheckOperator(_MirrorSparkJob):
    """spark_jobs/consistency_check.py: exit 1 (inconsistent) fails the task with the report summary."""

    script = "consistency_check.py"

    def __init__(self, *, report_dir: str | None = None, **kwargs) -> None:
        super().__init__(**kwargs)
        self.report_dir = report_dir
        self.report_path: Path | None = None

    def job_args(self, context) -> list[str]:
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        directory = Path(self.report_dir) if self.report_dir else report_dir_default()
        self.report_path = directory / self.mirror_name / f"check-{stamp}.json"
        self.report_path.parent.mkdir(parents=True, exist_ok=True)
        return [*super().job_args(context), "--report", str(self.report_path)]

    def execute(self, context):
        import re

        self.prepare(context)
        try:
            super().execute(context)
        except Exception as exc:
            code = re.search(r"Error code is: (\d+)", str(exc))
            summary = report_summary(self.report_path)
            if summary and summary.startswith("inconsistent"):
                raise RuntimeError(f"mirror {self.mirror_name!r} is inconsistent: {summary}") from exc
            raise RuntimeError(f"mirror {self.mirror_name!r}: the consistency check did not complete "
                               f"(exit {code.group(1) if code else '?'}){': ' + summary if summary else ''}") from exc
        summary = report_summary(self.report_path)
        self.log.info("consistency check: %s", summary)
        return {"report": str(self.report_path), "summary": summary}


class CatchupOperator(_MirrorSparkJob):
    """spark_jobs/catchup.py with the DAG run's params: topics, from_offsets or from_timestamp."""

    script = "catchup.py"

    def job_args(self, context) -> list[str]:
        params = context.get("params") or {}
        args = super().job_args(context)
        topics = str(params.get("topics") or "").strip()
        offsets = str(params.get("from_offsets") or "").strip()
        timestamp = str(params.get("from_timestamp") or "").strip()
        if offsets and timestamp:
            raise ValueError("give from_offsets or from_timestamp, not both")
        if topics:
            args += ["--topics", topics]
        if offsets:
            args += ["--from-offsets", offsets]
        if timestamp:
            args += ["--from-timestamp", timestamp]
        return args

    def execute(self, context):
        self.prepare(context)
        return super().execute(context)
