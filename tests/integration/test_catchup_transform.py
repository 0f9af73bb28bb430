"""The catch-up applies the worker's record transform on the real stack: schema ids rewritten to the
destination registry's (values framed by the topic's subject; keys that only look framed untouched),
provenance headers added (routing is the worker's Router: tests/unit/spark_jobs/catchup/test_copy_range.py)."""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer

from mirror_worker.policy.provenance import PROVENANCE_HEADER, provenance_value
from mirror_worker.schemas import wire_format
from tests.catchup_util import catchup_summary, run_catchup
from tests.integration.test_schema_framing import _avro_values, _destination_id, _long_key
from tests.integration.test_schema_sync import _pad_destination_ids
from tests.kafka_util import create_topic, produce
from tests.worker_util import committed_offsets, read_topic, write_mirror_spec

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def _spec_with_registries(tmp_path, stack, topic: str, prefix: str, **settings):
    spec = write_mirror_spec(tmp_path / "spec.yaml", stack, "m", topic, prefix=prefix, **settings)
    text = spec.read_text()
    for side in ("source", "destination"):
        bootstrap = stack[side].kafka.bootstrap_servers
        text = text.replace('kafka: {bootstrap.servers: "%s"}}' % bootstrap,
                            'kafka: {bootstrap.servers: "%s"}, schema-registry-url: "%s"}' % (bootstrap, stack[side].registry.url))
    spec.write_text(text)
    return spec


def test_catchup_rewrites_schema_ids_and_adds_provenance(stack, topic_name, tmp_path):
    src, dst = stack["source"].kafka.bootstrap_servers, stack["destination"].kafka.bootstrap_servers
    topic = topic_name("cutransform")
    create_topic(src, topic, partitions=2)
    values = _avro_values(stack, topic, 0, 8)  # registers <topic>-value only: keys are not framed
    source_id = wire_format.schema_id(values[0])
    keys = [_long_key(source_id, i) for i in range(8)]
    produce(src, topic, [{"key": k, "value": v, "partition": i % 2} for i, (k, v) in enumerate(zip(keys, values))])
    _pad_destination_ids(stack)
    spec = _spec_with_registries(tmp_path, stack, topic, "cut.", **{"provenance-headers": "true"})
    group = f"g-{topic}"

    result = run_catchup("--config", str(spec), "--mirror", "m", "--group.id", group)
    assert result.returncode == 0, result.stderr[-3000:]
    assert catchup_summary(result)["records"] == 8
    assert committed_offsets(src, group, topic, 2) == {0: 4, 1: 4}

    probe = Consumer({"bootstrap.servers": src, "group.id": "probe"})
    source_cluster = probe.list_topics(timeout=10).cluster_id
    probe.close()
    destination_id = _destination_id(stack, f"cut.{topic}-value")
    assert destination_id != source_id
    mirrored = read_topic(dst, f"cut.{topic}", timeout=60)
    assert sorted((m.key(), m.value()) for m in mirrored) == sorted(
        (k, wire_format.header(destination_id) + v[5:]) for k, v in zip(keys, values))
    by_key = {k: (i % 2, i // 2) for i, k in enumerate(keys)}  # source partition, offset
    for m in mirrored:
        partition, offset = by_key[m.key()]
        assert m.headers() == [(PROVENANCE_HEADER, provenance_value("east", source_cluster, topic, partition, offset))]


def test_catchup_maps_a_schema_id_of_another_subject_on_demand_as_the_worker_does(stack, topic_name, tmp_path):
    """A value framed with a schema registered under another subject only (another naming strategy, a
    shared schema): the worker syncs that subject when it meets the id (SchemaSyncer.destination_header);
    the catch-up used to stop with "not in the destination registry's map" and commit nothing."""
    src, dst = stack["source"].kafka.bootstrap_servers, stack["destination"].kafka.bootstrap_servers
    topic = topic_name("cuondemand")
    create_topic(src, topic, partitions=1)
    own = _avro_values(stack, topic, 0, 3)                   # <topic>-value: synced before the copy
    other = _avro_values(stack, f"{topic}-other", 3, 3)      # <topic>-other-value: met only mid-copy
    assert wire_format.schema_id(own[0]) != wire_format.schema_id(other[0])
    produce(src, topic, [{"value": v, "partition": 0} for v in own + other])
    _pad_destination_ids(stack)
    spec = _spec_with_registries(tmp_path, stack, topic, "cuo.")
    group = f"g-{topic}"

    result = run_catchup("--config", str(spec), "--mirror", "m", "--group.id", group)
    assert result.returncode == 0, result.stderr[-3000:]
    assert catchup_summary(result)["records"] == 6
    assert committed_offsets(src, group, topic, 1) == {0: 6}
    own_id, other_id = _destination_id(stack, f"cuo.{topic}-value"), _destination_id(stack, f"{topic}-other-value")
    assert other_id != wire_format.schema_id(other[0])  # the ids differ between the registries
    mirrored = [m.value() for m in read_topic(dst, f"cuo.{topic}", timeout=60)]
    assert mirrored == ([wire_format.header(own_id) + v[5:] for v in own]
                        + [wire_format.header(other_id) + v[5:] for v in other])

    # An id no subject of the source registry holds: the worker halts the partition; the catch-up fails with
    # one line naming it and commits nothing of the range.
    produce(src, topic, [{"value": wire_format.header(987654) + own[0][5:], "partition": 0}])
    result = run_catchup("--config", str(spec), "--mirror", "m", "--group.id", group)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1] == (
        f"catchup: failed: CopyFailed: {topic}[0] offset 6: schema id 987654 is not in the source 'east' "
        "registry; not committed")
    assert committed_offsets(src, group, topic, 1) == {0: 6}
