"""The Spark jobs' lines (`python -m spark_jobs.catchup`, `python -m spark_jobs.consistency_check`) and the input that
makes each job print it, for test_troubleshooting.py."""

from __future__ import annotations

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
}
