"""Catch-up: copy a mirror's backlog in parallel with Spark, then hand over to the worker.

    python -m spark_jobs.catchup --config mirrors.yaml --mirror NAME [--topics a,b] [--from-timestamp T]
    python -m spark_jobs.catchup --source.bootstrap.servers S --destination.bootstrap.servers D \\
        --topics a,b --group.id G [--prefix P] [--from-offsets topic:partition:offset,...] [--on-data-loss reset]

1. Per source partition, a range [start, end): start is the mirror group's committed offset, or given
   offsets/timestamps, taken through the worker's own `decide_start` (see plan.py; with no
   committed offset the partition starts as the worker would, by its auto.offset.reset); end is the
   last stable offset (LSO) when the job starts, as the worker's read_committed consumer sees it: the
   high watermark unless a transaction is open, then the first offset of the oldest open one. Such a
   partition is named on stderr, in the log and under "open_transactions" in the JSON summary.
2. While Spark starts (seconds: JVM, SparkContext, Python workers), the driver copies ranges itself, the
   largest first (`--driver-threads` at once), with the very code of Spark's tasks, and hands what is left to Spark at a batch boundary
   once Spark is ready (driver.py: a partition's parts are copied and committed strictly in
   sequence; `--driver-copy-limit` bounds the driver's share, 0 leaves every range to Spark; a backlog the
   driver finishes first never waits for Spark). Spark plans, schedules and retries the rest: one Spark
   task per source partition range (spark.py). Each task reads its range with librdkafka (copy_range.py:
   assigned at the start, batches of 10,000, read_committed unless the mirror's source settings say
   isolation.level=read_uncommitted, exactly as the worker reads: aborted records and transaction markers
   are skipped), and writes it with the worker's producer settings and the worker's record transform:
   routing (`Router`: preserve-partitions, preserve-order, or the key), headers (`mirrored_headers`:
   provenance when the mirror adds it, cycles refused), schema ids (`wire_format.rewrite` with the map the
   worker's `SchemaSyncer` builds, when the mirror syncs schemas); keys, values and timestamps kept.
3. Each task flushes, and only then commits the mirror group's offset at its range end, with the source
   topic's id as the commit's metadata, as the worker commits.

Progress: every task prints a JSON line on stderr every 5 s (records copied, position, rate, time left) and
one when done; the driver logs the whole job's progress every 5 s from the destination's log ends. The JSON
summary (stdout, and `--summary PATH`) has totals, the end-to-end rate, the Spark start-up time (null when the
driver copied everything first), the copy phase's time and rate (the driver's copy plus Spark's job: waiting
for Spark after the driver stopped is left out), the driver's share, and per range its offsets, records copied
and seconds.

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
rerun (the start of its part: the driver commits its part of a range before Spark copies the rest), so
duplicates are at most the records of the parts whose copies failed.

Exit codes: 0 done, 1 runtime failure, 2 bad input (one line on stderr), 3 data loss found (the lost
partitions halted, everything else copied and committed).
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import sys
import time
from contextlib import ExitStack, contextmanager
from pathlib import Path

from mirror_worker.batch_api import CatchupLease, committed_reader, failback_start, fitted_to_topics
from spark_jobs.catchup.copy_range import COPY_CONSUMER, CopySettings
from spark_jobs.catchup.driver import SparkStarter
from spark_jobs.catchup.eos import ExactlyOnce, destination_positions, expired_line, exactly_once_for
from spark_jobs.catchup.plan import Range, parse_offsets, parse_timestamp, plan_ranges
from spark_jobs.catchup.spark import (
    DestinationProgress, copy_tasks_for, copy_with_spark, on_demand_schemas, schema_fields,
)
from spark_jobs.common.cluster_security import target_secrets
from spark_jobs.common.job_config import JobInputError, JobTarget, base_parser, target_from_args
from spark_jobs.common.kafka_meta import KafkaMeta, resolve_topics
from spark_jobs.common.session import refuse_unprotected
from spark_jobs.common.stable_offsets import open_transactions, reachable

log = logging.getLogger("spark_jobs.catchup")

DATA_LOSS_EXIT = 3
# Where a bounded batch copy differs from the worker's producer settings (long-running, latency first).
_COPY_PRODUCER = {
    "linger.ms": "20",                         # throughput: nobody waits on a single record
    "message.timeout.ms": "300000",            # the task fails (a rerun copies the range again) instead of waiting forever
    "queue.buffering.max.messages": "200000",
}


def build_parser() -> argparse.ArgumentParser:
    """The job's argument parser (also rendered into the docs site's CLI reference)."""
    parser = base_parser("catchup.py", "Copy a mirror's backlog with Spark, then hand over to the worker.")
    parser.add_argument("--from-offsets", help="topic:partition:offset,... (default: the group's committed offsets)")
    parser.add_argument("--from-timestamp", help="start at this time (epoch ms or ISO-8601) instead")
    parser.add_argument("--summary", help="also write the JSON summary (totals, rates, per-partition ranges) here")
    parser.add_argument("--progress-interval-s", type=float, default=5.0,
                        help="progress lines (per task on stderr, the whole job in the log) this often")
    parser.add_argument("--no-commit", action="store_true", help="copy without moving the mirror group's offsets")
    parser.add_argument("--driver-copy-limit", type=int, metavar="OFFSETS",
                        help="the driver copies ranges while Spark starts, until Spark is ready: at most this many "
                             "offsets (default: no limit; 0: Spark copies every range)")
    # One thread: the driver's copy threads share one interpreter's GIL. Copying alone, 2 and 4 threads cost
    # 15-25% more CPU per record than 1 and copied slower (bench/catchup_copy_cpu.py, 2026-11-26); with Spark
    # starting beside them, 1 copied fastest and 4 slowest (docs/benchmarks/batch.md).
    parser.add_argument("--driver-threads", type=int, default=1,
                        help="ranges the driver copies at once while Spark starts (default 1; a range is copied "
                             "by one thread only)")
    parser.add_argument("--on-data-loss", choices=("halt", "reset"),
                        help="a start that would skip lost records: halt the partition (default) or copy from the "
                             "earliest record (default: the spec's on_data_loss)")
    return parser


def _parse_arguments(args: list[str]):
    return build_parser().parse_args(args)


def producer_conf(target: JobTarget) -> dict:
    """The worker's producer settings (acks=all, idempotence, partitioner, security) with the copy's changes."""
    return {**target.destination_settings, **_COPY_PRODUCER, "bootstrap.servers": target.destination_bootstrap}


def commit_conf(target: JobTarget) -> dict:
    return {**target.connection("source"), "group.id": target.group_id, "enable.auto.commit": False}


def check_group_idle(target: JobTarget, source: KafkaMeta) -> None:
    """The worker must not run during a catch-up: both would write the same ranges."""
    from mirror_worker.batch_api import active_members

    # The metadata reader's admin client: its librdkafka log stays off stderr, which holds one line per finding.
    members = active_members(source.admin, target.group_id)
    if members:
        raise JobInputError(
            f"mirror group {target.group_id!r} has {members} active member(s): "
            "stop the mirror's workers before a catch-up"
        )


def check_not_failed_over(target: JobTarget) -> None:
    """A failed-over mirror's old source must not be copied into the promoted topics (failover_mark.py)."""
    from mirror_worker.batch_api import FailedOver, admin_client, refuse_if_failed_over

    try:
        refuse_if_failed_over(admin_client(target.connection("destination"), whole=True), target.group_id,
                              "a catch-up", 10)
    except FailedOver as exc:
        raise JobInputError(str(exc)) from None


