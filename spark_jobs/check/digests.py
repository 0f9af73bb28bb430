"""The consistency check's digest-first pass: which source partitions and offset windows need the exact,
record-by-record comparison, and the counts of all the others.

Windows. A source partition's offsets are cut into windows of `window` offsets (`offset div window`).
Both sides are reduced, per (source topic, source partition, window), to a record count and a multiset
digest: the sums, as LONG, of the low and of the high 32-bit halves of
xxhash64(source offset, xxhash64(normalised key, normalised value, canonical headers)) — the same
normalisation as the exact path (schema id bytes left out, the provenance header left out). Each sum is
exact (no overflow below 2^31 records a window), so equal sums mean an equal sum of 64-bit hashes. A
destination record takes the source offset of its provenance header and counts in that source window,
when the offset lies in the checked range; records without usable provenance are counted apart (their
partitions go to the exact path whole). Equal count and digests mean the destination holds each source
record of the window exactly once, unaltered — up to a hash collision: a differing window reads as equal
with a chance of about 2^-64.

Order. Per (source partition, window, destination partition) the destination side also keeps the least
and the greatest (source offset - destination offset). When that shift is one constant in each
destination partition, source offsets rise with destination offsets there; with destination partitions
in order holding rising source offsets, no first copy follows a copy of a higher source offset (no
out-of-order record). Otherwise (gaps from transaction markers, interleaved source partitions) the
destination partitions holding those copies are read again into order segments: the Kafka source reads
one destination partition's offset range per Spark task, in offset order, and no shuffle happens before
`task_segments` (Python, vectorised per Arrow batch) keeps, per task and (source partition, window),
first and last destination and source offsets and whether source offsets never decrease. A partition
whose order is not proven is compared record by record whole. Only aggregates per window and task reach
the driver, never rows per record.
"""

from __future__ import annotations

import logging
import sys
from itertools import chain

from pyspark import cloudpickle
from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from mirror_worker.batch_api import HEADER_SIZE, MAGIC_BYTE, PROVENANCE_HEADER
from spark_jobs.check.digest_rows import (  # noqa: F401  (PartitionDigest, destination_spans: re-exported)
    MAX_LISTED_WINDOWS, POSITIONAL, PartitionDigest, destination_spans, partition_digests,
)
from spark_jobs.check.records import normalise_headers, provenance_header, with_provenance
from spark_jobs.check.window import Ranges

DIGEST_WINDOW = 50_000
OUTSIDE = -2                          # the window of copies whose source offset is outside the checked range
SEGMENT_SCHEMA = ("t INT, p INT, w BIGINT, dp INT, n BIGINT, lo BIGINT, hi BIGINT, first_do BIGINT, "
                  "last_do BIGINT, first_src BIGINT, last_src BIGINT, ordered BOOLEAN")
_HEADERS_TYPE = "ARRAY<STRUCT<key: STRING, value: BINARY>>"

log = logging.getLogger("spark_jobs.consistency_check")


# ------------------------------------------------------------------ hashing (JVM expressions)


def content_hash() -> Column:
    """xxhash64 of a Kafka row's key, value and headers, equal exactly when the exact path's normalised
    key, value and headers are (up to hash collisions)."""
    return F.xxhash64(*_bytes_parts("key"), *_bytes_parts("value"), _headers_hash())


def _bytes_parts(column: str) -> tuple[Column, Column]:
    """(kind, body): 0 absent, 1 schema-registry framing (body without the schema id, bytes 1..4), 2 plain
    bytes. The kind is never null, so an absent key cannot pass for an absent value (xxhash64 skips nulls)."""
    framed = (f"length({column}) >= {HEADER_SIZE} AND substring({column}, 1, 1) = X'{MAGIC_BYTE:02X}'")
    kind = F.expr(f"CASE WHEN {column} IS NULL THEN 0 WHEN {framed} THEN 1 ELSE 2 END")
    body = F.expr(f"CASE WHEN {framed} THEN substring({column}, {HEADER_SIZE + 1}) ELSE {column} END")
    return kind, body


