"""The mirrored records' producers' batch and request sizes before and after the destination topics are known
(engine/producer_sizing.py)."""

from __future__ import annotations

from mirror_worker.config.inflight import BATCHES_PER_PARTITION, MIN_PRODUCER_QUEUE_BYTES, inflight_sizes
from mirror_worker.config.librdkafka import KAFKA_MAX_MESSAGE_BYTES
from mirror_worker.engine.producer_sizing import ProducerSizing


def test_topics_at_kafkas_default_limit_replace_no_producer():
    """The defect (bench.wan's worker logs): librdkafka's message.max.bytes (1,000,000) is under the request a
    topic at Kafka's default limit (1,048,588) needs, so every start found its topics, raised it, and replaced
    the producers it had just made: a new connection, producer id and metadata, ~4 round trips at-least-once
    and ~9 exactly-once (a transactional producer's init) before the first record, 0.4-0.9 s at 100 ms. The
    producers are now made with what those topics need, as batch.size already was (DEFAULT_BATCH_SIZE)."""
    sizing = ProducerSizing({}, 10_000, {})
    before = sizing.fitted()
    assert sizing.refit([KAFKA_MAX_MESSAGE_BYTES, KAFKA_MAX_MESSAGE_BYTES]) is False
    assert sizing.fitted() == before
    assert int(before["message.max.bytes"]) >= KAFKA_MAX_MESSAGE_BYTES


def test_a_topic_taking_larger_records_still_raises_it_and_a_named_value_is_kept():
    sizing = ProducerSizing({}, 10_000, {})
    assert sizing.refit([8 * 1024 * 1024]) is True
    assert int(sizing.fitted()["message.max.bytes"]) > 8 * 1024 * 1024
    named = ProducerSizing({"message.max.bytes": "900000"}, 10_000, {})
    assert "message.max.bytes" not in named.fitted()
    assert named.refit([KAFKA_MAX_MESSAGE_BYTES]) is False


def _sized(named: dict) -> ProducerSizing:
    sizing = ProducerSizing(named, 10_000, {})
    sizing.resize(inflight_sizes(0.1, 128 * 1024 * 1024, None, named, [], 1))  # 100 ms away, no prefetch: ~94 MiB
    return sizing


def test_the_producers_bytes_follow_the_partitions_they_write_to_and_their_batches():
    """Stop 67 (config/inflight.py BATCHES_PER_PARTITION): counted partitions bound a producer's bytes to three of
    its batches each; batches fitted larger to the destination topics raise the bound with them."""
    sizing = _sized({})
    share = sizing.producer_queue_kbytes
    assert int(sizing.fitted()["queue.buffering.max.kbytes"]) == share  # not counted: the budget's share
    six = int(sizing.fitted(6)["queue.buffering.max.kbytes"])
    assert six == BATCHES_PER_PARTITION * 6 * sizing.batch_bytes // 1024 < share
    assert int(sizing.fitted(1)["queue.buffering.max.kbytes"]) == MIN_PRODUCER_QUEUE_BYTES // 1024
    assert sizing.refit([8 * 1024 * 1024]) is True
    assert int(sizing.fitted(2)["queue.buffering.max.kbytes"]) == BATCHES_PER_PARTITION * 2 * sizing.batch_bytes // 1024


def test_a_named_byte_bound_is_kept_whatever_the_partitions():
    sizing = _sized({"queue.buffering.max.kbytes": "500000"})
    assert "queue.buffering.max.kbytes" not in sizing.fitted(6)
