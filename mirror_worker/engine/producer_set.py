"""The producers the worker hands mirrored records to, and the polls that serve their delivery reports."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from confluent_kafka import KafkaException, Producer

from mirror_worker.metrics import MirrorMetrics

if TYPE_CHECKING:
    from mirror_worker.engine.source_stream import SourceStream

log = logging.getLogger("mirror_worker")


class ProducerSet:
    """At-least-once: the worker's shared producers (`shared`, a list refilled in place when they are rebuilt);
    exactly-once: each source's one transactional producer (`stream.producers` of `streams`)."""

    def __init__(self, shared: list[Producer], streams: list[SourceStream], exactly_once: bool,
                 metrics: MirrorMetrics, label: dict) -> None:
        self.shared = shared
        self.streams = streams
        self.exactly_once = exactly_once
        self.metrics = metrics
        self.label = label

    def all(self) -> list[Producer]:
        if not self.exactly_once:
            return self.shared
        return [p for stream in self.streams for p in stream.producers]

    def in_flight(self) -> int:
        return sum(len(p) for p in self.all())

    def serve(self, timeout: float) -> None:
        """Poll every producer (delivery reports). confluent-kafka raises a client's fatal error from poll()
        instead of handing it to error_cb: at-least-once it stops the worker (raised); exactly-once the next
        commit of that source's transaction classifies it (fenced: StreamTransaction; else it is replaced)."""
        if not self.exactly_once:
            for producer in self.shared:
                producer.poll(timeout)
            return
        for stream in self.streams:
            for producer in list(stream.producers):
                try:
                    producer.poll(timeout)
                except KafkaException as exc:
                    if not exc.args[0].fatal():
                        raise
                    self.metrics.errors.labels(kind="transaction_producer", **self.label).inc()
                    log.warning("exactly-once producer failed: its next commit classifies it", extra={
                        **self.label, "source": stream.alias, "error": exc.args[0].str()})