def _headers_hash() -> Column:
    """Headers in order without the provenance header. The usual cases (no provenance header, or one as the
    last header; no null value) hash the header array itself, without building a string per record; any
    other list hashes the exact path's canonical string, tagged apart."""
    headers = f"coalesce(headers, cast(array() AS {_HEADERS_TYPE}))"
    at = f"array_position({headers}.key, '{PROVENANCE_HEADER}')"
    count = f"size({headers})"
    # No null value (xxhash64 skips nulls): arrays_overlap is null when a value is null and none is empty,
    # true when one is empty; both cases take the canonical string.
    plain = f"NOT coalesce(arrays_overlap({headers}.value, array(X'')), true)"
    return (F.when(F.expr(f"{at} = 0 AND {plain}"), F.expr(f"xxhash64({headers})"))
            .when(F.expr(f"{at} = {count} AND {plain}"), F.expr(f"xxhash64(slice({headers}, 1, {count} - 1))"))
            .otherwise(F.xxhash64(F.lit(b"\xee"), normalise_headers("headers"))))


def _halves(record_hash: Column) -> tuple[Column, Column]:
    """The low and the high 32 bits of a LONG hash, each as a non-negative LONG (no overflowing arithmetic)."""
    return (record_hash.bitwiseAND(F.lit(0xFFFFFFFF)).alias("lo"),
            F.shiftrightunsigned(record_hash, 32).alias("hi"))


def _partition_key(topic_index: Column, partition: Column) -> Column:
    return F.shiftleft(topic_index.cast("long"), 32) + partition.cast("long")


def _literal_map(pairs, key_type: str, value_type: str) -> Column:
    return F.create_map(*chain.from_iterable((F.lit(k).cast(key_type), F.lit(v).cast(value_type)) for k, v in pairs))


def _topic_index(topics: list[str], column: str) -> Column:
    return F.try_element_at(_literal_map(((t, i) for i, t in enumerate(topics)), "string", "int"), F.col(column))


def _lookup(pairs: dict[int, int], key: Column) -> Column:
    """A LONG per partition key; null for keys not in `pairs`."""
    return F.try_element_at(_literal_map(pairs.items(), "long", "long"), key) if pairs else F.lit(None).cast("long")


# ------------------------------------------------------------------ the two sides


def source_windows(source_df: DataFrame, topics: list[str], committed: dict[tuple[str, int], int | None],
                   window: int) -> DataFrame:
    """Kafka source rows -> (t, p, w, s_n, s_lo, s_hi, beyond): t the topic's index in `topics`, beyond the
    records at or after the mirror group's committed offset."""
    index = {t: i for i, t in enumerate(topics)}
    t = _topic_index(topics, "topic")
    positions = {(index[tp[0]] << 32) + tp[1]: c for tp, c in committed.items() if c is not None and tp[0] in index}
    limit = _lookup(positions, _partition_key(t, F.col("partition")))
    lo, hi = _halves(F.xxhash64(F.col("offset"), content_hash()))
    rows = source_df.select(
        t.alias("t"), F.col("partition").alias("p"), F.expr(f"offset div {window}").alias("w"), lo, hi,
        F.coalesce((F.col("offset") >= limit).cast("long"), F.lit(0)).alias("beyond"))
    return rows.groupBy("t", "p", "w").agg(
        F.count(F.lit(1)).alias("s_n"), F.sum("lo").alias("s_lo"), F.sum("hi").alias("s_hi"),
        F.sum("beyond").alias("beyond"))


def destination_windows(destination_df: DataFrame, topics: list[str], topic_map: dict[str, str],
                        source_cluster_id: str | None, ranges: Ranges, window: int) -> DataFrame:
    """Kafka destination rows -> one row per (t, p, w, dp) in the JVM (a partial aggregation, no Python):
    n, lo, hi, first/last destination and source offset, and the least and greatest (source offset -
    destination offset). w = POSITIONAL: records without usable provenance (p: their destination
    partition); w = OUTSIDE: copies of offsets outside the checked range (ignored)."""
    rows = destination_rows(destination_df, topics, topic_map, source_cluster_id, ranges, window)
    return rows.groupBy("t", "p", "w", "dp").agg(
        F.count(F.lit(1)).alias("n"), F.sum("lo").alias("lo"), F.sum("hi").alias("hi"),
        F.min("do").alias("first_do"), F.max("do").alias("last_do"),
        F.min("src").alias("first_src"), F.max("src").alias("last_src"),
        F.min(F.col("src") - F.col("do")).alias("least_shift"), F.max(F.col("src") - F.col("do")).alias("greatest_shift"))


