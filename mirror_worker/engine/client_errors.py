"""What the worker does with the errors its clients report beside the records they hand over: a source consumer's
error, a failed delivery of a record produced without a RunDelivery (heartbeats, offset syncs, positions), and a
mirrored record the destination refused or did not take in time. All are served on the main thread, from a
consumer's consume() or a producer's poll(); none of them lets a record be skipped silently."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from confluent_kafka import KafkaError

from mirror_worker.clients.callbacks import fatal_reason
from mirror_worker.config.model import MirrorConfig
from mirror_worker.engine.delivery import RunDelivery, refusal_reason, undelivered
from mirror_worker.engine.halts import Halts
from mirror_worker.engine.run_state import RunState
from mirror_worker.metrics import MirrorMetrics

if TYPE_CHECKING:
    from mirror_worker.engine.source_stream import SourceStream

log = logging.getLogger("mirror_worker")


class ClientErrors:
    """`position_reset`: a partition whose position the consumer reset (PartitionAssignment.on_position_reset);
    `request_purge`: at-least-once, what the producers still hold is purged before the resend (CommitCycle)."""

    def __init__(self, config: MirrorConfig, metrics: MirrorMetrics, label: dict, state: RunState, halts: Halts,
                 position_reset: Callable[[SourceStream, str, int, str], None],
                 request_purge: Callable[[], None]) -> None:
        self.config = config
        self.metrics = metrics
        self.label = label
        self.state = state
        self.halts = halts
        self.position_reset = position_reset
        self.request_purge = request_purge

    def consume_error(self, stream: SourceStream, msg, err: KafkaError) -> None:
        """A consumer's error among its records: a reset position goes to the assignment; the rest are counted and
        logged, and a fatal one stops the worker."""
        if err.code() == KafkaError._AUTO_OFFSET_RESET and msg.topic() and msg.partition() is not None:
            self.position_reset(stream, msg.topic(), msg.partition(), err.str())
            return
        self.metrics.errors.labels(kind="consume", **self.label).inc()
        if err.fatal() or err.code() == KafkaError._FATAL:  # the latter: a fenced static member, see fatal_reason
            self.state.fail(fatal_reason(f"source {stream.alias!r} consumer failed", err, stream.instance_id))
        log.warning("consume error", extra={**self.label, "source": stream.alias, "error": err.str(),
                                            "topic": msg.topic()})

    def delivery_error(self, err: KafkaError, msg) -> None:
        """Records produced without a RunDelivery (heartbeats, offset syncs); only errors are reported."""
        self.metrics.errors.labels(kind="delivery", **self.label).inc()
        if msg.topic() in (self.config.heartbeat_topic, self.config.offset_syncs_topic, self.config.positions_topic):
            log.warning("heartbeat or offset sync delivery failed", extra={**self.label, "error": err.str()})
            return
        # Not a mirrored record (those carry their RunDelivery): nothing to tie it to, stop.
        self.state.fail(f"delivery to {msg.topic()}[{msg.partition()}] failed: {err.str()}")

    def refused_delivery(self, run: RunDelivery, err: KafkaError, msg) -> None:
        """The destination refused a record of `run`: halt the run's source partition at the run's first offset.

        Never dead-lettered, even with --dead.letter.topic: the broker refuses a whole batch, so the records
        reported here include valid ones that only shared a batch with the bad one (measured: a null key on
        a compacted topic took the next record with it). A restart mirrors them again from the halt.
        """
        self.metrics.errors.labels(kind="delivery", **self.label).inc()
        if undelivered(err) and (run.topic, run.partition) in run.stream.assigned:
            # Not refused, only not delivered in time: resent from the last commit, never skipped.
            self.halts.resend(run.stream, run.topic, run.partition, run.first_offset, f"not delivered: {err.str()}")
            if not self.config.exactly_once:
                self.request_purge()
            return
        reason = refusal_reason(err, msg, int(time.time() * 1000))  # wall clock, as the broker judges timestamps
        if msg.topic() == self.config.dead_letter_topic:
            reason = f"dead-letter topic refused a record: {err.str()}"
        if (run.topic, run.partition) not in run.stream.assigned:
            # Lost meanwhile (a revoke commits only after the flush that reports this): nothing of it is committed.
            log.error("record refused after its partition was lost", extra={
                **self.label, "source": run.stream.alias, "topic": run.topic, "partition": run.partition,
                "error": err.str()})
            return
        self.halts.halt(run.stream, run.topic, run.partition, run.first_offset, reason)
