"""The catch-up's deliveries on the real stack: its producer batches fit the destination topics'
max.message.bytes as the worker's do (a topic with a small limit receives every record instead of refusing
whole batches), and a record the destination refuses fails its task before the range is committed."""

from __future__ import annotations

import os

import pytest
from confluent_kafka import Producer

from tests.catchup_util import catchup_summary, run_catchup
from tests.kafka_util import create_topic
from tests.worker_util import read_topic

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def test_records_reach_a_destination_topic_whose_limit_is_below_the_batch_size(stack, topic_name):
    src, dst = stack["source"].kafka.bootstrap_servers, stack["destination"].kafka.bootstrap_servers
    topic = topic_name("cu-fit")
    create_topic(src, topic, partitions=2)
    # 16 KiB per batch at most on the destination; the worker's producer settings batch up to 1 MB.
    create_topic(dst, f"fit.{topic}", partitions=2, config={"max.message.bytes": "16384"})
    producer = Producer({"bootstrap.servers": src, "linger.ms": 50, "compression.type": "none"})
    for i in range(3_000):
        producer.produce(topic, bytes([i % 251]) * 1_000, f"k{i}".encode(), i % 2)
        producer.poll(0)
    assert producer.flush(30) == 0

    result = run_catchup("--source.bootstrap.servers", src, "--destination.bootstrap.servers", dst,
                         "--topics", topic, "--group.id", f"g-{topic}", "--prefix", "fit.")

    assert result.returncode == 0, result.stderr[-3000:]
    assert catchup_summary(result)["records"] == 3_000
    assert len(read_topic(dst, f"fit.{topic}", timeout=60)) == 3_000


def test_a_record_the_destination_refuses_fails_the_task_and_moves_no_offset(stack, topic_name):
    """A record over the destination topic's limit is refused alone: its range is not committed, the job fails
    (a delivery failure reported by the final flush used to be missed: the job exited 0, records lost)."""
    from tests.worker_util import committed_offsets

    src, dst = stack["source"].kafka.bootstrap_servers, stack["destination"].kafka.bootstrap_servers
    topic = topic_name("cu-refused")
    group = f"g-{topic}"
    create_topic(src, topic, partitions=2)
    create_topic(dst, f"ref.{topic}", partitions=2, config={"max.message.bytes": "16384"})
    producer = Producer({"bootstrap.servers": src, "linger.ms": 5})
    for i in range(200):
        # One record of partition 1 is over the destination's limit, even compressed (random bytes).
        producer.produce(topic, os.urandom(40_000 if i == 101 else 100), f"k{i}".encode(), i % 2)
    assert producer.flush(30) == 0

    result = run_catchup("--source.bootstrap.servers", src, "--destination.bootstrap.servers", dst,
                         "--topics", topic, "--group.id", group, "--prefix", "ref.")

    assert result.returncode == 1, result.stderr[-3000:]
    assert f"{topic}[1] delivery failed" in result.stderr
    committed = committed_offsets(src, group, topic, 2)
    assert committed[1] < 0  # the refused range is not committed: a rerun copies it again
