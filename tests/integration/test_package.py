"""The project as one installable distribution (pyproject.toml): its wheel, installed with its dependencies
(the repo's pins as constraints) into a fresh virtual environment outside the repository, works from a
folder that is not the repo and without PYTHONPATH: the worker mirrors records on the stack, both Spark jobs
run as modules on a standalone cluster whose executors have the third-party packages only (the check's Kafka
connector resolved by Spark, no checkout anywhere), the Airflow operators submit them so, and Airflow loads the
provider and builds a spec's DAGs.

The venv is built once per run (`packaged` fixture, through conftest's `once_per_run`: the first test process
that needs it builds it, another waits for it; about a minute alone on this machine, 320 s in a loaded run). Its
cost is pip's: the wheels come from pip's cache (warmed by `make setup`, which installs the same pins), else from
PyPI. The jobs run on the run's standalone cluster (`spark_cluster`), so their test is in the late Spark group.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import zipfile
from importlib.metadata import version
from pathlib import Path

import pytest

from spark_jobs.api import APPLICATION_FILE_ENV
from spark_jobs.common.connector import SHIPPED_BY_SPARK
from tests.airflow_support import ROOT
from tests.kafka_util import create_topic, produce
from tests.worker_util import wait_for_count, write_mirror_spec

# The first test's setup builds the wheel and a venv with pyspark and Airflow (384 s once under a full make test),
# then it runs both Spark jobs: over pytest-timeout's 600 s in a loaded run, which ended the whole test process.
pytestmark = [pytest.mark.integration, pytest.mark.timeout(1500)]

# What the wheel is built from: the distribution's sources, copied so that the build leaves nothing in the repo.
SOURCES = ("pyproject.toml", "LICENSE", "mirror_worker", "spark_jobs", "plugins/mirror_airflow")


def _run(argv: list, cwd: Path, env: dict, timeout: float = 600) -> subprocess.CompletedProcess:
    done = subprocess.run([str(a) for a in argv], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, f"{argv}: exit {done.returncode}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    return done


class Packaged:
    """The wheel installed in a fresh venv; `env` has no PYTHONPATH and `cwd` is outside the repository. The venv
    may be another test process's (`once_per_run`); the folders the tests write in are this process's."""

    def __init__(self, venv: Path, base: Path) -> None:
        self.cwd = base / "elsewhere"
        self.cwd.mkdir(exist_ok=True)
        self.venv = venv
        self.bin = self.venv / "bin"
        self.env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
        self.env.update({"PATH": os.pathsep.join([str(self.bin), os.environ.get("PATH", "")]),
                         "AIRFLOW_HOME": str(base / "airflow"), "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
                         "AIRFLOW__CORE__DAGS_FOLDER": str(base / "dags")})

    def run(self, *argv, timeout: float = 600) -> subprocess.CompletedProcess:
        return _run(list(argv), self.cwd, self.env, timeout)

    def python(self, *argv, timeout: float = 600, env: dict | None = None) -> subprocess.CompletedProcess:
        return _run([self.bin / "python", *argv], self.cwd, {**self.env, **(env or {})}, timeout)


@pytest.fixture(scope="session")
def packaged(once_per_run, tmp_path_factory) -> Packaged:
    base = tmp_path_factory.mktemp("package")
    built = once_per_run("package-venv", lambda folder: _build(folder, Packaged(folder / "venv", base)))
    return Packaged(built / "venv", base)


def _build(base: Path, packaged: Packaged) -> None:
    """The wheel built from a copy of the sources under `base`, and installed in `packaged.venv` with its
    dependencies."""
    source, wheels = base / "source", base / "wheels"
    for name in SOURCES:
        target = source / name
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info"))
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, target)
    _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--disable-pip-version-check", str(source),
          "-w", str(wheels)], base, dict(os.environ))
    [wheel] = wheels.glob("kafka_mirror-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    for module in ("mirror_worker/__main__.py", "spark_jobs/catchup/__main__.py", "spark_jobs/catchup/job.py",
                   "spark_jobs/check/__main__.py", "spark_jobs/check/job.py", "spark_jobs/consistency_check.py",
                   "spark_jobs/common/session.py", "mirror_airflow/get_provider_info.py",
                   "spark_jobs/jars/mirror-check.jar"):
        assert module in names, f"{module} is not in {wheel.name}"

    started = time.monotonic()
    _run([sys.executable, "-m", "venv", str(packaged.venv)], base, packaged.env)
    # The pip of the test's own venv first: the one a venv bundles (23.2) took 4-6 times as long for the
    # same install on this machine. No .pyc compiled at install: Airflow and pyspark are thousands of files.
    quiet = ("-q", "--disable-pip-version-check")
    packaged.python("-m", "pip", "install", *quiet, f"pip=={version('pip')}")
    # The repo's full pin set as constraints: the versions the tests run with.
    packaged.python("-m", "pip", "install", *quiet, "--prefer-binary", "--no-compile", "-c", ROOT / "constraints.txt",
                    f"{wheel}[airflow,spark]", timeout=1200)
    print(f"\nfresh venv with the wheel and its dependencies: {time.monotonic() - started:.1f} s", flush=True)


def test_the_wheel_installed_elsewhere_imports_from_its_venv_and_runs_the_spark_jobs_as_modules(packaged):
    where = json.loads(packaged.python("-c", "import json, mirror_worker, spark_jobs, mirror_airflow; print(json.dumps("
                                       "[m.__file__ for m in (mirror_worker, spark_jobs, mirror_airflow)]))").stdout)
    site = str(packaged.venv)
    assert all(path.startswith(site) for path in where), where
    for job, usage in (("spark_jobs.catchup", "--from-timestamp"), ("spark_jobs.consistency_check", "--report"),
                       ("spark_jobs.check", "--report")):
        assert usage in packaged.python("-m", job, "--help").stdout
    # The check's JVM digest reader ships in the package and is listed with the connector jars.
    packaged.python("-c", "from spark_jobs.common.session import CHECK_JAR; assert CHECK_JAR.is_file(), CHECK_JAR")
    assert "sync-schemas" in packaged.run(packaged.bin / "kafka-mirror-sync-schemas", "--help").stdout
    # The jobs' console scripts (pyproject.toml: spark_jobs.catchup.job:main, spark_jobs.check.job:main).
    for script, usage in (("kafka-mirror-catchup", "--from-timestamp"), ("kafka-mirror-consistency-check", "--report")):
        assert usage in packaged.run(packaged.bin / script, "--help").stdout


def test_the_installed_worker_mirrors_records_on_the_stack(packaged, stack, topic_name, tmp_path):
    topic = topic_name("pkg")
    create_topic(stack["source"].kafka.bootstrap_servers, topic, partitions=2)
    produce(stack["source"].kafka.bootstrap_servers, topic,
            [{"key": f"k{i}".encode(), "value": f"v{i}".encode(), "partition": i % 2} for i in range(40)])
    spec = write_mirror_spec(tmp_path / "mirrors.yaml", stack, "pkg", topic, prefix="pkg.")
    out, err = tmp_path / "worker.out", tmp_path / "worker.err"
    with open(out, "wb") as stdout, open(err, "wb") as stderr:
        worker = subprocess.Popen([str(packaged.bin / "kafka-mirror"), "--config", str(spec), "--mirror", "pkg"],
                                  cwd=packaged.cwd, env=packaged.env, stdout=stdout, stderr=stderr,
                                  stdin=subprocess.DEVNULL)
    try:
        copied = wait_for_count(stack["destination"].kafka.bootstrap_servers, f"pkg.{topic}", 40)
        assert sorted(m.value() for m in copied) == sorted(f"v{i}".encode() for i in range(40))
    finally:
        worker.terminate()
        code = worker.wait(60)
    assert code == 0, err.read_text()[-3000:]


def test_airflow_in_that_venv_lists_the_provider_and_builds_a_specs_dags(packaged, stack, tmp_path):
    providers = json.loads(packaged.run(packaged.bin / "airflow", "providers", "list", "-o", "json").stdout)
    assert "kafka-mirror" in {p["package_name"] for p in providers}, providers
    spec = write_mirror_spec(tmp_path / "mirrors.yaml", stack, "pkgdags", "orders", prefix="pkg.")
    dags = tmp_path / "dags"
    dags.mkdir()
    packaged.python("-m", "mirror_airflow.dag_factory", "render", "--spec", spec, "--out", dags)
    assert [p.name for p in dags.iterdir()] == ["mirror__pkgdags.py"]
    built = packaged.python("-c", "import json, sys; from mirror_airflow.dag_factory import mirror_dags; "
                                  "print(json.dumps(sorted(mirror_dags('pkgdags', sys.argv[1]))))", spec)
    assert json.loads(built.stdout.strip().splitlines()[-1]) == [
        "mirror__pkgdags", "mirror__pkgdags__catchup", "mirror__pkgdags__lag", "mirror__pkgdags__verify"]


# The operators' spark-submit command lines as the installed provider builds them (no submission).
SUBMIT_COMMANDS = """
import json, shutil, sys
from mirror_airflow.operators.spark import CatchupOperator, ConsistencyCheckOperator
commands = {}
for kind, operator in (("check", ConsistencyCheckOperator), ("catchup", CatchupOperator)):
    op = operator(task_id=kind, spec_path=sys.argv[1], mirror_name="m", report_dir=sys.argv[2])
    op.prepare({"params": {}})
    commands[kind] = op._get_hook()._build_spark_submit_command(op.application)
    shutil.rmtree(op.shipped_dir)
