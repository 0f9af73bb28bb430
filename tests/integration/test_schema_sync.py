"""Schema sync and schema-id rewrite on the real stack: two Apicurio registries (Confluent API), the real worker."""

from __future__ import annotations

import json
import urllib.request
import uuid

import pytest
from confluent_kafka.schema_registry import Schema, SchemaReference, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from mirror_worker.config.model import build_mirror_config
from mirror_worker.schemas import wire_format
from mirror_worker.schemas.sync import sync_mirror_schemas
from tests.kafka_util import create_topic, produce
from tests.worker_util import WorkerProcess, by_partition, read_topic, wait_for_count, write_properties

pytestmark = pytest.mark.integration

ORDER_V1 = {"type": "record", "name": "Order", "namespace": "demo",
            "fields": [{"name": "id", "type": "long"}, {"name": "item", "type": "string"}]}
ORDER_V2 = {**ORDER_V1, "fields": ORDER_V1["fields"] + [{"name": "qty", "type": "int", "default": 1}]}
KEY_SCHEMA = {"type": "record", "name": "OrderKey", "namespace": "demo", "fields": [{"name": "id", "type": "long"}]}


def _client(stack, cluster: str) -> SchemaRegistryClient:
    return SchemaRegistryClient({"url": stack[cluster].registry.url})


def _pad_destination_ids(stack, count: int = 3) -> None:
    """Unrelated subjects on the destination first: the same schema gets another id there."""
    source_next = _client(stack, "source").register_schema(
        f"pad-{uuid.uuid4().hex[:8]}-value", Schema(json.dumps({"type": "record", "name": f"P{uuid.uuid4().hex[:8]}",
                                                                 "fields": []}), "AVRO"))
    destination = _client(stack, "destination")
    for _ in range(count + 20):
        padded = destination.register_schema(
            f"pad-{uuid.uuid4().hex[:8]}-value",
            Schema(json.dumps({"type": "record", "name": f"P{uuid.uuid4().hex[:8]}", "fields": []}), "AVRO"))
        if padded > source_next + count:
            return


def _worker_args(stack, tmp_path, group: str, *extra: str) -> list[str]:
    consumer = write_properties(tmp_path / f"{group}.source.properties", {
        "bootstrap.servers": stack["source"].kafka.bootstrap_servers, "group.id": group,
    })
    producer = write_properties(tmp_path / f"{group}.destination.properties", {
        "bootstrap.servers": stack["destination"].kafka.bootstrap_servers,
    })
    return ["--consumer.config", consumer, "--producer.config", producer,
            "--schema.registry.url", stack["source"].registry.url,
            "--destination.schema.registry.url", stack["destination"].registry.url,
            "--offset.commit.interval.ms", "1000", *extra]


def _produce_avro(stack, topic: str, schema: dict, first: int, count: int, partitions: int,
                  key_schema: dict = KEY_SCHEMA) -> None:
    client = _client(stack, "source")
    values = AvroSerializer(client, json.dumps(schema))
    keys = AvroSerializer(client, json.dumps(key_schema))
    records = []
    for i in range(first, first + count):
        obj = {"id": i, "item": f"item-{i}"}
        if "qty" in json.dumps(schema):
            obj["qty"] = i * 10
        records.append({
            "key": keys({"id": i}, SerializationContext(topic, MessageField.KEY)),
            "value": values(obj, SerializationContext(topic, MessageField.VALUE)),
            "partition": i % partitions,
        })
    produce(stack["source"].kafka.bootstrap_servers, topic, records)


def _decoded(stack, cluster: str, topic: str, messages) -> dict[int, list[tuple]]:
    deserializer = AvroDeserializer(_client(stack, cluster))
    out = {}
    for partition, records in by_partition(messages).items():
        out[partition] = [
            (deserializer(m.key(), SerializationContext(topic, MessageField.KEY)),
             deserializer(m.value(), SerializationContext(topic, MessageField.VALUE)))
            for m in records
        ]
    return out


