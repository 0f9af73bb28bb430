"""Catch-up: copy a mirror's backlog in parallel with Spark, then hand over to the worker.

    python spark_jobs/catchup.py --config mirrors.yaml --mirror NAME [--topics a,b] [--from-timestamp T]
    python spark_jobs/catchup.py --source.bootstrap.servers S --destination.bootstrap.servers D \\
        --topics a,b --group.id G [--prefix P] [--from-offsets topic:partition:offset,...] [--on-data-loss reset]

1. Per source partition, a range [start, end): start is the mirror group's committed offset, or given
   offsets/timestamps, taken through the worker's own `decide_start` (see catchup_plan.py; with no
   committed offset the partition starts as the worker would, by its auto.offset.reset); end is the
   last stable offset (LSO) when the job starts, as the worker's read_committed consumer sees it: the
   high watermark unless a transaction is open, then the first offset of the oldest open one. Such a
   partition is named on stderr, in the log and under "open_transactions" in the JSON summary.
2. Spark's Kafka source reads exactly those ranges (batch, explicit starting and ending offsets), one
   Spark task per source partition, read_committed (unless the mirror's source settings say
   isolation.level=read_uncommitted: then read_uncommitted up to the high watermark, as the worker reads):
   aborted records and transaction markers inside a range are skipped, as the worker skips them.
3. Each task writes its records to the destination (same partition with preserve-partitions; keys,
   values, headers and timestamps kept) through an idempotent acks=all producer, flushes, and only
   then commits the mirror group's offset at its range end, with the source topic's id as the commit's
   metadata, as the worker commits.

Data loss: a start below the log's earliest offset (retention deleted records the mirror had not
copied), past its end, or a topic recreated since the group's commit (topic id) is never clamped
silently. By default (on_data_loss halt) that partition is not copied and its group offset is not
moved; one line on stderr names the partition and the lost range, the other partitions are copied,
the JSON summary lists the loss under "data_loss", and the job exits 3. With `on_data_loss: reset`
(spec) or `--on-data-loss reset` the partition is copied from its earliest record, the skipped range is
reported the same way, and the job exits 0. Explicit --from-offsets are checked the same way.

Every Kafka client of the job (driver and executors) is built from the mirror's resolved settings
(client_config: TLS/SASL, `${file:...}` secrets); the copy's producer starts from the worker's
producer settings.

Hand-over: the worker resumes from the committed offsets, i.e. exactly at the range ends: no gap,
no overlap (at an LSO the worker gets the open transaction's records once it commits, none if it
aborts). A range without a committed record (only aborted records and markers) is committed at its end
too. The mirror's workers must be stopped while the job runs (checked: the group must have no active
member). Rerun bound: a partition whose task completed is never copied again (its
commit moved the start); a task that failed before its commit is copied again from its start on the
rerun, so duplicates are at most the records of the ranges whose tasks failed.

Exit codes: 0 done, 1 runtime failure, 2 bad input (one line on stderr), 3 data loss found (the lost
partitions halted, everything else copied and committed).
"""

from __future__ import annotations

import json
import logging
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script (spark-submit / python spark_jobs/catchup.py)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from spark_jobs.catchup_plan import Range, parse_offsets, parse_timestamp, plan_ranges  # noqa: E402
from spark_jobs.job_config import JobInputError, JobTarget, base_parser, target_from_args  # noqa: E402
from spark_jobs.kafka_meta import KafkaMeta, resolve_topics  # noqa: E402
from spark_jobs.stable_offsets import open_transactions, reachable  # noqa: E402

log = logging.getLogger("spark_jobs.catchup")

DATA_LOSS_EXIT = 3
# Where a bounded batch copy differs from the worker's producer settings (long-running, latency first).
_COPY_PRODUCER = {
    "linger.ms": "20",                         # throughput: nobody waits on a single record
    "message.timeout.ms": "300000",            # the task fails (a rerun copies the range again) instead of waiting forever
    "queue.buffering.max.messages": "200000",
}


