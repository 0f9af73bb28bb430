"""The consistency check's exact path: source and destination records fingerprinted, destination records
mapped back to source coordinates, and one outcome per source record (see spark_jobs/check/job.py
for the rules). Pure DataFrame transformations: no I/O."""

from __future__ import annotations

from itertools import chain

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from mirror_worker.batch_api import EPOCH_ZERO_STAMP_MS, HEADER_SIZE, MAGIC_BYTE, PROVENANCE_HEADER

MAX_EXAMPLES = 20
# wrong_schema: a copy whose body is equal but whose schema id names another schema (spark_jobs/check/schemas.py).
KINDS = ("missing", "duplicated", "altered", "out_of_order", "wrong_schema")
PARTITION_FIELDS = ("source_count", "destination_count", *KINDS, "beyond_committed")


def normalise_schema_id(column: str) -> Column:
    """A key or value in schema-registry framing (magic byte 0, 4-byte schema id) without its schema id.

    Framed and unframed bytes are tagged apart, so dropping the id never makes two different values equal.
    """
    return F.expr(
        f"CASE WHEN length({column}) >= {HEADER_SIZE} AND substring({column}, 1, 1) = X'{MAGIC_BYTE:02X}' "
        f"THEN concat(X'00', substring({column}, {HEADER_SIZE + 1})) ELSE concat(X'01', {column}) END"
    )


def schema_id(column: str) -> Column:
    """The schema id (INT) of a key or value that looks framed as `normalise_schema_id` reads it; else null.
    Whether the field is framed at all is the topic's (spark_jobs/check/schemas.py)."""
    return F.expr(
        f"CASE WHEN length({column}) >= {HEADER_SIZE} AND substring({column}, 1, 1) = X'{MAGIC_BYTE:02X}' "
        f"THEN conv(hex(substring({column}, 2, 4)), 16, 10) END").cast("bigint")


def expected_timestamp(column: Column) -> Column:
    """The destination timestamp a faithful copy of a record stamped `column` carries: the worker's
    `expected_destination_timestamp` as an expression (librdkafka reads 0 as "now", so a record at the
    epoch is produced EPOCH_ZERO_STAMP_MS after it); the unit tests hold the two equal."""
    return F.when(F.unix_millis(column) == 0, F.timestamp_millis(F.lit(EPOCH_ZERO_STAMP_MS))).otherwise(column)


def normalise_headers(column: str = "headers") -> Column:
    """Headers as one canonical string, in order, without the provenance header; no headers -> ''."""
    return F.expr(
        f"coalesce(array_join(transform(filter({column}, h -> h.key != '{PROVENANCE_HEADER}'), "
        f"h -> concat(hex(encode(h.key, 'UTF-8')), ':', coalesce(hex(h.value), '-'))), ','), '')"
    )


def _digest(column: Column) -> Column:
    return F.unhex(F.sha2(column, 256))


def fingerprint(df: DataFrame, provenance: bool = False, tombstone: bool = False) -> DataFrame:
    """Kafka rows reduced to coordinates, timestamp, a digest of the normalised key (`key_d`, for
    positional mapping) and `content_d`, equal exactly when normalised key, value and headers are
    (plus `provenance`, and `tombstone`: a null value, when asked for); `key_sid`/`value_sid`, the schema
    ids of framed-looking keys and values, and `schema_d`, null until spark_jobs/check/schemas.py sets it."""
    key_d = _digest(normalise_schema_id("key"))
    value_d = _digest(normalise_schema_id("value"))
    headers_d = _digest(F.encode(normalise_headers("headers"), "UTF-8"))
    absent = F.lit(b"\xff")                          # one byte: never mistaken for a 32-byte digest
    columns = [
        "topic", "partition", "offset", "timestamp", key_d.alias("key_d"),
        F.concat(F.coalesce(key_d, absent), F.coalesce(value_d, absent), headers_d).alias("content_d"),
        schema_id("key").alias("key_sid"), schema_id("value").alias("value_sid"),
        F.lit(None).cast("string").alias("schema_d"),
    ]
    if provenance:
        columns.append(provenance_header())
    if tombstone:
        columns.append(F.col("value").isNull().alias("tombstone"))
    return df.select(*columns)


