"""Exactly-once when something fails in the middle of a batch (issue #17 a): what a committed transaction
holds and the position committed with it always agree."""

from __future__ import annotations

import json
import re
import time
import urllib.request

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from tests.integration.test_schema_sync import ORDER_V1, ORDER_V2
from tests.kafka_util import create_topic, produce
from tests.registry_proxy import RegistryProxy
from tests.worker_util import WorkerProcess, read_topic, wait_for_count, write_properties

pytestmark = pytest.mark.integration


def _avro_records(stack, topic: str, schema: dict, first: int, count: int) -> list[dict]:
    serialize = AvroSerializer(SchemaRegistryClient({"url": stack["source"].registry.url}), json.dumps(schema))
    records = []
    for i in range(first, first + count):
        value = {"id": i, "item": f"item-{i}", **({"qty": i} if schema is ORDER_V2 else {})}
        records.append({"key": f"k{i}".encode(), "value": serialize(value, SerializationContext(topic, MessageField.VALUE))})
    return records


def _consumed(metrics_url: str) -> float:
    text = urllib.request.urlopen(metrics_url, timeout=5).read().decode()
    return sum(float(v) for v in re.findall(r'^mirror_records_consumed_total\{[^}]*\} (\S+)$', text, re.M))


def test_registry_outage_mid_batch_commits_no_record_twice(stack, topic_name, tmp_path):
    """Records 0..9 are handed over in one batch (no commit yet: a 60 s interval); then 10..14 (known schema
    id) and 15 (a new id, while the source registry is down) arrive in another: the worker stops on the
    outage and commits on its way out. Before: that transaction held 0..14 with position 10 (the
    interrupted run never moved it), so after the restart read_committed readers saw 10..14 twice."""
    src, dst = stack["source"].kafka.bootstrap_servers, stack["destination"].kafka.bootstrap_servers
    topic = topic_name("eos-reg")
    create_topic(src, topic, partitions=1)
    consumer = write_properties(tmp_path / "source.properties", {"bootstrap.servers": src, "group.id": f"g-{topic}"})
    producer = write_properties(tmp_path / "destination.properties", {"bootstrap.servers": dst})
    with RegistryProxy(stack["source"].registry.url) as proxy:
        args = ["--consumer.config", consumer, "--producer.config", producer, "--whitelist", topic,
                "--exactly.once", "--offset.commit.interval.ms", "60000", "--name", f"eos-{topic}",
                "--schema.registry.url", proxy.url, "--metrics.port", "0",
                "--destination.schema.registry.url", stack["destination"].registry.url]
        first = WorkerProcess(args, tmp_path, "first")
        try:
            metrics = first.wait_for_log("metrics endpoint")["url"]
            first.wait_for_log("partitions assigned", timeout=90)
            produce(src, topic, _avro_records(stack, topic, ORDER_V1, 0, 10))
            deadline = time.monotonic() + 60
            while _consumed(metrics) < 10 and time.monotonic() < deadline:
                time.sleep(0.2)
            assert _consumed(metrics) == 10
            proxy.cut.set()
            produce(src, topic, _avro_records(stack, topic, ORDER_V1, 10, 5) + _avro_records(stack, topic, ORDER_V2, 15, 1))
            assert first.wait(120) == 1, first.stderr  # the registry does not answer: stop, resume later
        finally:
            first.stop_quietly()
        assert "schema registry" in first.stderr and proxy.requests_refused > 0, first.stderr
        proxy.cut.clear()
        second = WorkerProcess(args, tmp_path, "second")
        try:
            wait_for_count(dst, topic, 16, timeout=90)
        finally:
            assert second.terminate() == 0, second.stderr
    keys = [m.key() for m in read_topic(dst, topic)]  # read_committed (librdkafka's default)
    assert keys == [f"k{i}".encode() for i in range(16)]