def _parse_arguments(args: list[str]):
    parser = base_parser("catchup.py", "Copy a mirror's backlog with Spark, then hand over to the worker.")
    parser.add_argument("--from-offsets", help="topic:partition:offset,... (default: the group's committed offsets)")
    parser.add_argument("--from-timestamp", help="start at this time (epoch ms or ISO-8601) instead")
    parser.add_argument("--no-commit", action="store_true", help="copy without moving the mirror group's offsets")
    parser.add_argument("--on-data-loss", choices=("halt", "reset"),
                        help="a start that would skip lost records: halt the partition (default) or copy from the "
                             "earliest record (default: the spec's on_data_loss)")
    return parser.parse_args(args)


def offsets_json(ranges: list[Range], index: int) -> str:
    """Spark's startingOffsets (index 2) / endingOffsets (index 3) JSON for the ranges."""
    spec: dict[str, dict[str, int]] = {}
    for r in ranges:
        spec.setdefault(r[0], {})[str(r[1])] = r[index]
    return json.dumps(spec)


def read_ranges(spark, target: JobTarget, ranges: list[Range]):
    """The records of `ranges` as a DataFrame (one Spark partition per Kafka partition)."""
    from pyspark.sql import functions as F

    # Assigned, not subscribed: Spark wants offsets for every partition it reads, and halted or empty
    # partitions have no range.
    assigned: dict[str, list[int]] = {}
    for topic, partition, _, _ in ranges:
        assigned.setdefault(topic, []).append(partition)
    reader = spark.read.format("kafka").options(**target.spark_options("source"))
    frame = (
        reader.option("assign", json.dumps(assigned))
        .option("startingOffsets", offsets_json(ranges, 2))
        .option("endingOffsets", offsets_json(ranges, 3))
        .option("includeHeaders", "true")
        .option("failOnDataLoss", "true")
        # Fewer, larger fetches than the Java consumer's defaults (500 records a poll).
        .option("kafka.max.poll.records", "20000")
        .option("kafka.max.partition.fetch.bytes", str(16 << 20))
        .load()
    )
    return frame.select(
        "topic", "partition", "offset", "key", "value", "headers",
        F.unix_millis(F.col("timestamp")).alias("timestamp_ms"),
    )


def copy_partition(batches, destination_conf: dict, topic_map: dict, preserve_partitions: bool,
                   commit_conf: dict | None, ends: dict, topic_ids: dict):
    """Runs in an executor on Arrow batches of one Kafka partition's range: produce, flush, commit its end."""
    from collections import Counter

    import pyarrow as pa
    from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

    errors: list[str] = []
    producer = Producer({**destination_conf, "on_delivery": lambda err, _m: err and errors.append(err.str())})
    counts: dict[tuple[str, int], int] = {}
    for batch in batches:
        columns = batch.to_pydict()
        rows = zip(columns["topic"], columns["partition"], columns["key"], columns["value"], columns["headers"],
                   columns["timestamp_ms"])
        for topic, partition, key, value, headers, timestamp_ms in rows:
            if headers:
                headers = [(h["key"], h["value"]) for h in headers]
            while True:
                try:
                    producer.produce(topic_map[topic], value, key, partition if preserve_partitions else -1,
                                     timestamp=timestamp_ms or 0, headers=headers or None)
                    break
                except BufferError:
                    producer.poll(0.1)
        for key, count in Counter(zip(columns["topic"], columns["partition"])).items():
            counts[key] = counts.get(key, 0) + count
        producer.poll(0)
    if producer.flush(300) or errors:
        raise KafkaException(f"catch-up delivery failed for {sorted(counts)}: {errors[:3] or 'flush timed out'}")
    if commit_conf is not None and counts:
        committer = Consumer(commit_conf)
        try:
            committer.commit(offsets=[TopicPartition(t, p, ends[f"{t}:{p}"], topic_ids.get(t, "")) for t, p in counts],
                             asynchronous=False)
        finally:
            committer.close()
    for (topic, partition), copied in sorted(counts.items()):
        print(f"catchup: {topic}[{partition}] copied {copied} records up to offset {ends[f'{topic}:{partition}']}",
              file=sys.stderr, flush=True)
    yield pa.RecordBatch.from_pydict(
        {"topic": [t for t, _ in counts], "partition": [p for _, p in counts], "copied": list(counts.values())},
        schema=pa.schema([("topic", pa.string()), ("partition", pa.int32()), ("copied", pa.int64())]),
    )


