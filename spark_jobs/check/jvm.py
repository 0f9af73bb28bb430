"""The digest pass read on the JVM, Python's side: Spark plans one task per (side, partition, offset range)
(rdkafka_spark.plan_tasks), the JVM tasks read with the Kafka Java consumer and hash the records
(java/check/src/mirror/check/DigestTasks.java), and only rows per window come back, of the shapes of
rdkafka.SOURCE_WINDOWS and DESTINATION_WINDOWS, compared on the driver (digest_rows.py).

Why: the librdkafka reader (rdkafka.py) spends about 2 CPU-microseconds of Python per record and
side, which kept the check under 200K source records per second per core on this machine; the JVM tasks
hash a record in a fraction of that. The jar is built by `make setup` (scripts/setup.sh) into the package
(spark_jobs/jars/, shipped in its wheel), and spark_jobs.common.session.kafka_connector_jars lists it after
the connector jars, so every way the check is submitted (spark-submit --jars, the Airflow operator) ships it.
"""

from __future__ import annotations

import json
import logging

from spark_jobs.check.rdkafka import DestinationScope
from spark_jobs.check.rdkafka_spark import plan_tasks, scopes_for

log = logging.getLogger("spark_jobs.consistency_check")

JAR_HINT = "mirror-check.jar is missing from spark_jobs/jars/ and the Kafka connector jars (run `make setup`)"
STALL_TIMEOUT_S = 120
# The tasks' consumers: assigned, never committing, failing rather than resetting when a range start has
# gone (retention). Fetch sizes and the job's own client settings (TLS, SASL) come on top.
READ_SETTINGS = {"enable.auto.commit": "false", "auto.offset.reset": "none", "max.poll.records": "20000",
                 "client.id": "mirror-consistency-check"}


class JvmReaderMissing(RuntimeError):
    """The digest reader's classes are not on the Spark session's classpath."""


def java_consumer_settings(spark_options: dict[str, str]) -> dict[str, str]:
    """A task's Java consumer settings from `kafka.`-prefixed Spark options: the ones the Spark reader of the
    same pass gets (fetch sizes, then JobTarget.spark_options: bootstrap, Java security settings, isolation)."""
    return {**READ_SETTINGS, **{k.removeprefix("kafka."): v for k, v in spark_options.items() if k.startswith("kafka.")}}


def scope_json(scope: DestinationScope) -> dict:
    """A destination topic's scope (rdkafka_spark.scopes_for) as DigestTasks.destination reads it."""
    return {"t": scope.t, "source_topic": scope.rule.source_topic, "cluster_id": scope.rule.source_cluster_id,
            "ranges": [[p, start, end] for p, (start, end) in sorted(scope.ranges.items())]}


def settings_json(plan, fetch: dict[str, str]) -> str:
    """What every task shares, as DigestTasks reads it; `fetch`: `kafka.`-prefixed fetch sizes."""
    target = plan.target
    scopes = scopes_for(plan.topics, plan.topic_map, plan.source_cluster_id, plan.source_ranges, plan.digest_window)
    return json.dumps({
        "consumers": {side: java_consumer_settings({**fetch, **target.spark_options(side)})
                      for side in ("source", "destination")},
        "topics": list(plan.topics), "window": plan.digest_window, "stall_timeout_s": STALL_TIMEOUT_S,
        "committed": {f"{t}:{p}": c for (t, p), c in plan.committed.items()},
        "scopes": {topic: scope_json(scope) for topic, scope in scopes.items()}})


def windows_on_jvm(spark, plan, records_per_task: int, fetch: dict[str, str]) -> tuple[list[tuple], list[tuple]]:
    """(source rows, destination rows) per window of a plan.CheckPlan, read and hashed on the JVM, the
    consumers fetching as `fetch` says (the `kafka.`-prefixed options the pass gives Spark's reader)."""
    from py4j.java_gateway import JavaClass

    entry = spark._jvm.mirror.check.DigestTasks
    if not isinstance(entry, JavaClass):          # py4j answers a JavaPackage for a class it cannot find
        raise JvmReaderMissing(f"the digest pass's JVM reader is not on Spark's classpath: {JAR_HINT}")
    tasks = plan_tasks(plan.source_ranges, plan.destination_ranges, plan.digest_window, records_per_task)
    if not tasks:
        return [], []
    spark.sparkContext.setJobDescription(f"digest pass: {len(tasks)} ranges read on the JVM")
    out = json.loads(entry.run(spark._jsc, json.dumps([[t.side, t.topic, t.partition, t.start, t.end] for t in tasks]),
                               settings_json(plan, fetch)))
    log.info("digest pass read on the JVM", extra={
        "tasks": len(tasks), "offsets": sum(t.end - t.start for t in tasks),
        "task_seconds": round(sum(s for s, _ in out["task"]), 2),
        "task_cpu_seconds": round(sum(c for _, c in out["task"]), 2)})
    return [tuple(r) for r in out["source"]], [tuple(r) for r in out["destination"]]
