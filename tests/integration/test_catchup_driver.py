"""The catch-up's driver copies ranges while Spark starts and hands the rest to Spark (spark_jobs/catchup/driver.py),
on the real stack: ranges split between the driver and Spark copy every record exactly as a Spark-only copy
does (nothing missing, nothing twice, order and headers kept, group offsets or exactly-once positions at the
range ends), and a backlog the driver finishes first does not wait for Spark."""

from __future__ import annotations

import json

import pytest

from tests.catchup_util import catchup_summary, run_catchup
from tests.integration.test_catchup import PARTITIONS, _produce
from tests.integration.test_catchup_exactly_once import _positions, _records
from tests.kafka_util import create_topic, produce
from tests.worker_util import by_partition, committed_offsets, loss_and_duplicates, read_topic, write_mirror_spec

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def _same_records(src: str, topic: str, dst: str, mirrored_topic: str, partitions: int) -> None:
    source, destination = by_partition(read_topic(src, topic, timeout=60)), by_partition(read_topic(dst, mirrored_topic, timeout=60))
    for partition in range(partitions):
        expected = [(m.key(), m.value(), m.headers(), m.timestamp()) for m in source[partition]]
        assert [(m.key(), m.value(), m.headers(), m.timestamp()) for m in destination[partition]] == expected


def _catchup(stack, topic_name, name: str, records: int, prefix: str, *extra: str) -> tuple[str, str, str, dict]:
    """A fresh 6-partition topic of `records` records caught up into `prefix` + topic: (topic, group, stderr,
    summary)."""
    src, dst = stack["source"].kafka.bootstrap_servers, stack["destination"].kafka.bootstrap_servers
    topic = topic_name(name)
    group = f"g-{topic}"
    create_topic(src, topic, partitions=PARTITIONS)
    _produce(src, topic, 0, records)
    result = run_catchup("--source.bootstrap.servers", src, "--destination.bootstrap.servers", dst, "--topics", topic,
                         "--group.id", group, "--prefix", prefix, *extra)
    assert result.returncode == 0, result.stderr[-3000:]
    return topic, group, result.stderr, catchup_summary(result)


def _events(stderr: str, name: str) -> list[dict]:
    return [json.loads(line.split("catchup: ", 1)[1]) for line in stderr.splitlines()
            if line.startswith("catchup: {") and f'"event": "{name}"' in line]


def test_ranges_split_between_the_driver_and_spark_copy_every_record_once_in_order(stack, topic_name):
    src, dst = stack["source"].kafka.bootstrap_servers, stack["destination"].kafka.bootstrap_servers
    # The driver copies at most 50,000 offsets: two ranges of 20,000 and half of a third, unless Spark is
    # ready sooner; Spark copies the rest of that range from where the driver committed, and the others.
    topic, group, stderr, summary = _catchup(stack, topic_name, "split", 120_000, "sp.", "--driver-copy-limit", "50000")
    assert summary["records"] == 120_000 and 0 < summary["driver"]["records"] <= 50_000
    assert summary["driver"]["ranges_handed_over"] >= PARTITIONS - 2 and summary["spark_job_s"] > 0
    assert summary["spark_startup_s"] > 0
    assert [(r["partition"], r["start"], r["end"], r["copied"]) for r in summary["ranges"]] == [
        (p, 0, 20_000, 20_000) for p in range(PARTITIONS)]
    handed = _events(stderr, "partition handed over")
    assert handed and all(0 < e["position"] < 20_000 and e["offsets_left"] == 20_000 - e["position"] for e in handed)
    done = _events(stderr, "partition done")  # Spark's parts count the driver's records of their range
    assert sorted((e["partition"], e["copied"]) for e in done) == [(p, 20_000) for p in range(PARTITIONS)]
    assert committed_offsets(src, group, topic, PARTITIONS) == {p: 20_000 for p in range(PARTITIONS)}
    _same_records(src, topic, dst, f"sp.{topic}", PARTITIONS)


def test_a_backlog_the_driver_finishes_first_does_not_wait_for_spark(stack, topic_name):
    src, dst = stack["source"].kafka.bootstrap_servers, stack["destination"].kafka.bootstrap_servers
    topic, group, stderr, summary = _catchup(stack, topic_name, "small", 6_000, "sm.")
    assert summary["records"] == summary["driver"]["records"] == 6_000
    assert summary["driver"]["ranges_handed_over"] == 0 and summary["spark_job_s"] is None
    assert f"catchup: {topic}[0] copied 1000 records up to offset 1000" in stderr
    assert committed_offsets(src, group, topic, PARTITIONS) == {p: 1_000 for p in range(PARTITIONS)}
    _same_records(src, topic, dst, f"sm.{topic}", PARTITIONS)


def test_an_exactly_once_range_split_between_the_driver_and_spark_leaves_the_positions_at_the_ends(
        stack, topic_name, tmp_path):
    src, dst = stack["source"].kafka.bootstrap_servers, stack["destination"].kafka.bootstrap_servers
    topic = topic_name("eos-split")
    partitions = 3
    create_topic(src, topic, partitions=partitions)
    spec = write_mirror_spec(tmp_path / "mirrors.yaml", stack, "eoscu", topic, prefix="xs.",
                             **{"delivery": "exactly-once", "preserve-partitions": "true", "group-id": f"g-{topic}"})
    produce(src, topic, _records(0, 3_000))
    # Two transactions for the split range: the driver's up to its stop, Spark's from that position to the end.
    result = run_catchup("--config", str(spec), "--mirror", "eoscu", "--driver-copy-limit", "1500")
    assert result.returncode == 0, result.stderr[-3000:]
    summary = catchup_summary(result)
    assert summary["records"] == 3_000 and 0 < summary["driver"]["records"] <= 1_500
    assert summary["driver"]["ranges_handed_over"] >= 2
    assert _positions(dst, "eoscu", f"xs.{topic}") == {p: 1_000 for p in range(partitions)}
    mirrored = read_topic(dst, f"xs.{topic}")
    missing, duplicates, ordered = loss_and_duplicates(read_topic(src, topic), mirrored)
    assert (len(missing), duplicates, ordered) == (0, 0, True)
