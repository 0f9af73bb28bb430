"""The size of a far source's records, sampled at start: what its fetch responses follow (config/fetch_sizes.py
wan_fetch_max_bytes). A few partitions' last records are read once by a consumer of their own, which assigns them
(it never joins its group nor commits) and is closed before the mirror's consumer is made.

Only for a source across a WAN whose fetch.max.bytes is not named: a near source's responses do not follow the
records (engine/streams.py). What it costs: that consumer's connection and a metadata request, then the tails'
offsets and a fetch, about eight of the source's round trips at start (0.4 s at 50 ms on the bench;
docs/benchmarks/wan.md), beside the worker's own topics being made on the destination.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable

from confluent_kafka import KafkaError, KafkaException, TopicPartition

log = logging.getLogger("mirror_worker")

SAMPLE_PARTITIONS = 8  # spread over the mirrored topics, a topic's first partitions first
SAMPLE_TAIL = 100  # records read from the end of each
# What a record costs in a fetch response besides its key, value and headers (Kafka's record format v2: its length,
# attributes, timestamp and offset deltas, the key's and value's lengths, the header count; a batch's 61-byte
# header shared by its records).
RECORD_FRAMING_BYTES = 16
# The sampling consumer's own settings, over the source's connection: each partition's end is an event; a partition
# whose log starts later than its tail is read from its start; and a fetch of partitions with nothing new (an empty
# topic among them) returns at once: the broker's 500 ms wait held the partitions with records behind it, one fetch
# per broker being in flight (0.66 s of a 50 ms source's sample, measured on the bench with its empty live topic).
SAMPLE_CONSUMER = {"enable.partition.eof": True, "auto.offset.reset": "earliest", "fetch.wait.max.ms": 10}
# librdkafka's logical offset "N records before the end" (RD_KAFKA_OFFSET_TAIL): resolved by the consumer itself.
_OFFSET_TAIL_BASE = -2000


def wire_bytes(message) -> int:
    """A consumed record's bytes in a fetch response, about."""
    headers = message.headers() or ()
    return (len(message.key() or b"") + len(message.value() or b"") + RECORD_FRAMING_BYTES
            + sum(len(name) + len(value or b"") for name, value in headers))


def sample_partitions(partitions: dict[str, int], limit: int = SAMPLE_PARTITIONS) -> list[tuple[str, int]]:
    """Up to `limit` (topic, partition) of `partitions` (topic -> partition count), round the topics in name order:
    every topic's partition 0, then every topic's partition 1, and so on."""
    picked: list[tuple[str, int]] = []
    rounds = max(partitions.values(), default=0)
    for index in range(rounds):
        for topic in sorted(partitions):
            if index < partitions[topic]:
                picked.append((topic, index))
                if len(picked) == limit:
                    return picked
    return picked


def mean_record_bytes(consumer, partitions: Iterable[tuple[str, int]], timeout_s: float,
                      clock: Callable[[], float] = time.monotonic) -> float | None:
    """The mean wire size of the last SAMPLE_TAIL records of each of `partitions`, read by `consumer` (made with
    enable.partition.eof); None when none was read within `timeout_s` (empty partitions, no answer). Whatever was
    read by then counts: a sample, not a census."""
    wanted = {tp: SAMPLE_TAIL for tp in partitions}
    if not wanted:
        return None
    consumer.assign([TopicPartition(topic, partition, _OFFSET_TAIL_BASE - SAMPLE_TAIL) for topic, partition in wanted])
    total = count = 0
    deadline = clock() + timeout_s
    while wanted and (left := deadline - clock()) > 0:
        # Waits for one record or event, then takes what else is there: consume(n, timeout) alone would wait out
        # its timeout for n records that are not all coming (0.5 s of a 50 ms source's start, measured).
        batch = consumer.consume(1, min(left, 0.5))
        if batch:
            batch += consumer.consume(SAMPLE_TAIL * len(wanted), 0)
        for message in batch:
            key = (message.topic(), message.partition())
            if message.error() is not None:
                if message.error().code() == KafkaError._PARTITION_EOF:
                    wanted.pop(key, None)
                continue  # any other: the sample does without that partition's records
            total += wire_bytes(message)
            count += 1
            if key in wanted:
                wanted[key] -= 1
                if wanted[key] <= 0:
                    del wanted[key]
    return total / count if count else None


def sampled_record_bytes(make_consumer: Callable[[], object], topics: Callable[[object], dict[str, int] | None],
                         timeout_s: float, source: str) -> float | None:
    """mean_record_bytes over a few partitions of the `topics(consumer)` it mirrors (topic -> partition count),
    read by a consumer `make_consumer()` makes and this closes; None (logged) when the source does not answer or
    holds no records: the responses then keep their cap."""
    consumer = make_consumer()
    try:
        picked = sample_partitions(topics(consumer) or {})
        mean = mean_record_bytes(consumer, picked, timeout_s)
    except KafkaException as exc:
        log.warning("source records not sampled", extra={"source": source, "error": str(exc)})
        return None
    finally:
        consumer.close()
    log.info("source records sampled", extra={
        "source": source, "partitions": len(picked), "record_bytes": None if mean is None else round(mean, 1)})
    return mean
