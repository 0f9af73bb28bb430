"""Issue 43 defect 3 on the real stack: the consistency check proves what a copy's schema ids mean.

The source topic's values are Avro in Confluent framing (its value subject on the source registry). Its copy
is written by hand, as a defective worker would have written it: the same value bodies, some framed with the
id of an unrelated schema of the destination registry or an id the destination registry does not know. Body
bytes equal, the old check (ids stripped) called such a copy consistent; now each of those records is a
`wrong_schema` difference. A copy whose ids name the same schema under other numbers is consistent."""

from __future__ import annotations

import io
import json
import time
import uuid

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from fastavro import parse_schema, schemaless_writer

from mirror_worker.policy.provenance import PROVENANCE_HEADER, provenance_value
from mirror_worker.schemas import wire_format
from tests.integration.test_consistency_check import KEEP, cluster_id
from tests.integration.test_consistency_check_compacted import check_mirror
from tests.kafka_util import commit_offsets, create_topic, produce

pytestmark = [pytest.mark.integration, pytest.mark.spark]

RECORDS = 10
WRONG = (2, 5, 7)          # copies framed with an unrelated destination schema's id
UNKNOWN = 8                # a copy framed with an id the destination registry does not know
ALTERED = 4                # a copy with the right schema and another body: altered, not wrong_schema
UNKNOWN_ID = 2**31 - 7


def _schema(name: str, field_type) -> dict:
    return {"type": "record", "name": name, "fields": [{"name": "ts", "type": field_type}]}


def _body(schema: dict, ts: int) -> bytes:
    out = io.BytesIO()
    schemaless_writer(out, parse_schema(schema), {"ts": ts})
    return out.getvalue()


def _registry(stack, side: str) -> SchemaRegistryClient:
    return SchemaRegistryClient({"url": stack[side].registry.url})


@pytest.fixture(scope="module")
def framed(stack):
    """(source topic, prefix of the wrong copy, prefix of the right copy): one framed source, two copies."""
    src, dst = stack["source"].kafka.bootstrap_servers, stack["destination"].kafka.bootstrap_servers
    topic, tag = f"framed-{uuid.uuid4().hex[:12]}", uuid.uuid4().hex[:8]
    meaning = _schema(f"Event{tag}", {"type": "long", "logicalType": "timestamp-millis"})
    source_id = _registry(stack, "source").register_schema(f"{topic}-value", Schema(json.dumps(meaning), "AVRO"))
    destination = _registry(stack, "destination")
    # Unrelated subjects first, so that the destination numbers the same schema differently.
    unrelated_id = destination.register_schema(
        f"other-{tag}-value", Schema(json.dumps(_schema(f"Other{tag}", "long")), "AVRO"))
    for n in range(3):
        destination.register_schema(f"pad-{tag}-{n}-value",
                                    Schema(json.dumps(_schema(f"Pad{tag}{n}", "string")), "AVRO"))
    right_id = destination.register_schema(f"ok.{topic}-value", Schema(json.dumps(meaning), "AVRO"))
    assert right_id not in (source_id, unrelated_id)   # (unrelated_id may equal source_id: the id left as it was)

    bodies = [_body(meaning, 1_700_000_000_000 + n) for n in range(RECORDS)]
    create_topic(src, topic, partitions=1, config=KEEP)
    produce(src, topic, [{"partition": 0, "key": f"k{n}".encode(), "value": wire_format.header(source_id) + body,
                          "timestamp": 1_714_521_600_000 + n} for n, body in enumerate(bodies)])
    cluster = cluster_id(src)

    def copy(prefix: str, header_of, body_of) -> None:
        create_topic(dst, prefix + topic, partitions=1, config=KEEP)
        produce(dst, prefix + topic, [
            {"partition": 0, "key": f"k{n}".encode(), "value": header_of(n) + body_of(n),
             "timestamp": 1_714_521_600_000 + n,
             "headers": [(PROVENANCE_HEADER, provenance_value("source", cluster, topic, 0, n))]}
            for n in range(RECORDS)])

    def wrong_header(n: int) -> bytes:
        return wire_format.header(UNKNOWN_ID if n == UNKNOWN else unrelated_id if n in WRONG else right_id)

    _commit_all(src, topic)
    copy("bad.", wrong_header, lambda n: bodies[n] if n != ALTERED else bodies[n][:-1] + b"\x02")
    copy("ok.", lambda n: wire_format.header(right_id), lambda n: bodies[n])
    return topic


def _commit_all(bootstrap: str, topic: str) -> None:
    """The spec's group (`g`) has copied everything, as a mirror that caught up would have. Retried: on a fresh
    stack the group coordinator may not be ready yet (NOT_COORDINATOR), and the check reads that group."""
    deadline = time.monotonic() + 60
    while True:
        try:
            return commit_offsets(bootstrap, topic, "g", {0: RECORDS})
        except KafkaException:
            if time.monotonic() > deadline:
                raise
            time.sleep(1)


def _check(stack, tmp_path, topic: str, prefix: str):
    return check_mirror(stack, tmp_path, prefix.rstrip("."), topic, prefix,
                        **{"schema-registry-url": f'"{stack["source"].registry.url}"',
                           "destination-schema-registry-url": f'"{stack["destination"].registry.url}"'})


def test_copies_whose_ids_name_other_schemas_are_wrong_schema(stack, framed, tmp_path):
    run = _check(stack, tmp_path, framed, "bad.")
    assert run.rc == 1 and run.report is not None, (run.rc, run.stderr[-3000:])
    assert run.report["status"] == "inconsistent"
    counts = run.counts(framed, 0)
    # Before the fix: (None, 1, 0): the copies with wrong ids passed, only the altered body was seen.
    assert (counts.get("wrong_schema"), counts["altered"], counts["missing"]) == (len(WRONG) + 1, 1, 0), counts
    assert run.report["totals"]["wrong_schema"] == len(WRONG) + 1
    assert run.report["examples"]["wrong_schema"] == [f"{framed}:0:{n}" for n in sorted((*WRONG, UNKNOWN))]
    assert run.report["examples"]["altered"] == [f"{framed}:0:{ALTERED}"]
    html = run.report_path.with_suffix(".html").read_text()
    assert f"<h3>wrong schema ({len(WRONG) + 1})</h3>" in html and "schema ids: proven" in html


def test_ids_rewritten_to_the_same_schema_are_consistent(stack, framed, tmp_path):
    run = _check(stack, tmp_path, framed, "ok.")
    assert run.rc == 0 and run.report is not None, (run.rc, run.stderr[-3000:], run.report and run.report["totals"])
    assert run.report["status"] == "ok"
    assert run.report["totals"].get("wrong_schema") == 0 and run.report["totals"]["checked"] == RECORDS
    assert run.report["schemas"]["checked"] is True
