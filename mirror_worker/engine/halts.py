"""Records the destination will not take: dead-letter them (opt-in) or halt their partition."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from typing import Protocol

from confluent_kafka import KafkaException, TopicPartition

from mirror_worker.clients.headers import UnreadableHeaders, read_headers
from mirror_worker.engine.delivery import RunDelivery
from mirror_worker.engine.ledger import OffsetLedger
from mirror_worker.metrics import MirrorMetrics
from mirror_worker.policy.provenance import PROVENANCE_HEADER, provenance_value

log = logging.getLogger("mirror_worker")


class HaltableStream(Protocol):
    """What halting a partition needs of a source (source_stream.SourceStream is one): declared here, so
    that the parts depend on what they use, not on the worker's whole per-source state."""

    alias: str
    cluster_id: str
    consumer: object  # pause()
    ledger: OffsetLedger
    producers: list | dict  # indexed by the router's producer choice
    assigned: set[tuple[str, int]]


class Halts:
    """`refuse` a record (dead letter, else halt); `halt` a partition at an offset.

    `producer_index(topic, partition)` names the record's producer in `stream.producers` (the router's
    choice), so a dead-lettered record goes through the producer its partition writes with.
    """

    def __init__(self, metrics: MirrorMetrics, label: dict, dead_letter_topic: str | None,
                 producer_index: Callable[[str, int], object], on_refused_delivery: Callable | None = None) -> None:
        self.metrics = metrics
        self.label = label
        self.dead_letter_topic = dead_letter_topic
        self.producer_index = producer_index
        self.on_refused_delivery = on_refused_delivery  # a dead letter the destination refuses halts its partition

    def refuse(self, stream: HaltableStream, msg, reason: str, force_halt: bool = False) -> None:
        """A record the destination will not take: dead-letter it (opt-in) or halt its partition."""
        topic, partition, offset = msg.topic(), msg.partition(), msg.offset()
        labels = {**self.label, "source": stream.alias, "topic": topic}
        self.metrics.records_consumed.labels(**labels).inc()
        if self.dead_letter_topic and not force_halt:
            try:
                headers = read_headers(msg)
            except UnreadableHeaders as exc:  # a dead letter without its headers would not be the record
                self.halt(stream, topic, partition, offset, f"{reason}; {exc}")
                return
            headers = list(headers or []) + [
                (PROVENANCE_HEADER, provenance_value(stream.alias, stream.cluster_id, topic, partition, offset)),
                ("mirror.error", reason.encode()),
            ]
            try:
                extra = {}
                if self.on_refused_delivery is not None:
                    extra["on_delivery"] = RunDelivery(self.on_refused_delivery, stream, topic, partition, offset)
                stream.producers[self.producer_index(topic, partition)].produce(
                    self.dead_letter_topic, msg.value(), msg.key(), headers=headers, **extra)
                self.metrics.dead_lettered.labels(**labels).inc()
                log.error("record dead-lettered", extra={**labels, "partition": partition, "offset": offset, "reason": reason})
                return
            except (KafkaException, BufferError) as exc:
                reason = f"{reason}; dead-letter topic refused it too: {exc}"
        self.halt(stream, topic, partition, offset, reason)

    def resend(self, stream: HaltableStream, topic: str, partition: int, offset: int, reason: str) -> None:
        """A record at or after `offset` was not delivered (in time): hold the partition there, nothing at or
        after it is committed, and the next completed commit cycle rewinds it to its commit and mirrors it
        again (engine/commits.py). Counted and logged once per hold."""
        key = (topic, partition)
        held = key in stream.ledger.halted
        stream.ledger.halt(key, offset, reason, resend=True)
        if held:
            return
        stream.consumer.pause([TopicPartition(topic, partition)])
        self.metrics.errors.labels(kind="undelivered", **self.label).inc()
        log.warning("record not delivered, partition rewinds to its last commit", extra={
            **self.label, "source": stream.alias, "topic": topic, "partition": partition, "offset": offset,
            "reason": reason})

    def halt(self, stream: HaltableStream, topic: str, partition: int, offset: int, reason: str) -> None:
        """Stop one partition at `offset`: nothing at or after it is committed by this run."""
        labels = {**self.label, "source": stream.alias, "topic": topic}
        stream.ledger.halt((topic, partition), offset, reason)
        stream.consumer.pause([TopicPartition(topic, partition)])
        self.metrics.halted_partitions.labels(partition=str(partition), **labels).set(1)
        self.metrics.errors.labels(kind="halt", **self.label).inc()
        log.error("partition halted", extra={**labels, "partition": partition, "offset": offset, "reason": reason})
        print(f"mirror_worker: partition {topic}[{partition}] of source {stream.alias!r} halted at offset {offset}: {reason}",
              file=sys.stderr, flush=True)