def producer_conf(target: JobTarget) -> dict:
    """The worker's producer settings (acks=all, idempotence, partitioner, security) with the copy's changes."""
    return {**target.destination_settings, **_COPY_PRODUCER, "bootstrap.servers": target.destination_bootstrap}


def commit_conf(target: JobTarget) -> dict:
    return {**target.connection("source"), "group.id": target.group_id, "enable.auto.commit": False}


def check_group_idle(target: JobTarget) -> None:
    """The worker must not run during a catch-up: both would write the same ranges."""
    from confluent_kafka.admin import AdminClient

    from mirror_worker.groups import active_members

    members = active_members(AdminClient(target.connection("source")), target.group_id)
    if members:
        raise JobInputError(
            f"mirror group {target.group_id!r} has {members} active member(s): "
            "stop the mirror's workers before a catch-up"
        )


def ensure_destination_topics(target: JobTarget, source: KafkaMeta, topics: list[str]) -> None:
    from confluent_kafka.admin import AdminClient

    from mirror_worker.config import TopicCreation
    from mirror_worker.topics import DestinationTopics, describe_topics

    admin = AdminClient(target.connection("destination"))
    infos = describe_topics(source.consumer)
    DestinationTopics(admin, TopicCreation(), target.preserve_partitions).ensure(
        {target.destination_topic(t): infos[t] for t in topics}
    )


def run(target: JobTarget, args) -> dict:
    if not target.group_id and not args.no_commit:
        raise JobInputError("--group.id is required (the mirror's consumer group), or --no-commit")
    if args.from_offsets and args.from_timestamp:
        raise JobInputError("--from-offsets and --from-timestamp cannot be combined")
    explicit = parse_offsets(args.from_offsets) if args.from_offsets else None
    from_ms = parse_timestamp(args.from_timestamp) if args.from_timestamp else None

    source = KafkaMeta(target.source_bootstrap, "source", target.source_settings, timeout=10)
    try:
        KafkaMeta(target.destination_bootstrap, "destination", target.destination_settings, timeout=10).close()
        topics = resolve_topics(target, source)
        if explicit:
            unknown = sorted({t for t, _ in explicit} - set(topics))
            if unknown:
                raise JobInputError(f"--from-offsets names topic {unknown[0]!r}, which the job does not copy")
            for (topic, partition) in explicit:
                if partition >= source.partitions(topic):
                    raise JobInputError(f"--from-offsets: {topic} has no partition {partition}")
        if target.group_id and not args.no_commit:
            check_group_idle(target)
        ids = source.topic_ids(topics)
        ends = source.log_ends(topics)
        positions: dict = {}  # (topic, partition) -> (offset, topic id of the commit, if any)
        for topic in topics:
            if explicit is not None:
                positions.update({k: (v, None) for k, v in explicit.items() if k[0] == topic})
            elif from_ms is not None:
                positions.update({(topic, p): (o, None) for p, o in source.offsets_for_time(topic, from_ms).items()})
            elif target.group_id:
                positions.update({(topic, p): found for p, found in source.positions(target.group_id, topic).items()})
        on_data_loss = args.on_data_loss or target.on_data_loss
        plan = plan_ranges(reachable(ends), positions, ids, target.reset_to_earliest, on_data_loss == "halt")
        ensure_destination_topics(target, source, topics)
    finally:
        source.close()

    ranges = plan.ranges
    stopped = open_transactions({(t, p): e for t, p, _, e in ranges}, ends)
    for level, line in [(logging.ERROR if loss.halted else logging.WARNING, loss.line()) for loss in plan.losses] + \
            [(logging.WARNING, transaction.line()) for transaction in stopped]:
        log.log(level, "%s", line)  # people read these on stderr too: one line each
        print(f"catchup: {line}", file=sys.stderr, flush=True)
    to_copy = [r for r in ranges if r[3] > r[2]]
    for topic, partition, start, end in ranges:
        log.info("range %s[%d]: [%d, %d) %d offsets", topic, partition, start, end, end - start)
    copied: dict[tuple[str, int], int] = {}
    started = time.monotonic()
    if to_copy:
        copied = _copy_with_spark(target, args, to_copy, ids)
    if target.group_id and not args.no_commit:
        # The tasks committed what they copied; a range of aborted records and markers only had none to copy.
        _commit_uncopied(target, [r for r in ranges if (r[0], r[1]) not in copied], ids)
    seconds = time.monotonic() - started
    summary = {
        "topics": topics, "records": sum(copied.values()), "seconds": round(seconds, 2),
        "msgs_per_s": round(sum(copied.values()) / seconds) if copied and seconds else 0,
        "ranges": [{"topic": t, "partition": p, "start": s, "end": e} for t, p, s, e in ranges],
        "open_transactions": [transaction.summary() for transaction in stopped],
        "data_loss": [loss.summary() for loss in plan.losses],
    }
    print(json.dumps(summary), flush=True)
    return summary


