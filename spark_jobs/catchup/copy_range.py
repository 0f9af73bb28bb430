"""The catch-up's executor side: one Spark task copies one source partition's offset range with librdkafka.

The task assigns its partition at the range start (read_committed, as the worker reads), takes batches
as the worker takes them (`take_available`: what the consumer holds, never waiting for a batch to fill),
produces every record below the range end through the worker's producer settings and the worker's
record transform (routing decided by `mirror_worker.policy.routing.Router` on the driver, headers by
`mirror_worker.policy.provenance.mirrored_headers`, schema ids by `mirror_worker.schemas.wire_format.rewrite`), flushes,
and only then commits the mirror group's offset at the range end (with the topic id as metadata, as the
worker commits). A delivery error, a flush that does not finish or a consumer error fails the task before
its commit: a rerun copies the range again from its start.

The range is done when the consumer reaches a record at or past the end, or the partition end (EOF) at or
past it: aborted records and transaction markers have offsets but are never delivered. The driver's copy
(driver.py) may also stop a range early, at a batch boundary: the part copied so far is flushed and
committed exactly as a whole range is, and the rest is handed to Spark as a range of its own.
"""

from __future__ import annotations

import functools
import json
import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

from mirror_worker.batch_api import (
    UnreadableHeaders,
    mirrored_headers,
    produced_timestamp,
    provenance_value,
    read_headers,
    take_available,
    wire_format,
)
from spark_jobs.catchup.eos import copy_exactly_once

# A task's consumer reads one partition: fewer, larger fetches than the worker's 1 MB per partition (its
# prefetch stays bounded by the worker's queued.max.messages.kbytes). The job's reader_conf adds it last.
COPY_CONSUMER = {"max.partition.fetch.bytes": str(16 << 20)}


class CopyFailed(Exception):
    """A range could not be copied completely; nothing of it was committed."""


@dataclass(frozen=True)
class CopyTask:
    """One source partition's range [start, end) and where its records go."""

    topic: str
    partition: int
    start: int
    end: int
    destination_topic: str
    destination_partition: int          # -1: the producer's partitioner (murmur2 of the key), as the worker
    topic_id: str = ""                  # the commit's metadata
    frame_keys: bool = False            # rewrite schema ids in keys / values (the topic's framing)
    frame_values: bool = False
    copied_before: int = 0              # records of the plan's range the driver copied before this part


@dataclass(frozen=True)
class CopySettings:
    """What every task of one job shares (picklable: it travels to the executors)."""

    consumer: dict
    producer: dict
    commit: bool = True
    destination_cluster_id: str = ""
    provenance: tuple[str, str] | None = None   # (source alias, source cluster id) when the mirror adds the header
    skip_origin: bool = False                   # origin-records: skip (a failback pair), else such a record fails
    id_headers: dict = field(default_factory=dict)  # source framing header -> destination's
    schemas: object | None = None               # maps an id first met mid-copy (spark.OnDemandSchemas)
    batch: int = 10_000
    exactly_once: object | None = None          # eos.ExactlyOnce for an exactly-once mirror
    progress_interval_s: float = 5.0
    stall_timeout_s: float = 120.0
    flush_timeout_s: float = 300.0


@dataclass
class Progress:
    """A task's progress lines: records copied, rate and time left, every `interval_s` and at the end."""

    task: CopyTask
    interval_s: float
    clock: Callable[[], float]
    emit: Callable[[dict], None]
    started: float = 0.0
    next_at: float = 0.0

    def __post_init__(self) -> None:
        self.started = self.clock()
        self.next_at = self.started + self.interval_s

    def report(self, copied: int, position: int, done: bool = False, event: str = "partition done", **extra) -> None:
        now = self.clock()
        if not done and now < self.next_at:
            return
        self.next_at = now + self.interval_s
        seconds = now - self.started
        rate = copied / seconds if seconds > 0 else 0.0  # this part's rate; "copied" counts the whole range's
        left = max(0, self.task.end - position)
        self.emit({
            "event": event if done else "partition progress", "topic": self.task.topic,
            "partition": self.task.partition, "copied": self.task.copied_before + copied, "position": position,
            "end": self.task.end,
            "offsets_left": left, "msgs_per_s": round(rate), "seconds": round(seconds, 2),
            "eta_s": round(left / rate, 1) if rate > 0 else None, **extra,
        })


