"""Where a mirror's reports go: `<report dir>/<mirror>/<kind>-<UTC time>.<ext>`, the report dir being the
mirror's `airflow.verify-report-dir`, else $MIRROR_REPORT_DIR, else $AIRFLOW_HOME/mirror-reports."""

from __future__ import annotations

import os
import time
from pathlib import Path


def report_dir_default() -> Path:
    base = os.environ.get("MIRROR_REPORT_DIR") or Path(os.environ.get("AIRFLOW_HOME", Path.home() / "airflow")) / "mirror-reports"
    return Path(base)


def new_report_path(report_dir: str | None, mirror: str, kind: str, suffix: str = ".json") -> Path:
    """A new report file path for `mirror` (its folder created); the time stamp is UTC, to the second."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    directory = Path(report_dir) if report_dir else report_dir_default()
    path = directory / mirror / f"{kind}-{stamp}{suffix}"
    path.parent.mkdir(parents=True, exist_ok=True)
    return path
