"""Airflow for tests: a throw-away AIRFLOW_HOME with a migrated SQLite metadata DB, for `dag.test()`.

Airflow reads its configuration once, when it is first imported, so importing this module points it at
a fresh per-session home before anything imports airflow (tests/conftest.py imports it first). The home
has its own dags folder (`dags_folder()`): `dag.test()` finds a DAG through the dag bundle, so a test
writes a small DAG file there and runs the DAG that file defines (`load_dag_file`).

    from tests.airflow_support import airflow_db  # session fixture: `airflow db migrate` once
"""

from __future__ import annotations

import atexit
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PLUGINS = ROOT / "plugins"


def _configure_environment() -> Path:
    if "airflow" in sys.modules and os.environ.get("KAFKA_MIRROR_TEST_AIRFLOW_HOME"):
        return Path(os.environ["KAFKA_MIRROR_TEST_AIRFLOW_HOME"])
    home = Path(tempfile.mkdtemp(prefix="airflow-test-"))
    atexit.register(shutil.rmtree, home, True)
    (home / "dags").mkdir()
    from cryptography.fernet import Fernet

    os.environ.update({
        "KAFKA_MIRROR_TEST_AIRFLOW_HOME": str(home),
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home}/airflow.db",
        "AIRFLOW__CORE__DAGS_FOLDER": str(home / "dags"),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(PLUGINS),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__FERNET_KEY": Fernet.generate_key().decode(),
        "AIRFLOW__API_AUTH__JWT_SECRET": Fernet.generate_key().decode(),
        "AIRFLOW__LOGGING__LOGGING_LEVEL": "INFO",
        "PYTHONPATH": os.pathsep.join(
            [str(ROOT), str(PLUGINS), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]),
    })
    for path in (str(ROOT), str(PLUGINS)):
        if path not in sys.path:
            sys.path.insert(0, path)
    return home


HOME = _configure_environment()


def dags_folder() -> Path:
    return HOME / "dags"


@pytest.fixture(scope="session")
def airflow_db() -> Path:
    """A migrated metadata DB in the session's AIRFLOW_HOME (its path)."""
    if "airflow" in sys.modules:
        from airflow.configuration import conf

        if conf.get("core", "dags_folder") != str(dags_folder()):
            pytest.fail("airflow was imported before tests.airflow_support configured it: import "
                        "tests.airflow_support first (tests/conftest.py does)")
    result = subprocess.run([sys.executable, "-m", "airflow", "db", "migrate"], env=os.environ.copy(),
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    # A real worker talks to an api-server that is already up; dag.test() builds its in-process one (cached)
    # inside the first task it runs, which costs tens of seconds on a loaded machine. Build it here.
    import airflow.models  # noqa: F401
    from airflow.sdk.execution_time.supervisor import in_process_api_server

    in_process_api_server().transport  # noqa: B018
    return HOME


def load_dag_file(path: Path, dag_attribute: str = "dag"):
    """Import a DAG file written into `dags_folder()` and return its DAG object."""
    spec = importlib.util.spec_from_file_location(f"test_dag_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, dag_attribute)
