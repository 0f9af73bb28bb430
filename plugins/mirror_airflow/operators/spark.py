"""The Spark jobs of a mirror (spark_jobs/) as SparkSubmitOperators, submitted through the Spark provider's
public interface (SparkSubmitOperator.execute -> SparkSubmitHook.submit).

The application is mirror_airflow/spark_launcher.py, which runs the job's module (spark_jobs.catchup,
spark_jobs.consistency_check) and writes its exit code to an outcome file; the operator reads that file to tell
the job's outcomes apart:

| code | consistency check | catch-up |
|---|---|---|
| 0 | consistent, or nothing to check (no source record in the window: the task is skipped) | copied, offsets committed |
| 1 | inconsistent (the report says how) | failed (nothing committed past what was delivered) |
| 2 | bad input | bad input |
| 3 | could not complete | halted on data loss |

With a driver that does not run on the Airflow worker (cluster deploy mode) there is no outcome file: the
task then fails or succeeds as spark-submit does, without the distinction.

The jobs' code goes with the submission: a zip of the installed mirror_worker and spark_jobs packages
(spark_jobs.api.project_zip), built when the task runs, on --py-files (spark-submit puts it on the driver's
and the executors' Python path), so a cluster that has never seen the package runs them. The check's Kafka
connector and JVM digest reader go as the job would take them itself (spark_jobs.api.kafka_connector): --jars,
or --packages for Spark's Ivy to resolve; the catch-up reads with librdkafka and gets neither.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk.exceptions import AirflowSkipException

from mirror_airflow.reports import new_report_path

LAUNCHER = Path(__file__).resolve().parents[1] / "spark_launcher.py"
NOTHING_TO_CHECK = "nothing to check"  # the check's status when it read no source record (spark_jobs/check/report.py)


def spark_env() -> dict[str, str]:
    """spark-submit and its Python workers run this interpreter. PYTHONSAFEPATH: the launcher's folder stays off
    the driver's sys.path (spark_launcher.py). MIRROR_SECRETS_DIRS, where set: the driver reads the spec and
    resolves its placeholders under the same allowlist as the worker, also where the provider hands env_vars to
    a driver of its own (YARN's appMasterEnv, Kubernetes' driverEnv) instead of spark-submit's environment."""
    from mirror_worker.api import SECRETS_DIRS_VARIABLE

    bin_dir = str(Path(sys.executable).parent)
    secrets = os.environ.get(SECRETS_DIRS_VARIABLE)
    return {
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        "PYTHONSAFEPATH": "1",
        "PATH": os.pathsep.join([bin_dir, os.environ.get("PATH", "/usr/bin:/bin")]),
        **({SECRETS_DIRS_VARIABLE: secrets} if secrets else {}),
    }


def report_summary(report_path: Path | None) -> str | None:
    """One line from a consistency report: status, the non-zero totals, the topics checked by key."""
    try:
        report = json.loads(Path(report_path).read_text())
    except (TypeError, OSError, ValueError):
        return None
    if report.get("status") == NOTHING_TO_CHECK:
        return f"{NOTHING_TO_CHECK}: the source held no record in the window (report {report_path})"
    totals = report.get("totals") or {}
    counts = ", ".join(f"{k}={v}" for k, v in totals.items() if v)
    by_key = sorted(t for t, m in (report.get("modes") or {}).items() if m.get("mode") == "compacted")
    keys = f"; latest value per key: {', '.join(by_key)}" if by_key else ""
    return f"{report.get('status', '?')}: {counts or 'nothing checked'}{keys} (report {report_path})"


def read_outcome(path: Path | None) -> int | None:
    """The job's exit code from the launcher's outcome file; None when there is none (or it is unreadable)."""
    try:
        code = json.loads(Path(path).read_text())["exit_code"]
    except (TypeError, OSError, ValueError, KeyError):
        return None
    return code if isinstance(code, int) else None


