"""Issue #27 defect 2: a schema-id rewrite keeps what the data means.

Two source versions that differ only in an attribute the parsing canonical form drops (Avro `logicalType`,
a decimal's scale) are two schemas: each record's copy names the destination schema of its own version,
and strict mode does not take a destination subject without the attribute for an exact copy."""

from __future__ import annotations

import json
import uuid

import pytest
from confluent_kafka.schema_registry import Schema
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext

from mirror_worker.config.model import build_mirror_config
from mirror_worker.schemas import wire_format
from mirror_worker.schemas.sync import sync_mirror_schemas
from tests.integration.test_schema_sync import _client, _pad_destination_ids, _worker_args
from tests.kafka_util import create_topic, produce
from tests.worker_util import WorkerProcess, wait_for_count

pytestmark = pytest.mark.integration


def _avro(tag: str, ts_type) -> str:
    return json.dumps({"type": "record", "name": f"Event{tag}", "fields": [{"name": "ts", "type": ts_type}]})


def _versions(kind: str, tag: str) -> tuple[str, str]:
    """Two versions of one subject that differ only in how a field's bytes are to be read."""
    if kind == "AVRO":
        return _avro(tag, "long"), _avro(tag, {"type": "long", "logicalType": "timestamp-millis"})
    if kind == "AVRO-decimal":
        decimal = {"type": "bytes", "logicalType": "decimal", "precision": 12}
        return _avro(tag, {**decimal, "scale": 2}), _avro(tag, {**decimal, "scale": 4})
    if kind == "JSON":
        field = {"type": "string"}
        return tuple(json.dumps({"title": f"Event{tag}", "type": "object", "properties": {"ts": f}})
                     for f in (field, {**field, "format": "date-time"}))
    return tuple(f'syntax = "proto3";\npackage e{tag};\nmessage Event {{ {t} ts = 1; }}\n' for t in ("int64", "sint64"))


def _same_text(kind: str, a: str, b: str) -> bool:
    return a.split() == b.split() if kind == "PROTOBUF" else json.loads(a) == json.loads(b)


@pytest.mark.parametrize("kind", ["AVRO", "AVRO-decimal", "JSON", "PROTOBUF"])
def test_each_copy_names_the_destination_schema_of_its_own_version(stack, topic_name, tmp_path, kind):
    src, dst = stack["source"].kafka.bootstrap_servers, stack["destination"].kafka.bootstrap_servers
    topic = topic_name("meaning")
    create_topic(src, topic, partitions=1)
    schema_type = kind.split("-")[0]
    source = _client(stack, "source")
    ids = [source.register_schema(f"{topic}-value", Schema(text, schema_type))
           for text in _versions(kind, uuid.uuid4().hex[:8])]
    assert ids[0] != ids[1]  # the registry keeps two versions
    # Avro: payloads both versions read (a long 1700000000000 / 16 bytes of a decimal); others: opaque here.
    payload = b"\x80\xa0\xab\xfe\xf9\x62" if kind == "AVRO" else b"\x02\x0f" if kind == "AVRO-decimal" else b"\x00x"
    records = [wire_format.header(ids[i // 5]) + payload for i in range(10)]
    produce(src, topic, [{"value": v} for v in records])
    _pad_destination_ids(stack)

    worker = WorkerProcess(_worker_args(stack, tmp_path, f"g-{topic}", "--whitelist", topic, "--prefix", "sm."),
                           tmp_path)
    try:
        worker.wait_started()
        mirrored = wait_for_count(dst, f"sm.{topic}", 10, timeout=60)
    finally:
        assert worker.terminate() == 0, worker.stderr
    destination = _client(stack, "destination")
    assert [m.value()[5:] for m in mirrored] == [r[5:] for r in records]
    named = [destination.get_schema(wire_format.schema_id(m.value())).schema_str for m in mirrored]
    wrong = [i for i, (text, record) in enumerate(zip(named, records))
             if not _same_text(kind, text, source.get_schema(wire_format.schema_id(record)).schema_str)]
    assert wrong == [], f"copies naming another version's destination schema: {wrong}"
    assert destination.get_versions(f"sm.{topic}-value") == [1, 2]
    if kind == "AVRO":  # what a consumer of the copy reads: a long, then a timestamp
        read = AvroDeserializer(destination)
        values = [read(m.value(), SerializationContext(f"sm.{topic}", MessageField.VALUE))["ts"] for m in mirrored]
        assert [type(v).__name__ for v in values] == ["int"] * 5 + ["datetime"] * 5


def test_strict_mode_refuses_a_destination_subject_without_the_logical_type(stack, topic_name):
    topic = topic_name("strictlt")
    tag = uuid.uuid4().hex[:8]
    plain, timestamp = _versions("AVRO", tag)
    _client(stack, "source").register_schema(f"{topic}-value", Schema(timestamp, "AVRO"))
    _client(stack, "destination").register_schema(f"sm.{topic}-value", Schema(plain, "AVRO"))
    config = build_mirror_config({
        "name": "m", "group_id": "g", "whitelist": ".*", "prefix": "sm.",
        "sources": [{"name": "s", "consumer": {"bootstrap.servers": stack["source"].kafka.bootstrap_servers},
                     "schema_registry_url": stack["source"].registry.url}],
        "producer": {"bootstrap.servers": stack["destination"].kafka.bootstrap_servers},
        "destination_schema_registry_url": stack["destination"].registry.url,
    })

    report = sync_mirror_schemas(config, [topic])

    assert report.conflicts == {topic: f"schema conflict on topic {topic}: subject {topic}-value -> sm.{topic}-value: "
                                       "destination version 1 differs from source version 1 (strict mode needs an "
                                       "exact copy)"}
    assert report.registered == 0
