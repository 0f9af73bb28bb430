"""A header name that is not UTF-8 (Kafka allows any bytes; confluent-kafka cannot read it): the worker halts
only that record's partition, at that record, with one line; the other partitions are mirrored, and a
restarted worker halts there again instead of exiting."""

from __future__ import annotations

import time

import pytest

from tests.kafka_util import create_topic, produce
from tests.raw_headers import produce_with_header_name
from tests.worker_util import WorkerProcess, by_partition, committed_offsets, wait_for_count, write_mirror_spec

pytestmark = pytest.mark.integration

ODD_NAME = b"\xff\xfetrace"


def test_unreadable_header_name_halts_only_its_partition(stack, topic_name, tmp_path):
    src, dst = stack["source"].kafka.bootstrap_servers, stack["destination"].kafka.bootstrap_servers
    topic = topic_name("hdr")
    create_topic(src, topic, partitions=2)
    create_topic(dst, f"m.{topic}", partitions=2)
    produce(src, topic, [{"value": f"a-{i}".encode(), "partition": i % 2, "headers": [("ok", b"1")]}
                         for i in range(10)])
    produce_with_header_name(src, topic, 0, b"odd", ODD_NAME)  # partition 0, offset 5
    produce(src, topic, [{"value": f"b-{i}".encode(), "partition": i % 2} for i in range(10)])
    group = f"g-{topic}"
    spec = write_mirror_spec(tmp_path / "mirrors.yaml", stack, "m1", topic,
                             **{"group-id": group, "preserve-partitions": "true", "commit-interval-s": 1})
    line = f"partition {topic}[0] of source 'east' halted at offset 5: header name {ODD_NAME!r} is not UTF-8"
    for run in range(2):  # the second run starts at the committed offsets: it halts at the same record
        worker = WorkerProcess(["--config", str(spec), "--mirror", "m1"], tmp_path, name=f"run{run}")
        try:
            worker.wait_started()
            mirrored = wait_for_count(dst, f"m.{topic}", 15)
            time.sleep(4)  # a few commit intervals
            assert worker.proc.poll() is None, worker.stderr  # alive: it keeps mirroring partition 1
            assert line in worker.stderr, worker.stderr
            assert worker.stderr.count("halted at offset") == 1, worker.stderr
        finally:
            assert worker.terminate() == 0, worker.stderr
        parts = by_partition(mirrored)
        assert [m.value() for m in parts[1]] == ([f"a-{i}".encode() for i in range(1, 10, 2)]
                                                 + [f"b-{i}".encode() for i in range(1, 10, 2)])
        assert [m.value() for m in parts[0]] == [f"a-{i}".encode() for i in range(0, 10, 2)]  # up to the odd one
        assert all(m.headers()[0] == ("ok", b"1") for m in parts[0])
        assert committed_offsets(src, group, topic, 2) == {0: 5, 1: 10}  # never past the halted record