def destination_segments(destination_df: DataFrame, topics: list[str], topic_map: dict[str, str],
                         source_cluster_id: str | None, ranges: Ranges, window: int) -> DataFrame:
    """Kafka destination rows -> SEGMENT_SCHEMA rows, one per Spark task and (source partition, window,
    destination partition); w = POSITIONAL (p: the destination partition) for records without usable
    provenance. Destination records with provenance outside the checked ranges are left out."""
    rows = destination_rows(destination_df, topics, topic_map, source_cluster_id, ranges, window)
    # By value: the Python workers need not find this package on their path (spark-submit from anywhere).
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    return rows.mapInArrow(task_segments, SEGMENT_SCHEMA)


def destination_rows(destination_df: DataFrame, topics: list[str], topic_map: dict[str, str],
                     source_cluster_id: str | None, ranges: Ranges, window: int) -> DataFrame:
    """Kafka destination rows -> (t, p, w, dp, do, src, lo, hi), the input of `task_segments`."""
    hashed = destination_df.select(
        "topic", "partition", "offset", "timestamp", F.lit(None).cast("binary").alias("key_d"),
        content_hash().alias("content_d"), provenance_header())
    dest = with_provenance(hashed, topic_map, source_cluster_id)
    index = {t: i for i, t in enumerate(topics)}
    t = _topic_index(topics, "src_topic")
    key = _partition_key(t, F.col("p_partition"))
    keys = {(index[tp]) << 32 | p: r for (tp, p), r in ranges.items() if tp in index}
    start = _lookup({k: s for k, (s, _) in keys.items()}, key)
    end = _lookup({k: e for k, (_, e) in keys.items()}, key)
    usable = F.col("usable")
    in_range = F.coalesce((F.col("p_offset") >= start) & (F.col("p_offset") < end), F.lit(False))
    lo, hi = _halves(F.coalesce(F.xxhash64(F.col("p_offset"), F.col("d_content")), F.lit(0)))
    # No Filter here: the optimiser would push it below the provenance parsing and parse once per use.
    window_of = (F.when(usable & in_range, F.expr(f"p_offset div {window}"))
                 .when(usable, F.lit(OUTSIDE)).otherwise(F.lit(POSITIONAL)))
    rows = dest.select(
        t.alias("t"),
        F.when(usable, F.col("p_partition")).otherwise(F.col("dest_partition")).alias("p"),
        window_of.alias("w"), F.col("dest_partition").alias("dp"), F.col("dest_offset").alias("do"),
        F.when(usable, F.col("p_offset")).otherwise(F.lit(-1)).alias("src"), lo, hi)
    return rows


