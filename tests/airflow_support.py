"""Airflow for tests: a throw-away AIRFLOW_HOME with a migrated SQLite metadata DB, for `dag.test()`.

Airflow reads its configuration once, when it is first imported, so importing this module points it at
a fresh per-session home before anything imports airflow (tests/conftest.py imports it first). The home
has its own dags folder (`dags_folder()`): `dag.test()` finds a DAG through the dag bundle, so a test
writes a small DAG file there and runs the DAG that file defines (`load_dag_file`).

    from tests.airflow_support import airflow_db  # session fixture: `airflow db migrate` once
    from tests.airflow_support import airflow_api_server  # session fixture: `airflow api-server` on that DB
"""

from __future__ import annotations

import atexit
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import requests

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
    })
    return home


HOME = _configure_environment()


def dags_folder() -> Path:
    return HOME / "dags"


def dashboard_spec() -> Path:
    """The mirror spec the `airflow_api_server`'s dashboard shows (its KAFKA_MIRROR_SPEC): a test writes the
    mirrors it wants listed there (tests/integration/test_airflow_breadth.py)."""
    return HOME / "dashboard-mirrors.yaml"


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


def auth_rules_file() -> Path:
    """The `airflow_api_server`'s per-DAG permissions (tests/airflow_auth.py): a test writes the rules it needs."""
    return HOME / "auth-rules.json"


# The api-server's users and their SimpleAuthManager roles. `mirror-tasks` is what docker-compose.yaml gives the
# tasks (role user: read and pause DAGs, no connections); `lifecycle-only` and `every-part` are viewers whose
# DAGs the rules file narrows.
API_USERS = {"admin": "admin", "mirror-tasks": "user", "lifecycle-only": "viewer", "every-part": "viewer"}


def api_password(user: str) -> str:
    """A user's password on the `airflow_api_server` (SimpleAuthManager generates them at its start)."""
    return json.loads((HOME / "simple_auth_manager_passwords.json.generated").read_text())[user]


@pytest.fixture(scope="session")
def airflow_api_server(airflow_db, tmp_path_factory):
    """`airflow api-server` (core API, SimpleAuthManager narrowed per DAG by tests/airflow_auth.py, the users of
    API_USERS) on the session's metadata DB, on a free port; yields (base url, admin's password). dag.test() runs
    and this API share the DB: a test pauses DAGs and answers human-in-the-loop tasks through it as a person
    would."""
    from devstack.net import free_port

    port = free_port()
    log = tmp_path_factory.mktemp("api") / "api-server.log"
    env = {**os.environ, "AIRFLOW__API__WORKERS": "1",
           "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": ",".join(f"{u}:{r}" for u, r in API_USERS.items()),
           "AIRFLOW__CORE__AUTH_MANAGER": "tests.airflow_auth.PerDagAuthManager",
           "MIRROR_TEST_AUTH_RULES": str(auth_rules_file()),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
           "AIRFLOW__API__BASE_URL": f"http://127.0.0.1:{port}", "KAFKA_MIRROR_SPEC": str(dashboard_spec()),
           "MIRROR_DASHBOARD_DB": str(HOME / "dashboard-history.sqlite")}
    with open(log, "wb") as out:
        proc = subprocess.Popen([str(Path(sys.executable).parent / "airflow"), "api-server", "--apps", "core",
                                 "-H", "127.0.0.1", "-p", str(port)], env=env, cwd=ROOT, stdout=out,
                                stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 240
        while True:
            assert proc.poll() is None, log.read_text()[-3000:]
            try:
                if requests.get(f"{base}/api/v2/monitor/health", timeout=5).ok:
                    break
            except requests.RequestException:
                pass
            assert time.monotonic() < deadline, "api-server did not answer: " + log.read_text()[-3000:]
            time.sleep(1)
        yield base, api_password("admin")
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def sync_dag_file(path: Path, dag_id: str) -> None:
    """Parse a DAG file of `dags_folder()` and store its DAGs in the metadata DB, as the dag-processor
    would: the REST API then knows them (pause, unpause)."""
    from airflow.dag_processing.bundles.manager import DagBundlesManager
    from airflow.dag_processing.dagbag import DagBag, sync_bag_to_db

    bag = DagBag(dag_folder=str(path))
    assert dag_id in bag.dags, bag.import_errors
    DagBundlesManager().sync_bundles_to_db()
    sync_bag_to_db(bag, "dags-folder", None)
