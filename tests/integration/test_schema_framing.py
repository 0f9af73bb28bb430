"""Issue #17 b: schema ids are rewritten only where the topic's subjects say the data is framed.

A key or value that merely starts with byte 0 (an 8-byte big-endian long, raw bytes) is not Confluent
framing: with `schema-id-rewrite: auto` it passes byte for byte, whatever its bytes 1-4 happen to be."""

from __future__ import annotations

import json
import struct
import time

import pytest
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from mirror_worker.schemas import wire_format
from mirror_worker.schemas.framing import RECHECK_INTERVAL_S
from tests.integration.test_schema_sync import ORDER_V1, _client, _pad_destination_ids, _worker_args
from tests.kafka_util import create_topic, produce
from tests.worker_util import WorkerProcess, wait_for_count, write_mirror_spec

pytestmark = pytest.mark.integration

UNKNOWN_ID = 0x7FFFFFF4


def _long_key(schema_id: int, low: int) -> bytes:
    """A LongSerializer key (8 bytes, big-endian) whose bytes 1-4 read as `schema_id`."""
    return struct.pack(">q", (schema_id << 24) | low)


def _avro_values(stack, topic: str, first: int, count: int) -> list[bytes]:
    # A schema of its own: the registries give the same content the same id.
    schema = {**ORDER_V1, "name": f"Order{topic.replace('-', '_')}"}
    serializer = AvroSerializer(_client(stack, "source"), json.dumps(schema))
    return [serializer({"id": i, "item": f"item-{i}"}, SerializationContext(topic, MessageField.VALUE))
            for i in range(first, first + count)]


def _destination_id(stack, subject: str) -> int:
    return _client(stack, "destination").get_latest_version(subject).schema_id


def _halts(worker: WorkerProcess) -> list[dict]:
    return [e for e in worker.logs() if e.get("msg") in ("partition halted", "record dead-lettered")]


def test_long_keys_pass_byte_for_byte_while_avro_values_are_rewritten(stack, topic_name, tmp_path):
    src, dst = stack["source"].kafka.bootstrap_servers, stack["destination"].kafka.bootstrap_servers
    topic = topic_name("longkeys")
    create_topic(src, topic, partitions=1)
    values = _avro_values(stack, topic, 0, 6)  # registers <topic>-value only
    source_id = wire_format.schema_id(values[0])
    # Keys whose bytes 1-4 read as the value schema's id (mapped, so a blind rewrite alters them) or as an
    # id no registry knows (a blind rewrite halts on it).
    keys = [_long_key(source_id, i) for i in range(3)] + [_long_key(UNKNOWN_ID, i) for i in range(3)]
    assert all(wire_format.is_framed(k) for k in keys)
    produce(src, topic, [{"key": k, "value": v} for k, v in zip(keys, values)])
    _pad_destination_ids(stack)

    worker = WorkerProcess(_worker_args(stack, tmp_path, f"g-{topic}", "--whitelist", topic, "--prefix", "fr."),
                           tmp_path)
    try:
        worker.wait_started()
        mirrored = wait_for_count(dst, f"fr.{topic}", len(keys), timeout=60)
        halts = _halts(worker)
    finally:
        assert worker.terminate() == 0, worker.stderr
    assert halts == []
    assert [m.key() for m in mirrored] == keys
    destination_id = _destination_id(stack, f"fr.{topic}-value")
    assert destination_id != source_id
    assert [m.value() for m in mirrored] == [wire_format.header(destination_id) + v[5:] for v in values]


def test_topic_without_subjects_passes_unknown_schema_ids_untouched(stack, topic_name, tmp_path):
    src, dst = stack["source"].kafka.bootstrap_servers, stack["destination"].kafka.bootstrap_servers
    topic = topic_name("nosubj")
    create_topic(src, topic, partitions=1)
    records = [wire_format.header(UNKNOWN_ID) + f"raw-{i}".encode() for i in range(3)] + [b"\x00\x00\x00\x00\x01x"]
    produce(src, topic, [{"key": r, "value": r} for r in records])

    worker = WorkerProcess(_worker_args(stack, tmp_path, f"g-{topic}", "--whitelist", topic, "--prefix", "fr."),
                           tmp_path)
    try:
        worker.wait_started()
        mirrored = wait_for_count(dst, f"fr.{topic}", len(records), timeout=60)
        halts = _halts(worker)
        assert worker.proc.poll() is None, worker.stderr
    finally:
        assert worker.terminate() == 0, worker.stderr
    assert halts == []
    assert [(m.key(), m.value()) for m in mirrored] == [(r, r) for r in records]