def task_segments(batches):
    """mapInArrow body: the rows of one Spark task, in their order, into one segment per (t, p, w, dp)."""
    import numpy as np
    import pyarrow as pa

    segments: dict[tuple, list] = {}
    for batch in batches:
        n = batch.num_rows
        if not n:
            continue
        col = {name: batch.column(name).to_numpy(zero_copy_only=False)
               for name in ("t", "p", "w", "dp", "do", "src", "lo", "hi")}
        inside = col["w"] != OUTSIDE                 # copies of records outside the window are ignored
        if not inside.all():
            col = {name: values[inside] for name, values in col.items()}
            n = int(inside.sum())
            if not n:
                continue
        order = np.lexsort((np.arange(n), col["dp"], col["w"], col["p"], col["t"]))
        s = {name: values[order] for name, values in col.items()}
        new = np.ones(n, dtype=bool)
        new[1:] = ((s["t"][1:] != s["t"][:-1]) | (s["p"][1:] != s["p"][:-1]) | (s["w"][1:] != s["w"][:-1])
                   | (s["dp"][1:] != s["dp"][:-1]))
        starts = np.flatnonzero(new)
        lasts = np.r_[starts[1:], n] - 1
        step_back = np.zeros(n, dtype=bool)
        step_back[1:] = ~new[1:] & ((s["src"][1:] < s["src"][:-1]) | (s["do"][1:] <= s["do"][:-1]))
        counts = np.diff(np.r_[starts, n])
        lo, hi = np.add.reduceat(s["lo"], starts), np.add.reduceat(s["hi"], starts)
        disorder = np.logical_or.reduceat(step_back, starts)
        for g, (first, last) in enumerate(zip(starts, lasts)):
            key = (int(s["t"][first]), int(s["p"][first]), int(s["w"][first]), int(s["dp"][first]))
            part = [int(counts[g]), int(lo[g]), int(hi[g]), int(s["do"][first]), int(s["do"][last]),
                    int(s["src"][first]), int(s["src"][last]), not bool(disorder[g])]
            seen = segments.get(key)
            if seen is None:
                segments[key] = part
                continue
            in_order = seen[7] and part[7] and seen[6] <= part[5] and seen[4] < part[3]
            segments[key] = [seen[0] + part[0], seen[1] + part[1], seen[2] + part[2], seen[3], part[4],
                             seen[5], part[6], in_order]
    names = [f.split()[0] for f in SEGMENT_SCHEMA.split(", ")]
    rows = [(*key, *part) for key, part in segments.items()]
    columns = {name: [row[i] for row in rows] for i, name in enumerate(names)}
    schema = pa.schema([("t", pa.int32()), ("p", pa.int32()), ("w", pa.int64()), ("dp", pa.int32()),
                        *((name, pa.int64()) for name in names[4:11]), ("ordered", pa.bool_())])
    yield pa.RecordBatch.from_pydict(columns, schema=schema)


# ------------------------------------------------------------------ comparing


def order_violations(segments: DataFrame) -> DataFrame:
    """(t, p, in_order) per source partition with provenance-mapped copies."""
    by_position = Window.partitionBy("t", "p").orderBy("dp", "first_do", "last_do")
    previous = lambda name: F.lag(name).over(by_position)  # noqa: E731
    step_back = (~F.col("ordered")
                 | F.coalesce(previous("last_src") > F.col("first_src"), F.lit(False))
                 | F.coalesce((previous("dp") == F.col("dp")) & (previous("last_do") >= F.col("first_do")),
                              F.lit(False)))
    return (segments.filter(F.col("w") >= 0)
            .select("t", "p", step_back.alias("step_back"))
            .groupBy("t", "p").agg((~F.max("step_back")).alias("in_order")))


def digest_pass(source_df: DataFrame, destination_df: DataFrame, topics: list[str], topic_map: dict[str, str],
                source_cluster_id: str | None, ranges: Ranges, committed: dict[tuple[str, int], int | None],
                window: int = DIGEST_WINDOW, read_destination=None,
                ) -> tuple[dict[tuple[str, int], PartitionDigest], list]:
    """Reads each side once: the digest outcome of every source partition of `ranges`, and the destination
    rows per window (for `destination_spans`).

    Where the offset shift does not prove the order (gaps, interleaved partitions), `read_destination`
    (destination ranges -> Kafka rows; default: `destination_df` again) reads the destination partitions
    holding those copies once more for the exact order check of `task_segments`."""
    destination_rows = destination_windows(destination_df, topics, topic_map, source_cluster_id, ranges,
                                           window).filter(F.col("w") != OUTSIDE).collect()
    source_rows = source_windows(source_df, topics, committed, window).collect()
    digests = compare_digests(source_rows, destination_rows, topics, topic_map, source_cluster_id, ranges, window,
                              lambda dest_ranges: read_destination(dest_ranges) if read_destination else destination_df)
    return digests, destination_rows