def _metric(url: str, name: str, having: str = "") -> float:
    text = urllib.request.urlopen(url, timeout=5).read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(name + "{") and having in line)


@pytest.mark.parametrize("delivery", [[], ["--exactly.once"]], ids=["at-least-once", "exactly-once"])
def test_avro_records_read_the_same_through_both_registries_across_evolution(stack, topic_name, tmp_path, delivery):
    src, dst = stack["source"].kafka.bootstrap_servers, stack["destination"].kafka.bootstrap_servers
    topic = topic_name("avro")
    create_topic(src, topic, partitions=2)
    # Schemas of this test only: the registries give content they already hold the id it had (a reused stack).
    tag = topic.replace("-", "_")
    v1, v2 = ({**schema, "name": f"Order{tag}"} for schema in (ORDER_V1, ORDER_V2))
    key_schema = {**KEY_SCHEMA, "name": f"OrderKey{tag}"}
    _produce_avro(stack, topic, v1, 0, 30, 2, key_schema)
    _pad_destination_ids(stack)

    worker = WorkerProcess(_worker_args(stack, tmp_path, f"g-{topic}", "--whitelist", topic, "--prefix", "dc1.", "--preserve.partitions",
                                        "--metrics.port", "0", *delivery), tmp_path)
    try:
        worker.wait_started()
        assert len(wait_for_count(dst, f"dc1.{topic}", 30)) == 30
        # The schema evolves while the worker runs: v2 is registered on the source by this producer.
        _produce_avro(stack, topic, v2, 30, 30, 2, key_schema)
        mirrored = wait_for_count(dst, f"dc1.{topic}", 60)
        assert len(mirrored) == 60
        url = worker.wait_for_log("metrics endpoint")["url"]
        assert _metric(url, "mirror_schemas_registered_total") >= 3  # key v1, value v1, value v2
        assert _metric(url, "mirror_schema_id_cache_misses_total") >= 1
        assert _metric(url, "mirror_schema_id_cache_size") >= 3
    finally:
        assert worker.terminate() == 0, worker.stderr

    source = read_topic(src, topic)
    assert _decoded(stack, "destination", f"dc1.{topic}", mirrored) == _decoded(stack, "source", topic, source)
    assert any(v[1].get("qty") == 590 for values in _decoded(stack, "destination", f"dc1.{topic}", mirrored).values()
               for v in values)
    # Same payload bytes, another schema id: the rewrite was exercised, nothing re-serialised.
    source_partitions, mirrored_partitions = by_partition(source), by_partition(mirrored)
    for partition, originals in source_partitions.items():
        for original, m in zip(originals, mirrored_partitions[partition], strict=True):
            assert m.value()[5:] == original.value()[5:] and m.key()[5:] == original.key()[5:]
            assert wire_format.schema_id(m.value()) != wire_format.schema_id(original.value())
            assert wire_format.schema_id(m.key()) != wire_format.schema_id(original.key())
    destination = _client(stack, "destination")
    assert destination.get_versions(f"dc1.{topic}-value") == [1, 2]
    assert destination.get_versions(f"dc1.{topic}-key") == [1]


