"""The lag sensor's measurements on the real stack: committed offsets vs watermarks per source partition
(at-least-once and exactly-once positions), the newest heartbeat per source and whose clock times it."""

from __future__ import annotations

import json
import time
import uuid

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource

from mirror_airflow.lag.measure import measure_partitions, newest_heartbeats
from mirror_airflow.lag.rules import Limits, Status, evaluate
from mirror_worker.config.model import TopicCreation
from mirror_worker.config.spec import select_mirror
from mirror_worker.engine.topic_management import internal_topics
from mirror_worker.exactly_once.positions import POSITIONS_GROUP
from mirror_worker.topics.admin import DestinationTopics
from tests.kafka_util import create_topic, produce
from tests.worker_util import write_mirror_spec

pytestmark = pytest.mark.integration


def _mirror(tmp_path, stack, topic: str, **settings):
    name = f"m-{uuid.uuid4().hex[:8]}"
    return select_mirror(write_mirror_spec(tmp_path / f"{name}.yaml", stack, name, topic, **settings), name)


def _commit(bootstrap: str, group: str, offsets: list[TopicPartition]) -> None:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        consumer.commit(offsets=offsets, asynchronous=False)
    finally:
        consumer.close()


def test_partition_samples_follow_the_mirror_group_and_topic_filter(stack, topic_name, tmp_path):
    src = stack["source"].kafka.bootstrap_servers
    topic, other = topic_name("meas"), topic_name("other")
    for t in (topic, other):
        create_topic(src, t, partitions=3)
        produce(src, t, [{"value": b"v", "partition": i % 3} for i in range(30)])
    mirror = _mirror(tmp_path, stack, topic)
    _commit(src, mirror.group_id, [TopicPartition(topic, 0, 10), TopicPartition(topic, 1, 4)])

    samples = dict(measure_partitions(mirror))
    assert sorted(samples) == [("east", topic, p) for p in range(3)]
    assert [(s.committed, s.high, s.lag) for _, s in sorted(samples.items())] == [(10, 10, 0), (4, 10, 6), (None, 10, 10)]


def test_lag_counts_to_the_last_stable_offset_for_a_read_committed_mirror(stack, topic_name, tmp_path):
    src = stack["source"].kafka.bootstrap_servers
    topic = topic_name("measlso")
    create_topic(src, topic, partitions=1)
    produce(src, topic, [{"value": b"v"} for _ in range(5)])
    mirror = _mirror(tmp_path, stack, topic)
    open_transaction = Producer({"bootstrap.servers": src, "transactional.id": f"tx-{topic}"})
    open_transaction.init_transactions(30)
    open_transaction.begin_transaction()
    for _ in range(3):
        open_transaction.produce(topic, b"pending")
    open_transaction.flush(30)
    try:
        [(_key, sample)] = measure_partitions(mirror)
        assert (sample.high, sample.lag) == (5, 5)  # the 3 pending records are not readable yet
    finally:
        open_transaction.abort_transaction(30)


def test_exactly_once_positions_are_read_from_the_destination(stack, topic_name, tmp_path):
    src, dst = stack["source"].kafka.bootstrap_servers, stack["destination"].kafka.bootstrap_servers
    topic = topic_name("meoos")
    create_topic(src, topic, partitions=2)
    create_topic(dst, f"m.{topic}", partitions=2)
    produce(src, topic, [{"value": b"v", "partition": i % 2} for i in range(20)])
    mirror = _mirror(tmp_path, stack, topic, delivery="exactly-once")
    # A source-cluster commit of the same group must be ignored in this mode.
    _commit(src, mirror.group_id, [TopicPartition(topic, 0, 1), TopicPartition(topic, 1, 1)])
    _commit(dst, POSITIONS_GROUP, [TopicPartition(f"m.{topic}", 0, 7)])

    samples = dict(measure_partitions(mirror))
    assert samples[("east", topic, 0)].committed == 7 and samples[("east", topic, 0)].lag == 3
    assert samples[("east", topic, 1)].committed is None and samples[("east", topic, 1)].lag == 10


