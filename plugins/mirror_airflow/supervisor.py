"""Supervision of the mirror worker's process for MirrorWorkerOperator: the pure decision of what to do
next, and a child process whose output reaches the task log and which stops gracefully on SIGTERM."""

from __future__ import annotations

import enum
import logging
import os
import signal
import subprocess
import sys
import threading
from collections import deque
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


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


def worker_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The worker process's environment: this one's (it imports mirror_worker as installed here), unbuffered, and
    PYTHONSAFEPATH so that `python -m` leaves the working folder off its sys.path."""
    return {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONSAFEPATH": "1", **(extra or {})}


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


class WorkerProcess:
    """A child process whose stdout/stderr are drained into `log` (the last stderr lines kept)."""

    def __init__(self, argv: list[str], log: logging.Logger, tail_lines: int = 20) -> None:
        self.log = log
        self.proc = subprocess.Popen(argv, env=worker_env(), stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, errors="replace",
                                     bufsize=1, preexec_fn=_parent_death_signal())
        self.stderr_tail: deque = deque(maxlen=tail_lines)
        # The pipes must be drained whatever they carry, or a full pipe blocks the worker.
        self.threads = [threading.Thread(target=self._pump, args=(self.proc.stdout, logging.INFO, None), daemon=True),
                        threading.Thread(target=self._pump, args=(self.proc.stderr, logging.WARNING, self.stderr_tail),
                                         daemon=True)]
        for thread in self.threads:
            thread.start()

    def _pump(self, stream, level: int, keep: deque | None) -> None:
        for line in stream:
            line = line.rstrip("\n")
            if keep is not None:
                keep.append(line)
            self.log.log(level, "worker: %s", line)

    def poll(self) -> int | None:
        return self.proc.poll()

    def stop(self, reason: str, timeout_s: float) -> int:
        """SIGTERM, then wait for the graceful stop (flush, commit); SIGKILL only past the timeout."""
        if self.proc.poll() is not None:
            return self.proc.returncode
        self.log.info("stopping mirror worker (pid %d): %s", self.proc.pid, reason)
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.log.error("worker did not stop within %.0f s: killing it", timeout_s)
            self.proc.kill()
            return self.proc.wait(10)

    def join_output(self, timeout_s: float = 5.0) -> str:
        """Wait for the output to be drained; the stderr tail as one line."""
        for thread in self.threads:
            thread.join(timeout_s)
        return " | ".join(self.stderr_tail)
