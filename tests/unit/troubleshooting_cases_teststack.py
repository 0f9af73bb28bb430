"""The lines of the stack parts only the integration tests and the benchmarks start (`make test`, `make bench`):
Toxiproxy, the fault tests' Kafka clusters, the Spark cluster and the Celery Airflow, each made by a scene for
test_troubleshooting.py. A scene prints the StackError's message, as pytest's set-up error and a benchmark's
traceback end with it; nothing is started."""

from __future__ import annotations

import io
import itertools
import subprocess
import sys
import urllib.error
from pathlib import Path
from types import SimpleNamespace
from unittest import mock

from tests.unit.troubleshooting_cases import case

SETUP_FAILS = "the test errors at set-up (a benchmark stops)"
TEST_FAILS = "the test fails"


def stack_part(failing) -> str:
    """`failing()` raises a StackError (or one of its kinds): its message, as the test's error ends with it."""
    from devstack.errors import StackError

    try:
        failing()
    except StackError as exc:
        print(exc, file=sys.stderr)
    return SETUP_FAILS


def toxiproxy(what: str) -> str:
    """The fault tests' Toxiproxy server in ./toxiproxy: its binary missing (`missing`), a port of it taken
    (`taken`), the server gone (`exited`), its log saying a proxy's port could not be bound (`proxies`), its API
    silent (`silent`) or refusing a proxy (`api`: HTTP 409, it exists already)."""
    from devstack import paths, toxiproxy
    from devstack.toxiproxy import ToxiproxyServer

    server = ToxiproxyServer(Path("toxiproxy"))
    server.configure()
    server.process.log_file.write_text(
        "msg=Failed to populate proxies from file: listen tcp 127.0.0.1:40311: bind: address already in use\n"
        if what == "proxies" else "")
    refusal = urllib.error.HTTPError(server.url, 409, "Conflict", {}, io.BytesIO(
        b'{"error":"proxy already exists","status":409}\n'))
    with mock.patch.object(paths, "TOXIPROXY_SERVER", Path("no-toxiproxy" if what == "missing" else "spec.yaml")), \
            mock.patch.object(toxiproxy, "is_listening", lambda port: what == "taken"), \
            mock.patch.object(server.process, "is_running", lambda: what not in ("missing", "taken", "exited")), \
            mock.patch("urllib.request.urlopen", side_effect=refusal):
        if what == "api":
            return stack_part(lambda: server.add_proxy("source-1", "127.0.0.1:1"))
        return stack_part(server.start if what in ("missing", "taken") else lambda: server.wait_ready(
            0 if what == "silent" else 1))


def kafka_cluster_short() -> str:
    """The fault tests' 3-broker cluster: each broker answers, the metadata through the proxies names fewer."""
    from devstack import kafka_cluster
    from devstack.kafka_cluster import KafkaCluster

    cluster = KafkaCluster("source", Path("source"), None)
    with mock.patch.object(KafkaCluster, "bootstrap_servers", "127.0.0.1:1"), \
            mock.patch.object(kafka_cluster, "answers_metadata", lambda servers, brokers: False), \
            mock.patch.multiple(cluster.nodes[0].__class__, wait_ready=lambda self, timeout: None):
        return stack_part(lambda: cluster.wait_ready(0))


def spark(what: str) -> str:
    """The tests' Spark cluster in ./spark: pyspark not importable (`no-pyspark`), pyspark without Spark's scripts
    (`no-scripts`), the cluster's Python seeing the project (`project`), the workers not registering (`workers`),
    or the master knowing an application's name twice (`apps`)."""
    from devstack import spark_cluster
    from devstack.spark_cluster import SparkCluster

    cluster = SparkCluster(Path("spark"))
    if what == "no-pyspark":
        with mock.patch.dict(sys.modules, {"pyspark": None}):
            return stack_part(spark_cluster.spark_home)
    if what == "no-scripts":
        with mock.patch("pyspark.__file__", str(Path("pyspark/__init__.py").absolute())):
            return stack_part(spark_cluster.spark_home)
    if what == "project":  # the venv made, and the probe importing spark_jobs
        (cluster.home / "python" / "lib" / "python3.12" / "site-packages").mkdir(parents=True)
        with mock.patch.object(spark_cluster.subprocess, "run", lambda *args, **kwargs: subprocess.CompletedProcess(
                args, 0, stdout="", stderr="")):
            return stack_part(cluster._make_python)
    cluster.home.mkdir()
    (cluster.home / "cluster.json").write_text('{"master": 7077, "master_ui": 8080, "workers": []}')
    if what == "workers":
        return stack_part(lambda: cluster.wait_ready(0))
    apps = [{"id": "app-1", "name": "mirror-catchup"}, {"id": "app-2", "name": "mirror-catchup"}]
    with mock.patch.object(cluster, "state", lambda: {"activeapps": [], "completedapps": apps}):
        stack_part(lambda: cluster.application("mirror-catchup"))
    return TEST_FAILS


