"""Supervision of the mirror worker's process for MirrorWorkerOperator: the pure decision of what to do
next, and a child process whose output reaches the task log and which stops gracefully on SIGTERM."""

from __future__ import annotations

import enum
import logging
import os
import re
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


# What the worker needs of the task's environment (issue 46 item 4), and nothing else: the task process holds
# Airflow's database URL, JWT and API secrets, fernet key and connections, which the worker has no use for and a
# `${env:...}` placeholder or a crash dump could carry further. Finding the interpreter and its packages (PATH,
# PYTHONPATH), locale and time zone, temp files, Kerberos (GSSAPI), the CA bundle and proxies of the registry's
# HTTP client, the library path of a custom librdkafka, and the worker's own settings (MIRROR_*: the secrets
# directories, the worker slot, the log level).
PASSED_ENV = ("PATH", "HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "TZ", "TMPDIR", "PYTHONPATH", "JAVA_HOME",
              "LD_LIBRARY_PATH", "SSL_CERT_FILE", "SSL_CERT_DIR", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY",
              "http_proxy", "https_proxy", "no_proxy")
PASSED_PREFIXES = ("LC_", "KRB5", "MIRROR_")
_ENV_PLACEHOLDER = re.compile(r"\$\{env:+(?P<name>[A-Za-z_][A-Za-z0-9_]*)\}")


def spec_env_names(spec_path) -> set[str]:
    """The variables a spec's `${env:NAME}` placeholders name (none when the file cannot be read)."""
    try:
        text = Path(spec_path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return set()
    return {m.group("name") for m in _ENV_PLACEHOLDER.finditer(text)}


def worker_env(extra: dict[str, str] | None = None, spec_env: set[str] | frozenset[str] = frozenset()) -> dict[str, str]:
    """The worker process's environment: the allowlisted part of this one's, unbuffered, and PYTHONSAFEPATH so
    that `python -m` leaves the working folder off its sys.path. `spec_env`: the variables the spec's
    `${env:...}` placeholders name, passed only while the worker resolves them (no MIRROR_SECRETS_DIRS: the
    worker refuses `${env:...}` then, config/placeholders.py)."""
    from mirror_worker.api import SECRETS_DIRS_VARIABLE

    wanted = set() if os.environ.get(SECRETS_DIRS_VARIABLE) else set(spec_env)
    kept = {k: v for k, v in os.environ.items() if k in PASSED_ENV or k.startswith(PASSED_PREFIXES) or k in wanted}
    return {**kept, "PYTHONUNBUFFERED": "1", "PYTHONSAFEPATH": "1", **(extra or {})}


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

    def __init__(self, argv: list[str], log: logging.Logger, tail_lines: int = 20,
                 env: dict[str, str] | None = None) -> None:
        """`env`: the child's environment (default: worker_env())."""
        self.log = log
        self.proc = subprocess.Popen(argv, env=env if env is not None else worker_env(), stdin=subprocess.DEVNULL,
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