def compare_digests(source_rows: list, destination_rows: list, topics: list[str], topic_map: dict[str, str],
                    source_cluster_id: str | None, ranges: Ranges, window: int, read_destination,
                    ) -> dict[tuple[str, int], PartitionDigest]:
    """`digest_pass` from the two sides' rows per window (of `source_windows` and `destination_windows`,
    however read: see also spark_jobs/check/rdkafka.py), compared on the driver (digest_rows.py);
    `read_destination` (destination ranges -> Kafka rows) reads destination partitions again where the
    order needs the exact check of `task_segments`."""
    out = partition_digests(source_rows, destination_rows, topics, ranges)
    unknown = {tp: ranges[tp] for tp, digest in out.items() if digest.in_order is None and tp in ranges}
    if unknown:
        spans = destination_spans(destination_rows, topics, unknown, window)
        log.info("order checked record by record", extra={
            "partitions": [f"{t}:{p}" for t, p in sorted(unknown)],
            "destination_records": sum(e - s for s, e in spans.values())})
        dest_ranges = {(_destination_topic(topic_map, t), dp): span for (t, dp), span in spans.items()}
        reread = read_destination(dest_ranges)
        segments = destination_segments(reread, topics, topic_map, source_cluster_id, unknown, window)
        for row in order_violations(segments).collect():
            if (topics[row.t], row.p) in unknown:
                out[(topics[row.t], row.p)].in_order = bool(row.in_order)
    for digest in out.values():  # partitions outside the ranges, never re-read: no verdict on their order
        if digest.in_order is None:
            digest.in_order = True
    return out


def _destination_topic(topic_map: dict[str, str], source_topic: str) -> str:
    return next(d for d, s in topic_map.items() if s == source_topic)


# ------------------------------------------------------------------ what the exact path re-checks (driver)


def recheck_spans(ranges: Ranges, digests: dict[tuple[str, int], PartitionDigest], window: int,
                  preserve_partitions: bool, schema_topics: frozenset[str] | set[str] = frozenset(),
                  ) -> dict[tuple[str, int], tuple[int, int, str]]:
    """(topic, partition) -> (from, to, reason) for the source offsets the exact path must compare.

    Whole partitions when a destination record of theirs may need positional mapping (reason
    "positional": with preserved partitions the partition of that record, otherwise every partition of
    its topic), when their topic is in `schema_topics` ("schemas": framed keys or values whose ids must
    name equal schemas, which the digests, hashing bodies without ids, cannot prove: see
    spark_jobs/check/schemas.py) or when their copies may be out of order ("order"); otherwise the span
    from the first to the last differing window ("windows"). Partitions not listed are consistent by their
    digests.
    """
    positional = {tp for tp, d in digests.items() if d.positional}
    positional_topics = {t for t, _ in positional}
    out = {}
    for tp, (start, end) in sorted(ranges.items()):
        digest = digests.get(tp, PartitionDigest())
        if tp in positional or (not preserve_partitions and tp[0] in positional_topics):
            out[tp] = (start, end, "positional")
        elif tp[0] in schema_topics:
            out[tp] = (start, end, "schemas")
        elif not digest.in_order:
            out[tp] = (start, end, "order")
        elif digest.differing:
            out[tp] = (max(start, digest.first_differing * window), min(end, (digest.last_differing + 1) * window),
                       "windows")
    return {tp: span for tp, span in out.items() if span[1] > span[0]}


def digest_summary(ranges: Ranges, window: int, digests: dict[tuple[str, int], PartitionDigest],
                   spans: dict[tuple[str, int], tuple[int, int, str]]) -> dict:
    """The report's `digest` section: per partition, the windows compared, those that differed, and the
    offsets compared record by record."""
    partitions = []
    for tp in sorted(ranges):
        digest, span = digests.get(tp, PartitionDigest()), spans.get(tp)
        exact_windows = 0
        if span:
            exact_windows = (digest.windows if span[2] != "windows"
                             else min(digest.windows, (span[1] - 1) // window - span[0] // window + 1))
        partitions.append({
            "topic": tp[0], "partition": tp[1], "windows": digest.windows, "windows_differing": digest.differing,
            "differing_windows": digest.differing_windows, "windows_by_digest": digest.windows - exact_windows,
            "windows_record_by_record": exact_windows,
            "record_by_record": {"from": span[0], "to": span[1], "reason": span[2]} if span else None})
    return {"window_offsets": window, "partitions": partitions,
            **{k: sum(p[k] for p in partitions) for k in ("windows", "windows_by_digest", "windows_record_by_record")},
            "records_record_by_record": sum(s[1] - s[0] for s in spans.values())}
