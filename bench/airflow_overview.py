"""The dashboard's overview at breadth, for bench.airflow_breadth: over HTTP from the running api-server, and
built in-process by a given plugins folder's code (an older checkout's, to compare with)."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import requests

from bench.airflow_probe import timed_get
from devstack.airflow import Airflow

API = "/mirror-dashboard/api/mirrors"
PAGE = "/mirror-dashboard/"
STILL = "still being measured"


def _look(session: requests.Session, url: str, path: str) -> dict:
    seconds, response = timed_get(session, url + path)
    out = {"path": path, "s": round(seconds, 3), "status": response.status_code}
    if response.status_code != 200:
        out["error"] = response.text[:300]
    elif path == API:
        mirrors = response.json()["mirrors"]
        out.update(mirrors=len(mirrors), with_lag=sum(m["total_lag"] is not None for m in mirrors),
                   still_measuring=sum(any(STILL in n for n in m["notes"]) for m in mirrors))
    else:
        out.update(mirrors=response.text.count("data-state="), still_measuring=response.text.count(STILL))
    return out


def _median(looks: list[dict]) -> float | None:
    return round(statistics.median(look["s"] for look in looks), 3) if looks else None


def measure_overview(session: requests.Session, url: str, expected: int, repeats: int = 5, gap_s: float = 11.0) -> dict:
    """cold: the first view (nothing measured yet); kept: `repeats` page views within 10 s of the samples;
    remeasured: `repeats` API views `gap_s` apart, each measuring every mirror again (as the page's refresh does)."""
    cold = _look(session, url, API)
    kept = [_look(session, url, PAGE) for _ in range(repeats)]
    remeasured = []
    for _ in range(repeats):
        time.sleep(gap_s)
        remeasured.append(_look(session, url, API))
    time.sleep(gap_s)
    page_remeasured = _look(session, url, PAGE)
    every = [cold, *kept, *remeasured, page_remeasured]
    return {
        "expected_mirrors": expected, "cold": cold, "kept": kept, "remeasured": remeasured,
        "page_remeasured": page_remeasured,
        "kept_median_s": _median(kept), "remeasured_median_s": _median(remeasured),
        "max_s": max(look["s"] for look in every),
        "all_listed": all(look.get("mirrors") == expected for look in every),
        "within_2s": all(look["s"] <= 2.0 for look in every),
    }


_IN_PROCESS = """
import json, sys, time
from mirror_airflow.dashboard.gather import Dashboard
from mirror_airflow.dashboard.sources import real_edges
from mirror_airflow.dashboard.store import HistoryStore
import mirror_airflow
board = Dashboard(real_edges(), HistoryStore())
out = {"code": mirror_airflow.__file__, "views": []}
for _ in range(int(sys.argv[1])):
    started = time.monotonic()
    views = board.overview()
    out["views"].append({"s": round(time.monotonic() - started, 3), "mirrors": len(views),
                         "with_lag": sum(v.total_lag is not None for v in views),
                         "still_measuring": sum(any("still being measured" in n for n in v.notes) for v in views)})
    time.sleep(float(sys.argv[2]))
print("RESULT " + json.dumps(out))
"""


def overview_in_process(airflow: Airflow, plugins: Path, views: int = 4, gap_s: float = 11.0) -> dict:
    """The overview built by `plugins`' code in a process of its own (a fresh history file: the first view is
    cold), on the running Airflow's metadata DB and spec; every view `gap_s` after the last measures again."""
    repo = Path(__file__).resolve().parents[1]
    with tempfile.TemporaryDirectory(prefix="bench-overview-") as tmp:
        env = {**os.environ, **airflow.environment(), "PYTHONPATH": os.pathsep.join([str(plugins), str(repo)]),
               "MIRROR_DASHBOARD_DB": str(Path(tmp) / "history.sqlite")}
        done = subprocess.run([sys.executable, "-c", _IN_PROCESS, str(views), str(gap_s)], env=env, cwd=tmp,
                              capture_output=True, text=True, timeout=1800)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    if done.returncode != 0 or not lines:
        return {"plugins": str(plugins), "error": (done.stderr or done.stdout)[-1000:]}
    result = json.loads(lines[-1][len("RESULT "):])
    result["plugins"] = str(plugins)
    return result


def compare_plugins(airflow: Airflow, folders: list[Path]) -> list[dict]:
    return [overview_in_process(airflow, folder) for folder in folders]
