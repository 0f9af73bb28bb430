"""The consistency check's compacted mode (`--mode compacted`): the latest value of each key, not every record.

A compacted topic keeps, in time, only the latest record of each key, and the source and the destination
compact on their own schedules: older versions are gone on one side and still there on the other, so
the record-by-record check counts them missing. In this mode, for every key with a record in the window,
the latest record of that key in the window is compared with the latest copy of that key on the
destination (the whole destination topic, read_committed):

- per source partition when partitions are preserved (latest: the highest offset; the copy is looked for
  in the destination partition of the same number); otherwise per topic (latest: the highest timestamp,
  then partition and offset), the key counted in the partition of its latest record;
- the same copy means the same normalised key, value and headers as in record mode (schema ids and the
  provenance header left out), and, with registries in the spec, ids naming the same schemas (a copy whose body
  is the same and whose ids name other schemas: wrong_schema, spark_jobs/check/schemas.py);
- a key whose latest record is a tombstone (null value) is consistent when the destination has no copy of
  the key (compaction removes tombstones after delete.retention.ms) or its latest copy is a tombstone.

Per source partition: source_count = keys, destination_count = keys with a copy, missing = keys without
a copy, altered = keys whose latest copy differs, wrong_schema = keys whose latest copy has the body but
not the schema, beyond_committed = keys whose latest record is at or
after the mirror group's committed offset and not yet copied as it is now (neither missing nor altered:
the mirror has not got there). duplicated and out_of_order are 0: compaction keeps neither meaningful.
Examples name the latest source record of each offending key (`topic:partition:offset`).
"""

from __future__ import annotations

from itertools import chain

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from spark_jobs.check.records import MAX_EXAMPLES, fingerprint
from spark_jobs.check.schemas import SchemaCheck, with_schema_meaning

COMPACTED_KINDS = ("missing", "altered", "wrong_schema")


def latest_per_key(fingerprints: DataFrame, preserve_partitions: bool) -> DataFrame:
    """One row per key (topic, [partition,] key_d) with its latest record as `latest` (a struct)."""
    group = ["topic", "partition", "key_d"] if preserve_partitions else ["topic", "key_d"]
    order = F.col("offset") if preserve_partitions else F.struct("timestamp", "partition", "offset")
    return fingerprints.groupBy(*group).agg(
        F.max_by(F.struct("partition", "offset", "content_d", "schema_d", "tombstone"), order).alias("latest"))


def key_outcomes(source_df: DataFrame, destination_df: DataFrame, topic_map: dict[str, str],
                 preserve_partitions: bool, committed: dict[tuple[str, int], int | None],
                 schemas: SchemaCheck | None = None, registry_factory=None) -> DataFrame:
    """One row per source key: topic, partition, offset (of its latest record), copied, missing, altered,
    wrong_schema, beyond_committed. `source_df`/`destination_df` are Kafka rows (the Spark Kafka source's
    columns); with `schemas`, each side is read once more for its distinct schema ids."""
    spark = source_df.sparkSession
    to_source = F.create_map(*chain.from_iterable((F.lit(d), F.lit(s)) for d, s in topic_map.items()))
    source_fp, destination_fp = with_schema_meaning(
        fingerprint(source_df, tombstone=True), fingerprint(destination_df, tombstone=True), schemas, topic_map,
        registry_factory)
    source = latest_per_key(source_fp, preserve_partitions)
    destination = latest_per_key(
        destination_fp.withColumn("topic", F.try_element_at(to_source, F.col("topic")))
        .filter(F.col("topic").isNotNull()), preserve_partitions)
    on = ["topic", "partition", "key_d"] if preserve_partitions else ["topic", "key_d"]
    s, d = source.alias("s"), destination.alias("d")
    joined = s.join(d, [F.col(f"s.{c}").eqNullSafe(F.col(f"d.{c}")) for c in on], "left").select(
        F.col("s.topic").alias("topic"), F.col("s.latest.partition").alias("partition"),
        F.col("s.latest.offset").alias("offset"), F.col("s.latest.content_d").alias("content"),
        F.col("s.latest.schema_d").alias("schema"),
        F.col("s.latest.tombstone").alias("tombstone"), F.col("d.latest").alias("copy"))
    committed_df = spark.createDataFrame(
        [(t, p, c) for (t, p), c in committed.items() if c is not None], "topic STRING, partition INT, committed BIGINT")
    copied = F.col("copy").isNotNull()
    same_body = copied & (F.col("copy.content_d") == F.col("content"))
    same_schema = F.col("copy.schema_d").eqNullSafe(F.col("schema"))       # both null: schemas not checked
    deleted = F.col("tombstone") & (~copied | F.coalesce(F.col("copy.tombstone"), F.lit(False)))
    ok = (same_body & same_schema) | deleted
    beyond = F.coalesce(F.col("committed").isNotNull() & (F.col("offset") >= F.col("committed")), F.lit(False))
    return joined.join(F.broadcast(committed_df), ["topic", "partition"], "left").select(
        "topic", "partition", "offset", copied.alias("copied"),
        (~ok & ~copied & ~beyond).alias("missing"), (~ok & copied & ~same_body & ~beyond).alias("altered"),
        (~ok & same_body & ~beyond).alias("wrong_schema"),
        (~ok & beyond).alias("beyond_committed"))


def summarise_keys(outcomes: DataFrame) -> dict[tuple[str, int], dict]:
    """Per source partition, the report's PARTITION_FIELDS for keys."""
    count_of = lambda flag: F.sum(F.col(flag).cast("long")).alias(flag)  # noqa: E731
    rows = outcomes.groupBy("topic", "partition").agg(
        F.count(F.lit(1)).alias("source_count"), count_of("copied").alias("destination_count"),
        count_of("missing"), count_of("altered"), count_of("wrong_schema"), count_of("beyond_committed")).collect()
    return {(r.topic, r.partition): {**r.asDict(), "duplicated": 0, "out_of_order": 0} for r in rows}


def key_examples(outcomes: DataFrame, limit: int = MAX_EXAMPLES) -> dict[str, list[str]]:
    """At most `limit` offending keys per kind, by the coordinates of their latest source record."""
    out = {}
    for kind in COMPACTED_KINDS:
        rows = (outcomes.filter(F.col(kind)).orderBy("topic", "partition", "offset").limit(limit)
                .select("topic", "partition", "offset").collect())
        out[kind] = [f"{r.topic}:{r.partition}:{r.offset}" for r in rows]
    return out


def compare_latest(source_df: DataFrame, destination_df: DataFrame, topic_map: dict[str, str],
                   preserve_partitions: bool, committed: dict[tuple[str, int], int | None],
                   schemas: SchemaCheck | None = None, registry_factory=None):
    """(per source partition counts, examples) of the compacted mode."""
    outcomes = key_outcomes(source_df, destination_df, topic_map, preserve_partitions, committed, schemas,
                            registry_factory).cache()
    try:
        rows = summarise_keys(outcomes)
        flagged = any(row[kind] for row in rows.values() for kind in COMPACTED_KINDS)
        return rows, key_examples(outcomes) if flagged else {}
    finally:
        outcomes.unpersist()