def ensure_destination_topics(target: JobTarget, source: KafkaMeta, topics: list[str]) -> dict[str, int]:
    """Creates (or grows) the destination topics as the worker does; returns their max.message.bytes."""
    from mirror_worker.batch_api import (
        DestinationTopics,
        TopicCreation,
        admin_client,
        creation_configs,
        describe_topics,
        exclusion_pattern,
    )

    admin = admin_client(target.connection("destination"), whole=True)
    infos = describe_topics(source.consumer)
    mirror = target.mirror
    exactly_once = mirror is not None and mirror.exactly_once
    # As the worker creates them: the spec's topic creation settings, with the worker's configs (the source's
    # when config sync is on, the timestamp limits raised to the source's always); exactly-once keys positions by
    # source partition on the destination topic (it needs the room) and keeps its compacted positions topic.
    destination = DestinationTopics(admin, mirror.topic_creation if mirror is not None else TopicCreation(),
                                    target.preserve_partitions or exactly_once)
    configs, why = creation_configs(
        admin_client(target.connection("source"), whole=True), admin,
        {t: target.destination_topic(t) for t in topics}, bool(mirror is not None and mirror.config_sync_interval_ms),
        exclusion_pattern(mirror.config_sync_exclude if mirror is not None else []))
    if why is not None:
        log.warning("destination timestamp limits not raised at topic creation: %s", why)
    destination.ensure({target.destination_topic(t): infos[t] for t in topics}, configs)
    if exactly_once:
        destination.ensure_internal({mirror.positions_topic: {"cleanup.policy": "compact"}})
    return destination.max_message_bytes([target.destination_topic(t) for t in topics])


