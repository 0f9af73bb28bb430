"""The digest pass's reading with librdkafka, Spark's side: Spark plans and schedules one task per (side,
partition, offset range); each task reads its range with one librdkafka consumer (spark_jobs/check/rdkafka.py)
and returns only aggregates per window, compared on the driver (spark_jobs/check/digest_rows.py).
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from spark_jobs.check import rdkafka as check_rdkafka
from spark_jobs.check.rdkafka import (
    DestinationScope, ProvenanceRule, ReadFailed, destination_window_rows, read_range, seed_probe, source_window_rows,
)

log = logging.getLogger("spark_jobs.consistency_check")


@dataclass(frozen=True)
class ReadTask:
    """One Spark task: one side's partition, offsets [start, end)."""

    side: str                                    # "source" or "destination"
    topic: str
    partition: int
    start: int
    end: int


@dataclass(frozen=True)
class ReadSettings:
    """What every task of the pass shares (picklable: it travels to the executors)."""

    consumers: dict                              # side -> librdkafka consumer settings
    topics: tuple[str, ...]                      # the checked source topics (t: the index)
    window: int
    committed: dict                              # (source topic, partition) -> the mirror group's offset or None
    scopes: dict                                 # destination topic -> DestinationScope
    batch: int = 10_000


def plan_tasks(source_ranges: dict, destination_ranges: dict, window: int, records_per_task: int) -> list[ReadTask]:
    """Ranges cut into tasks of about `records_per_task` offsets; source cuts fall on window edges (a source
    window is summed in one task), destination cuts anywhere (its rows are merged by Spark after)."""
    per_source_task = max(1, records_per_task // window) * window
    tasks = []
    for side, ranges in (("source", source_ranges), ("destination", destination_ranges)):
        for (topic, partition), (start, end) in sorted(ranges.items()):
            cut = start
            while cut < end:
                step_end = (cut // per_source_task + 1) * per_source_task if side == "source" else cut + records_per_task
                tasks.append(ReadTask(side, topic, partition, cut, min(end, step_end)))
                cut = min(end, step_end)
    # Longest first, so fewer cores idle at the end: a destination record costs about 1.5 source records
    # (its provenance header is parsed too).
    return sorted(tasks, key=lambda task: (task.start - task.end) * (3 if task.side == "destination" else 2))


def read_windows(tasks: Iterable[ReadTask], settings: ReadSettings) -> Iterator[tuple]:
    """mapPartitions body: per task, ("source" | "destination", seed probe, row) per window, then ("task",
    seed probe, (seconds, cpu seconds of the Python worker, librdkafka's threads included))."""
    from mirror_worker.batch_api import consumer as kafka_consumer

    probe = seed_probe()
    for task in tasks:
        started, cpu = time.monotonic(), time.process_time()
        consumer = kafka_consumer(settings.consumers[task.side])
        try:
            batches = read_range(consumer, task.topic, task.partition, task.start, task.end, settings.batch)
            if task.side == "source":
                t = settings.topics.index(task.topic)
                rows = source_window_rows(batches, t, task.partition, settings.window,
                                          settings.committed.get((task.topic, task.partition)))
            else:
                rows = destination_window_rows(batches, task.partition, settings.scopes[task.topic])
        finally:
            consumer.close()
        for row in rows:
            yield task.side, probe, row
        yield "task", probe, (time.monotonic() - started, time.process_time() - cpu)


def consumer_settings(connection: dict, read_committed: bool) -> dict:
    """A task's consumer: how to reach the cluster (the job's own client settings), assigned, never committing,
    reading committed records where the job's Spark reads do, in large fetches."""
    return {**connection, "group.id": "mirror-consistency-check", "enable.auto.commit": False,
            "enable.auto.offset.store": False, "enable.partition.eof": True, "auto.offset.reset": "error",
            "isolation.level": "read_committed" if read_committed else "read_uncommitted",
            "max.partition.fetch.bytes": str(16 << 20), "fetch.max.bytes": str(64 << 20)}


def scopes_for(topics: list[str], topic_map: dict[str, str], source_cluster_id: str | None, ranges: dict,
               window: int) -> dict[str, DestinationScope]:
    """Destination topic -> how its records are placed (see `DestinationScope`)."""
    return {destination: DestinationScope(
        topics.index(source), ProvenanceRule(source, source_cluster_id),
        {p: span for (t, p), span in ranges.items() if t == source}, window)
        for destination, source in topic_map.items() if source in topics}


def window_rows(spark, tasks: list[ReadTask], settings: ReadSettings) -> tuple[list[tuple], list[tuple]]:
    """Runs the tasks (one Spark task each); (source rows, destination rows) of the shapes SOURCE_WINDOWS
    and DESTINATION_WINDOWS. Only rows per window (and one per task: its times, logged) reach the driver."""
    from pyspark import cloudpickle

    from mirror_worker.batch_api import take_available

    # By value: the Python workers need not find these packages on their path (spark-submit from anywhere).
    for module in (sys.modules[__name__], check_rdkafka, sys.modules[take_available.__module__]):
        cloudpickle.register_pickle_by_value(module)
    rows: dict[str, list[tuple]] = {"source": [], "destination": [], "task": []}
    probes = set()
    if tasks:
        context = spark.sparkContext
        context.setJobDescription(f"digest pass: {len(tasks)} ranges read with librdkafka")
        for side, probe, row in context.parallelize(tasks, len(tasks)).mapPartitions(
                lambda part: read_windows(part, settings)).collect():
            rows[side].append(row)
            probes.add(probe)
    if len(probes) > 1:
        raise ReadFailed("the Python workers hash differently (PYTHONHASHSEED differs between executors): "
                         "set spark.executorEnv.PYTHONHASHSEED")
    cpu = sum(c for _, c in rows["task"])
    log.info("digest pass read with librdkafka", extra={
        "tasks": len(tasks), "offsets": sum(t.end - t.start for t in tasks), "task_seconds": round(sum(
            s for s, _ in rows["task"]), 2), "task_cpu_seconds": round(cpu, 2)})
    return rows["source"], rows["destination"]


def windows_with_librdkafka(spark, plan, records_per_task: int):
    """(source rows, destination rows) per window of a plan.CheckPlan, read with librdkafka."""
    target = plan.target
    settings = ReadSettings(
        # Client settings (TLS, SASL) from the job's own target; the destination is read as its consumers
        # read it (an exactly-once mirror writes transactions there), the source as the worker reads it.
        consumers={"source": consumer_settings(target.connection("source"), target.reads_committed),
                   "destination": consumer_settings(target.connection("destination"), True)},
        topics=tuple(plan.topics), window=plan.digest_window, committed=dict(plan.committed),
        scopes=scopes_for(plan.topics, plan.topic_map, plan.source_cluster_id, plan.source_ranges,
                          plan.digest_window))
    tasks = plan_tasks(plan.source_ranges, plan.destination_ranges, plan.digest_window, records_per_task)
    return window_rows(spark, tasks, settings)