def stderr_line(text: str) -> None:
    """One whole line on stderr: a single write (the driver's copy threads print too; print() writes the text
    and its newline apart, and lines of two threads ran into one)."""
    sys.stderr.write(text + "\n")
    sys.stderr.flush()


def stderr_event(event: dict) -> None:
    """A progress event as one `catchup: {json}` line on stderr."""
    stderr_line(f"catchup: {json.dumps(event)}")


def copy_range(task: CopyTask, settings: CopySettings, consumer, producer, errors: list,
               clock: Callable[[], float] = time.monotonic, emit: Callable[[dict], None] = stderr_event,
               checkpoint: Callable[[int], None] | None = None, checkpoint_every: int = 0,
               checkpoint_every_s: float = 0.0) -> int:
    """Copy `task`'s range from `consumer` to `producer`, flush, commit its end; the records copied.

    `errors` collects the producer's delivery errors (its on_delivery callback appends to it). With a
    `checkpoint` (exactly-once: commit the open transaction with the position given), it is called after a
    batch once `checkpoint_every` records were copied since the last one, or `checkpoint_every_s` seconds went by
    with records copied (a transaction must commit within its timeout however slowly records come), and at the
    end instead of the flush.
    """
    return copy_until(task, settings, consumer, producer, errors, clock, emit, checkpoint, checkpoint_every,
                      checkpoint_every_s=checkpoint_every_s)[0]