def run(target: JobTarget, args) -> dict:
    with ExitStack() as held:  # the catch-up's lease on the mirror's group, until the job ends
        return _run(target, args, held)


def _run(target: JobTarget, args, held: ExitStack) -> dict:
    refuse_unprotected(args.master, target_secrets(target))  # before any client, lease or copy
    if not target.group_id and not args.no_commit:
        raise JobInputError("--group.id is required (the mirror's consumer group), or --no-commit")
    if args.from_offsets and args.from_timestamp:
        raise JobInputError("--from-offsets and --from-timestamp cannot be combined")
    explicit = parse_offsets(args.from_offsets) if args.from_offsets else None
    from_ms = parse_timestamp(args.from_timestamp) if args.from_timestamp else None

    source = KafkaMeta(target.source_bootstrap, "source", target.source_settings, timeout=10)
    try:
        destination = KafkaMeta(target.destination_bootstrap, "destination", target.destination_settings, timeout=10)
        clusters = (_cluster_id(source), _cluster_id(destination))
        eos = exactly_once_for(target, clusters[0])
        destination.close()
        topics = resolve_topics(target, source)
        if explicit:
            unknown = sorted({t for t, _ in explicit} - set(topics))
            if unknown:
                raise JobInputError(f"--from-offsets names topic {unknown[0]!r}, which the job does not copy")
            for (topic, partition) in explicit:
                if partition >= source.partitions(topic):
                    raise JobInputError(f"--from-offsets: {topic} has no partition {partition}")
        if target.group_id and not args.no_commit:
            # Announce the catch-up first, then look for workers: a worker starting from now on sees the lease.
            held.enter_context(CatchupLease(target.connection("source"), target.group_id, topics[0]))
            check_group_idle(target, source)
            check_not_failed_over(target)
        # Nothing left to refuse: Spark starts now (seconds), while the plan is made and the driver copies. With
        # nothing to copy, or on a failure, the job does not wait for it (abandon).
        starter = SparkStarter(args.master, secrets=target_secrets(target)).start()
        held.callback(starter.abandon)
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
        limits = ensure_destination_topics(target, source, topics)  # exactly-once: the positions topic too, read next
        expired: list = []
        if eos is not None and explicit is None and from_ms is None:
            # The worker starts an exactly-once partition from its destination position when it has one.
            keys = [(t, p) for t in topics for p in range(source.partitions(t))]
            on_destination, vanished = destination_positions(eos, keys, target.destination_topic, ids)
            positions.update(on_destination)
            expired = sorted(vanished)
        on_data_loss = args.on_data_loss or target.on_data_loss
        watermarks = {t: {p: bounds for p, bounds in parts.items() if (t, p) not in expired}
                      for t, parts in reachable(ends).items()}
        with failback_start_rule(target, clusters[1]) as fresh_start:
            plan = plan_ranges(watermarks, positions, ids, target.reset_to_earliest, on_data_loss == "halt",
                               fresh_start)
    finally:
        source.close()
    destination = KafkaMeta(target.destination_bootstrap, "destination", target.destination_settings, timeout=10)
    destination_partitions = {target.destination_topic(t): destination.partitions(target.destination_topic(t))
                              for t in topics}
    destination.close()

    ranges = plan.ranges
    stopped = open_transactions({(t, p): e for t, p, _, e in ranges}, ends)
    for level, line in [(logging.ERROR if loss.halted else logging.WARNING, loss.line()) for loss in plan.losses] + \
            [(logging.ERROR, expired_line(key, eos)) for key in expired] + \
            [(logging.WARNING, transaction.line()) for transaction in stopped]:
        log.log(level, "%s", line)  # people read these on stderr too: one line each
        print(f"catchup: {line}", file=sys.stderr, flush=True)
    to_copy = [r for r in ranges if r[3] > r[2]]
    for topic, partition, start, end in ranges:
        log.info("range %s[%d]: [%d, %d) %d offsets", topic, partition, start, end, end - start)
    started = time.monotonic()
    copy = {"partitions": {}, "spark_startup_s": None, "copy_seconds": 0.0}
    if to_copy:
        id_headers, fields = schema_fields(target, topics)
        tasks = copy_tasks_for(target, to_copy, ids, destination_partitions, fields)
        progress = DestinationProgress(target.connection("destination"), destination_partitions,
                                       sum(r[3] - r[2] for r in to_copy), args.progress_interval_s)
        copy = copy_with_spark(starter, tasks, copy_settings(target, args, clusters, id_headers, eos, limits), progress,
                               args.driver_copy_limit, max(1, args.driver_threads))
    copied = {key: records for key, (records, _, _) in copy["partitions"].items()}
    if target.group_id and not args.no_commit:
        # The tasks committed their ranges; an empty range (nothing since the group's offset) had no task.
        _commit_uncopied(target, [r for r in ranges if (r[0], r[1]) not in copied], ids)
    summary = _summary(topics, ranges, copy, time.monotonic() - started, stopped, plan.losses)
    summary["data_loss"] += [{"topic": t, "partition": p, "kind": "position_expired", "action": "halt",
                              "reason": expired_line((t, p), eos)} for t, p in expired]
    print(json.dumps(summary), flush=True)
    if args.summary:
        Path(args.summary).write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def _summary(topics: list[str], ranges: list[Range], copy: dict, seconds: float, stopped, losses) -> dict:
    """The job's JSON summary: totals, rates (end to end from the plan, and of the copy phase alone), ranges."""
    records = sum(copied for copied, _, _ in copy["partitions"].values())
    phase = copy["copy_seconds"]
    per_range = []
    for topic, partition, start, end in ranges:
        copied, task_seconds, cpu = copy["partitions"].get((topic, partition), (0, 0.0, 0.0))
        per_range.append({"topic": topic, "partition": partition, "start": start, "end": end, "copied": copied,
                          "seconds": task_seconds, "cpu_s": cpu})
    return {
        "topics": topics, "records": records, "seconds": round(seconds, 2),
        "msgs_per_s": round(records / seconds) if records and seconds else 0,
        "spark_startup_s": copy["spark_startup_s"], "spark_ready_s": copy.get("spark_ready_s"),
        "copy_phase_s": round(phase, 2), "copy_phase_msgs_per_s": round(records / phase) if records and phase else 0,
        "driver": copy.get("driver"), "spark_job_s": copy.get("spark_job_s"), "resent": copy.get("resent"),
        "destination_offsets": copy.get("destination_offsets"),
        "master": copy.get("master"), "parallelism": copy.get("parallelism"),
        "ranges": per_range,
        "open_transactions": [transaction.summary() for transaction in stopped],
        "data_loss": [loss.summary() for loss in losses],
    }