def provenance_header(column: str = "headers") -> Column:
    """The value of the last provenance header as a string (`provenance`); null without one. The worker
    adds it last: that header is read without scanning the others."""
    last = f"try_element_at({column}, -1)"
    return F.expr(
        f"CAST(CASE WHEN {last}.key = '{PROVENANCE_HEADER}' THEN {last}.value "
        f"ELSE try_element_at(filter({column}, h -> h.key = '{PROVENANCE_HEADER}'), -1).value END AS STRING)"
    ).alias("provenance")


MAPPED_COLUMNS = ("src_topic", "src_partition", "src_offset", "dest_partition", "dest_offset", "d_content",
                  "d_schema")


def with_provenance(destination_df: DataFrame, topic_map: dict[str, str],
                    source_cluster_id: str | None = None) -> DataFrame:
    """Destination rows (topic, partition, offset, timestamp, key_d, content_d, provenance) with the source
    topic they mirror and their provenance header parsed: `usable` when it parses, names the source topic
    this destination topic mirrors, and names the source cluster or no cluster."""
    to_source = F.create_map(*chain.from_iterable((F.lit(d), F.lit(s)) for d, s in topic_map.items()))
    parts = F.split(F.col("provenance"), ":")
    parsed = F.size(parts) == 5
    cluster = F.try_element_at(parts, F.lit(2))
    cluster_ok = F.lit(True) if source_cluster_id is None else (cluster == "") | (cluster == source_cluster_id)
    dest = destination_df.select(
        F.try_element_at(to_source, F.col("topic")).alias("src_topic"),
        F.col("partition").alias("dest_partition"), F.col("offset").alias("dest_offset"), "timestamp",
        F.col("key_d").alias("d_key"), F.col("content_d").alias("d_content"),
        (F.col("schema_d") if "schema_d" in destination_df.columns else F.lit(None).cast("string")).alias("d_schema"),
        F.when(parsed, F.try_element_at(parts, F.lit(3))).alias("p_topic"),
        F.when(parsed, F.try_element_at(parts, F.lit(4)).try_cast("int")).alias("p_partition"),
        F.when(parsed, F.try_element_at(parts, F.lit(5)).try_cast("bigint")).alias("p_offset"),
        cluster_ok.alias("p_cluster_ok"),
    )
    usable = F.coalesce(
        (F.col("p_topic") == F.col("src_topic")) & F.col("p_partition").isNotNull()
        & F.col("p_offset").isNotNull() & F.col("p_cluster_ok"),
        F.lit(False),
    )
    return dest.withColumn("usable", usable)


def split_by_provenance(destination_df: DataFrame, topic_map: dict[str, str],
                        source_cluster_id: str | None = None) -> tuple[DataFrame, DataFrame]:
    """(records mapped by their provenance header: MAPPED_COLUMNS, the others: for `map_by_position`);
    see `with_provenance` for when a header is used."""
    dest = with_provenance(destination_df, topic_map, source_cluster_id)
    by_provenance = dest.filter("usable").select(
        "src_topic", F.col("p_partition").alias("src_partition"), F.col("p_offset").alias("src_offset"),
        "dest_partition", "dest_offset", "d_content", "d_schema")
    rest = dest.filter(~F.col("usable")).select(
        "src_topic", "dest_partition", "dest_offset", "timestamp", "d_key", "d_content", "d_schema")
    return by_provenance, rest


def map_by_position(rest_df: DataFrame, source_df: DataFrame, preserve_partitions: bool = True) -> DataFrame:
    """Destination records without usable provenance -> source coordinates by key and timestamp (in the
    same partition when partitions are preserved); the k-th copy of a (key, timestamp) group takes the
    k-th source record of the group, cycling. Records matching no source record are dropped.

    Without preserved partitions, records of one group may come from several source partitions and reach
    the destination in any order between them, so a copy first takes a source record of the group with
    the same content (k-th copy of that content, k-th such record, cycling); only the copies left over are
    paired by position with the source records left over (altered), or, where none is left, with the
    group's records as above (copies of records already copied). Ties between partitions are then never
    counted as altered.

    A source record's timestamp is matched as its copy carries it (`expected_timestamp`: the epoch is 1 ms)."""
    group = [("src_topic", "src_topic"), ("d_key", "key_d"), ("timestamp", "timestamp")]
    source = source_df.select(F.col("topic").alias("src_topic"), "partition", "offset", "key_d",
                              expected_timestamp(F.col("timestamp")).alias("timestamp"), "content_d")
    if preserve_partitions:
        return _pair(rest_df, source, [*group, ("dest_partition", "partition")])
    by_content = [*group, ("d_content", "content_d")]
    copies_left = _anti(rest_df, source, by_content)
    sources_left = _anti(source, rest_df, [(s, d) for d, s in by_content])
    return (_pair(rest_df, source, by_content)
            .unionByName(_pair(copies_left, sources_left, group))
            .unionByName(_pair(_anti(copies_left, sources_left, group), source, group)))