def test_newest_heartbeat_per_source_within_the_lookback(stack, topic_name, tmp_path):
    dst = stack["destination"].kafka.bootstrap_servers
    beats = topic_name("beats")
    create_topic(dst, beats, partitions=1)
    mirror = _mirror(tmp_path, stack, "unused", **{"heartbeat-topic": beats})
    assert newest_heartbeats(mirror, lookback_s=60) == {"east": []}  # empty topic

    now_ms = int(time.time() * 1000)

    def beat(mirror_name: str, at_ms: int) -> dict:
        value = {"mirror": mirror_name, "source": "east", "timestamp_ms": at_ms}
        return {"key": f"{mirror_name}/east".encode(), "value": json.dumps(value).encode(), "timestamp": at_ms}

    produce(dst, beats, [beat(mirror.name, now_ms - 600_000), beat(mirror.name, now_ms - 20_000),
                         beat(mirror.name, now_ms - 10_000), beat("another", now_ms - 1_000)])
    [newest] = newest_heartbeats(mirror, lookback_s=60)["east"]
    # A CreateTime topic (made here, not by the worker): no broker stamp, only the producer's.
    assert (newest.offset, newest.worker_time, newest.broker_time) == (2, (now_ms - 10_000) / 1000, None)
    assert newest_heartbeats(mirror, lookback_s=5) == {"east": []}  # only another mirror's beat is that recent


def _timestamp_type(bootstrap: str, topic: str) -> str:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    [future] = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, topic)]).values()
    return future.result(30)["message.timestamp.type"].value


@pytest.mark.parametrize("existing", [False, True], ids=["new-topic", "topic-of-an-older-worker"])
def test_heartbeats_are_timed_by_the_destination_broker_not_the_worker_clock(stack, topic_name, tmp_path, existing):
    dst = stack["destination"].kafka.bootstrap_servers
    beats = topic_name("beatclock")
    if existing:
        create_topic(dst, beats, partitions=1)  # as a worker before this change made it: CreateTime
    mirror = _mirror(tmp_path, stack, "unused", **{"heartbeat-topic": beats})
    # The worker's own start-up step, on the real destination.
    DestinationTopics(AdminClient({"bootstrap.servers": dst}), TopicCreation(), False).ensure_internal(
        internal_topics(mirror))
    assert _timestamp_type(dst, beats) == "LogAppendTime"

    # A worker whose clock runs an hour ahead sends a heartbeat (value and record timestamp from its clock, as
    # Housekeeping.send_heartbeats does), then dies.
    sent = time.time()
    ahead_ms = int((sent + 3600) * 1000)
    value = {"mirror": mirror.name, "source": "east", "worker": "fast-clock:1", "timestamp_ms": ahead_ms}
    produce(dst, beats, [{"key": f"{mirror.name}/east".encode(), "value": json.dumps(value).encode(),
                          "timestamp": ahead_ms}])
    heartbeats = newest_heartbeats(mirror, lookback_s=600)
    [newest] = heartbeats["east"]
    assert newest.worker_time == ahead_ms / 1000
    assert abs(newest.broker_time - sent) < 30  # the destination broker's append time, not the worker's stamp
    limits = Limits(max_latency_s=300, max_clock_skew_s=60)
    # Now: alive by the broker's time; the worker's clock is named in a warning, not a page.
    now = evaluate({}, heartbeats, time.time(), limits)
    assert now.status is Status.WARN and now.findings[0].where == "worker fast-clock:1"
    # 400 s of silence later (the sensor's clock moved on): stale, although the worker's stamp is still in the future.
    later = evaluate({}, heartbeats, time.time() + 400, limits)
    assert later.status is Status.LATENCY and "replication latency" in later.summary()


def test_a_source_whose_group_coordinator_is_not_ready_is_measured_once_it_is(stack, topic_name, tmp_path):
    """A young cluster (or one whose coordinator moves: a broker restarted) answers the group's offset fetch with
    "not coordinator" for a few seconds. The measurement failed on it, and the lag DAG paged FAILED instead of the
    stall it was there to see (CI, test_lag_faults.py, 2026-12-01); now it asks again within its timeout, as the
    worker's tools do (clients/groups.py)."""
    from tests.kafka_util import private_kafka

    topic = topic_name("young")
    with private_kafka(tmp_path / "young") as node:
        src = node.bootstrap_servers
        create_topic(src, topic, partitions=2)
        produce(src, topic, [{"value": b"v", "partition": i % 2} for i in range(6)])
        mirror = select_mirror(write_mirror_spec(tmp_path / "young.yaml", stack, "m-young", topic, source=src),
                               "m-young")
        samples = dict(measure_partitions(mirror))
    assert sorted(samples) == [("east", topic, 0), ("east", topic, 1)]
    assert [(s.committed, s.high) for _, s in sorted(samples.items())] == [(None, 3), (None, 3)]