def reader_conf(target: JobTarget) -> dict:
    """A task's consumer: the worker's source settings, assigned (never subscribed), reading as the worker reads,
    and committing the range end for the mirror group."""
    isolation = "read_committed" if target.reads_committed else "read_uncommitted"
    conf = {**target.source_settings, **commit_conf(target), "enable.auto.offset.store": False,
            "enable.partition.eof": True, "auto.offset.reset": "error", "isolation.level": isolation,
            **COPY_CONSUMER}
    conf.pop("group.instance.id", None)
    if not target.group_id:
        conf["group.id"] = "mirror-catchup-reader"
    return conf


def copy_settings(target: JobTarget, args, clusters: tuple[str, str], id_headers: dict,
                  eos: ExactlyOnce | None, limits: dict[str, int] | None = None) -> CopySettings:
    source_cluster, destination_cluster = clusters
    producer = producer_conf(target)
    # As the worker fits its producers: no record batch larger than a destination topic accepts, batches as
    # large as they take, and no record a topic takes refused by the producer's own message.max.bytes.
    producer.update(fitted_to_topics(producer, (limits or {}).values()))
    if eos is not None:  # a transactional producer's message.timeout.ms may not exceed its transaction.timeout.ms:
        producer.pop("message.timeout.ms")  # the worker's setting (or librdkafka's fit to the transaction's)
        if "message.timeout.ms" in target.destination_settings:
            producer["message.timeout.ms"] = target.destination_settings["message.timeout.ms"]
    return CopySettings(
        consumer=reader_conf(target), producer=producer, exactly_once=eos,
        commit=bool(target.group_id) and not args.no_commit, destination_cluster_id=destination_cluster,
        provenance=(target.source_alias, source_cluster) if target.provenance_headers else None,
        skip_origin=target.mirror is not None and target.mirror.origin_records == "skip",
        id_headers=id_headers, schemas=on_demand_schemas(target), progress_interval_s=args.progress_interval_s,
    )