def _anti(left: DataFrame, right: DataFrame, on: list[tuple[str, str]]) -> DataFrame:
    """Rows of `left` with no row of `right` agreeing on every (left column, right column) of `on`."""
    condition = [F.col(f"l.{a}").eqNullSafe(F.col(f"r.{b}")) for a, b in on]
    return left.alias("l").join(right.alias("r"), condition, "left_anti")


def _pair(copies: DataFrame, source: DataFrame, on: list[tuple[str, str]]) -> DataFrame:
    """The k-th copy (in destination order) of each group named by `on` (copy column, source column) takes
    the k-th source record of the group (in partition and offset order), cycling: MAPPED_COLUMNS."""
    s_group, d_group = [b for _, b in on], [a for a, _ in on]
    ranked_source = (source.withColumn("s_rank", F.row_number().over(
        Window.partitionBy(*s_group).orderBy("partition", "offset")))
        .withColumn("s_count", F.count(F.lit(1)).over(Window.partitionBy(*s_group))))
    ranked_copies = copies.withColumn("d_rank", F.row_number().over(
        Window.partitionBy(*d_group).orderBy("dest_partition", "dest_offset")))
    d, s = ranked_copies.alias("d"), ranked_source.alias("s")
    condition = [F.col(f"d.{a}").eqNullSafe(F.col(f"s.{b}")) for a, b in on]
    condition.append(F.col("s.s_rank") == ((F.col("d.d_rank") - 1) % F.col("s.s_count")) + 1)
    return d.join(s, condition, "inner").select(
        F.col("s.src_topic").alias("src_topic"), F.col("s.partition").alias("src_partition"),
        F.col("s.offset").alias("src_offset"), "d.dest_partition", "d.dest_offset", "d.d_content", "d.d_schema")


def map_to_source(destination_df: DataFrame, source_df: DataFrame, topic_map: dict[str, str],
                  preserve_partitions: bool = True, source_cluster_id: str | None = None) -> DataFrame:
    """Destination fingerprints (with provenance) -> MAPPED_COLUMNS: the source coordinates each record copies."""
    by_provenance, rest = split_by_provenance(destination_df, topic_map, source_cluster_id)
    return by_provenance.unionByName(map_by_position(rest, source_df, preserve_partitions)).select(*MAPPED_COLUMNS)