def test_strict_conflict_halts_only_that_topic(stack, topic_name, tmp_path):
    src, dst = stack["source"].kafka.bootstrap_servers, stack["destination"].kafka.bootstrap_servers
    base = topic_name("strict")
    clash, fine = f"{base}.clash", f"{base}.fine"
    for topic in (clash, fine):
        create_topic(src, topic, partitions=1)
        _produce_avro(stack, topic, ORDER_V1, 0, 10, 1)
    # The destination subject already holds a different schema: strict mode cannot make it an exact copy.
    other = {"type": "record", "name": "Other", "fields": [{"name": "x", "type": "string"}]}
    _client(stack, "destination").register_schema(f"dc1.{clash}-value", Schema(json.dumps(other), "AVRO"))

    worker = WorkerProcess(_worker_args(stack, tmp_path, f"g-{base}", "--whitelist", f"{base}\\..*",
                                        "--prefix", "dc1.", "--metrics.port", "0"), tmp_path)
    try:
        worker.wait_started()
        assert len(wait_for_count(dst, f"dc1.{fine}", 10)) == 10
        conflict = worker.wait_for_log("schema conflict: topic not mirrored")
        assert conflict["topic"] == clash
        halted = worker.wait_for_log("partition halted")
        assert halted["topic"] == clash and halted["partition"] == 0 and halted["offset"] == 0
        # Still mirroring the other topic.
        _produce_avro(stack, fine, ORDER_V1, 10, 5, 1)
        _produce_avro(stack, clash, ORDER_V1, 10, 5, 1)
        assert len(wait_for_count(dst, f"dc1.{fine}", 15)) == 15
        url = worker.wait_for_log("metrics endpoint")["url"]
        assert _metric(url, "mirror_schema_conflict", f'topic="{clash}"') == 1
        assert _metric(url, "mirror_schema_conflict", f'topic="{fine}"') == 0
    finally:
        assert worker.terminate() == 0, worker.stderr
    assert read_topic(dst, f"dc1.{clash}") == []
    assert _client(stack, "destination").get_versions(f"dc1.{clash}-value") == [1]  # nothing written
    assert (f"mirror_worker: schema conflict on topic {clash}: subject {clash}-value -> dc1.{clash}-value: "
            "destination version 1 differs from source version 1 (strict mode needs an exact copy)") in worker.stderr


def _spec(stack, tmp_path, topics_regex: str, mode: str) -> str:
    path = tmp_path / f"spec-{mode}.yaml"
    path.write_text(json.dumps({
        "groups": [{
            "name": "g",
            "source": {"name": "src", "kafka": {"bootstrap.servers": stack["source"].kafka.bootstrap_servers},
                       "schema-registry-url": stack["source"].registry.url},
            "destination": {"kafka": {"bootstrap.servers": stack["destination"].kafka.bootstrap_servers},
                            "schema-registry-url": stack["destination"].registry.url},
            "mirrors": [{"name": "m", "whitelist": topics_regex, "prefix": "dc2.", "schema-sync": mode,
                         "schema-compatibility": "mirror"}],
        }],
    }))
    return str(path)


def test_lenient_accepts_extra_destination_versions_strict_does_not(stack, topic_name, tmp_path):
    src = stack["source"].kafka.bootstrap_servers
    topic = topic_name("lenient")
    create_topic(src, topic, partitions=1)
    source = _client(stack, "source")
    source.register_schema(f"{topic}-value", Schema(json.dumps(ORDER_V1), "AVRO"))
    source.register_schema(f"{topic}-value", Schema(json.dumps(ORDER_V2), "AVRO"))
    source.set_compatibility(f"{topic}-value", "FORWARD")
    destination = _client(stack, "destination")
    extra = {"type": "record", "name": "Order", "namespace": "demo", "fields": [{"name": "id", "type": "long"}]}
    destination.register_schema(f"dc2.{topic}-value", Schema(json.dumps(extra), "AVRO"))

    strict = WorkerProcess(["sync-schemas", "--config", _spec(stack, tmp_path, topic, "strict"), "--mirror", "m"],
                           tmp_path, "strict")
    assert strict.wait(60) == 1
    assert strict.stderr.strip().splitlines() == [
        f"mirror_worker: schema conflict on topic {topic}: subject {topic}-value -> dc2.{topic}-value: destination "
        "version 1 differs from source version 1 (strict mode needs an exact copy)"]

    lenient = WorkerProcess(["sync-schemas", "--config", _spec(stack, tmp_path, topic, "lenient"), "--mirror", "m",
                             "--topics", topic], tmp_path, "lenient")
    assert lenient.wait(60) == 0, lenient.stderr
    report = json.loads(lenient.stdout_path.read_text().strip().splitlines()[-1])
    assert report == {"ok": True, "conflicts": {}, "registered": 2, "topics": [topic]}
    versions = [destination.get_version(f"dc2.{topic}-value", v).schema.schema_str for v in (1, 2, 3)]
    assert [json.loads(s) for s in versions] == [extra, ORDER_V1, ORDER_V2]
    assert destination.get_compatibility(f"dc2.{topic}-value") == "FORWARD"

    again = WorkerProcess(["sync-schemas", "--config", _spec(stack, tmp_path, topic, "lenient"), "--mirror", "m"],
                          tmp_path, "again")
    assert again.wait(60) == 0, again.stderr
    assert json.loads(again.stdout_path.read_text().strip().splitlines()[-1])["registered"] == 0


