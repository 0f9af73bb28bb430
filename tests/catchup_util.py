"""Running the catch-up (`python -m spark_jobs.catchup`) as operators do (a process of its own) and reading its
JSON summary."""

from __future__ import annotations

import json
import subprocess
import sys

from devstack.paths import ROOT


def run_catchup(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "spark_jobs.catchup", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=600, stdin=subprocess.DEVNULL)


def catchup_summary(result: subprocess.CompletedProcess) -> dict:
    return json.loads(next(line for line in result.stdout.splitlines() if line.startswith('{"topics"')))
