"""The project as one installable distribution (pyproject.toml): its wheel, installed with its dependencies
(the repo's pins as constraints) into a fresh virtual environment outside the repository, works from a
folder that is not the repo and without PYTHONPATH: the worker mirrors records on the stack, both Spark jobs
run as modules, and Airflow loads the provider and builds a spec's DAGs.

The venv is built once per session (`packaged` fixture; about a minute on this machine). Its cost is pip's:
the wheels come from pip's cache (warmed by `make setup`, which installs the same pins), else from PyPI.
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
    """The wheel installed in a fresh venv; `env` has no PYTHONPATH and `cwd` is outside the repository."""

    def __init__(self, base: Path) -> None:
        self.cwd = base / "elsewhere"
        self.cwd.mkdir()
        self.venv = base / "venv"
        self.bin = self.venv / "bin"
        self.env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
        self.env.update({"PATH": os.pathsep.join([str(self.bin), os.environ.get("PATH", "")]),
                         "AIRFLOW_HOME": str(base / "airflow"), "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
                         "AIRFLOW__CORE__DAGS_FOLDER": str(base / "dags")})
        self.install_seconds = 0.0

    def run(self, *argv, timeout: float = 600) -> subprocess.CompletedProcess:
        return _run(list(argv), self.cwd, self.env, timeout)

    def python(self, *argv, timeout: float = 600) -> subprocess.CompletedProcess:
        return self.run(self.bin / "python", *argv, timeout=timeout)


@pytest.fixture(scope="session")
def packaged(tmp_path_factory) -> Packaged:
    base = tmp_path_factory.mktemp("package")
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

    packaged = Packaged(base)
    started = time.monotonic()
    _run([sys.executable, "-m", "venv", str(packaged.venv)], base, packaged.env)
    # The pip of the test's own venv first: the one a venv bundles (23.2) took 4-6 times as long for the
    # same install on this machine. No .pyc compiled at install: Airflow and pyspark are thousands of files.
    quiet = ("-q", "--disable-pip-version-check")
    packaged.python("-m", "pip", "install", *quiet, f"pip=={version('pip')}")
    # The repo's full pin set as constraints: the versions the tests run with.
    packaged.python("-m", "pip", "install", *quiet, "--prefer-binary", "--no-compile", "-c", ROOT / "constraints.txt",
                    f"{wheel}[airflow,spark]", timeout=1200)
    packaged.install_seconds = round(time.monotonic() - started, 1)
    print(f"\nfresh venv with the wheel and its dependencies: {packaged.install_seconds} s", flush=True)
    return packaged


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
