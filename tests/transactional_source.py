"""A source topic written as transactional applications write it: plain records, committed and aborted
transactions, and one transaction left open at the end (on partitions 0 and 2), for the batch-plane tests."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from confluent_kafka import Producer

from tests.kafka_util import create_topic

PARTITIONS = 3
OPEN_PARTITIONS = (0, 2)


@dataclass
class TransactionalSource:
    topic: str
    committed: dict[int, list[bytes]]          # per partition, in offset order: what a read_committed reader gets now
    pending: dict[int, list[bytes]]            # per partition: what it gets once the open transaction commits
    aborted: list[bytes]
    open_producer: Producer = field(repr=False)

    def commit_open_transaction(self) -> None:
        self.open_producer.commit_transaction(30)
        for partition, values in self.pending.items():
            self.committed[partition].extend(values)
        self.pending = {p: [] for p in self.pending}


# The open transaction must outlive the test that checks around it: at librdkafka's default (60 s) the broker
# aborted it under a loaded CI run, mid-test, and fenced the producer (its abort then failed with _FENCED).
# 10 minutes is inside the broker's transaction.max.timeout.ms (15 minutes by default).
OPEN_FOR_MS = 600_000


def _transactional(bootstrap: str, topic: str) -> Producer:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"tx-{topic}-{uuid.uuid4().hex[:8]}",
                         "linger.ms": 5, "transaction.timeout.ms": OPEN_FOR_MS})
    producer.init_transactions(30)
    return producer


def write_transactional_source(bootstrap: str, topic: str) -> TransactionalSource:
    """Per partition p, in offset order: 5 plain, a committed transaction of 4, an aborted one of 3, 5 plain,
    (p 0 and 1) a committed transaction of 2, then (p 0 and 2) an open transaction of 3 and 2 plain records
    written while it is open. Values are unique; every key is the value."""
    create_topic(bootstrap, topic, partitions=PARTITIONS, config={"retention.ms": "-1"})
    plain = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    committed: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
    pending: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
    aborted: list[bytes] = []

    def write_plain(label: str, count: int, into: dict[int, list[bytes]]) -> None:
        for p in range(PARTITIONS):
            for i in range(count):
                value = f"{label}-{p}-{i}".encode()
                plain.produce(topic, value, value, p)
                into[p].append(value)
        assert plain.flush(30) == 0

    def transaction(producer: Producer, label: str, count: int, partitions, into: list | dict) -> None:
        producer.begin_transaction()
        for p in partitions:
            for i in range(count):
                value = f"{label}-{p}-{i}".encode()
                producer.produce(topic, value, value, p)
                into[p].append(value) if isinstance(into, dict) else into.append(value)
        producer.flush(30)

    writer = _transactional(bootstrap, topic)
    write_plain("plain-a", 5, committed)
    transaction(writer, "tx-committed", 4, range(PARTITIONS), committed)
    writer.commit_transaction(30)
    transaction(writer, "tx-aborted", 3, range(PARTITIONS), aborted)
    writer.abort_transaction(30)
    write_plain("plain-b", 5, committed)
    transaction(writer, "tx-second", 2, (0, 1), committed)
    writer.commit_transaction(30)
    opened = _transactional(bootstrap, topic)
    transaction(opened, "tx-open", 3, OPEN_PARTITIONS, pending)
    # Written while the transaction is open: past the last stable offset on partitions 0 and 2.
    after = {p: [] for p in range(PARTITIONS)}
    write_plain("plain-c", 2, after)
    for p in range(PARTITIONS):
        (pending if p in OPEN_PARTITIONS else committed)[p].extend(after[p])
    return TransactionalSource(topic, committed, pending, aborted, opened)
