"""Small real-client helpers shared by integration tests."""

from __future__ import annotations

import subprocess
import time
from contextlib import contextmanager
from pathlib import Path

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

from devstack.jdk import find_java
from devstack.kafka import KafkaNode
from devstack.paths import KAFKA_LIBS

_PRODUCE_AT = Path(__file__).parent / "java" / "ProduceAt.java"


def create_topic(bootstrap: str, name: str, partitions: int = 1, config: dict | None = None,
                 replication_factor: int = 1, replica_assignment: list[list[int]] | None = None) -> None:
    """`replica_assignment` (the brokers of each partition, preferred leader first) replaces the counts."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    if replica_assignment:
        new_topic = NewTopic(name, len(replica_assignment), replica_assignment=replica_assignment, config=config or {})
    else:
        new_topic = NewTopic(name, partitions, replication_factor, config=config or {})
    futures = admin.create_topics([new_topic])
    futures[name].result(30)
    wait_for_partitions(bootstrap, name, len(replica_assignment) if replica_assignment else partitions, "creation")


def grow_partitions(bootstrap: str, name: str, partitions: int) -> None:
    """Add partitions and wait until the metadata shows them: a producer made before the broker answers
    with the new count fails records for the new partitions with 'Unknown partition'."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_partitions([NewPartitions(name, partitions)])[name].result(30)
    wait_for_partitions(bootstrap, name, partitions, "growth")


def wait_for_partitions(bootstrap: str, name: str, partitions: int, after: str, timeout: float = 30.0) -> None:
    """Until every broker of `bootstrap` lists `name` with (at least) `partitions` partitions. Each broker
    learns a change from the controller on its own time: on three brokers one of them still listed a new topic
    without partitions right after another had them (7 creations of 60), and the next client, asking that one,
    saw none. A client bootstrapped with one address asks that broker."""
    deadline = time.monotonic() + timeout
    for address in bootstrap.split(","):
        admin = AdminClient({"bootstrap.servers": address})
        while True:
            topic = admin.list_topics(name, timeout=10).topics.get(name)
            if topic is not None and topic.error is None and len(topic.partitions) >= partitions:
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"topic {name} not listed with its {partitions} partitions by {address} "
                                   f"after {after}")
            time.sleep(0.1)


def topic_exists(bootstrap: str, name: str) -> bool:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    return name in admin.list_topics(timeout=10).topics


def produce(bootstrap: str, topic: str, records: list[dict]) -> None:
    """records: dicts with value and optional key, headers, timestamp (ms), partition."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True})
    errors: list = []

    def on_delivery(err, _msg):
        if err is not None:
            errors.append(err)

    for record in records:
        kwargs = {k: record[k] for k in ("key", "headers", "timestamp", "partition") if k in record}
        producer.produce(topic, value=record.get("value"), on_delivery=on_delivery, **kwargs)
        producer.poll(0)
    remaining = producer.flush(30)
    if remaining or errors:
        raise KafkaException(f"produce to {topic} failed: {remaining} undelivered, errors {errors[:3]}")


def produce_at(bootstrap: str, topic: str, partition: int, records: list[tuple[str, int]]) -> None:
    """(value, CreateTime) records written by the Java client, which takes a timestamp of 0 as it is:
    librdkafka, behind `produce`, reads 0 as "now"."""
    subprocess.run([find_java(17), "-cp", f"{KAFKA_LIBS}/*", str(_PRODUCE_AT), bootstrap, topic, str(partition),
                    *(f"{value}@{timestamp}" for value, timestamp in records)],
                   check=True, capture_output=True, timeout=120)


def commit_offsets(bootstrap: str, topic: str, group: str, positions: dict[int, int]) -> None:
    """Commit {partition: offset} of `topic` for `group` without joining it (the group stays without members)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[TopicPartition(topic, p, o) for p, o in positions.items()], asynchronous=False)
    finally:
        consumer.close()


def end_offsets(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    """{partition: high watermark} of `topic` now."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "end-offsets", "enable.auto.commit": False})
    try:
        return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(partitions)}
    finally:
        consumer.close()


def consume_all(bootstrap: str, topic: str, expected: int, timeout: float = 60.0) -> list:
    """Read `expected` records from the beginning of `topic` (no group commits)."""
    consumer = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": f"test-reader-{time.monotonic_ns()}",
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
    })
    consumer.subscribe([topic])
    out = []
    deadline = time.monotonic() + timeout
    try:
        while len(out) < expected and time.monotonic() < deadline:
            for msg in consumer.consume(500, 1.0):
                if msg.error():
                    raise KafkaException(msg.error())
                out.append(msg)
    finally:
        consumer.close()
    return out


@contextmanager
def private_kafka(home: Path, **broker_settings: str):
    """A started one-node cluster of the test's own (small heap), for outages and special broker configs:
    the shared stack is never stopped or reconfigured."""
    node = KafkaNode("private", home, heap_mb=256, extra_settings=broker_settings, jit="c1")
    node.start()
    try:
        node.wait_ready(120)
        yield node
    finally:
        node.stop()