@contextmanager
def failback_start_rule(target: JobTarget, destination_cluster_id: str):
    """A failback mirror's start for partitions without a position, as the worker's (mirror_worker.dr.failback);
    None for other mirrors (their reset policy)."""
    if target.mirror is None or target.mirror.reverse_of is None:
        yield None
        return
    reader = committed_reader(target.connection("source"), None, f"{target.group_id}.failback-start",
                              where="the source")
    try:
        yield lambda topic, partition, low, high: failback_start(
            reader.records, topic, partition, low, high, destination_cluster_id,
            destination_topic=target.destination_topic(topic)).offset
    finally:
        reader.close()


def _cluster_id(meta: KafkaMeta) -> str:
    return meta.consumer.list_topics(timeout=meta.timeout).cluster_id or ""

def _commit_uncopied(target: JobTarget, ranges: list[Range], topic_ids: dict[str, str]) -> None:
    """Ranges without a record to copy still get their end committed, so the worker starts there."""
    from confluent_kafka import TopicPartition

    from mirror_worker.batch_api import consumer

    if not ranges:
        return
    committer = consumer(commit_conf(target))
    try:
        committer.commit(offsets=[TopicPartition(t, p, e, topic_ids.get(t, "")) for t, p, _, e in ranges],
                         asynchronous=False)
    finally:
        committer.close()


def failure_line(exc: BaseException) -> str:
    """One line naming the failure. A task's CopyFailed reaches the driver inside Spark's PythonException,
    whose first line only says that a Python worker raised: the CopyFailed line from its traceback is the one
    that names the partition, the offset and why."""
    text = str(exc)
    copy_failures = re.findall(r"CopyFailed: (.+)", text)
    if copy_failures:
        return f"CopyFailed: {copy_failures[-1].strip()}"
    return f"{exc.__class__.__name__}: {text.splitlines()[0] if text else ''}"


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s", stream=sys.stdout)
    try:
        args = _parse_arguments(sys.argv[1:] if argv is None else argv)
        summary = run(target_from_args(args), args)
    except JobInputError as exc:
        print(f"catchup: {exc}", file=sys.stderr, flush=True)
        return 2
    except Exception as exc:  # runtime failure: nothing committed past what was delivered
        print(f"catchup: failed: {failure_line(exc)}", file=sys.stderr, flush=True)
        return 1
    return DATA_LOSS_EXIT if any(loss["action"] == "halt" for loss in summary["data_loss"]) else 0


if __name__ == "__main__":
    sys.exit(main())