def record_outcomes(source_df: DataFrame, mapped_df: DataFrame,
                    committed: dict[tuple[str, int], int | None]) -> DataFrame:
    """One row per source record of the window: copies, and the missing/duplicated/altered/out-of-order/
    wrong-schema flags. wrong_schema: every copy's body is the source's but a copy's `schema_d` is not (its ids
    name other schemas); a record with a copy whose body differs is altered, and only that.

    Source records and mapped copies meet in one aggregation per source coordinate, clustered by
    source partition so that the out-of-order window needs no second shuffle.
    """
    spark = source_df.sparkSession
    committed_df = spark.createDataFrame(
        [(t, p, c) for (t, p), c in committed.items() if c is not None],
        "topic STRING, partition INT, committed BIGINT")
    no_position = F.lit(None).cast("struct<dest_partition: INT, dest_offset: BIGINT>")
    records = source_df.select("topic", "partition", "offset", F.lit(True).alias("is_source"), "content_d",
                               "schema_d", no_position.alias("position"))
    copies = mapped_df.select(
        F.col("src_topic").alias("topic"), F.col("src_partition").alias("partition"),
        F.col("src_offset").alias("offset"), F.lit(False).alias("is_source"), F.col("d_content").alias("content_d"),
        F.col("d_schema").alias("schema_d"), F.struct("dest_partition", "dest_offset").alias("position"))
    copy = ~F.col("is_source")
    per_record = (
        records.unionByName(copies)
        .repartition("topic", "partition")
        .groupBy("topic", "partition", "offset")
        .agg(
            F.max("is_source").alias("in_window"),
            F.count(F.when(copy, 1)).alias("copies"),
            F.max(F.when(F.col("is_source"), F.col("content_d"))).alias("source_content"),
            F.min(F.when(copy, F.col("content_d"))).alias("lowest_copy"),
            F.max(F.when(copy, F.col("content_d"))).alias("highest_copy"),
            F.max(F.when(F.col("is_source"), F.col("schema_d"))).alias("source_schema"),
            F.min(F.when(copy, F.col("schema_d"))).alias("lowest_schema"),
            F.max(F.when(copy, F.col("schema_d"))).alias("highest_schema"),
            F.min(F.when(copy, F.col("position"))).alias("first"),
        )
        .filter("in_window")                          # copies of records outside the window are ignored
    )
    # Every copy equals the source record exactly when the lowest and the highest copy do.
    altered = (F.col("copies") > 0) & ((F.col("lowest_copy") != F.col("source_content"))
                                       | (F.col("highest_copy") != F.col("source_content")))
    # schema_d is null on both sides when schemas are not checked (no registries): null-safe, equal then.
    wrong_schema = (F.col("copies") > 0) & ~altered & (~F.col("lowest_schema").eqNullSafe(F.col("source_schema"))
                                                      | ~F.col("highest_schema").eqNullSafe(F.col("source_schema")))
    outcomes = per_record.join(F.broadcast(committed_df), ["topic", "partition"], "left").select(
        "topic", "partition", "offset", "first", "copies",
        F.coalesce(F.col("committed").isNotNull() & (F.col("offset") >= F.col("committed")),
                   F.lit(False)).alias("beyond_committed"),
        altered.alias("altered"), wrong_schema.alias("wrong_schema"),
    )
    return with_out_of_order(outcomes).select(
        "topic", "partition", "offset", "copies", "beyond_committed",
        ((F.col("copies") == 0) & ~F.col("beyond_committed")).alias("missing"),
        F.greatest(F.col("copies") - 1, F.lit(0)).alias("duplicated"),
        "altered", "out_of_order", "wrong_schema",
    )


def with_out_of_order(outcomes: DataFrame) -> DataFrame:
    """Adds `out_of_order`: the record's first copy comes after the first copy of a higher source offset.

    Expects topic, partition, offset and `first` (struct dest_partition, dest_offset; null: no copy).
    """
    before = (Window.partitionBy("topic", "partition")
              .orderBy(F.col("first.dest_partition"), F.col("first.dest_offset"))
              .rowsBetween(Window.unboundedPreceding, -1))
    highest_before = F.max(F.when(F.col("first").isNotNull(), F.col("offset"))).over(before)
    return outcomes.withColumn(
        "out_of_order", F.coalesce(F.col("first").isNotNull() & (F.col("offset") < highest_before), F.lit(False)))


def summarise(outcomes: DataFrame) -> DataFrame:
    """Per source partition: the PARTITION_FIELDS counts."""
    count_of = lambda flag: F.sum(F.col(flag).cast("long")).alias(flag)  # noqa: E731
    return outcomes.groupBy("topic", "partition").agg(
        F.count(F.lit(1)).alias("source_count"),
        F.sum("copies").alias("destination_count"),
        count_of("missing"),
        F.sum("duplicated").alias("duplicated"),
        count_of("altered"),
        count_of("out_of_order"),
        count_of("wrong_schema"),
        count_of("beyond_committed"),
    ).orderBy("topic", "partition")


def compare(source_df: DataFrame, mapped_df: DataFrame, committed: dict[tuple[str, int], int | None]) -> DataFrame:
    """Per-partition counts for source fingerprints against destination records mapped to source coordinates."""
    return summarise(record_outcomes(source_df, mapped_df, committed))


def offending_examples(outcomes: DataFrame, kinds=KINDS, limit: int = MAX_EXAMPLES) -> dict[str, list[str]]:
    """At most `limit` source coordinates `topic:partition:offset` per kind, lowest first."""
    out = {}
    for kind in kinds:
        flag = F.col(kind) > 0 if kind == "duplicated" else F.col(kind)
        rows = (outcomes.filter(flag).orderBy("topic", "partition", "offset").limit(limit)
                .select("topic", "partition", "offset").collect())
        out[kind] = [f"{r.topic}:{r.partition}:{r.offset}" for r in rows]
    return out
