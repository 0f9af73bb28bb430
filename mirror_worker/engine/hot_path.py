"""The hot path of a worker: every record of a consumed batch handed to its producer, in order, per partition.

`BatchMirror` takes its collaborators in its constructor (the router, the halts, the backpressure, the
metrics, the destination's max.message.bytes per topic, two callbacks of the worker) and keeps no state of
its own between batches but which partitions' epoch-stamped records it has logged: a stream's ledger, stash
and pending counts live on the stream. Unit tests drive it alone with in-memory fakes
(tests/unit/mirror_worker/engine/test_hot_path.py).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from confluent_kafka import KafkaError, KafkaException

from mirror_worker.clients.headers import HEADERS, UNREADABLE, unreadable_reason
from mirror_worker.clients.timestamps import produced_timestamp
from mirror_worker.engine.backpressure import Backpressure
from mirror_worker.engine.delivery import RunDelivery
from mirror_worker.engine.halts import Halts
from mirror_worker.engine.source_stream import SourceStream
from mirror_worker.metrics import MirrorMetrics
from mirror_worker.policy.provenance import mirrored_headers, provenance_value
from mirror_worker.policy.routing import Router
from mirror_worker.schemas import wire_format

log = logging.getLogger("mirror_worker")


class BatchMirror:
    """Hands batches of one stream to the producers (`mirror`): routing, headers, schema ids, limits, room."""

    def __init__(self, router: Router, halts: Halts, backpressure: Backpressure, metrics: MirrorMetrics, label: dict,
                 *, max_bytes: dict[str, int], destination_cluster_id: Callable[[], str],
                 on_refused_delivery: Callable, on_consume_error: Callable, provenance_headers: bool = False,
                 rewrite_ids: bool = True, skip_origin: bool = False) -> None:
        self.router = router
        self.halts = halts
        self.backpressure = backpressure
        self.metrics = metrics
        self._label = label
        self.max_bytes = max_bytes                        # destination topic -> max.message.bytes (TopicManagement updates it)
        self.destination_cluster_id = destination_cluster_id
        self.on_refused_delivery = on_refused_delivery    # (RunDelivery, err, msg): the destination refused a record
        self.on_consume_error = on_consume_error          # (stream, msg, err)
        self.provenance_headers = provenance_headers
        self.rewrite_ids = rewrite_ids                    # schema-id-rewrite is not "off"
        self.skip_origin = skip_origin                    # origin-records: skip (a failback pair), else halt
        self._restamp_logged: set[tuple[str, str, int]] = set()  # (source, topic, partition): logged once each

    def mirror(self, stream: SourceStream, batch: list) -> None:
        """The hot path: hand every record of `batch` to its producer, in order, per partition.

        A batch holds runs of records of one partition: the route, producer and halt state are looked
        up once per run, and the ledger and the counts are updated once per run (with the offset of the
        run's last record handed over), not once per record.
        """
        route_of = self.router.route
        destination_cluster_id = self.destination_cluster_id()
        producers = stream.producers
        handed_over = stream.ledger.handed_over  # called once per run, not per record
        halted = stream.ledger.halted
        pending = stream.pending
        provenance = self.provenance_headers
        max_bytes = self.max_bytes
        schemas = stream.schemas
        id_map = schemas.id_headers if schemas is not None and self.rewrite_ids else None
        rewrite, magic, header_size = wire_format.rewrite, wire_format.MAGIC_BYTE, wire_format.HEADER_SIZE
        frame_keys = frame_values = watch = False
        refused_delivery = self.on_refused_delivery
        msg_headers = HEADERS
        before = {topic: (c[0], c[1]) for topic, c in pending.items()}
        no_limit = 1 << 62
        # queue.size bounds the records in flight across every producer (exactly-once has one per partition).
        room = started_with = self.backpressure.room()
        # The current run: its partition, and what was handed over of it.
        topic = partition = None
        skip = False
        last = None  # the run's last record handed to the producer
        records = size_sum = newest = 0
        try:
            for msg in batch:
                err = msg.error()
                if err is not None:
                    # Close the run first: error handling may move a partition's position (on_data_loss=reset).
                    if last is not None:
                        _close_run(handed_over, pending, topic, partition, last, records, size_sum, newest)
                        last = None
                        records = size_sum = newest = 0
                    topic = partition = None
                    self.on_consume_error(stream, msg, err)
                    continue
                msg_partition = msg.partition()
                msg_topic = msg.topic()
                if msg_partition != partition or msg_topic != topic:
                    if last is not None:
                        _close_run(handed_over, pending, topic, partition, last, records, size_sum, newest)
                        last = None
                        records = size_sum = newest = 0
                    topic, partition = msg_topic, msg_partition
                    skip = bool(halted) and (topic, partition) in halted
                    route = route_of(topic, partition)
                    dest_topic, dest_partition = route.topic, route.partition
                    produce = producers[route.producer_index].produce
                    limit = max_bytes.get(dest_topic, no_limit)
                    on_delivery = RunDelivery(refused_delivery, stream, topic, partition, msg.offset())
                    if id_map is not None:
                        frame_keys, frame_values = schemas.fields(topic)
                        watch = not (frame_keys and frame_values)
                if skip:
                    continue
                key = msg.key()
                value = msg.value()
                size = (len(key) if key else 0) + (len(value) if value else 0)
                try:
                    headers = msg_headers(msg)  # clients/headers.py read_headers, inline: a call less per record
                except UNREADABLE as exc:
                    # Not copyable as it is (clients/headers.py): only this partition stops, at this record.
                    self.halts.refuse(stream, msg, unreadable_reason(exc), force_halt=True)
                    skip = True
                    continue
                timestamp = msg.timestamp()[1]
                if timestamp <= 0:  # none (the producer stamps it) or the epoch (1 ms): clients/timestamps.py
                    timestamp = self._restamp(stream, msg, timestamp)
                if provenance or headers:
                    headers = self._headers(stream, msg, headers, destination_cluster_id, dest_topic)
                    if headers is False:
                        skip = (topic, partition) in halted
                        continue
                refused = False
                if size > limit:
                    refused = True
                    self.halts.refuse(stream, msg, f"record of {size} bytes exceeds destination {dest_topic} "
                                                   f"max.message.bytes={limit}")
                elif id_map is not None:
                    if watch and ((not frame_keys and wire_format.is_framed(key))
                                  or (not frame_values and wire_format.is_framed(value))):
                        frame_keys, frame_values = schemas.recheck_framing(stream, msg)
                        watch = not (frame_keys and frame_values)
                        skip = (topic, partition) in halted  # a subject found now may conflict
                        if skip:
                            continue
                    try:
                        if frame_keys and key and key[0] == magic and len(key) >= header_size:
                            key = rewrite(key, id_map)
                        if frame_values and value and value[0] == magic and len(value) >= header_size:
                            value = rewrite(value, id_map)
                    except KeyError:
                        rewritten = schemas.new_schema_ids(stream, msg, frame_keys, frame_values)
                        refused = rewritten is None  # dead-lettered, or its partition (or topic) halted
                        if not refused:
                            key, value = rewritten
                if refused:
                    skip = (topic, partition) in halted
                    if skip:
                        continue
                else:
                    if room <= 0:
                        # queue.size records in flight: the rest of the batch waits, in order, in the stash,
                        # and the main loop waits for room before it fetches anything newer.
                        stream.stash[:0] = batch[batch.index(msg):]
                        break
                    try:
                        # By position: named arguments cost ~0.5 us a record (clients/produce_positions.py).
                        produce(dest_topic, value, key, dest_partition, on_delivery, None, timestamp, headers)
                    except BufferError:  # a producer's own queue.buffering.max.messages
                        stream.stash[:0] = batch[batch.index(msg):]
                        break
                    except KafkaException as exc:
                        if stream.transactions is not None and _transaction_failed(exc.args[0]):
                            # Not the record's fault: its transaction failed (a record before it was not
                            # delivered); the commit cycle aborts it and mirrors the partition again.
                            self.halts.resend(stream, topic, partition, msg.offset(), exc.args[0].str())
                            skip = True
                            continue
                        self.halts.refuse(stream, msg, exc.args[0].str())
                        skip = (topic, partition) in halted
                        if skip:
                            continue
                    room -= 1
                last = msg
                records += 1
                size_sum += size
                if timestamp > newest:
                    newest = timestamp
        except BaseException:
            # The rest of the batch was neither handed over nor stashed, yet the consumer's position counts
            # it: the commits on the way out must not step over to that position (see CommitCycle).
            stream.interrupted = True
            raise
        finally:
            # Also when an exception (e.g. SchemaRegistryUnavailable) ends the batch: the position must
            # cover exactly what was handed over, since exactly-once commits the open transaction with it.
            if last is not None:
                _close_run(handed_over, pending, topic, partition, last, records, size_sum, newest)
        if room < started_with:  # only a batch that handed records over: len() also counts unserved events,
            # so a batch that found the queue full noted one over queue.size with no record over it
            self.backpressure.note_in_flight(self.backpressure.queue_size - room)  # before the batch, plus it
        for topic, counts in pending.items():
            records, size = before.get(topic, (0, 0))
            if counts[0] > records:
                labels = {**self._label, "source": stream.alias, "topic": topic}
                self.metrics.records_consumed.labels(**labels).inc(counts[0] - records)
                self.metrics.bytes_consumed.labels(**labels).inc(counts[1] - size)

    def _restamp(self, stream: SourceStream, msg, timestamp: int) -> int:
        """The timestamp to produce a record without one (-1) or stamped at the epoch (0) with; the latter counted."""
        if timestamp == 0:
            topic, partition = msg.topic(), msg.partition()
            self.metrics.records_restamped.labels(**self._label, source=stream.alias, topic=topic).inc()
            where = (stream.alias, topic, partition)
            if where not in self._restamp_logged:
                self._restamp_logged.add(where)
                log.warning("record stamped at the epoch produced 1 ms later (librdkafka reads 0 as now); "
                            "counted in mirror_records_restamped, logged once per partition",
                            extra={**self._label, "source": stream.alias, "topic": topic, "partition": partition,
                                   "offset": msg.offset()})
        return produced_timestamp(timestamp)

    def _headers(self, stream: SourceStream, msg, headers, destination_cluster_id: str, destination_topic: str):
        """Copy headers, check for a cycle, add provenance. False means: the record was refused."""
        provenance = provenance_value(stream.alias, stream.cluster_id, msg.topic(), msg.partition(), msg.offset()) \
            if self.provenance_headers else None
        out = mirrored_headers(headers, provenance, destination_cluster_id, msg.topic(), destination_topic)
        if type(out) is bytes:
            if self.skip_origin:  # a failback pair: the destination has this record
                self.metrics.records_skipped.labels(reason="origin", **self._label, source=stream.alias,
                                                    topic=msg.topic()).inc()
                return False
            self.halts.refuse(stream, msg, f"cycle: the record is a copy of a record of the destination cluster "
                                           f"({out.decode()}), in a topic a mirror names after its topic",
                              force_halt=True)
            return False
        return out


def _transaction_failed(error: KafkaError) -> bool:
    """An exactly-once producer's state, not the record: the commit cycle aborts (or replaces the producer)."""
    return error.txn_requires_abort() or error.fatal() or error.code() in (KafkaError._STATE, KafkaError._FATAL)


def _close_run(handed_over, pending: dict, topic: str, partition: int, last, records: int, size: int,
               newest: int) -> None:
    """A run of one partition's records was handed over, up to and including `last`."""
    handed_over((topic, partition), last.offset())
    counts = pending.get(topic)
    if counts is None:
        counts = pending[topic] = [0, 0, 0]
    counts[0] += records
    counts[1] += size
    if newest > counts[2]:
        counts[2] = newest
