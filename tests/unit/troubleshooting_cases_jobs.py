"""The Spark jobs' lines (`python -m spark_jobs.catchup`, `python -m spark_jobs.consistency_check`) and the input that
makes each job print it, for test_troubleshooting.py."""

from __future__ import annotations

import sys
from types import SimpleNamespace
from unittest import mock

from tests.unit.troubleshooting_cases import (
    CATCHUP,
    CATCHUP_FLAGS,
    CHECK,
    CHECK_FLAGS,
    EXPLICIT,
    SOURCE,
    SPEC,
    case,
    with_source_kafka,
)


def connector_missing() -> int:
    """The catch-up's Spark session asks for Kafka's connector where SPARK_KAFKA_JARS points, an empty folder: the
    job's last line, as its main prints a failure."""
    import sys

    from spark_jobs.catchup.job import failure_line
    from spark_jobs.common.connector import (
        JARS_VARIABLE,
        KafkaConnectorMissing,
        kafka_connector,
    )

    try:
        kafka_connector({}, {JARS_VARIABLE: "."})
    except KafkaConnectorMissing as exc:
        print(f"catchup: failed: {failure_line(exc)}", file=sys.stderr)
        return 1
    return 0


def catchup_job(failing) -> int:
    """`failing()` raises what the catch-up's main reports: its line and exit code as the main gives them."""
    from spark_jobs.catchup.job import failure_line
    from spark_jobs.common.job_config import JobInputError

    try:
        failing()
    except JobInputError as exc:
        print(f"catchup: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # noqa: BLE001 - as the main: a runtime failure
        print(f"catchup: failed: {failure_line(exc)}", file=sys.stderr)
        return 1
    return 0


def check_job(failing) -> int:
    """`failing()` raises what the check's main reports as a failed check (exit 3)."""
    from spark_jobs.check.job import PROG

    try:
        failing()
    except Exception as exc:  # noqa: BLE001 - as the main: ReadFailed, JvmReaderMissing, Spark's and the OS's
        print(f"{PROG}: check failed: {' '.join(str(exc).split())[:300]}", file=sys.stderr)
        return 3
    return 0


def mirror_group_busy() -> int:
    """The mirror's workers still hold its group on the source when the catch-up starts."""
    from spark_jobs.catchup.job import check_group_idle
    from tests.unit.fakes import FakeAdmin

    return catchup_job(lambda: check_group_idle(SimpleNamespace(group_id="kafka-mirror.orders"), SimpleNamespace(
        admin=FakeAdmin(group_members={"kafka-mirror.orders": 2}))))


def mirror_failed_over() -> int:
    """The destination holds the failover's mark topic of the mirror's group."""
    from spark_jobs.catchup.job import check_not_failed_over

    marked = SimpleNamespace(list_topics=lambda topic, timeout: SimpleNamespace(
        topics={topic: SimpleNamespace(error=None)}))
    target = SimpleNamespace(group_id="kafka-mirror.orders", connection=lambda side: {})
    with mock.patch("mirror_worker.batch_api.admin_client", lambda *args, **kwargs: marked):
        return catchup_job(lambda: check_not_failed_over(target))


def speculative_session() -> int:
    from spark_jobs.catchup.driver import refuse_speculation

    session = SimpleNamespace(sparkContext=SimpleNamespace(getConf=lambda: {"spark.speculation": "true"}),
                              stop=lambda: None)
    return catchup_job(lambda: refuse_speculation(session))


def no_spark_for_connector() -> int:
    """Neither SPARK_HOME's jars nor pyspark's, nor the checkout's, nor SPARK_KAFKA_JARS: no connector to ask for."""
    from pathlib import Path

    from spark_jobs.common.connector import kafka_connector

    return catchup_job(lambda: kafka_connector({}, {"SPARK_HOME": "no-spark"}, checkout_jars=Path("no-jars")))


def copy_fails(what: str) -> int:
    """One catch-up task copies orders[2] 10..20 over the fakes of tests/unit/spark_jobs/catchup/test_copy_range.py,
    failing at `what`: its CopyFailed, as the driver reports a task's."""
    from confluent_kafka import KafkaError

    from mirror_worker.policy.provenance import PROVENANCE_HEADER, provenance_value
    from mirror_worker.schemas import wire_format
    from spark_jobs.catchup.copy_range import CopySettings, CopyTask, copy_range
    from tests.unit.fakes import FakeError, FakeMessage, UnreadableHeadersMessage
    from tests.unit.spark_jobs.catchup.test_copy_range import FakeSchemas, RangeConsumer, RecordingProducer

    task, settings, errors, clock = CopyTask("orders", 2, 10, 20, "orders", 2), CopySettings({}, {}), [], None
    framed = [FakeMessage("orders", 2, 10, value=wire_format.header(9) + b"x")]
    log = {
        "stall": [], "consume": [FakeMessage("orders", 2, 10, error=FakeError(KafkaError._AUTO_OFFSET_RESET,
                                                                             "Broker: Offset out of range"))],
        "headers": [UnreadableHeadersMessage("orders", 2, 10)],
        "cycle": [FakeMessage("orders", 2, 10, headers=[(PROVENANCE_HEADER, provenance_value(
            "back", "dst-cluster", "orders", 0, 3))])],
        "delivery": [FakeMessage("orders", 2, o) for o in range(10, 20)], "unmapped": framed, "unknown": framed,
    }[what]
    if what == "stall":
        now = [0.0]
        settings = CopySettings({}, {}, stall_timeout_s=60)
        clock = lambda: now.__setitem__(0, now[0] + 30) or now[0]  # noqa: E731
    if what == "cycle":
        settings = CopySettings({}, {}, destination_cluster_id="dst-cluster")
    if what == "delivery":
        errors = ["Broker: Message size too large"]
    if what in ("unmapped", "unknown"):
        task = CopyTask("orders", 2, 10, 20, "orders", 2, frame_values=True)
        settings = CopySettings({}, {}, id_headers={wire_format.header(7): wire_format.header(8)},
                                schemas=FakeSchemas({}) if what == "unknown" else None)
    return catchup_job(lambda: copy_range(task, settings, RangeConsumer(log), RecordingProducer(), errors,
                                          emit=lambda _event: None, **({"clock": clock} if clock else {})))


def read_fails(what: str) -> int:
    """The check's digest pass reads orders[2] 10..20 with librdkafka: it stalls, or the consumer fails."""
    from confluent_kafka import KafkaError

    from spark_jobs.check.rdkafka import read_range
    from tests.unit.fakes import FakeError, FakeMessage
    from tests.unit.spark_jobs.catchup.test_copy_range import RangeConsumer

    now = [0.0]
    log = [] if what == "stall" else [FakeMessage("orders", 2, 10, error=FakeError(
        KafkaError._AUTO_OFFSET_RESET, "Broker: Offset out of range"))]
    return check_job(lambda: list(read_range(RangeConsumer(log), "orders", 2, 10, 20, stall_timeout_s=60,
                                             clock=lambda: now.__setitem__(0, now[0] + 30) or now[0])))


def hash_seeds_differ() -> int:
    """The digest pass's tasks report two hash probes: their Python workers hash with different seeds."""
    from spark_jobs.check.rdkafka_spark import window_rows

    rows = [("task", 1, ("t", 0.1)), ("task", 2, ("t", 0.1))]
    context = SimpleNamespace(setJobDescription=print, parallelize=lambda tasks, n: SimpleNamespace(
        mapPartitions=lambda f: SimpleNamespace(collect=lambda: rows)))
    return check_job(lambda: window_rows(SimpleNamespace(sparkContext=context), ["a", "b"], SimpleNamespace()))


def jvm_reader_missing() -> int:
    """The check's JVM digest pass on a Spark whose classpath lacks the project's jar (py4j: a JavaPackage)."""
    from spark_jobs.check.jvm import windows_on_jvm

    spark = SimpleNamespace(_jvm=SimpleNamespace(mirror=SimpleNamespace(check=SimpleNamespace(DigestTasks=None))))
    return check_job(lambda: windows_on_jvm(spark, None, 1, {}))



def spark_not_started() -> int:
    """The check's Spark session does not start: Spark's JVM exits before it answers (no Java for it)."""
    from pyspark.errors import PySparkRuntimeError

    def start():
        raise PySparkRuntimeError(errorClass="JAVA_GATEWAY_EXITED", messageParameters={})
    return check_job(start)


def running_session_unprotected() -> int:
    """The catch-up of a mirror with credentials asks for a session on spark://10.0.0.1:7077 (the cluster's shared
    secret given): getOrCreate hands back one already running in the process, without the RPC protection the job
    set."""
    from spark_jobs.common.session import create_session

    running = SimpleNamespace(stop=lambda: None, sparkContext=SimpleNamespace(
        master="spark://10.0.0.1:7077", getConf=lambda: SimpleNamespace(getAll=lambda: [])))
    builder = SimpleNamespace(getOrCreate=lambda: running)
    builder.appName = builder.master = builder.config = lambda *args: builder
    with mock.patch("pyspark.sql.SparkSession.builder", builder):
        return catchup_job(lambda: create_session("mirror-catchup", "spark://10.0.0.1:7077", kafka_source=False,
                                                  extra_conf={"spark.authenticate.secret": "s"},
                                                  secrets=["source sasl.password"]))

CASES = {
    # the Spark jobs: both
    "catchup: --source.bootstrap.servers is required (or --config mirrors.yaml --mirror NAME)": case(
        CATCHUP, "--topics", "a"),
    "catchup: --config cannot be combined with --source/--destination.bootstrap.servers": case(
        CATCHUP, *CATCHUP_FLAGS, *EXPLICIT),
    "catchup: mirror … has several sources; Spark jobs take one": case(
        CATCHUP, *CATCHUP_FLAGS, spec_yaml=SPEC.replace(
            f"    {SOURCE}\n", f"    sources: [{SOURCE[8:]}, {SOURCE[8:].replace('east', 'west')}]\n")),
    "consistency_check: the following arguments are required: …": case(CHECK, "--topics", "a"),
    "catchup: … cluster unreachable at … within …s: …": case(CATCHUP, *EXPLICIT, "--no-commit", cluster=None),
    "catchup: unknown topic … on the … cluster": case(CATCHUP, *EXPLICIT, "--no-commit", cluster={"b": 1}),
    "catchup: the mirror selects no topic on the source cluster": case(CATCHUP, *CATCHUP_FLAGS, "--no-commit",
                                                                       cluster={"b": 1}),
    "catchup: refused: the mirror's credentials (…) would reach … over unauthenticated, unencrypted RPC: …": case(
        CATCHUP, *CATCHUP_FLAGS, "--master", "spark://10.0.0.1:7077", spec_yaml=with_source_kafka(
            "security.protocol: SASL_SSL, sasl.mechanism: PLAIN, sasl.username: u, sasl.password: p")),
    # the catch-up
    "catchup: --group.id is required (the mirror's consumer group), or --no-commit": case(CATCHUP, *EXPLICIT),
    "catchup: --from-offsets and --from-timestamp cannot be combined": case(
        CATCHUP, *EXPLICIT, "--no-commit", "--from-offsets", "a:0:1", "--from-timestamp", "1"),
    "catchup: bad timestamp …: use epoch milliseconds or ISO-8601": case(
        CATCHUP, *EXPLICIT, "--no-commit", "--from-timestamp", "yesterday"),
    "catchup: bad --from-offsets entry …: expected topic:partition:offset": case(
        CATCHUP, *EXPLICIT, "--no-commit", "--from-offsets", "a:0"),
    "catchup: --from-offsets is empty": case(CATCHUP, *EXPLICIT, "--no-commit", "--from-offsets", ","),
    "catchup: --from-offsets names topic …, which the job does not copy": case(
        CATCHUP, *EXPLICIT, "--no-commit", "--from-offsets", "b:0:1", cluster={"a": 1, "b": 1}),
    "catchup: --from-offsets: … has no partition …": case(
        CATCHUP, *EXPLICIT, "--no-commit", "--from-offsets", "a:5:1", cluster={"a": 1}),
    # the consistency check
    "consistency_check: --report: give the JSON path; the HTML summary is written beside it": case(
        CHECK, "--config", "{dir}/spec.yaml", "--report", "{dir}/r.html"),
    "consistency_check: --report: cannot write under …": case(
        CHECK, "--config", "{dir}/spec.yaml", "--report", "{dir}/p.properties/r.json"),
    "consistency_check: --offsets: no range given (topic:partition:from-to,...)": case(
        CHECK, *CHECK_FLAGS, "--offsets", ","),
    "consistency_check: --report: … is a directory": case(CHECK, "--config", "{dir}/spec.yaml", "--report", "{dir}"),
    "consistency_check: --offsets cannot be combined with --from-timestamp/--to-timestamp": case(
        CHECK, *CHECK_FLAGS, "--offsets", "a:0:1-2", "--from-timestamp", "1"),
    "consistency_check: --offsets: … is not topic:partition:from-to": case(CHECK, *CHECK_FLAGS, "--offsets", "a:0"),
    "consistency_check: bad window: --offsets …: from … is not below to …": case(
        CHECK, *CHECK_FLAGS, "--offsets", "a:0:5-5"),
    "consistency_check: --offsets: …:… is given twice": case(CHECK, *CHECK_FLAGS, "--offsets", "a:0:1-2,a:0:3-4"),
    "consistency_check: bad window: --from-timestamp … is not before --to-timestamp …": case(
        CHECK, *CHECK_FLAGS, "--from-timestamp", "2000", "--to-timestamp", "1000"),
    "consistency_check: …: … is neither epoch milliseconds nor an ISO-8601 time": case(
        CHECK, *CHECK_FLAGS, "--from-timestamp", "yesterday"),
    "consistency_check: …: … is before 1970-01-01T00:00:00Z": case(
        CHECK, *CHECK_FLAGS, "--from-timestamp", "1969-12-31T00:00:00Z"),
    "catchup: failed: KafkaConnectorMissing: … connector jar missing in … (…): put its jars there, or unset … to let "
    "Spark resolve it (spark.jars.packages)": case(connector_missing, exit_code=1),
    "catchup: mirror group … has … active member(s): stop the mirror's workers before a catch-up": case(
        mirror_group_busy),
    "catchup: mirror group … was failed over (topic … on the destination): … refused; delete that topic to mirror "
    "from the source again": case(mirror_failed_over),
    "catchup: spark.speculation is true in the catch-up's Spark session: a speculative task would copy its range a "
    "second time; set spark.speculation=false for the catch-up": case(speculative_session),
    "catchup: failed: KafkaConnectorMissing: … connector: no Spark found (SPARK_HOME or pyspark) to resolve it for, "
    "and none given: set …": case(no_spark_for_connector, exit_code=1),
    "catchup: failed: CopyFailed: …[…]: nothing read for …s at offset …, range end …": case(
        copy_fails, "stall", exit_code=1),
    "catchup: failed: CopyFailed: …[…] consume error at offset …: …": case(copy_fails, "consume", exit_code=1),
    "catchup: failed: CopyFailed: …[…] offset …: header name … is not UTF-8: the Kafka client cannot read it, so it "
    "cannot be copied": case(copy_fails, "headers", exit_code=1),
    "catchup: failed: CopyFailed: …[…] offset …: cycle: the record came from the destination cluster (…)": case(
        copy_fails, "cycle", exit_code=1),
    "catchup: failed: CopyFailed: …[…] delivery failed: …; not committed": case(copy_fails, "delivery", exit_code=1),
    "catchup: failed: CopyFailed: …[…] offset …: schema id … is not in the destination registry's map and the job "
    "has no registries to map it": case(copy_fails, "unmapped", exit_code=1),
    "catchup: failed: CopyFailed: …[…] offset …: schema id … is in no subject of the … registry; not committed": case(
        copy_fails, "unknown", exit_code=1),
    "consistency_check: check failed: …[…]: nothing read for …s at offset …, range end …": case(
        read_fails, "stall", exit_code=3),
    "consistency_check: check failed: …[…] consume error at offset …: …": case(read_fails, "consume", exit_code=3),
    "consistency_check: check failed: the Python workers hash differently (PYTHONHASHSEED differs between "
    "executors): set spark.executorEnv.PYTHONHASHSEED": case(hash_seeds_differ, exit_code=3),
    "consistency_check: check failed: the digest pass's JVM reader is not on Spark's classpath: …": case(
        jvm_reader_missing, exit_code=3),
    "consistency_check: --offsets: topic … is not among the checked topics": case(
        CHECK, *CHECK_FLAGS, "--offsets", "payments:0:0-5", cluster={"orders": 1}),
    "consistency_check: --offsets: topic … has … partitions on the source cluster; … is not one": case(
        CHECK, *CHECK_FLAGS, "--offsets", "orders:3:0-5", cluster={"orders": 1}),
    "consistency_check: check failed: …": case(spark_not_started, exit_code=3),
    "catchup: refused: the mirror's credentials would reach … unprotected: … missing from the running session": case(
        running_session_unprotected),
}
