"""The catch-up's driver side of the copy: the ranges copied on the driver while Spark starts, then one Spark
task per range (what is left of it), and the job's progress.

Spark plans, schedules and retries the ranges it is handed; each task reads and writes with librdkafka
(copy_range.py), the driver's copy with the same code (driver.py). Where a record goes is decided here, once per
partition, by the worker's `Router`; schema ids are mapped by the worker's `SchemaSyncer` (when the mirror syncs
schemas) before any task starts, and an id a task meets that is not mapped yet by the same code where the task runs.
While the tasks run, a thread on the driver logs the whole job's progress from the destination's log ends (records
written since the copy started, rate, time left).
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import threading
import time

from mirror_worker.batch_api import Router, rewritten_fields
from spark_jobs.catchup.copy_range import CopySettings, CopyTask, copy_tasks, stderr_line
from spark_jobs.catchup.driver import SparkStarter, copy_on_driver, left_for_spark
from spark_jobs.catchup.plan import Range
from spark_jobs.common.job_config import JobTarget

log = logging.getLogger("spark_jobs.catchup")

PROGRESS_INTERVAL_S = 5.0


def schema_fields(target: JobTarget, topics: list[str]) -> tuple[dict, dict[str, tuple[bool, bool]]]:
    """(source framing header -> destination's, topic -> (rewrite keys, rewrite values)), as the worker's
    schema gate has them after syncing the topics' subjects; nothing when the mirror does not sync schemas."""
    mirror = target.mirror
    if mirror is None or not mirror.syncs_schemas or mirror.schema_id_rewrite == "off":
        return {}, {}
    from mirror_worker.batch_api import syncers_for

    syncer = syncers_for(mirror).get(target.source_alias)
    if syncer is None:
        return {}, {}
    for topic in topics:
        syncer.sync_topic(topic)
    fields = {topic: rewritten_fields(mirror.schema_id_rewrite, syncer.framing.get(topic)) for topic in topics}
    return dict(syncer.id_headers), fields


class OnDemandSchemas:
    """Maps a schema id a task meets mid-copy, with the worker's `SchemaSyncer` (its `destination_header`),
    built where the task runs on first use: it travels to the executors as the mirror's settings only."""

    def __init__(self, mirror, source_alias: str) -> None:
        self.mirror = mirror
        self.source_alias = source_alias
        self._syncer = None

    def __getstate__(self) -> dict:
        return {"mirror": self.mirror, "source_alias": self.source_alias, "_syncer": None}

    def header(self, topic: str, source_id: int) -> bytes:
        if self._syncer is None:
            from mirror_worker.batch_api import syncers_for

            self._syncer = syncers_for(self.mirror)[self.source_alias]
        return self._syncer.destination_header(topic, source_id)


def on_demand_schemas(target: JobTarget) -> OnDemandSchemas | None:
    """What maps ids met mid-copy, when the mirror syncs this source's schemas and rewrites ids."""
    mirror = target.mirror
    if mirror is None or not mirror.syncs_schemas or mirror.schema_id_rewrite == "off":
        return None
    if not any(s.name == target.source_alias and mirror.source_registry_url(s) for s in mirror.sources):
        return None
    return OnDemandSchemas(mirror, target.source_alias)


def copy_tasks_for(target: JobTarget, ranges: list[Range], topic_ids: dict[str, str],
                   destination_partitions: dict[str, int], fields: dict[str, tuple[bool, bool]]) -> list[CopyTask]:
    """One task per range, routed as the worker routes (preserve-partitions, preserve-order, or the key)."""
    router = Router(target.policy, target.preserve_partitions, target.preserve_order)
    for topic, count in destination_partitions.items():
        router.set_destination_partitions(topic, count)
    tasks = []
    for topic, partition, start, end in ranges:
        route = router.route(topic, partition)
        keys, values = fields.get(topic, (False, False))
        tasks.append(CopyTask(topic, partition, start, end, route.topic, route.partition, topic_ids.get(topic, ""),
                              keys, values))
    return tasks


class DestinationProgress:
    """Logs the job's progress every `interval_s` from the destination topics' log ends (a thread)."""

    def __init__(self, connection: dict, topics: dict[str, int], total: int, interval_s: float = PROGRESS_INTERVAL_S,
                 clock=time.monotonic) -> None:
        from mirror_worker.batch_api import consumer

        self.consumer = consumer(connection, {"group.id": "mirror-catchup-progress", "enable.auto.commit": False})
        self.topics, self.total, self.interval_s, self.clock = topics, total, interval_s, clock
        self.stopped = threading.Event()
        self.baseline: int | None = None
        self.started = clock()
        self.thread = threading.Thread(target=self._run, name="catchup-progress", daemon=True)
        self.written: int | None = None

    def _written(self) -> int:
        from confluent_kafka import TopicPartition

        return sum(self.consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=5)[1]
                   for topic, count in self.topics.items() for p in range(count))

    def line(self, written: int, seconds: float) -> dict:
        rate = written / seconds if seconds > 0 else 0.0
        left = max(0, self.total - written)
        return {"event": "catch-up progress", "copied": written, "offsets": self.total,
                "percent": round(100 * written / self.total, 1) if self.total else 100.0,
                "msgs_per_s": round(rate), "seconds": round(seconds, 1),
                "eta_s": round(left / rate, 1) if rate > 0 else None}

    def _run(self) -> None:
        while not self.stopped.wait(self.interval_s):
            try:
                if self.baseline is None:  # a destination topic created just now may have no leader yet
                    self.baseline = self._written()
                    continue
                written = self._written() - self.baseline
            except Exception as exc:  # progress is best effort: the copy goes on
                log.warning("progress: destination log ends unavailable: %s", exc)
                continue
            log.info("%s", json.dumps(self.line(written, self.clock() - self.started)))

    def __enter__(self):
        try:
            self.baseline = self._written()  # before any task starts: the records written since are the copy's
        except Exception as exc:
            log.warning("progress: destination log ends unavailable: %s", exc)
        self.started = self.clock()
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stopped.set()
        self.thread.join(10)
        try:  # what the copy wrote, every attempt of a task included
            self.written = self._written() - self.baseline if self.baseline is not None else None
        except Exception as error:
            log.warning("progress: destination log ends unavailable: %s", error)
        self.consumer.close()