class MirrorSparkJob(SparkSubmitOperator):
    """spark-submit of one of the spark_jobs modules for a mirror of the spec, with the Kafka connector jars and
    the project's code (project_zip)."""

    job = ""  # the module, run as `python -m` would
    kafka_source = True  # the job reads with Spark's Kafka source: the connector goes with it

    def __init__(self, *, spec_path: str, mirror_name: str, conn_id: str = "spark_default",
                 report_dir: str | None = None, **kwargs) -> None:
        if not spec_path or not mirror_name:
            raise ValueError("spec_path and mirror_name are required")
        kwargs.setdefault("driver_memory", "1g")
        kwargs.setdefault("conf", {"spark.ui.showConsoleProgress": "false"})
        # The driver runs here (client mode) on this interpreter, whatever Python the cluster's spark-defaults name
        # for its executors (spark.pyspark.python, which spark-submit would give the driver too).
        kwargs["conf"] = {"spark.pyspark.driver.python": sys.executable, **kwargs["conf"]}
        super().__init__(application=str(LAUNCHER), conn_id=conn_id, env_vars=spark_env(),
                         name=f"{self.job.rpartition('.')[2]}-{mirror_name}", **kwargs)
        self.spec_path = str(spec_path)
        self.mirror_name = mirror_name
        self.report_dir = report_dir
        self.outcome_path: Path | None = None
        self.application_path: Path | None = None
        self.shipped_dir: Path | None = None

    def report_file(self, kind: str) -> Path:
        """A new `<report dir>/<mirror>/<kind>-<UTC time>.json` (its folder created) for the job to write."""
        return new_report_path(self.report_dir, self.mirror_name, kind)

    def job_args(self, context) -> list[str]:
        return ["--config", self.spec_path, "--mirror", self.mirror_name]

    def prepare(self, context) -> None:
        """Jars, code, outcome file and arguments, decided when the task runs (looked up on the worker host)."""
        from spark_jobs.api import APPLICATION_FILE_ENV, kafka_connector, project_zip

        if self.kafka_source:
            submitted = self.submitted_conf()
            connector = kafka_connector(submitted).spark_conf(submitted)
            self.jars = connector.get("spark.jars", self.jars)
            self.packages = connector.get("spark.jars.packages", self.packages)
            self.exclude_packages = connector.get("spark.jars.excludes", self.exclude_packages)
        stem = self.job.rpartition(".")[2]
        # One private directory per run (mkdtemp: 0700, a new name) holds the shipped code and the files the
        # job writes later by name (the outcome, its `.tmp`, the application): nobody else can put a file or a
        # symlink at those names for the job to follow, which a name freed in the shared temp directory allowed.
        self.shipped_dir = Path(tempfile.mkdtemp(prefix=f"{stem}-run-"))
        self.py_files = str(project_zip(self.shipped_dir / "kafka-mirror.zip"))
        self.outcome_path = self.shipped_dir / "outcome.json"  # the launcher creates it when the job ends
        self.application_path = self.shipped_dir / "application.json"
        self.env_vars = {**(self.env_vars or {}), APPLICATION_FILE_ENV: str(self.application_path)}
        # A Spark UI for a run on a cluster (linked in the task log), none on the Airflow worker itself.
        self.conf = {**(self.conf or {})}
        self.conf.setdefault("spark.ui.enabled", "false" if self._local_master() else "true")
        self.conf.update(self.protection())
        self.application_args = ["--outcome", str(self.outcome_path), self.job, *self.job_args(context)]

    def submitted_conf(self) -> dict[str, str]:
        """The conf spark-submit will run the application with: spark-defaults.conf, the operator's conf, and its
        jars, packages and excludes (spark-submit's flags, which replace the conf's)."""
        from spark_jobs.api import spark_defaults

        flags = {"spark.jars": self.jars, "spark.jars.packages": self.packages,
                 "spark.jars.excludes": self.exclude_packages}
        return {**spark_defaults(), **(self.conf or {}), **{k: v for k, v in flags.items() if v}}

    def _connection(self):
        from airflow.sdk import BaseHook

        try:
            return BaseHook.get_connection(self._conn_id)
        except Exception:  # the hook falls back to yarn
            return None

    def _local_master(self) -> bool:
        connection = self._connection()
        return connection is not None and ((connection.host or "").startswith("local") or connection.conn_type == "local")

    def master(self) -> str:
        """The master spark-submit gets, as SparkSubmitHook resolves it from the connection (yarn without one)."""
        connection = self._connection()
        if connection is None or not connection.host:
            return "local" if connection is not None and connection.conn_type == "local" else "yarn"
        return f"{connection.host}:{connection.port}" if connection.port else connection.host

    def protection(self) -> dict[str, str]:
        """What the job's Spark conf needs before the mirror's credentials go to a cluster (spark_jobs.api's
        secured_conf, which the job applies again when it starts); UnprotectedCredentials fails the task first.
        A spec that does not load here is left to the job, which refuses it as bad input."""
        from mirror_worker.api import ConfigError, select_mirror
        from spark_jobs.api import mirror_secrets, secured_conf

        try:
            secrets = mirror_secrets(select_mirror(Path(self.spec_path), self.mirror_name))
        except ConfigError:
            secrets = []
        return secured_conf(self.master(), self.submitted_conf(), secrets)

    def log_application(self) -> dict | None:
        """One line in the task log: the Spark application, its UI while it ran, its event log (history)."""
        try:
            application = json.loads(self.application_path.read_text())
        except (TypeError, OSError, ValueError):
            return None
        finally:
            if self.application_path is not None:
                self.application_path.unlink(missing_ok=True)
        self.log.info("Spark application %s on %s: UI %s, event log %s", application.get("app_id"),
                      application.get("master"), application.get("ui") or "off (spark.ui.enabled=false)",
                      application.get("event_log") or "off (spark.eventLog.enabled=false)")
        return application

    def submit(self, context) -> tuple[int | None, Exception | None]:
        """Runs the job through SparkSubmitOperator.execute; (the job's exit code or None, the submit error)."""
        self.prepare(context)
        error: Exception | None = None
        try:
            super().execute(context)
        except Exception as exc:  # spark-submit failed: the outcome file says how, when the driver ran here
            error = exc
        code = read_outcome(self.outcome_path)
        self.application = self.log_application()
        if self.outcome_path is not None:
            self.outcome_path.unlink(missing_ok=True)
        if self.shipped_dir is not None:
            shutil.rmtree(self.shipped_dir, ignore_errors=True)
        if code is None and error is None:
            code = 0
        return code, error


