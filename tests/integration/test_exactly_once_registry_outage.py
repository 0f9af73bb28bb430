"""Exactly-once across a source schema-registry outage in the middle of a batch (issue #17 a).

The shared registry is never stopped: the worker reaches it through a small TCP proxy that the test cuts.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from urllib.parse import urlsplit, urlunsplit

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from tests.kafka_util import create_topic, produce
from tests.worker_util import WorkerProcess, read_topic, write_properties

pytestmark = pytest.mark.integration

ORDER_V1 = {"type": "record", "name": "Order", "namespace": "outage",
            "fields": [{"name": "id", "type": "long"}, {"name": "item", "type": "string"}]}
ORDER_V2 = {**ORDER_V1, "fields": ORDER_V1["fields"] + [{"name": "qty", "type": "int", "default": 1}]}


class CuttableProxy:
    """Forwards TCP connections to `upstream` until cut(): then every connection is closed at once."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.down = False
        self.open: list[socket.socket] = []
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            if self.down:
                client.close()
                continue
            try:
                server = socket.create_connection(self.upstream, timeout=5)
            except OSError:
                client.close()
                continue
            with self.lock:
                self.open += [client, server]
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for s in (source, sink):
                try:
                    s.close()
                except OSError:
                    pass

    def cut(self) -> None:
        self.down = True
        with self.lock:
            for s in self.open:
                try:
                    s.shutdown(socket.SHUT_RDWR)
                    s.close()
                except OSError:
                    pass
            self.open = []

    def restore(self) -> None:
        self.down = False

    def close(self) -> None:
        self.cut()
        self.listener.close()


def _count_uncommitted(bootstrap: str, topic: str) -> int:
    """Records handed to the destination, in open transactions too (read_uncommitted)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "outage-watch",
                         "isolation.level": "read_uncommitted"})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1]
    finally:
        consumer.close()


def _wait_uncommitted(bootstrap: str, topic: str, at_least: int, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while _count_uncommitted(bootstrap, topic) < at_least:
        assert time.monotonic() < deadline, f"fewer than {at_least} records reached {topic}"
        time.sleep(0.3)


def _framed(client: SchemaRegistryClient, topic: str, schema: dict, ids: range) -> list[dict]:
    serialize = AvroSerializer(client, json.dumps(schema))
    records = []
    for i in ids:
        obj = {"id": i, "item": f"item-{i}", **({"qty": i} if schema is ORDER_V2 else {})}
        records.append({"key": f"k{i}".encode(), "value": serialize(obj, SerializationContext(topic, MessageField.VALUE))})
    return records


def test_registry_outage_mid_batch_commits_no_record_twice(stack, tmp_path, topic_name):
    src, dst = stack["source"].kafka.bootstrap_servers, stack["destination"].kafka.bootstrap_servers
    registry = urlsplit(stack["source"].registry.url)
    proxy = CuttableProxy((registry.hostname, registry.port))
    proxied_url = urlunsplit(registry._replace(netloc=f"127.0.0.1:{proxy.port}"))
    source_registry = SchemaRegistryClient({"url": stack["source"].registry.url})
    topic = topic_name("eos-outage")
    create_topic(src, topic, partitions=1)
    consumer = write_properties(tmp_path / "source.properties", {
        "bootstrap.servers": src, "group.id": f"g-{topic}", "auto.offset.reset": "earliest",
    })
    producer = write_properties(tmp_path / "destination.properties", {"bootstrap.servers": dst})
    # A long commit interval: when the registry goes away, records 0..9 sit in the open transaction.
    args = ["--consumer.config", consumer, "--producer.config", producer, "--whitelist", topic, "--name", "outage",
            "--exactly.once", "--offset.commit.interval.ms", "60000",
            "--schema.registry.url", proxied_url, "--destination.schema.registry.url", stack["destination"].registry.url]
    produce(src, topic, _framed(source_registry, topic, ORDER_V1, range(10)))
    workers = []
    try:
        first = WorkerProcess(args, tmp_path, "outage-1")
        workers.append(first)
        first.wait_started()
        _wait_uncommitted(dst, topic, 10)
        proxy.cut()
        # Known id (10..14), then a new one (15..17), fetched in one batch: the worker stops at 15.
        produce(src, topic, _framed(source_registry, topic, ORDER_V1, range(10, 15))
                + _framed(source_registry, topic, ORDER_V2, range(15, 18)))
        assert first.wait(90) == 1
        assert "schema registry" in first.stderr, first.stderr[-2000:]
        proxy.restore()
        second = WorkerProcess(args, tmp_path, "outage-2")
        workers.append(second)
        second.wait_started()
        # 15 records and a commit marker from the first worker, then at least 15..17 from this one.
        _wait_uncommitted(dst, topic, 16 + 3)
        assert second.terminate() == 0, second.stderr[-2000:]  # commits the open transaction
    finally:
        for worker in workers:
            worker.stop_quietly()
        proxy.close()
    source = read_topic(src, topic)
    mirrored = read_topic(dst, topic)  # read_committed
    # Schema ids differ between the registries; the Avro payload after the 5-byte header does not.
    assert [m.value()[5:] for m in mirrored] == [m.value()[5:] for m in source]