def test_json_schema_and_protobuf_with_reference_are_copied(stack, topic_name):
    json_topic, proto_topic = topic_name("js"), topic_name("pb")
    tag = uuid.uuid4().hex[:8]
    source = _client(stack, "source")
    json_schema = {"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]}
    source.register_schema(f"{json_topic}-value", Schema(json.dumps(json_schema), "JSON"))
    common_subject = f"common-{tag}.proto"
    common = f'syntax = "proto3";\npackage c{tag};\nmessage Address {{ string city = 1; }}\n'
    source.register_schema(common_subject, Schema(common, "PROTOBUF"))
    order = (f'syntax = "proto3";\npackage o{tag};\nimport "{common_subject}";\n'
             f'message Order {{ int64 id = 1; c{tag}.Address ship_to = 2; }}\n')
    source.register_schema(f"{proto_topic}-value",
                           Schema(order, "PROTOBUF", [SchemaReference(common_subject, common_subject, 1)]))
    config = build_mirror_config({
        "name": "m", "group_id": "g", "whitelist": ".*", "prefix": "dc3.",
        "sources": [{"name": "s", "consumer": {"bootstrap.servers": stack["source"].kafka.bootstrap_servers},
                     "schema_registry_url": stack["source"].registry.url}],
        "producer": {"bootstrap.servers": stack["destination"].kafka.bootstrap_servers},
        "destination_schema_registry_url": stack["destination"].registry.url,
    })

    report = sync_mirror_schemas(config, [json_topic, proto_topic])

    assert report.to_dict() == {"ok": True, "conflicts": {}, "registered": 3, "topics": [json_topic, proto_topic]}
    destination = _client(stack, "destination")
    copied_json = destination.get_version(f"dc3.{json_topic}-value", 1).schema
    assert copied_json.schema_type == "JSON" and json.loads(copied_json.schema_str) == json_schema
    assert destination.get_version(common_subject, 1).schema.schema_str.split() == common.split()
    copied = destination.get_version(f"dc3.{proto_topic}-value", 1).schema
    assert copied.schema_type == "PROTOBUF" and copied.schema_str.split() == order.split()
    assert [(r.name, r.subject, r.version) for r in copied.references] == [(common_subject, common_subject, 1)]


def test_unframed_records_pass_through_and_an_unknown_schema_id_halts_its_partition(stack, topic_name, tmp_path):
    src, dst = stack["source"].kafka.bootstrap_servers, stack["destination"].kafka.bootstrap_servers
    base = topic_name("raw")
    plain, bad = f"{base}.plain", f"{base}.bad"
    create_topic(src, plain, partitions=1)
    create_topic(src, bad, partitions=2)
    payloads = [b"plain text", b"\x00\x01\x02", b"\x01\x00\x00\x00\x07rest", None, b"", b"\xff" * 100]
    produce(src, plain, [{"key": p, "value": p, "headers": [("h", b"\x00\x00\x00\x00\x01x")]} for p in payloads])
    # Framing is a property of the topic: `bad`'s values are framed because it has a value subject.
    _client(stack, "source").register_schema(f"{bad}-value", Schema(json.dumps(ORDER_V1), "AVRO"))
    unknown = wire_format.header(0x7FFFFFF0) + b"payload"
    produce(src, bad, [
        {"value": b"first", "partition": 0}, {"value": unknown, "partition": 0}, {"value": b"after", "partition": 0},
        {"value": b"other partition", "partition": 1},
    ])

    worker = WorkerProcess(_worker_args(stack, tmp_path, f"g-{base}", "--whitelist", f"{base}\\..*",
                                        "--provenance.headers"), tmp_path)
    try:
        worker.wait_started()
        mirrored = wait_for_count(dst, plain, len(payloads))
        halted = worker.wait_for_log("partition halted")
        assert halted["topic"] == bad and halted["partition"] == 0 and halted["offset"] == 1
        assert "unknown schema: schema id 2147483632 is not in the source" in halted["reason"]
        assert sorted(m.value() for m in wait_for_count(dst, bad, 2)) == [b"first", b"other partition"]
    finally:
        assert worker.terminate() == 0, worker.stderr
    assert [(m.key(), m.value()) for m in mirrored] == [(p, p) for p in payloads]
    assert all(m.headers()[0] == ("h", b"\x00\x00\x00\x00\x01x") for m in mirrored)
    assert f"partition {bad}[0] of source" in worker.stderr and "halted at offset 1" in worker.stderr
    # The halted partition wrote nothing after the bad record.
    assert sorted(m.value() for m in read_topic(dst, bad)) == [b"first", b"other partition"]


def test_unknown_schema_id_goes_to_the_dead_letter_topic_when_asked(stack, topic_name, tmp_path):
    src, dst = stack["source"].kafka.bootstrap_servers, stack["destination"].kafka.bootstrap_servers
    topic, dead = topic_name("dlq-src"), topic_name("dlq")
    create_topic(src, topic, partitions=1)
    create_topic(dst, dead, partitions=1)
    _client(stack, "source").register_schema(f"{topic}-value", Schema(json.dumps(ORDER_V1), "AVRO"))
    unknown = wire_format.header(0x7FFFFFF1) + b"payload"
    produce(src, topic, [{"value": b"first"}, {"value": unknown}, {"value": b"after"}])

    worker = WorkerProcess(_worker_args(stack, tmp_path, f"g-{topic}", "--whitelist", topic,
                                        "--dead.letter.topic", dead), tmp_path)
    try:
        worker.wait_started()
        assert [m.value() for m in wait_for_count(dst, topic, 2)] == [b"first", b"after"]
        [dead_lettered] = wait_for_count(dst, dead, 1)
    finally:
        assert worker.terminate() == 0, worker.stderr
    assert dead_lettered.value() == unknown  # the source's bytes, not rewritten
    headers = dict(dead_lettered.headers())
    assert headers["mirror.error"].decode().startswith("unknown schema: schema id 2147483633 is not in the source")
    assert "partition halted" not in [e.get("msg") for e in worker.logs()]


def test_unreachable_registry_stops_the_worker_without_leaking_credentials(stack, topic_name, tmp_path):
    src = stack["source"].kafka.bootstrap_servers
    topic = topic_name("noreg")
    create_topic(src, topic, partitions=1)
    args = _worker_args(stack, tmp_path, f"g-{topic}", "--whitelist", topic)
    args[args.index("--schema.registry.url") + 1] = "http://127.0.0.1:1/apis/ccompat/v7"
    # Credentials over http are refused without this opt-in (config/posture.py): here they must reach the client.
    with open(args[args.index("--consumer.config") + 1], "a") as source_properties:
        source_properties.write("\nallow-insecure=http-registry\nschema.registry.basic.auth.user.info=mirror:s3cret-pw\n")

    worker = WorkerProcess(args, tmp_path)
    assert worker.wait(120) == 1
    assert worker.stderr.strip().splitlines() == [
        "mirror_worker: source 'g-{}.source' schema registry unreachable: ConnectError: [Errno 111] Connection "
        "refused".format(topic)]
    assert "s3cret" not in worker.stdout_path.read_text()
