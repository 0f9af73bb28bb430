"""Foundation: the local stack's clusters and registries are real, independent and durable."""

from __future__ import annotations

import time

import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

from devstack.net import is_listening
from tests.kafka_util import consume_all, create_topic, produce, topic_exists

pytestmark = pytest.mark.integration

# Recent timestamps: the brokers enforce retention every few seconds, and 7 days is the default.
NOW_MS = int(time.time() * 1000) - 60_000
RECORDS = [
    {"key": b"k-1", "value": b"v-1", "headers": [("h", b"1"), ("trace", b"abc")], "timestamp": NOW_MS + 1},
    {"key": b"k-2", "value": b"", "headers": [("h", b"2")], "timestamp": NOW_MS + 2},
    {"key": b"k-3", "value": None, "timestamp": NOW_MS + 3},  # a tombstone
    {"value": b"no key", "headers": [("dup", b"a"), ("dup", b"b")], "timestamp": NOW_MS + 4},
]


def _as_tuples(messages):
    return [(m.key(), m.value(), m.headers() or [], m.timestamp()[1]) for m in messages]


@pytest.mark.parametrize("cluster", ["source", "destination"])
def test_round_trip_keeps_keys_headers_and_timestamps(stack, topic_name, cluster):
    bootstrap = stack[cluster].kafka.bootstrap_servers
    topic = topic_name("roundtrip")
    create_topic(bootstrap, topic)
    produce(bootstrap, topic, RECORDS)

    got = consume_all(bootstrap, topic, expected=len(RECORDS))

    expected = [(r.get("key"), r["value"], r.get("headers", []), r["timestamp"]) for r in RECORDS]
    assert _as_tuples(got) == expected


def test_clusters_are_independent(stack, topic_name):
    topic = topic_name("only-on-source")
    create_topic(stack["source"].kafka.bootstrap_servers, topic)

    assert topic_exists(stack["source"].kafka.bootstrap_servers, topic)
    assert not topic_exists(stack["destination"].kafka.bootstrap_servers, topic)
    assert stack["source"].kafka.bootstrap_servers != stack["destination"].kafka.bootstrap_servers
    assert stack["source"].registry.url != stack["destination"].registry.url


AVRO_SCHEMA = """
{"type": "record", "name": "Order", "namespace": "demo",
 "fields": [{"name": "id", "type": "long"}, {"name": "item", "type": "string"}]}
"""


@pytest.mark.parametrize("cluster", ["source", "destination"])
def test_registry_registers_and_returns_avro_schema(stack, topic_name, cluster):
    client = SchemaRegistryClient({"url": stack[cluster].registry.url})
    subject = f"{topic_name('orders')}-value"

    schema_id = client.register_schema(subject, Schema(AVRO_SCHEMA, "AVRO"))

    by_id = client.get_schema(schema_id)
    latest = client.get_latest_version(subject)
    by_version = client.get_version(subject, 1)
    assert by_id.schema_type == "AVRO"
    assert _fields(by_id.schema_str) == ["id", "item"]
    assert latest.schema_id == schema_id and latest.version == 1 and latest.subject == subject
    assert by_version.schema_id == schema_id
    assert subject in client.get_subjects()


def _fields(schema_str: str) -> list[str]:
    import json

    return [f["name"] for f in json.loads(schema_str)["fields"]]


def test_registries_are_independent(stack, topic_name):
    subject = f"{topic_name('only-source')}-value"
    SchemaRegistryClient({"url": stack["source"].registry.url}).register_schema(subject, Schema(AVRO_SCHEMA, "AVRO"))

    assert subject in SchemaRegistryClient({"url": stack["source"].registry.url}).get_subjects()
    assert subject not in SchemaRegistryClient({"url": stack["destination"].registry.url}).get_subjects()


def test_broker_restart_keeps_data(outage_stack, topic_name):
    node = outage_stack["destination"].kafka  # a stack's broker class, the test's own: it is stopped
    topic = topic_name("durable")
    create_topic(node.bootstrap_servers, topic, partitions=3)
    records = [{"key": f"k{i}".encode(), "value": f"v{i}".encode(), "partition": i % 3} for i in range(30)]
    produce(node.bootstrap_servers, topic, records)
    address_before = node.bootstrap_servers

    node.stop()
    assert not node.process.is_running()
    assert not is_listening(node.port)
    node.start()
    node.wait_ready()

    assert node.bootstrap_servers == address_before
    got = consume_all(node.bootstrap_servers, topic, expected=30)
    assert sorted((m.key(), m.value()) for m in got) == sorted((r["key"], r["value"]) for r in records)