def _copy_with_spark(target: JobTarget, args, ranges: list[Range], topic_ids: dict[str, str]) -> dict[tuple[str, int], int]:
    """Records copied per partition that had any (each committed by its task)."""
    from spark_jobs.session import create_session

    spark = create_session("mirror-catchup", master=args.master)
    try:
        spark.sparkContext.setJobDescription(
            f"catch-up {len(ranges)} partitions, {sum(r[3] - r[2] for r in ranges)} records"
        )
        frame = read_ranges(spark, target, ranges)
        topic_map = {t: target.destination_topic(t) for t in {r[0] for r in ranges}}
        ends = {f"{t}:{p}": e for t, p, _, e in ranges}
        committer = commit_conf(target) if target.group_id and not args.no_commit else None
        conf, preserve = producer_conf(target), target.preserve_partitions
        results = frame.mapInArrow(
            lambda batches: copy_partition(batches, conf, topic_map, preserve, committer, ends, topic_ids),
            "topic string, partition int, copied long",
        ).collect()
        return {(row.topic, row.partition): row.copied for row in results}
    finally:
        spark.stop()


def _commit_uncopied(target: JobTarget, ranges: list[Range], topic_ids: dict[str, str]) -> None:
    """Ranges without a record to copy still get their end committed, so the worker starts there."""
    from confluent_kafka import Consumer, TopicPartition

    if not ranges:
        return
    committer = Consumer(commit_conf(target))
    try:
        committer.commit(offsets=[TopicPartition(t, p, e, topic_ids.get(t, "")) for t, p, _, e in ranges],
                         asynchronous=False)
    finally:
        committer.close()


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s", stream=sys.stdout)
    try:
        args = _parse_arguments(sys.argv[1:] if argv is None else argv)
        summary = run(target_from_args(args), args)
    except JobInputError as exc:
        print(f"catchup: {exc}", file=sys.stderr, flush=True)
        return 2
    except Exception as exc:  # runtime failure: nothing committed past what was delivered
        print(f"catchup: failed: {exc.__class__.__name__}: {str(exc).splitlines()[0] if str(exc) else ''}",
              file=sys.stderr, flush=True)
        return 1
    return DATA_LOSS_EXIT if any(loss["action"] == "halt" for loss in summary["data_loss"]) else 0


if __name__ == "__main__":
    sys.exit(main())
