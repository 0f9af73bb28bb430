"""MirrorWorkerOperator: runs the mirror worker as a child process (mirror_airflow.supervisor) and stops
it when the DAG is paused, when the run is bounded, or when the task is killed."""

from __future__ import annotations

import signal
import sys
import time

from mirror_airflow.exceptions import WorkerFailedError
from mirror_airflow.hooks.airflow_api import api_from_connection
from mirror_airflow.operators.base import MirrorOperator
from mirror_airflow.supervisor import (
    Action, WorkerProcess, next_action, pause_check_due, spec_env_names, worker_env,
)
from mirror_worker.api import SLOT_FLAG


class MirrorWorkerOperator(MirrorOperator):
    """Runs `python -m mirror_worker --config SPEC --mirror NAME [--worker.slot N]` and supervises it.

    Pause check every `pause_check_interval_s` (<= 15 s) through the REST API (`api_conn_id`):
    paused -> SIGTERM, the worker flushes and commits, the task succeeds. `stop_after_s` (arg or DAG
    param) bounds the run the same way. A non-zero exit fails the task (Airflow retries restart it).
    """

    template_fields = (*MirrorOperator.template_fields, "api_conn_id")
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
        self._worker: WorkerProcess | None = None

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

    def _stop(self, reason: str) -> int:
        return 0 if self._worker is None else self._worker.stop(reason, self.stop_timeout_s)

    def execute(self, context) -> dict:
        dag_id = self.dag_id
        stop_after = self._bounded_run(context)
        api = api_from_connection(self.api_conn_id, self.log)
        argv = self.worker_argv()
        self.log.info("starting mirror worker: %s", " ".join(argv))
        self._worker = worker = WorkerProcess(argv, self.log, env=worker_env(spec_env=spec_env_names(self.spec_path)))
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
                action = next_action(worker.poll(), paused, now - started, stop_after)
                if action is not Action.CONTINUE:
                    break
                time.sleep(self.poll_interval_s)
            code = worker.proc.returncode if action is Action.EXITED else self._stop(action.value)
        except BaseException:
            self._stop("task interrupted")
            raise
        finally:
            tail = worker.join_output()
        if code == -signal.SIGTERM and action is not Action.EXITED:
            # Our SIGTERM reached the worker before it had installed its handler, i.e. while it was still
            # starting: it had mirrored and committed nothing, so this stop is as clean as a graceful one.
            self.log.info("mirror worker stopped while starting (before it handled SIGTERM): nothing to commit")
            code = 0
        summary = {"exit_code": code, "reason": action.value, "seconds": round(time.monotonic() - started, 1)}
        # 0 is the worker's clean stop (flushed, committed) after SIGTERM/SIGINT, whoever sent it.
        if code != 0:
            raise WorkerFailedError(self.mirror_name, code, tail)
        self.log.info("mirror worker stopped cleanly: %s", summary)
        return summary

    def on_kill(self) -> None:
        self._stop("task killed")
