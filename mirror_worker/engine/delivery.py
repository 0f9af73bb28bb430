"""Tying a delivery error to the source record it came from, without trusting anything in the record.

librdkafka reports a refused record with its destination topic, partition, key and value, but neither
its headers nor anything of the source: a `mirror.source` header may be an upstream hop's, and is not
even handed back. So the hot path passes one `RunDelivery` per run (consecutive records of one source
partition handed over together) as `on_delivery`: with `delivery.report.only.error` it is only called
for records the destination refused, and it knows the run's source partition and its first offset.

Invariant: `first_offset` is at or below the offset of every record produced with this object, so a
halt there never lets the partition commit past a refused record (records of the run before the
refused one, and valid records refused only because they shared its batch, are mirrored again after a
restart: at-least-once).
"""

from __future__ import annotations

from typing import Callable

from confluent_kafka import TIMESTAMP_NOT_AVAILABLE, KafkaError

from mirror_worker.clients.callbacks import call_normalised

# Not refused by the destination, only not delivered (in time): the record may be sent again.
_UNDELIVERED = {
    KafkaError._MSG_TIMED_OUT, KafkaError._TIMED_OUT, KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN,
    KafkaError._PURGE_QUEUE, KafkaError._PURGE_INFLIGHT, KafkaError.REQUEST_TIMED_OUT,
    KafkaError.NOT_ENOUGH_REPLICAS, KafkaError.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
    KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE,
    # The producer's state failed, not the record: its idempotence sequence or epoch (every record it still held
    # is reported so after a destination leader's kill -9: OUT_OF_ORDER_SEQUENCE_NUMBER). Exactly-once, its
    # transaction is aborted and the partition re-sent with a new producer; at-least-once, the producer's fatal
    # error stops the worker. Halting there (as for a refusal) stopped a partition for good.
    KafkaError.OUT_OF_ORDER_SEQUENCE_NUMBER, KafkaError.UNKNOWN_PRODUCER_ID, KafkaError.INVALID_PRODUCER_EPOCH,
    KafkaError.INVALID_PRODUCER_ID_MAPPING, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_TXN_STATE,
    KafkaError.TRANSACTION_ABORTABLE, KafkaError._FATAL, KafkaError._FENCED, KafkaError._STATE,
    KafkaError._INCONSISTENT,
}


def refusal_reason(err: KafkaError, msg, now_ms: int) -> str:
    """Why a refused record halts its partition, naming what to change on the destination when it is a setting.

    INVALID_TIMESTAMP: the destination topic does not take the record's CreateTime this far from its broker's
    clock (Kafka 4 takes one hour ahead by default, while a 3.x source took any). The worker raises new topics'
    limits to the source's (topics/timestamp_limits.py); a topic that existed, or a clock further off, needs an
    operator. librdkafka reports a refused record without its timestamp (measured, test_topic_sync.py): the
    line then names both settings; a reported timestamp ahead of `now_ms` names `after`, one behind `before`.
    """
    reason = f"destination refused the record: {err.str()}"
    if err.code() != KafkaError.INVALID_TIMESTAMP:
        return reason
    kind, stamp = msg.timestamp()
    if kind == TIMESTAMP_NOT_AVAILABLE:
        return (f"{reason}: raise message.timestamp.after.max.ms (a record ahead of the broker's clock) or "
                f"message.timestamp.before.max.ms (behind it) on destination topic {msg.topic()}")
    ahead = stamp > now_ms
    return (f"{reason}: its timestamp {stamp} is {abs(stamp - now_ms)} ms {'ahead of' if ahead else 'behind'} the "
            f"clock; raise message.timestamp.{'after' if ahead else 'before'}.max.ms on destination topic {msg.topic()}")


def undelivered(err: KafkaError) -> bool:
    """The destination did not refuse the record; it was not delivered before the producer gave up on it."""
    return err.code() in _UNDELIVERED or (err.retriable() and not err.fatal())


class RunDelivery:
    """The `on_delivery` callback of one run of records of one source partition."""

    __slots__ = ("on_refused", "stream", "topic", "partition", "first_offset")

    def __init__(self, on_refused: Callable, stream, topic: str, partition: int, first_offset: int) -> None:
        self.on_refused = on_refused  # (run, KafkaError, Message) -> None
        self.stream = stream
        self.topic = topic
        self.partition = partition
        self.first_offset = first_offset

    def __call__(self, err, msg) -> None:
        if err is not None:  # only refusals are reported (delivery.report.only.error): not per record
            call_normalised(self.on_refused, self, err, msg)

    def __repr__(self) -> str:
        return f"RunDelivery({self.topic}[{self.partition}] from offset {self.first_offset})"
