"""Cycles on the real stack are decided by what this project wrote, not by any `mirror.source` header.

A record whose header names the destination cluster is a loop only when it sits where a mirror puts a copy
of the topic the header names: that topic itself or under a prefix (`dr.orders` for `orders`), or the topic
this mirror writes it back into (a failback pair). Kafka Streams and Connect forward input headers: an
application that read such a copy and wrote its own topic leaves the header on records that are new, and
those are mirrored like any other. A loop still stops its partition (or is skipped in a failback pair), and
says which record: a log line, the worker's stderr, the halted-partition gauge and the skip counter.
"""

from __future__ import annotations

import time
import urllib.request

import pytest
from confluent_kafka.admin import AdminClient

from tests.kafka_util import create_topic, produce
from tests.worker_util import WorkerProcess, read_topic, wait_for_count, write_mirror_spec

pytestmark = pytest.mark.integration


def _metric(text: str, name: str, topic: str) -> float:
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(name + "{") and f'topic="{topic}"' in line)


@pytest.mark.parametrize("origin_records", ["halt", "skip"])
def test_a_forwarded_header_is_mirrored_and_a_loop_is_named(stack, topic_name, tmp_path, origin_records):
    src, dst = stack["source"].kafka.bootstrap_servers, stack["destination"].kafka.bootstrap_servers
    base = topic_name("loop")
    # On the source cluster: `dr.<base>` holds a copy a mirror from the destination's `<base>` wrote (after a
    # record of its own); `<base>-enriched` is an application's output of such copies, headers forwarded.
    copies, enriched = f"dr.{base}", f"{base}-enriched"
    destination_id = AdminClient({"bootstrap.servers": dst}).list_topics(timeout=10).cluster_id
    header = [("mirror.source", f"west:{destination_id}:{base}:0:7".encode())]
    create_topic(src, copies)
    create_topic(src, enriched)
    produce(src, copies, [{"value": b"written here"}, {"value": b"a copy", "headers": header},
                          {"value": b"written here too"}])
    produce(src, enriched, [{"value": f"enriched-{i}".encode(), "headers": header} for i in range(5)])
    spec = write_mirror_spec(tmp_path / "mirrors.yaml", stack, f"loop-{base}", f".*{base}.*", prefix="m.", **{
        "preserve-partitions": "true", "commit-interval-s": 1, "metrics-port": 0, "origin-records": origin_records})
    worker = WorkerProcess(["--config", str(spec), "--mirror", f"loop-{base}"], tmp_path)
    try:
        worker.wait_started()
        url = worker.wait_for_log("metrics endpoint")["url"]
        mirrored = wait_for_count(dst, f"m.{enriched}", 5, timeout=60)
        expected_copies = [b"written here"] if origin_records == "halt" else [b"written here", b"written here too"]
        assert [m.value() for m in wait_for_count(dst, f"m.{copies}", len(expected_copies), timeout=60)] \
            == expected_copies
        if origin_records == "halt":
            halted = worker.wait_for_log("partition halted", timeout=30)
        time.sleep(2)  # one more commit interval: nothing else moves
        metrics = urllib.request.urlopen(url, timeout=10).read().decode()
        assert worker.proc.poll() is None, worker.stderr[-2000:]
    finally:
        worker.stop_quietly()
    assert [m.value() for m in mirrored] == [f"enriched-{i}".encode() for i in range(5)]
    halts = [e for e in worker.logs() if e.get("msg") == "partition halted"]
    if origin_records == "halt":
        assert [(e["topic"], e["partition"], e["offset"]) for e in halts] == [(copies, 0, 1)], halts
        assert f"west:{destination_id}:{base}:0:7" in halted["reason"], halted
        assert f"partition {copies}[0] of source 'east' halted at offset 1" in worker.stderr
        assert _metric(metrics, "mirror_partition_halted", copies) == 1
    else:
        assert halts == []
        assert _metric(metrics, "mirror_records_skipped_total", copies) == 1
    assert _metric(metrics, "mirror_partition_halted", enriched) == 0
    assert [m.value() for m in read_topic(dst, f"m.{copies}")] == expected_copies
