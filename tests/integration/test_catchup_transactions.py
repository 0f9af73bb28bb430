"""Catch-up over a transactional source: it copies committed records only, stops at the last stable offset
where a transaction is still open (and says so), and the worker continues from there with no gap and no
duplicate once the transaction commits."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from mirror_worker.clients.log_ends import log_bounds
from tests.catchup_util import catchup_summary, run_catchup
from tests.transactional_source import OPEN_PARTITIONS, PARTITIONS, write_transactional_source
from tests.worker_util import (WorkerProcess, by_partition, committed_offsets, read_topic, wait_for_count,
                               write_properties)

pytestmark = [pytest.mark.integration, pytest.mark.spark]

# Offsets of write_transactional_source: the open transaction starts at 22 on partition 0 and at 19 on
# partition 2 (its records, then 2 plain ones, end the log at 27 and 24); partition 1 ends at 24.
LAST_STABLE = {0: 22, 1: 24, 2: 19}
HIGH = {0: 27, 1: 24, 2: 24}


def _wait_stable(bootstrap: str, partition: TopicPartition, end: int, timeout: float = 30.0) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + timeout
    while log_bounds(admin, [partition], True, 10)[(partition.topic, partition.partition)][1] != end:
        assert time.monotonic() < deadline, f"{partition.topic}[{partition.partition}]: LSO never reached {end}"
        time.sleep(0.2)


def _values(messages) -> dict[int, list[bytes]]:
    return {p: [m.value() for m in found] for p, found in by_partition(messages).items()}


def test_catchup_copies_committed_records_up_to_the_last_stable_offset_then_the_worker_continues(
        stack, topic_name, tmp_path):
    src, dst = stack["source"].kafka.bootstrap_servers, stack["destination"].kafka.bootstrap_servers
    source = write_transactional_source(src, topic_name("cu-tx"))
    topic, group = source.topic, f"g-{source.topic}"
    try:
        result = run_catchup("--source.bootstrap.servers", src, "--destination.bootstrap.servers", dst,
                             "--topics", topic, "--group.id", group, "--prefix", "ct.")

        assert result.returncode == 0, result.stderr[-3000:]
        summary = catchup_summary(result)
        copied = sum(len(v) for v in source.committed.values())
        assert summary["records"] == copied
        assert [(r["partition"], r["start"], r["end"]) for r in summary["ranges"]] == [
            (p, 0, LAST_STABLE[p]) for p in range(PARTITIONS)]
        assert summary["open_transactions"] == [
            {"topic": topic, "partition": p, "last_stable_offset": LAST_STABLE[p], "high_watermark": HIGH[p],
             "reason": "stopped at the last stable offset (a transaction is open)"}
            for p in OPEN_PARTITIONS]
        for p in OPEN_PARTITIONS:
            assert (f"catchup: {topic}[{p}] stopped at the last stable offset {LAST_STABLE[p]} (a transaction is "
                    f"open; high watermark {HIGH[p]})") in result.stderr
            assert f"WARNING spark_jobs.catchup {topic}[{p}] stopped at the last stable offset" in result.stdout
        assert committed_offsets(src, group, topic, PARTITIONS) == LAST_STABLE
        assert _values(read_topic(dst, f"ct.{topic}")) == source.committed  # no aborted, none of the open one

        source.commit_open_transaction()
    finally:
        source.open_producer.flush(10)
    consumer = write_properties(tmp_path / "source.properties", {"bootstrap.servers": src, "group.id": group})
    producer = write_properties(tmp_path / "destination.properties", {"bootstrap.servers": dst})
    worker = WorkerProcess(["--consumer.config", consumer, "--producer.config", producer, "--whitelist", topic,
                            "--prefix", "ct.", "--preserve.partitions"], tmp_path)
    try:
        total = sum(len(v) for v in source.committed.values())
        mirrored = wait_for_count(dst, f"ct.{topic}", total, timeout=90)
    finally:
        assert worker.terminate() == 0, worker.stderr[-2000:]
    assert _values(mirrored) == source.committed  # every committed record once, in order, no gap
    assert source.aborted and not set(source.aborted) & {m.value() for m in mirrored}

    # A range holding nothing but an aborted transaction and its marker: nothing to copy, its end committed.
    aborting = Producer({"bootstrap.servers": src, "transactional.id": f"tx-abort-{topic}"})
    aborting.init_transactions(30)
    aborting.begin_transaction()
    for i in range(3):
        aborting.produce(topic, f"late-abort-{i}".encode(), partition=1)
    assert aborting.flush(30) == 0
    aborting.abort_transaction(30)
    _wait_stable(src, TopicPartition(topic, 1), HIGH[1] + 4)  # the abort marker lands after abort_transaction returns
    rerun = run_catchup("--source.bootstrap.servers", src, "--destination.bootstrap.servers", dst,
                        "--topics", topic, "--group.id", group, "--prefix", "ct.")
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert catchup_summary(rerun)["records"] == 0
    assert [(r["partition"], r["start"], r["end"]) for r in catchup_summary(rerun)["ranges"]] == [
        (0, HIGH[0] + 1, HIGH[0] + 1), (1, HIGH[1], HIGH[1] + 4), (2, HIGH[2] + 1, HIGH[2] + 1)]
    assert committed_offsets(src, group, topic, PARTITIONS) == {0: HIGH[0] + 1, 1: HIGH[1] + 4, 2: HIGH[2] + 1}
    assert _values(read_topic(dst, f"ct.{topic}")) == source.committed
