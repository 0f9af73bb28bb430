"""What bench.airflow_breadth reads of a running Airflow: the metadata DB (parsed DAGs, their parse durations,
import errors, task instances), the components' log (the scheduler's loop durations), the components' processes
(CPU, RSS), and the dashboard's overview over HTTP. Read-only; SQLite is read with its own connection."""

from __future__ import annotations

import re
import sqlite3
import statistics
import time
from contextlib import closing
from pathlib import Path

import psutil
import requests

from devstack.process import descendants

LOOP_LINE = re.compile(r"Ran scheduling loop in ([0-9.]+) ms")


def summary(values: list[float], digits: int = 3) -> dict:
    """n, median, p95, max of `values` ({"n": 0} for none)."""
    if not values:
        return {"n": 0}
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return {"n": len(ordered), "median": round(statistics.median(ordered), digits), "p95": round(p95, digits),
            "max": round(ordered[-1], digits), "sum": round(sum(ordered), digits)}


class MetadataDb:
    """The Airflow metadata DB (SQLite) of the benchmark's Airflow."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def _rows(self, query: str, args: tuple = ()) -> list[tuple]:
        with closing(sqlite3.connect(f"file:{self.path}?mode=ro", uri=True, timeout=30)) as db:
            return db.execute(query, args).fetchall()

    def dag_ids(self) -> set[str]:
        return {row[0] for row in self._rows("SELECT dag_id FROM dag WHERE is_stale = 0")}

    def parse_durations(self) -> dict[str, tuple[float, str]]:
        """DAG file -> (its last parse duration in s, when), as the dag-processor stored them (dag table)."""
        rows = self._rows("SELECT relative_fileloc, MAX(last_parse_duration), MAX(last_parsed_time) FROM dag "
                          "WHERE is_stale = 0 AND last_parse_duration IS NOT NULL GROUP BY relative_fileloc")
        return {file: (duration, when) for file, duration, when in rows}

    def import_errors(self) -> list[tuple[str, str]]:
        rows = self._rows("SELECT filename, stacktrace FROM import_error")
        return [(file, (trace or "").strip().splitlines()[-1] if trace else "") for file, trace in rows]

    def running_tasks(self) -> list[tuple[str, str, str]]:
        """(dag_id, task_id, pool) of every running task instance."""
        return self._rows("SELECT dag_id, task_id, pool FROM task_instance WHERE state = 'running'")

    def pool_slots(self, pool: str = "default_pool") -> int:
        return self._rows("SELECT slots FROM slot_pool WHERE pool = ?", (pool,))[0][0]

    def task_states(self, dag_id: str, task_id: str) -> list[str]:
        return [row[0] for row in self._rows("SELECT state FROM task_instance WHERE dag_id = ? AND task_id = ? "
                                             "ORDER BY start_date", (dag_id, task_id))]


def wait_parsed(db: MetadataDb, dag_ids: set[str], timeout: float) -> float:
    """Seconds until every DAG of `dag_ids` is in the metadata DB; raises with what is missing."""
    started = time.monotonic()
    missing = set(dag_ids)
    while time.monotonic() - started < timeout:
        missing = dag_ids - db.dag_ids()
        if not missing:
            return time.monotonic() - started
        time.sleep(2)
    errors = db.import_errors()
    raise TimeoutError(f"{len(missing)} DAGs not parsed in {timeout:.0f} s (e.g. {sorted(missing)[:3]}); "
                       f"import errors: {errors[:3]}")


def loop_durations_ms(log: Path, offset: int) -> tuple[list[float], int]:
    """The scheduler's 'Ran scheduling loop in N ms' lines (DEBUG) written to `log` after byte `offset`."""
    with open(log, "rb") as handle:
        handle.seek(offset)
        text = handle.read().decode("utf-8", "replace")
        end = handle.tell()
    return [float(m.group(1)) for m in LOOP_LINE.finditer(text)], end


def component_pids(root_pid: int) -> dict[str, int]:
    """component name (scheduler, dag-processor, api-server, triggerer) -> pid of its `airflow <name>` process."""
    found = {}
    for pid in descendants(root_pid):
        try:
            cmdline = psutil.Process(pid).cmdline()
        except psutil.Error:
            continue
        for name in ("scheduler", "dag-processor", "api-server", "triggerer"):
            if name not in found and len(cmdline) >= 2 and cmdline[-1] == name and "airflow" in " ".join(cmdline[:-1]):
                found[name] = pid
    return found


def tree_cpu_s(pid: int) -> float:
    """User+system CPU seconds of a process and its living descendants."""
    total = 0.0
    for each in [pid, *descendants(pid)]:
        try:
            times = psutil.Process(each).cpu_times()
            total += times.user + times.system + times.children_user + times.children_system
        except psutil.Error:
            pass
    return total


def cpu_share(pids: dict[str, int], seconds: float) -> dict[str, float]:
    """Per component: the fraction of one core its process tree used over the next `seconds`."""
    before = {name: tree_cpu_s(pid) for name, pid in pids.items()}
    time.sleep(seconds)
    return {name: round((tree_cpu_s(pid) - before[name]) / seconds, 3) for name, pid in pids.items()}


def tree_rss_mib(pid: int) -> float:
    total = 0.0
    for each in [pid, *descendants(pid)]:
        try:
            total += psutil.Process(each).memory_info().rss
        except psutil.Error:
            pass
    return round(total / 2**20, 1)


def worker_task_trees(mirror: str) -> list[int]:
    """Pids of the task processes supervising `mirror`'s worker: the parents (task runner, its supervisor) of a
    `python -m mirror_worker ... --mirror NAME` process, outermost first."""
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = proc.info["cmdline"] or []
        if "mirror_worker" in cmdline and "--mirror" in cmdline and cmdline[cmdline.index("--mirror") + 1] == mirror:
            chain = [p.pid for p in proc.parents() if "airflow" in " ".join(p.cmdline())]
            return list(reversed(chain))[-2:] + [proc.pid] if chain else [proc.pid]
    return []


def timed_get(session: requests.Session, url: str) -> tuple[float, requests.Response]:
    started = time.monotonic()
    response = session.get(url, timeout=300)
    return time.monotonic() - started, response


def logged_in(url: str, username: str, password: str) -> requests.Session:
    session = requests.Session()
    response = session.post(f"{url}/auth/token", json={"username": username, "password": password}, timeout=120)
    response.raise_for_status()
    session.headers["Authorization"] = f"Bearer {response.json()['access_token']}"
    return session
