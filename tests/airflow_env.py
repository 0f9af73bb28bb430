"""Airflow for tests: a private AIRFLOW_HOME (SQLite) set before anything imports airflow.

Import this module first in a test module that touches Airflow (`from tests.airflow_env import ...`):
Airflow reads its configuration when `airflow` is first imported. `airflow_db` (session) runs
`airflow db migrate` once; DagBag and dag.test() need it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PLUGINS = ROOT / "plugins"

if "_MIRROR_TEST_AIRFLOW_HOME" not in os.environ:
    os.environ["_MIRROR_TEST_AIRFLOW_HOME"] = tempfile.mkdtemp(prefix="mirror-airflow-home-")
AIRFLOW_HOME = Path(os.environ["_MIRROR_TEST_AIRFLOW_HOME"])
os.environ.update({
    "AIRFLOW_HOME": str(AIRFLOW_HOME),
    "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
    # dag.test() syncs the DAGs folder to the DB: tests render the stubs of their own spec there.
    "AIRFLOW__CORE__DAGS_FOLDER": str(AIRFLOW_HOME / "dags"),
    "AIRFLOW__CORE__PLUGINS_FOLDER": str(PLUGINS),
    "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{AIRFLOW_HOME / 'airflow.db'}",
})
DAGS_FOLDER = AIRFLOW_HOME / "dags"
DAGS_FOLDER.mkdir(exist_ok=True)
for path in (str(ROOT), str(PLUGINS)):
    if path not in sys.path:
        sys.path.insert(0, path)


@pytest.fixture(scope="session")
def airflow_db() -> Path:
    marker = AIRFLOW_HOME / ".migrated"
    if not marker.exists():
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
        result = subprocess.run([str(Path(sys.executable).parent / "airflow"), "db", "migrate"], env=env,
                                capture_output=True, text=True, timeout=600)
        assert result.returncode == 0, result.stderr[-3000:]
        marker.touch()
    return AIRFLOW_HOME
