"""Issue #27 defect 7: exactly-once across a schema conflict found by the framing re-check mid-batch.

A topic without subjects is mirrored as raw bytes; its producer then registers a value subject that the
destination's subject contradicts, and writes framed records right behind raw ones. The re-check of the
first framed record finds the conflict and halts the partition there, after the raw records before it in
the same batch went into the open transaction: the position committed with them is that record's offset,
so the run after the conflict is resolved copies neither a raw record twice nor loses a framed one."""

from __future__ import annotations

import json
import uuid

import pytest
from confluent_kafka.schema_registry import Schema

from mirror_worker.schemas import wire_format
from tests.integration.test_exactly_once_registry_outage import _wait_uncommitted
from tests.integration.test_schema_sync import ORDER_V1, _client
from tests.kafka_util import create_topic, produce
from tests.worker_util import WorkerProcess, read_topic, wait_for_count, write_properties

pytestmark = pytest.mark.integration


def test_framing_recheck_conflict_halts_at_the_first_record_not_copied(stack, tmp_path, topic_name):
    src, dst = stack["source"].kafka.bootstrap_servers, stack["destination"].kafka.bootstrap_servers
    topic = topic_name("eos-recheck")
    create_topic(src, topic, partitions=1)
    # The destination subject holds another schema: strict mode cannot copy the source's there.
    other = {"type": "record", "name": f"Other{uuid.uuid4().hex[:8]}", "fields": [{"name": "x", "type": "string"}]}
    _client(stack, "destination").register_schema(f"{topic}-value", Schema(json.dumps(other), "AVRO"))
    consumer = write_properties(tmp_path / "source.properties", {
        "bootstrap.servers": src, "group.id": f"g-{topic}", "auto.offset.reset": "earliest",
    })
    producer = write_properties(tmp_path / "destination.properties", {"bootstrap.servers": dst})
    args = ["--consumer.config", consumer, "--producer.config", producer, "--whitelist", topic, "--name", "recheck",
            "--exactly.once", "--schema.registry.url", stack["source"].registry.url,
            "--destination.schema.registry.url", stack["destination"].registry.url]
    raw = [f"raw-{i:03d}".encode() for i in range(30)]
    workers = []
    try:
        # A long commit interval: records 0..9 are still in the open transaction when the conflict comes.
        first = WorkerProcess(args + ["--offset.commit.interval.ms", "60000"], tmp_path, "recheck-1")
        workers.append(first)
        first.wait_started()
        produce(src, topic, [{"value": v} for v in raw[:10]])
        _wait_uncommitted(dst, topic, 10)
        schema = {**ORDER_V1, "name": f"Order{uuid.uuid4().hex[:8]}"}
        schema_id = _client(stack, "source").register_schema(f"{topic}-value", Schema(json.dumps(schema), "AVRO"))
        framed = [wire_format.header(schema_id) + f"framed-{i}".encode() for i in range(5)]
        # One batch: raw records 10..29 are handed over, then the first framed one (30) finds the conflict.
        produce(src, topic, [{"value": v} for v in raw[10:] + framed])
        halted = first.wait_for_log("partition halted")
        assert first.terminate() == 0, first.stderr[-2000:]  # commits the open transaction

        # Resolved: lenient mode appends the source's version after the destination's own.
        second = WorkerProcess(args + ["--offset.commit.interval.ms", "500", "--schema.sync.mode", "lenient"],
                               tmp_path, "recheck-2")
        workers.append(second)
        second.wait_started()
        wait_for_count(dst, topic, 35, timeout=60)
        assert second.terminate() == 0, second.stderr[-2000:]
    finally:
        for worker in workers:
            worker.stop_quietly()
    mirrored = read_topic(dst, topic)  # read_committed
    copied = [m.value() for m in mirrored]
    duplicates = len(copied) - len(set(copied))
    missing = [v for v in raw if v not in copied] + [v[5:] for v in framed if v[5:] not in {c[5:] for c in copied}]
    assert (duplicates, missing) == (0, [])
    assert (halted["topic"], halted["partition"], halted["offset"]) == (topic, 0, 30)
    assert [v[5:] for v in copied] == [v[5:] for v in raw + framed]  # in order; the framed ones rewritten
    destination_id = _client(stack, "destination").get_latest_version(f"{topic}-value").schema_id
    assert {wire_format.schema_id(v) for v in copied[30:]} == {destination_id}