def copy_until(task: CopyTask, settings: CopySettings, consumer, producer, errors: list,
               clock: Callable[[], float] = time.monotonic, emit: Callable[[dict], None] = stderr_event,
               checkpoint: Callable[[int], None] | None = None, checkpoint_every: int = 0,
               stop: Callable[[], bool] | None = None, checkpoint_every_s: float = 0.0) -> tuple[int, int]:
    """copy_range that `stop` may end early, after any batch: (records copied, the end committed).

    Stopped at offset X, [start, X) is flushed (or checkpointed) and X committed, as if the range ended there:
    every record below X was delivered, none at or past it was produced. Not stopped, the end is task.end.
    """
    from confluent_kafka import KafkaError, TopicPartition

    end = task.end
    progress = Progress(task, settings.progress_interval_s, clock, emit)
    consumer.assign([TopicPartition(task.topic, task.partition, task.start)])
    produce, poll = producer.produce, producer.poll
    destination_topic, destination_partition = task.destination_topic, task.destination_partition
    provenance = settings.provenance
    cluster = settings.destination_cluster_id
    # The task's own copy: ids first met mid-copy are added to it (rewrite_on_demand).
    id_headers = dict(settings.id_headers) if task.frame_keys or task.frame_values else None
    frame_keys, frame_values, rewrite, framed = task.frame_keys, task.frame_values, wire_format.rewrite, wire_format.is_framed
    eof = KafkaError._PARTITION_EOF
    position, copied, waits, restamped = task.start, 0, 0, 0
    checkpointed, checkpointed_at = 0, None
    checkpoint_due = clock() + checkpoint_every_s if checkpoint_every_s else float("inf")
    stalled_at = clock() + settings.stall_timeout_s
    while position < end:
        batch = take_available(consumer, settings.batch, 1.0)
        if not batch:
            if clock() >= stalled_at:
                raise CopyFailed(f"{task.topic}[{task.partition}]: nothing read for {settings.stall_timeout_s:.0f}s "
                                 f"at offset {position}, range end {end}")
            continue
        stalled_at = clock() + settings.stall_timeout_s
        for msg in batch:
            err = msg.error()
            if err is not None:
                if err.code() == eof:
                    position = max(position, msg.offset())  # the partition's end: nothing below it is left
                    continue
                raise CopyFailed(f"{task.topic}[{task.partition}] consume error at offset {position}: {err.str()}")
            offset = msg.offset()
            if offset >= end:
                position = end
                break
            try:
                headers = read_headers(msg)
            except UnreadableHeaders as exc:
                # Not copyable as it is: the range stops here, before its commit, as the worker's partition
                # halts at this record; a rerun stops here again.
                raise CopyFailed(f"{task.topic}[{task.partition}] offset {offset}: {exc}") from None
            key, value = msg.key(), msg.value()
            timestamp = msg.timestamp()[1]
            if timestamp <= 0:  # none: the producer stamps it; the epoch: 1 ms (clients/timestamps.py), counted
                restamped += timestamp == 0
                timestamp = produced_timestamp(timestamp)
            if provenance or headers:
                headers = mirrored_headers(headers, provenance and provenance_value(
                    provenance[0], provenance[1], task.topic, task.partition, offset), cluster, task.topic,
                    destination_topic)
                if type(headers) is bytes:
                    if settings.skip_origin:  # as the worker: the destination has this record already
                        position = offset + 1
                        continue
                    raise CopyFailed(f"{task.topic}[{task.partition}] offset {offset}: cycle: the record came from "
                                     f"the destination cluster ({headers.decode()})")
            if id_headers is not None:
                try:
                    if frame_keys and framed(key):
                        key = rewrite(key, id_headers)
                    if frame_values and framed(value):
                        value = rewrite(value, id_headers)
                except KeyError:
                    key, value = rewrite_on_demand(settings.schemas, task, offset, msg.key(), msg.value(), id_headers)
            while True:
                try:
                    # By position: named arguments cost ~0.5 us a record (clients/produce_positions.py).
                    produce(destination_topic, value, key, destination_partition, None, None, timestamp, headers)
                    break
                except BufferError:  # queue.buffering.max.messages in flight: wait for deliveries
                    waits += 1
                    poll(0.005)
            position = offset + 1
            copied += 1
        poll(0)
        if errors:
            break
        if checkpoint is not None and copied > checkpointed and (
                copied - checkpointed >= checkpoint_every or clock() >= checkpoint_due):
            checkpoint(position)
            checkpointed, checkpointed_at = copied, position
            checkpoint_due = clock() + checkpoint_every_s if checkpoint_every_s else float("inf")
        progress.report(copied, position)
        if stop is not None and position < end and stop():
            end = position  # a batch boundary: every record below it was produced, none past it
    # The flush serves the last delivery reports (failures land in `errors`): check them after it.
    unflushed = producer.flush(settings.flush_timeout_s) if checkpoint is None and not errors else 0
    if errors or unflushed:
        raise CopyFailed(f"{task.topic}[{task.partition}] delivery failed: {errors[:3] or 'flush timed out'}; "
                         "not committed")
    if checkpoint is not None and checkpointed_at != end:
        checkpoint(end)  # the transaction's commit waits for every record of it
    if settings.commit:
        commit_range(consumer, [TopicPartition(task.topic, task.partition, end, task.topic_id)])
    progress.report(copied, end, done=True, event="partition done" if end == task.end else "partition handed over",
                    producer_waits=waits, **({"restamped_epoch_zero": restamped} if restamped else {}))
    return copied, end