def celery(what: str) -> str:
    """test_airflow_celery.py's Celery Airflow in ./celery: given the stack's own root (`root`), without
    redis-server (`tools`), its database migration failing (`migrate`), or not ready in time (`slow`)."""
    from devstack import airflow_celery
    from devstack.airflow_celery import CeleryAirflow
    from devstack.stack import Stack

    Path("mirrors.yaml").write_text("groups: []\n")
    root = Path("stack" if what == "root" else "celery")
    make = lambda: CeleryAirflow(Stack(Path("stack")), root, Path("mirrors.yaml"), Path("dags"))  # noqa: E731
    if what == "root":
        return stack_part(make)
    airflow = make()
    migrate = subprocess.CompletedProcess([], 1, stdout="", stderr=(
        "sqlalchemy.exc.OperationalError: (sqlite3.OperationalError) unable to open database file"))
    clock = SimpleNamespace(monotonic=itertools.count(0, 1).__next__, sleep=lambda seconds: None)
    with mock.patch.object(airflow_celery.shutil, "which", lambda tool: None if what == "tools" else f"/bin/{tool}"), \
            mock.patch.object(airflow_celery.subprocess, "run", lambda *args, **kwargs: migrate), \
            mock.patch.multiple(airflow_celery, airflow_bin=lambda: Path("airflow"), time=clock,
                                is_listening=lambda port: False, _worker_ready=lambda process, host: False), \
            mock.patch.object(airflow.redis, "start", lambda argv, env=None: 4242):
        if what == "slow":  # started: its api-server's port written, no process exited, none healthy yet
            airflow.settings.node_file.parent.mkdir(parents=True)
            airflow.settings.node_file.write_text('{"api_port": 1}')
            for process in airflow.processes():
                process.exited = lambda: False
            return stack_part(lambda: airflow.wait_ready(1.5))
        return stack_part(airflow.start)


CASES = {
    "toxiproxy … …: HTTP … …": case(toxiproxy, "api", exit_code=SETUP_FAILS),
    "toxiproxy-server missing at …: run `make setup-test`": case(toxiproxy, "missing", exit_code=SETUP_FAILS),
    "toxiproxy: port … is taken by another process": case(toxiproxy, "taken", exit_code=SETUP_FAILS),
    "toxiproxy exited during start-up; see …": case(toxiproxy, "exited", exit_code=SETUP_FAILS),
    "toxiproxy could not open its proxies: …": case(toxiproxy, "proxies", exit_code=SETUP_FAILS),
    "toxiproxy did not answer on … within …s; see …": case(toxiproxy, "silent", exit_code=SETUP_FAILS),
    "kafka cluster …: not all … brokers registered within …s": case(kafka_cluster_short, exit_code=SETUP_FAILS),
    "pyspark is not installed: run `make setup`": case(spark, "no-pyspark", exit_code=SETUP_FAILS),
    "pyspark at … has no bin/spark-class": case(spark, "no-scripts", exit_code=SETUP_FAILS),
    "spark cluster: its Python must have pyspark and confluent_kafka but not the project: …": case(
        spark, "project", exit_code=SETUP_FAILS),
    "spark cluster: … workers not registered with … within …s; see …/*/server.log": case(
        spark, "workers", exit_code=SETUP_FAILS),
    "spark cluster: … applications named …": case(spark, "apps", exit_code=TEST_FAILS),
    "a Celery Airflow runs under a root of its own, not the stack's": case(celery, "root", exit_code=SETUP_FAILS),
    "… is missing: run `make setup-test` (Debian redis-server, util-linux)": case(
        celery, "tools", exit_code=SETUP_FAILS),
    "airflow db migrate failed: …": case(celery, "migrate", exit_code=SETUP_FAILS),
    "celery airflow not ready within …s: waiting for … (logs under …)": case(celery, "slow", exit_code=SETUP_FAILS),
}