class ConsistencyCheckOperator(MirrorSparkJob):
    """spark_jobs.consistency_check: exit 1 (inconsistent) fails the task with the report summary."""

    job = "spark_jobs.consistency_check"

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.report_path: Path | None = None

    def prepare(self, context) -> None:
        from spark_jobs.api import THROUGHPUT_JVM_OPTIONS

        # The driver JVM reads and hashes the records (spark_jobs/check/jvm.py): spark-submit starts it with the
        # collector the job picks when it starts its own JVM. The DAG's own conf wins.
        self.conf = {"spark.driver.extraJavaOptions": THROUGHPUT_JVM_OPTIONS, **(self.conf or {})}
        super().prepare(context)

    def job_args(self, context) -> list[str]:
        self.report_path = self.report_file("check")
        return [*super().job_args(context), "--report", str(self.report_path)]

    def execute(self, context):
        code, error = self.submit(context)
        summary = report_summary(self.report_path)
        if code == 1 and summary:
            raise RuntimeError(f"mirror {self.mirror_name!r} is inconsistent: {summary}") from error
        if code != 0 or error is not None:
            what = {2: "bad input", 3: "failed while it ran"}.get(code, "failed")
            raise RuntimeError(f"mirror {self.mirror_name!r}: the consistency check did not complete "
                               f"(exit {'?' if code is None else code}, {what})"
                               f"{': ' + summary if summary else ''}") from error
        if summary and summary.startswith(NOTHING_TO_CHECK):
            # Zero records compared proves nothing: a skipped task, not a green one (and no on-call alert).
            raise AirflowSkipException(summary)
        self.log.info("consistency check: %s", summary)
        return {"report": str(self.report_path), "summary": summary}


def catchup_line(summary: dict | None) -> str | None:
    """One line from the catch-up's JSON summary: records, rates, start-up, losses, open transactions."""
    if not summary:
        return None
    startup = summary.get("spark_startup_s")
    # None: the driver copied everything while Spark was starting (spark_jobs/catchup/driver.py).
    spark = f"Spark start-up {startup} s" if startup is not None else "copied before Spark was up"
    line = (f"{summary.get('records', 0):,} records in {summary.get('seconds', 0)} s "
            f"({summary.get('msgs_per_s', 0):,} msgs/s end to end, {summary.get('copy_phase_msgs_per_s', 0):,} "
            f"msgs/s copying; {spark}), {len(summary.get('ranges') or [])} partition(s)")
    if summary.get("resent"):
        line += f"; {summary['resent']:,} records written twice (a failed task's copy, retried)"
    losses = summary.get("data_loss") or []
    if losses:
        line += "; data loss: " + "; ".join(loss.get("reason", "") for loss in losses)
    stopped = summary.get("open_transactions") or []
    if stopped:
        line += f"; {len(stopped)} partition(s) stopped at the last stable offset (a transaction is open)"
    return line


class CatchupOperator(MirrorSparkJob):
    """spark_jobs.catchup with the DAG run's params: topics, from_offsets or from_timestamp. Its JSON
    summary (records, rates, per-partition ranges, losses) goes to the task log in one line and to XCom."""

    job = "spark_jobs.catchup"
    kafka_source = False  # its tasks read with librdkafka (spark_jobs/catchup/driver.py)

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.summary_path: Path | None = None

    def job_args(self, context) -> list[str]:
        params = context.get("params") or {}
        self.summary_path = self.report_file("catchup")
        args = [*super().job_args(context), "--summary", str(self.summary_path)]
        topics = str(params.get("topics") or "").strip()
        offsets = str(params.get("from_offsets") or "").strip()
        timestamp = str(params.get("from_timestamp") or "").strip()
        if offsets and timestamp:
            raise ValueError("give from_offsets or from_timestamp, not both")
        if topics:
            args += ["--topics", topics]
        if offsets:
            args += ["--from-offsets", offsets]
        if timestamp:
            args += ["--from-timestamp", timestamp]
        limit = str(params.get("driver_copy_limit") or "").strip()
        if limit:
            args += ["--driver-copy-limit", limit]
        return args

    def execute(self, context):
        code, error = self.submit(context)
        try:
            summary = json.loads(self.summary_path.read_text()) if self.summary_path else None
        except (OSError, ValueError):
            summary = None
        line = catchup_line(summary)
        if code == 0 and error is None:
            self.log.info("catch-up: %s (summary %s)", line or "no summary written", self.summary_path)
            return {"summary_path": str(self.summary_path), **(summary or {})}
        what = {1: "failed (nothing committed past what was delivered)", 2: "refused its input",
                3: "halted on data loss"}.get(code, "did not complete")
        raise RuntimeError(f"mirror {self.mirror_name!r}: the catch-up {what} "
                           f"(exit {'?' if code is None else code}){': ' + line if line else ''}") from error
