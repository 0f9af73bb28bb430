"""Consistency check: prove, record by record, that a mirror copied a window of its source.

    python -m spark_jobs.consistency_check --source.bootstrap.servers S --destination.bootstrap.servers D \\
        --topics orders [--prefix dc1.] [--group.id mirror-orders] --report out/check.json \\
        [--from-timestamp T] [--to-timestamp T | --offsets orders:0:100-200,orders:1:0-50]

(or `--config mirrors.yaml --mirror NAME`.) Through spark-submit, give the driver the jars
`spark_jobs.common.session.kafka_connector_jars()` lists (`--jars`: the Kafka connector's and the digest reader).

Window: by default every source record from the low watermark to the last stable offset (LSO) of each
partition, read read_committed as the worker reads (read_uncommitted up to the high watermark when the
mirror's source settings say so): a partition where a transaction is open stops at its LSO and is named
with its LSO and high watermark under window.open_transactions, "stopped at the last stable offset (a
transaction is open)"; aborted records and transaction markers are not source records.
`--from-timestamp`/`--to-timestamp` (epoch milliseconds or ISO-8601, UTC when no zone is given) select,
per partition, the offsets from the first record at or after the from-time up to (excluded) the first
record at or after the to-time, as Kafka's offsetsForTimes does. `--offsets topic:partition:from-to`
(from included, to excluded) checks exactly the listed partitions. Ranges are clamped to [low, LSO).
The destination topics are read whole, read_committed (low watermark to LSO): their offsets do not follow the
source's, so a destination record is placed by the source coordinates it maps to.

Mapping a destination record back to its source record:
- provenance: header `mirror.source` = `alias:cluster-id:topic:partition:offset` (the worker's
  `--provenance.headers`), used when it parses, names a checked source topic that maps to this
  destination topic, and names the source cluster (or no cluster);
- positional, for every other record: the destination record matches the source record of the same
  topic with the same key and timestamp (a source 0 as 1 ms: see Timestamps), in the same partition when
  partitions are preserved (the default with flags; the spec's `preserve-partitions` otherwise). When several
  source records share partition, key and timestamp, the k-th destination copy (in destination order)
  matches the k-th source record (in offset order), extra copies cycling over them as duplicates. So a lost record
  followed by a copy of a same-key, same-timestamp sibling reads as one altered record, not as
  missing plus duplicated, and a window edge that splits such a group can pair the wrong records.
Destination records that map to no source record of the window are ignored.

Per source partition the report counts: source records in the window, destination copies of them,
missing (no copy; records at or after the mirror group's committed offset are not missing, they are
`beyond_committed`; no committed offset or no group: nothing is excluded), duplicated (copies beyond
the first), altered (records with a copy whose key, value or headers differ; a key or value starting
with magic byte 0 and at least 5 bytes long compares without its schema id, bytes 1..4; the
provenance header is left out of the header comparison, header order counts), out of order (first
copies, taken in destination order, whose source offset is below the highest one seen before them),
wrong_schema (records whose copies have the source's bytes but not its schemas: see below).

Schema ids (spark_jobs/check/schemas.py). With registries in the mirror spec, a framed key or value (its
topic's key or value subject, as the worker decides) counts as the same only when the body is equal and the
destination id names, in the destination registry, the schema the source id names in the source registry
(type and full text, logical types kept, references by content: mirror_worker/schemas/meaning.py); a copy with
the body but another schema, or an id its registry does not know, is `wrong_schema`, not `altered`. The digest
pass cannot see ids, so topics with a framed field go to the exact path whole (reason `schemas`). Without
registries (flags, or a spec without) ids are left out as before; the report's `schemas` section says which.

Timestamps. librdkafka cannot produce CreateTime 0, so the worker stamps a copy of a record at the epoch 1 ms
(mirror_worker/clients/timestamps.py): positional mapping matches a source timestamp 0 with a destination 1 ms.

Digests first (spark_jobs/check/digests.py): per source partition and window of --digest-window offsets
both sides are reduced to a count and a multiset hash; the comparison above runs record by record only
over the differing windows, and over whole partitions whose order is not proven or that have destination
records needing positional mapping. The counts are the same as a record-by-record run (a differing window
passes for an equal one with a chance of about 2^-64). The report's `digest` section says, per partition,
how many windows were verified by digest and which offsets record by record. Spark plans the digest pass
as one task per (side, partition, offset range); each task reads its range with the Kafka Java consumer
and the job's client settings, hashes the records on the JVM (spark_jobs/check/jvm.py,
java/check/src/mirror/check/) and returns only sums per window, compared on the driver
(spark_jobs/check/digest_rows.py). `--digest-reader librdkafka` reads and hashes in Python with librdkafka
instead (spark_jobs/check/rdkafka.py, about half the speed, no jar needed), `--digest-reader spark` with
Spark's Kafka source (slower still). The record-by-record path always reads through Spark's Kafka source.

Compacted topics are compared instead by the latest value of each key of the window and the latest copy
of that key on the destination (spark_jobs/check/compacted.py). `--mode auto` (the default) picks that
mode for each source topic whose cleanup.policy includes `compact`, and every record for the others;
`--mode records` or `--mode compacted` forces one mode for all (spark_jobs/check/modes.py). The report
names each topic's mode and why (`modes`).

Writes the JSON report at --report and an HTML summary beside it (.html). Exit 0: consistent,
1: inconsistent, 2: bad input (one line on stderr), 3: the check could not complete (one line on
stderr, details in the JSON logs on stdout).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

from py4j.protocol import Py4JError
from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, SparkSession

from mirror_worker.batch_api import SchemaRegistryUnavailable, configure_logging
from spark_jobs.check.compacted import compare_latest
from spark_jobs.check.digests import (
    DIGEST_WINDOW, PartitionDigest, compare_digests, destination_spans, digest_pass, digest_summary, recheck_spans,
)
from spark_jobs.check.jvm import JvmReaderMissing, windows_on_jvm
from spark_jobs.check.modes import AUTO, COMPACTED, MODES
from spark_jobs.check.plan import CheckPlan, plan_check
from spark_jobs.check.rdkafka import ReadFailed
from spark_jobs.check.rdkafka_spark import windows_with_librdkafka
from spark_jobs.check.records import (  # noqa: F401  (re-exported: the job's exact path)
    KINDS, MAPPED_COLUMNS, MAX_EXAMPLES, PARTITION_FIELDS, compare, fingerprint, map_by_position, map_to_source,
    normalise_headers, normalise_schema_id, offending_examples, record_outcomes, split_by_provenance, summarise,
    with_out_of_order,
)
from spark_jobs.check.report import exit_code, verdict, write_report
from spark_jobs.check.schemas import UNCHECKED, with_schema_meaning
from spark_jobs.check.window import CheckWindow, Ranges, source_ranges, window_from_args  # noqa: F401
from spark_jobs.common.cluster_security import target_secrets
from spark_jobs.common.job_config import JobInputError, base_parser
from spark_jobs.common.session import THROUGHPUT_JVM_OPTIONS, create_session, refuse_unprotected

PROG = "consistency_check"
MAX_RECORDS_PER_SPARK_PARTITION = 50_000        # the exact path (sorts and joins)
DIGEST_RECORDS_PER_SPARK_PARTITION = 1_000_000   # the digest pass streams: fewer, longer tasks
# Larger fetches for the digest pass's long sequential reads, Spark's reader and the JVM reader alike (the
# mirror's client settings still win).
DIGEST_FETCH = {"kafka.max.partition.fetch.bytes": str(8 << 20), "kafka.fetch.max.bytes": str(64 << 20),
                "kafka.receive.buffer.bytes": str(4 << 20)}

# Arrow batches for the digest pass's order segments: fewer, larger hand-overs to Python.
SESSION_CONF = {"spark.sql.execution.arrow.maxRecordsPerBatch": "100000",
                "spark.driver.extraJavaOptions": THROUGHPUT_JVM_OPTIONS}

KAFKA_SCHEMA = ("key BINARY, value BINARY, topic STRING, partition INT, offset BIGINT, timestamp TIMESTAMP, "
                "timestampType INT, headers ARRAY<STRUCT<key: STRING, value: BINARY>>")

log = logging.getLogger("spark_jobs.consistency_check")


# ------------------------------------------------------------------ input


def build_parser() -> argparse.ArgumentParser:
    """The job's argument parser (also rendered into the docs site's CLI reference)."""
    parser = base_parser(PROG, "Record-by-record check that a mirror copied a window of its source.")
    add = parser.add_argument
    add("--report", required=True, help="where the JSON report goes (the HTML summary goes beside it, .html)")
    add("--from-timestamp", help="window start: epoch ms or ISO-8601 (included)")
    add("--to-timestamp", help="window end: epoch ms or ISO-8601 (excluded)")
    add("--offsets", help="window as topic:partition:from-to,... (from included, to excluded)")
    add("--mode", choices=MODES, default=AUTO,
        help="auto: per topic, compacted when its cleanup.policy includes compact, else records (default); "
             "records: every record; compacted: the latest value of each key")
    add("--digest-window", type=_positive, default=DIGEST_WINDOW,
        help=f"source offsets per digest window (default {DIGEST_WINDOW:,}); differing windows are compared "
             "record by record")
    add("--digest-reader", choices=("jvm", "librdkafka", "spark"), default="jvm",
        help="how the digest pass reads both sides: the Kafka Java consumer in each Spark task (default), "
             "librdkafka in each Spark task, or Spark's Kafka source")
    return parser


def _parse_arguments(args: list[str]) -> argparse.Namespace:
    parsed = build_parser().parse_args(args)
    parsed.window = window_from_args(parsed)
    if not parsed.topics and not parsed.config and parsed.window.kind == "offsets":
        parsed.topics = ",".join(dict.fromkeys(t for t, *_ in parsed.window.offsets))
    check_report_path(Path(parsed.report))
    return parsed


def _positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive integer")
    return int(text)


def check_report_path(report: Path) -> None:
    """Fails before the check runs when its report could not be written (missing folders are created then)."""
    if report.suffix == ".html":
        raise JobInputError("--report: give the JSON path; the HTML summary is written beside it")
    if report.is_dir():
        raise JobInputError(f"--report: {report} is a directory")
    existing = report.absolute().parent
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
        raise JobInputError(f"--report: cannot write under {existing}")


# ------------------------------------------------------------------ Spark: read


def offset_options(ranges: Ranges) -> dict[str, str]:
    """Spark Kafka source options `assign`, `startingOffsets`, `endingOffsets` for exact ranges."""
    assign: dict[str, list[int]] = {}
    starting: dict[str, dict[str, int]] = {}
    ending: dict[str, dict[str, int]] = {}
    for (topic, partition), (start, end) in sorted(ranges.items()):
        assign.setdefault(topic, []).append(partition)
        starting.setdefault(topic, {})[str(partition)] = start
        ending.setdefault(topic, {})[str(partition)] = end
    return {"assign": json.dumps(assign), "startingOffsets": json.dumps(starting),
            "endingOffsets": json.dumps(ending)}


def read_kafka(spark: SparkSession, client_options: dict[str, str], ranges: Ranges,
               records_per_task: int = MAX_RECORDS_PER_SPARK_PARTITION) -> DataFrame:
    wanted = {tp: r for tp, r in ranges.items() if r[1] > r[0]}
    if not wanted:
        return spark.createDataFrame([], KAFKA_SCHEMA)
    return (spark.read.format("kafka")
            .options(**client_options)
            .options(**offset_options(wanted))
            .option("includeHeaders", "true")
            .option("maxRecordsPerPartition", str(records_per_task))
            .load())


# ------------------------------------------------------------------ report


def complete_partitions(rows: list[dict], ranges: Ranges) -> list[dict]:
    """Every partition of the window, with zero counts where it had no source record."""
    found = {(r["topic"], r["partition"]): r for r in rows}
    return [
        {"topic": t, "partition": p, **{k: int(found.get((t, p), {}).get(k) or 0) for k in PARTITION_FIELDS}}
        for t, p in sorted(ranges)
    ]


def build_report(plan: CheckPlan, partitions: list[dict], examples: dict[str, list[str]], now: float) -> dict:
    totals = {"checked": sum(p["source_count"] for p in partitions),
              **{k: sum(p[k] for p in partitions) for k in KINDS}}
    status = verdict(totals)
    window = {
        **plan.window.describe(),
        "ranges": [{"topic": t, "partition": p, "from": s, "to": e, "committed": plan.committed[(t, p)]}
                   for (t, p), (s, e) in sorted(plan.source_ranges.items())],
        "open_transactions": [transaction.summary() for transaction in plan.open_transactions],
    }
    return {
        "status": status,
        "mode": plan.mode,
        "modes": {t: plan.modes[t].summary() for t in plan.topics if t in plan.modes},
        "totals": totals,
        "partitions": partitions,
        "window": window,
        "source": {"bootstrap_servers": plan.target.source_bootstrap, "cluster_id": plan.source_cluster_id,
                   "topics": plan.topics, "group_id": plan.target.group_id},
        "destination": {"bootstrap_servers": plan.target.destination_bootstrap, "topics": sorted(plan.topic_map),
                        "preserve_partitions": plan.target.preserve_partitions},
        "generated_at": datetime.fromtimestamp(now, tz=timezone.utc).isoformat(timespec="seconds"),
        "examples": {k: examples.get(k, []) for k in KINDS},
        "schemas": plan.schemas.summary() if plan.schemas is not None else UNCHECKED,
    }


# ------------------------------------------------------------------ job


def check_topics(spark: SparkSession, plan: CheckPlan) -> dict:
    """The report over every topic of the plan, each compared in its mode (spark_jobs/check/modes.py)."""
    by_key = [t for t in plan.topics if plan.mode_of(t) == COMPACTED]
    partitions, examples, digest = [], {}, None
    if len(by_key) < len(plan.topics):
        partitions, examples, digest = run_check(spark, plan.only([t for t in plan.topics if t not in by_key]))
    if by_key:  # the latest value per key (spark_jobs/check/compacted.py)
        keys = plan.only(by_key)
        rows, key_examples = compare_latest(
            read_kafka(spark, keys.target.spark_options("source"), keys.source_ranges),
            read_kafka(spark, keys.target.spark_options("destination"), keys.destination_ranges),
            keys.topic_map, keys.target.preserve_partitions, keys.committed, keys.schemas)
        partitions += complete_partitions(list(rows.values()), keys.source_ranges)
        examples = {k: (examples.get(k, []) + key_examples.get(k, []))[:MAX_EXAMPLES]
                    for k in {*examples, *key_examples}}
    report = build_report(plan, sorted(partitions, key=lambda p: (p["topic"], p["partition"])), examples,
                          time.time())
    if digest is not None:
        report["digest"] = digest
    return report


def run_check(spark: SparkSession, plan: CheckPlan) -> tuple[list[dict], dict[str, list[str]], dict]:
    """Digests per window first (spark_jobs/check/digests.py), then record by record where they differ:
    (partition rows, examples, the report's digest section)."""
    target, window = plan.target, plan.digest_window
    started = time.monotonic()
    def read(side: str, ranges: Ranges) -> DataFrame:
        return read_kafka(spark, {**DIGEST_FETCH, **target.spark_options(side)}, ranges,
                          DIGEST_RECORDS_PER_SPARK_PARTITION)

    if plan.digest_reader in ("jvm", "librdkafka"):  # one consumer per Spark task, rows per window back
        if plan.digest_reader == "jvm":
            source_rows, windows = windows_on_jvm(spark, plan, DIGEST_RECORDS_PER_SPARK_PARTITION, DIGEST_FETCH)
        else:
            source_rows, windows = windows_with_librdkafka(spark, plan, DIGEST_RECORDS_PER_SPARK_PARTITION)
        digests = compare_digests(source_rows, windows, plan.topics, plan.topic_map, plan.source_cluster_id,
                                  plan.source_ranges, window, lambda ranges: read("destination", ranges))
    else:
        digests, windows = digest_pass(
            read("source", plan.source_ranges), read("destination", plan.destination_ranges), plan.topics,
            plan.topic_map, plan.source_cluster_id, plan.source_ranges, plan.committed, window,
            read_destination=lambda ranges: read("destination", ranges))
    spans = recheck_spans(plan.source_ranges, digests, window, target.preserve_partitions,
                          plan.schemas.framed_topics() if plan.schemas is not None else frozenset())
    destination_ranges = _recheck_destination(plan, spans, windows)
    log.info("destination read", extra={"positional": sum(d.positional for d in digests.values())})
    for (topic, partition), digest in sorted(digests.items()):
        if (topic, partition) in plan.source_ranges:
            log.info("partition digests compared", extra={
                "topic": topic, "partition": partition, "windows": digest.windows, "differing": digest.differing,
                "in_order": digest.in_order, "positional": digest.positional,
                "recheck": list(spans.get((topic, partition), ())) or None})
    log.info("digest pass done", extra={"seconds": round(time.monotonic() - started, 2), "rechecked_partitions": len(spans),
                                        "records_to_recheck": sum(e - s for s, e, _ in spans.values())})
    exact_rows, examples = (_exact_check(spark, plan, {tp: (s, e) for tp, (s, e, _) in spans.items()},
                                         destination_ranges) if spans else ({}, {}))
    partitions = []
    for tp in sorted(plan.source_ranges):
        digest, exact = digests.get(tp, PartitionDigest()), exact_rows.get(tp, {})
        rechecked = int(exact.get("source_count") or 0)
        row = {"topic": tp[0], "partition": tp[1], "source_count": digest.source_count,
               "destination_count": digest.source_count - rechecked + int(exact.get("destination_count") or 0),
               **{k: int(exact.get(k) or 0) for k in KINDS}, "beyond_committed": digest.beyond_committed}
        log.info("partition checked", extra=row)
        partitions.append(row)
    return partitions, examples, digest_summary(plan.source_ranges, plan.digest_window, digests, spans)


def _recheck_destination(plan: CheckPlan, spans: dict, windows: list) -> Ranges:
    """Destination ranges holding every copy of the source offsets to re-check: whole topics where a
    record needs positional mapping, elsewhere the offsets the digest pass saw those copies at."""
    positional = {t for (t, _), (_, _, reason) in spans.items() if reason == "positional"}
    ranges = {(d, p): r for (d, p), r in plan.destination_ranges.items() if plan.topic_map[d] in positional}
    by_provenance = {tp: (s, e) for tp, (s, e, _) in spans.items() if tp[0] not in positional}
    for (topic, partition), (first, end) in destination_spans(windows, plan.topics, by_provenance,
                                                              plan.digest_window).items():
        key = (plan.target.destination_topic(topic), partition)
        low, high = plan.destination_ranges.get(key, (first, end))
        ranges[key] = (max(first, low), min(end, high))
    return ranges


def _exact_check(spark: SparkSession, plan: CheckPlan, source_ranges: Ranges,
                 destination_ranges: Ranges) -> tuple[dict[tuple[str, int], dict], dict[str, list[str]]]:
    """The record-by-record comparison over these ranges: counts per source partition, and examples."""
    target = plan.target
    cached = [fingerprint(read_kafka(spark, target.spark_options("source"), source_ranges)).cache(),
              fingerprint(read_kafka(spark, target.spark_options("destination"), destination_ranges),
                          provenance=True).cache()]
    # The ids' meanings (spark_jobs/check/schemas.py), from each side's distinct ids read off the cache.
    source, destination = with_schema_meaning(*cached, plan.schemas, plan.topic_map)
    mapped, rest = split_by_provenance(destination, plan.topic_map, plan.source_cluster_id)
    positional = rest.count()
    log.info("destination read for the exact check", extra={"positional": positional,
                                                            "records": sum(e - s for s, e in source_ranges.values())})
    if positional:
        # The positional join ranks the whole source; it is only paid for when a record needs it.
        mapped = mapped.unionByName(map_by_position(rest, source, target.preserve_partitions))
    outcomes = record_outcomes(source, mapped, plan.committed).cache()
    rows = {(r.topic, r.partition): r.asDict() for r in summarise(outcomes).collect()}
    flagged = [k for k in KINDS if any(r[k] for r in rows.values())]
    examples = offending_examples(outcomes, flagged) if flagged else {}
    for df in (outcomes, *cached):
        df.unpersist()
    return rows, examples


def main(argv: list[str] | None = None) -> int:
    configure_logging()
    logging.getLogger("py4j").setLevel(logging.WARNING)
    try:
        args = _parse_arguments(sys.argv[1:] if argv is None else argv)
        plan = plan_check(args)
        refuse_unprotected(args.master, target_secrets(plan.target))
    except JobInputError as exc:
        print(f"{PROG}: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    started = time.monotonic()
    spark = None
    try:
        spark = create_session(PROG, args.master, SESSION_CONF, secrets=target_secrets(plan.target))
        spark.sparkContext.setLogLevel("WARN")
        log.info("spark session ready", extra={"master": spark.sparkContext.master,
                                               "seconds": round(time.monotonic() - started, 2)})
        report = check_topics(spark, plan)
        html = write_report(report, plan.report)
    except JobInputError as exc:  # the session's own refusal: one already running here without protection
        print(f"{PROG}: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    except (PySparkException, Py4JError, OSError, ReadFailed, JvmReaderMissing, SchemaRegistryUnavailable) as exc:
        log.exception("check failed")
        print(f"{PROG}: check failed: {' '.join(str(exc).split())[:300]}", file=sys.stderr)
        return 3
    finally:
        if spark is not None:
            spark.stop()
    log.info("check finished", extra={
        "status": report["status"], **report["totals"], "seconds": round(time.monotonic() - started, 2),
        "report": str(plan.report), "html": str(html)})
    return exit_code(report)


if __name__ == "__main__":
    sys.exit(main())