@pytest.mark.parametrize("stamped", ["now", "an hour ago"])
def test_a_value_subject_registered_while_mirroring_starts_the_rewrite(stack, topic_name, tmp_path, stamped):
    """`an hour ago`, issue 43 defect 2: records carrying event time (a backfill, a replay, Kafka Streams) were
    stamped before the worker last looked for the topic's subjects, so it never looked again and copied them with
    the source's schema id, which names an unrelated destination schema. Framing is now decided by the record's
    schema id and the registry: an id not met before in the topic makes the worker look again, whatever the
    record's time."""
    src, dst = stack["source"].kafka.bootstrap_servers, stack["destination"].kafka.bootstrap_servers
    topic = topic_name("late")
    create_topic(src, topic, partitions=1)
    raw = [wire_format.header(UNKNOWN_ID) + b"before any subject"]
    produce(src, topic, [{"value": v} for v in raw])
    _pad_destination_ids(stack)

    worker = WorkerProcess(_worker_args(stack, tmp_path, f"g-{topic}", "--whitelist", topic, "--prefix", "fr."),
                           tmp_path)
    try:
        worker.wait_started()
        assert [m.value() for m in wait_for_count(dst, f"fr.{topic}", 1, timeout=60)] == raw
        if stamped != "now":
            time.sleep(2 * RECHECK_INTERVAL_S)  # the worker's last look is behind it, as in a long-running mirror
        values = _avro_values(stack, topic, 0, 5)  # the producer registers <topic>-value, then writes
        first_ms = int(time.time() * 1000) - (3_600_000 if stamped != "now" else 0)
        produce(src, topic, [{"value": v, "timestamp": first_ms + i} for i, v in enumerate(values)])
        mirrored = wait_for_count(dst, f"fr.{topic}", 6, timeout=60)
        halts = _halts(worker)
    finally:
        assert worker.terminate() == 0, worker.stderr
    assert halts == []
    assert [m.value() for m in mirrored[1:]] != values, "copied with the source's schema ids"
    destination_id = _destination_id(stack, f"fr.{topic}-value")
    assert destination_id != wire_format.schema_id(values[0])
    assert [m.value() for m in mirrored] == raw + [wire_format.header(destination_id) + v[5:] for v in values]


@pytest.mark.parametrize("mode", ["off", "force"])
def test_the_spec_turns_the_rewrite_off_or_forces_it(stack, topic_name, tmp_path, mode):
    src, dst = stack["source"].kafka.bootstrap_servers, stack["destination"].kafka.bootstrap_servers
    topic = topic_name(f"rw{mode}")
    create_topic(src, topic, partitions=1)
    values = _avro_values(stack, topic, 0, 2)
    source_id = wire_format.schema_id(values[0])
    # No key subject: only `force` treats these keys as framed.
    keys = [_long_key(source_id, i) for i in range(2)]
    produce(src, topic, [{"key": k, "value": v} for k, v in zip(keys, values)])
    _pad_destination_ids(stack)
    spec = write_mirror_spec(tmp_path / "spec.yaml", stack, "m", topic, prefix="fr.", **{"schema-id-rewrite": mode})
    text = spec.read_text()
    text = text.replace('kafka: {bootstrap.servers: "%s"}}' % src,
                        'kafka: {bootstrap.servers: "%s"}, schema-registry-url: "%s"}' % (src, stack["source"].registry.url))
    text = text.replace('kafka: {bootstrap.servers: "%s"}}' % dst,
                        'kafka: {bootstrap.servers: "%s"}, schema-registry-url: "%s"}' % (dst, stack["destination"].registry.url))
    spec.write_text(text)

    worker = WorkerProcess(["--config", str(spec), "--mirror", "m"], tmp_path)
    try:
        worker.wait_started()
        mirrored = wait_for_count(dst, f"fr.{topic}", 2, timeout=60)
        halts = _halts(worker)
    finally:
        assert worker.terminate() == 0, worker.stderr
    assert halts == []
    if mode == "off":
        assert [(m.key(), m.value()) for m in mirrored] == list(zip(keys, values))
        return
    destination = wire_format.header(_destination_id(stack, f"fr.{topic}-value"))
    assert [(m.key(), m.value()) for m in mirrored] == [(destination + k[5:], destination + v[5:])
                                                        for k, v in zip(keys, values)]
