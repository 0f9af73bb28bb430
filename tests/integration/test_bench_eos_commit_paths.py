"""bench.eos_commit_paths on real brokers: each path commits records together with the position it says."""

from __future__ import annotations

import json

import pytest
from confluent_kafka import Consumer, TopicPartition

from bench.eos_commit_paths import Probe
from tests.worker_util import by_partition, read_topic

pytestmark = pytest.mark.integration


def test_each_path_commits_the_records_and_their_position(stack):
    bootstrap = stack["destination"].kafka.bootstrap_servers
    probe = Probe(bootstrap, partitions=2, rate=1_000)
    counts = {path: len(probe.window(path, 2.0)) for path in ("group", "group-per-partition", "record")}
    assert all(n > 5 for n in counts.values()), counts
    for producer in probe.producers:
        producer.abort_transaction(10)  # the transaction each one opened after its last commit: empty
    records = by_partition(read_topic(bootstrap, probe.data))
    # The last window's positions: one record per partition in the positions topic (the latest by key) whose
    # offset is the number of records committed in that partition.
    latest = {tuple(json.loads(m.key())): json.loads(m.value()) for m in read_topic(bootstrap, probe.positions)}
    assert {key[1]: value[2] for key, value in latest.items()} == {p: len(records[p]) for p in (0, 1)}
    # The group paths' positions: below what the partitions hold (the later windows added records after them).
    for group, partitions in ((probe.group, [0, 1]), (f"{probe.group}-0", [0]), (f"{probe.group}-1", [1])):
        reader = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
        try:
            committed = reader.committed([TopicPartition(probe.data, p) for p in partitions], timeout=10)
        finally:
            reader.close()
        assert all(0 < tp.offset < len(records[tp.partition]) for tp in committed), (group, committed)
