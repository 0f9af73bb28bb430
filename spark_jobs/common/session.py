"""SparkSession construction shared by the jobs: the Kafka connector (spark_jobs/common/connector.py, for the jobs
that read with Spark's Kafka source), small local defaults."""

from __future__ import annotations

import atexit
import importlib.util
import json
import os
import shutil
import sys
import tempfile
import zipfile
from collections.abc import Iterable
from pathlib import Path

from spark_jobs.common.cluster_security import UnprotectedCredentials, secured_conf, spark_defaults, unprotected
from spark_jobs.common.connector import (  # noqa: F401 (CHECK_JAR: the package's reader, for its users)
    CHECK_JAR, KafkaConnectorMissing, entries, kafka_connector,
)

# A driver JVM that only schedules Python tasks (the catch-up: its tasks read and write with librdkafka) starts
# on about half the CPU with the client compiler only and the serial collector. Measured on 2 busy cores: 5.8
# -> 3.1 CPU seconds and 7.2 -> 4.3 s to a SparkSession. Not for jobs whose JVM does the work (Spark's Kafka
# source: the consistency check), which want the optimising compiler.
LIGHT_JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"

# A driver JVM whose tasks read and hash records (the consistency check's digest pass, spark_jobs/check/jvm.py)
# allocates a buffer per record, which the default G1 collects at a high CPU cost on few cores. Measured on 2
# busy cores, 5M records of 1 KiB: the check took 17.2 s with G1, 12.6 s with the throughput collector.
THROUGHPUT_JVM_OPTIONS = "-XX:+UseParallelGC"

APPLICATION_FILE_ENV = "MIRROR_SPARK_APPLICATION_FILE"


# What the Spark driver and executors import of the project: the jobs and the worker's library they use.
SHIPPED_PACKAGES = ("mirror_worker", "spark_jobs")