def rewrite_on_demand(schemas, task: CopyTask, offset: int, key, value, id_headers: dict) -> tuple:
    """A key or value framed with a schema id the map does not have yet (registered under another subject
    than the topic's, or after the job started): map it as the worker's schema gate does
    (`SchemaSyncer.destination_header`: the subjects holding it are synced first), then rewrite. An id the
    source registry does not know, or a subject that conflicts, fails the range: nothing of it is
    committed, as the worker halts the partition."""
    from mirror_worker.batch_api import SchemaConflict, UnknownSchemaId

    fields = ((key, task.frame_keys), (value, task.frame_values))
    for data, framed in fields:
        if framed and wire_format.is_framed(data) and data[:wire_format.HEADER_SIZE] not in id_headers:
            source_id = wire_format.schema_id(data)
            if schemas is None:
                raise CopyFailed(f"{task.topic}[{task.partition}] offset {offset}: schema id {source_id} is not in "
                                 "the destination registry's map and the job has no registries to map it")
            try:
                id_headers[data[:wire_format.HEADER_SIZE]] = schemas.header(task.topic, source_id)
            except (UnknownSchemaId, SchemaConflict) as exc:
                raise CopyFailed(f"{task.topic}[{task.partition}] offset {offset}: {exc}; not committed") from None
    return tuple(wire_format.rewrite(data, id_headers) if framed and wire_format.is_framed(data) else data
                 for data, framed in fields)


def commit_range(consumer, offsets, timeout_s: float = 60.0, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
    """Commit a range's end for the mirror group, from outside the group (the task is not a member).

    The broker refuses such a commit while the group has members: a worker that joined during the catch-up
    is a member until it sees the catch-up's lease and exits (mirror_worker/engine/catchup_lease.py). Retried
    until the group is empty again, or `timeout_s`.
    """
    from confluent_kafka import KafkaError, KafkaException

    busy = {KafkaError.UNKNOWN_MEMBER_ID, KafkaError.ILLEGAL_GENERATION, KafkaError.REBALANCE_IN_PROGRESS,
            KafkaError.STALE_MEMBER_EPOCH, KafkaError.FENCED_MEMBER_EPOCH}
    deadline = clock() + timeout_s
    while True:
        try:
            consumer.commit(offsets=offsets, asynchronous=False)
            return
        except KafkaException as exc:
            if exc.args[0].code() not in busy or clock() > deadline:
                raise
            sleep(0.5)


def copy_task(task: CopyTask, settings: CopySettings, stop: Callable[[], bool] | None = None,
              emit: Callable[[dict], None] = stderr_event) -> tuple:
    """Copy one range with clients of its own: (copied, end committed, seconds, cpu seconds of this process,
    librdkafka's threads included). Spark's tasks and the driver's copy both run this."""
    from mirror_worker.batch_api import consumer as kafka_consumer
    from mirror_worker.batch_api import producer as kafka_producer

    errors: list = []
    started, cpu = time.monotonic(), time.process_time()
    copy = functools.partial(copy_until, emit=emit, stop=stop)
    consumer = kafka_consumer(settings.consumer)
    try:
        if settings.exactly_once is not None:
            copied, end = copy_exactly_once(task, settings, consumer, errors, copy)
        else:
            producer = kafka_producer(settings.producer, {
                "delivery.report.only.error": True, "on_delivery": lambda err, _msg: errors.append(err.str())})
            copied, end = copy(task, settings, consumer, producer, errors)
    finally:
        consumer.close()
    return copied, end, round(time.monotonic() - started, 3), round(time.process_time() - cpu, 3)


def copy_tasks(tasks: Iterable[CopyTask], settings: CopySettings) -> Iterator[tuple]:
    """A Spark partition's tasks (mapPartitions): (topic, partition, copied, seconds, cpu seconds) per range
    (cpu: the Python worker process's, librdkafka's threads included)."""
    for task in tasks:
        copied, end, seconds, cpu = copy_task(task, settings)
        stderr_line(f"catchup: {task.topic}[{task.partition}] copied {task.copied_before + copied} records up to "
                    f"offset {end}")
        yield task.topic, task.partition, copied, seconds, cpu


def warm_up(_partition: Iterable) -> Iterator[int]:
    """A Spark task that only imports what the copy needs: started while the driver still copies, the Python
    workers (reused by the copy's tasks) are ready when the ranges are handed over."""
    import confluent_kafka  # noqa: F401

    yield os.getpid()