print(json.dumps(commands))
"""


def test_the_installed_jobs_run_on_a_cluster_and_the_operators_submit_the_connector(packaged, stack, spark_cluster,
                                                                                    topic_name, tmp_path):
    """Issue 44 item 1: the driver in the wheel's venv, the executors on the cluster's Python (third-party packages,
    nothing of the project: docs/operations/scaling.md). The catch-up copies; the check, which exited 3 before
    ("spark-sql-kafka connector jar missing in …/site-packages/.cache/spark/jars: run `make setup`"), gets the
    connector from Spark's Ivy at pyspark's version and finds every record; the operators built in that venv put
    the same on spark-submit's command line (the catch-up, reading with librdkafka, gets none). The run's cluster
    (`spark_cluster`) sees the jobs' fixed names again from other tests: each run is found by the id it records."""
    import pyspark

    src, dst = stack["source"].kafka.bootstrap_servers, stack["destination"].kafka.bootstrap_servers
    topic, records = topic_name("pkgspark"), 2_000
    create_topic(src, topic, partitions=2)
    produce(src, topic, [{"key": f"k{i}".encode(), "value": f"v{i}".encode(), "partition": i % 2}
                         for i in range(records)])
    env = {**{k: v for k, v in packaged.env.items() if k not in ("SPARK_KAFKA_JARS", "MIRROR_CHECK_JAR")},
           "SPARK_CONF_DIR": str(spark_cluster.conf_dir), "PYSPARK_PYTHON": str(spark_cluster.python)}
    applications = {job: tmp_path / f"{job}-application.json" for job in ("catchup", "check")}
    sides = ["--master", spark_cluster.master_url, "--source.bootstrap.servers", src,
             "--destination.bootstrap.servers", dst, "--topics", topic, "--prefix", "pkgspark."]

    catchup = _run([packaged.bin / "python", "-m", "spark_jobs.catchup", *sides, "--group.id", f"g-{topic}",
                    "--driver-copy-limit", "0"], packaged.cwd,
                   {**env, APPLICATION_FILE_ENV: str(applications["catchup"])})
    summary = json.loads(next(line for line in catchup.stdout.splitlines() if line.startswith('{"topics"')))
    assert summary["records"] == records, summary
    report = tmp_path / "check.json"
    _run([packaged.bin / "python", "-m", "spark_jobs.consistency_check", *sides, "--report", report],
         packaged.cwd, {**env, APPLICATION_FILE_ENV: str(applications["check"])})
    report = json.loads(report.read_text())
    assert report["status"] == "ok" and {k: v for k, v in report["totals"].items() if v} == {"checked": records}

    connector = f"org.apache.spark:spark-sql-kafka-0-10_2.13:{pyspark.__version__}"
    reader = str(packaged.venv / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
                 / "spark_jobs" / "jars" / "mirror-check.jar")
    ran = {job: spark_cluster.application(app_id=json.loads(path.read_text())["app_id"])
           for job, path in applications.items()}  # on the cluster's master, each under its job's fixed name
    assert {job: app["name"] for job, app in ran.items()} == {"catchup": "mirror-catchup", "check": "consistency_check"}
    events = spark_cluster.events(ran["check"]["id"])
    properties = dict(next(e for e in events if e["Event"] == "SparkListenerEnvironmentUpdate")["Spark Properties"])
    excluded = ",".join(e.format(scala="2.13") for e in SHIPPED_BY_SPARK)  # pyspark ships them
    assert (properties["spark.jars.packages"], properties["spark.jars.excludes"]) == (connector, excluded)
    assert properties["spark.jars"] == reader
    # The check's digest and Kafka source tasks ran on the executors, which had the resolved jars (before the
    # session added them, the executors had the reader only: NoClassDefFoundError for Kafka's Deserializer).
    executors = {e["Task Info"]["Executor ID"] for e in events if e["Event"] == "SparkListenerTaskEnd"}
    assert executors and "driver" not in executors, executors

    host, port = spark_cluster.master_url.removeprefix("spark://").split(":")
    commands = json.loads(packaged.python("-c", SUBMIT_COMMANDS, tmp_path / "none.yaml", tmp_path / "reports",
                                          env={"AIRFLOW_CONN_SPARK_DEFAULT": json.dumps(
                                              {"conn_type": "spark", "host": f"spark://{host}", "port": int(port)}),
                                               "SPARK_CONF_DIR": str(spark_cluster.conf_dir)}).stdout.splitlines()[-1])
    check = commands["check"]
    assert check[check.index("--packages") + 1] == connector
    assert check[check.index("--exclude-packages") + 1] == excluded
    assert check[check.index("--jars") + 1] == reader
    assert not {"--jars", "--packages"} & set(commands["catchup"]), commands["catchup"]