def project_zip(path: Path) -> Path:
    """The SHIPPED_PACKAGES as this interpreter imports them (installed, or editable from a checkout) zipped into
    `path` for --py-files or addPyFile: their files but compiled ones and jars (those go with --jars)."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for package in SHIPPED_PACKAGES:
            for root in importlib.util.find_spec(package).submodule_search_locations:
                for file in sorted(Path(root).rglob("*")):
                    if file.is_file() and "__pycache__" not in file.parts and file.suffix not in (".pyc", ".jar"):
                        archive.write(file, str(Path(package) / file.relative_to(root)))
    return path


def ship_project(session) -> None:
    """The executors of a cluster may have nothing of the project (their hosts never saw it): a session this
    process started against one sends the packages along (spark-submit's --py-files does it for its own)."""
    directory = Path(tempfile.mkdtemp(prefix="kafka-mirror-code-"))
    atexit.register(shutil.rmtree, directory, True)  # the driver serves the file while the application runs
    session.sparkContext.addPyFile(str(project_zip(directory / "kafka-mirror.zip")))


def create_session(app_name: str, master: str | None = None, extra_conf: dict[str, str] | None = None,
                   kafka_source: bool = True, light_jvm: bool = False, secrets: Iterable[str] = ()):
    """A SparkSession, with the Kafka connector unless `kafka_source` is False (a job whose tasks read with
    librdkafka: the catch-up); `master` defaults to local[*] unless spark-submit set one. `light_jvm`: the
    driver JVM this process launches (not spark-submit's, already running) starts with LIGHT_JVM_OPTIONS,
    unless `extra_conf` or SPARK_LAUNCHER_OPTS say otherwise. `secrets`: the credential settings its tasks will
    carry (cluster_security: protected off a local master, or UnprotectedCredentials before any task)."""
    from pyspark.sql import SparkSession

    # Python workers run the jobs' functions (confluent-kafka inside): same interpreter as the driver
    # unless the deployment says otherwise.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder
    if not launched_by_spark_submit():  # else spark-submit's --name stays (the operators name the mirror)
        builder = builder.appName(app_name)
    if master:
        builder = builder.master(master)
    elif not launched_by_spark_submit() and "spark.master" not in (extra_conf or {}):
        builder = builder.master("local[*]")
    conf = {
        "spark.sql.shuffle.partitions": "8",
        "spark.ui.showConsoleProgress": "false",
        "spark.driver.memory": "1g",
        **(extra_conf or {}),
    }
    # Under spark-submit the driver's JVM is up with its --jars and --packages already.
    connector = None
    if kafka_source and not launched_by_spark_submit():
        base = {**submitted_conf(), **conf}
        connector = kafka_connector(base)
        conf.update(connector.spark_conf(base))
    if light_jvm and not launched_by_spark_submit():
        conf.setdefault("spark.driver.extraJavaOptions", LIGHT_JVM_OPTIONS)
        os.environ.setdefault("SPARK_LAUNCHER_OPTS", LIGHT_JVM_OPTIONS)  # spark-class's launcher JVM, before it
    secrets = list(secrets)
    conf.update(protection(master, conf, secrets))
    for key, value in conf.items():
        builder = builder.config(key, value)
    try:
        session = builder.getOrCreate()
    except Exception as exc:
        # spark-submit exits before the gateway is up when Ivy cannot resolve the packages.
        if connector is not None and connector.packages and "JAVA_GATEWAY_EXITED" in str(exc):
            raise KafkaConnectorMissing(connector.unresolved()) from exc
        raise
    if connector is not None:  # its packages, or those spark-defaults name
        add_resolved_jars(session)
    running_master = session.sparkContext.master
    missing = unprotected(running_master, dict(session.sparkContext.getConf().getAll()), secrets)
    if missing:  # a session already running in this process, or a conf that turned protection off since
        session.stop()
        raise UnprotectedCredentials(f"refused: the mirror's credentials would reach {running_master} unprotected: "
                                     f"{' and '.join(missing)} missing from the running session")
    if not launched_by_spark_submit() and not session.sparkContext.master.startswith("local"):
        ship_project(session)
    record_application(session)
    return session


def add_resolved_jars(session) -> None:
    """The jars spark-submit resolved from spark.jars.packages, for the executors too. spark-submit puts them on the
    driver's classpath and in spark.jars, but pyspark's builder sets its own spark.jars (the check's reader) again
    once the JVM is up: the context listed that one only, and the check's tasks failed on a cluster's executors
    with NoClassDefFoundError for Kafka's classes. spark-submit keeps the whole list in spark.repl.local.jars."""
    context = session.sparkContext
    listed = {url.rsplit("/", 1)[-1] for url in entries(context._jsc.sc().listJars().mkString(","))}
    for jar in entries(context.getConf().get("spark.repl.local.jars", "")):
        if jar.rsplit("/", 1)[-1] not in listed:
            context._jsc.addJar(jar)


def submitted_conf() -> dict[str, str]:
    """What the application's conf holds before this process adds to it: under spark-submit, the driver JVM's
    (spark-defaults.conf and --conf); otherwise the spark-defaults.conf that pyspark's own spark-submit reads."""
    if launched_by_spark_submit():
        from pyspark import SparkConf, SparkContext

        SparkContext._ensure_initialized()  # the gateway to spark-submit's JVM, whose properties SparkConf loads
        return dict(SparkConf().getAll())
    return spark_defaults()


def protection(master: str | None, conf: dict[str, str], secrets: list[str]) -> dict[str, str]:
    """cluster_security.secured_conf for this process's application: `conf` on top of submitted_conf()."""
    base = {**submitted_conf(), **conf}
    effective_master = master or conf.get("spark.master") or (
        base.get("spark.master") if launched_by_spark_submit() else "local[*]")
    return secured_conf(effective_master, base, secrets)


def refuse_unprotected(master: str | None, secrets: list[str]) -> None:
    """UnprotectedCredentials (a JobInputError) now, before a job's first client, when its session would be."""
    protection(master, {}, list(secrets))


def record_application(spark) -> None:
    """The application's id, master, live UI and event log, written where a launcher asks (APPLICATION_FILE_ENV:
    the Airflow operators link them in the task log)."""
    path = os.environ.get(APPLICATION_FILE_ENV)
    if not path:
        return
    context = spark.sparkContext
    conf = context.getConf()
    events = conf.get("spark.eventLog.dir", "") if conf.get("spark.eventLog.enabled", "false") == "true" else ""
    Path(path).write_text(json.dumps({
        "app_id": context.applicationId, "master": context.master, "ui": context.uiWebUrl,
        "event_log": f"{events.rstrip('/')}/{context.applicationId}" if events else None}))


def launched_by_spark_submit() -> bool:
    """spark-submit starts the Python driver with a gateway port and its own --master."""
    return bool(os.environ.get("PYSPARK_GATEWAY_PORT") or os.environ.get("SPARK_MASTER"))