def copy_with_spark(starter: SparkStarter, tasks: list[CopyTask], settings: CopySettings,
                    progress: DestinationProgress | None, driver_limit: int | None = None,
                    driver_threads: int = 1) -> dict:
    """Copy the ranges: on the driver while `starter` starts Spark, then what is left with one Spark task per
    range (driver.py). Per range (records, seconds, cpu seconds), and the times of each phase."""
    left: list[CopyTask] = []
    try:
        with progress if progress is not None else contextlib.nullcontext():
            driver = copy_on_driver(tasks, settings, starter.ready.is_set, driver_limit, emit=stderr_line,
                                    threads=min(driver_threads, len(tasks)))
            left = left_for_spark(tasks, driver)
            spark = _copy_on_spark(starter.wait(), left, settings) if left else {"rows": []}
    finally:
        if not left:
            starter.abandon()  # the driver copied everything: no need to wait for Spark
        elif starter.session is not None:
            starter.session.stop()
    records = driver.records + sum(row[2] for row in spark["rows"])
    written = progress.written if progress is not None else None
    # At least once, a task attempt that failed after writing (a lost executor) leaves records its retry writes
    # again: the destination's log ends count them (nothing else writes the mirror's topics during the catch-up).
    # Exactly once, a failed attempt's transaction is aborted: its offsets are not records anyone reads.
    resent = written - records if written is not None and settings.exactly_once is None else None
    # A driver part's CPU is not its own (the driver's threads share one process): the driver's CPU is reported
    # once, under "driver"; a range's cpu_s is its Spark part's.
    partitions = {key: (copied, seconds, 0.0) for key, (copied, _, seconds, _) in driver.parts.items()}
    for topic, partition, copied, seconds, cpu in spark["rows"]:
        before = partitions.get((topic, partition), (0, 0.0, 0.0))
        partitions[(topic, partition)] = (before[0] + copied, before[1] + seconds, before[2] + cpu)
    return {
        # Copying: the driver's copy, then Spark's job; waiting for Spark after the driver stopped is left out.
        "partitions": partitions, "copy_seconds": driver.seconds + spark.get("seconds", 0.0),
        "spark_startup_s": starter.startup_s, "spark_ready_s": starter.ready_s,
        "destination_offsets": written, "resent": resent,
        "spark_job_s": spark.get("seconds"), "parallelism": spark.get("parallelism"), "master": spark.get("master"),
        "driver": {"records": driver.records, "seconds": driver.seconds, "cpu_s": driver.cpu_s,
                   "ranges_done": sum(1 for t in tasks if (t.topic, t.partition) in driver.parts
                                      and driver.parts[(t.topic, t.partition)][1] == t.end),
                   "ranges_handed_over": len(left), "failure": driver.failure},
    }


def _copy_on_spark(spark, tasks: list[CopyTask], settings: CopySettings) -> dict:
    """One Spark task per range; (topic, partition, copied, seconds, cpu) rows, the job's time and master."""
    context = spark.sparkContext
    context.setJobDescription(f"catch-up {len(tasks)} partitions, {sum(t.end - t.start for t in tasks)} offsets")
    started = time.monotonic()
    rows = context.parallelize(tasks, len(tasks)).mapPartitions(
        functools.partial(copy_tasks, settings=settings)).collect()
    return {"rows": rows, "seconds": round(time.monotonic() - started, 2),
            "parallelism": context.defaultParallelism, "master": context.master}

