"""A mirror that copies nothing while records wait says so (log, metric, dashboard); size limits the destination
accepts never halt a partition; halts of partitions a worker no longer owns leave its metrics."""

from __future__ import annotations

import os
import time
import urllib.request

import pytest
from confluent_kafka import Producer

from mirror_airflow.dashboard.sources import parse_metrics
from tests.kafka_util import create_topic, produce
from tests.worker_util import (
    WorkerProcess, owned_partitions, read_topic, wait_for_count, write_mirror_spec, write_properties,
)

pytestmark = pytest.mark.integration


def _status(worker: WorkerProcess, mirror: str):
    """What the dashboard reads from the worker's metrics endpoint."""
    url = worker.wait_for_log("metrics endpoint")["url"]
    return parse_metrics(urllib.request.urlopen(url, timeout=5).read().decode(), mirror)


def _eventually(predicate, timeout: float = 30.0):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.5)


def _produce_sized(bootstrap: str, topic: str, values: list[bytes], **settings) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", **settings})
    errors = []
    for value in values:
        producer.produce(topic, value, on_delivery=lambda err, _m: err and errors.append(err))
        producer.poll(0)
    assert producer.flush(30) == 0 and not errors, errors[:1]


def test_a_mirror_that_copies_nothing_while_records_wait_says_so(stack, topic_name, tmp_path):
    """Records wait behind a transaction left open on the source (a read_committed consumer gets nothing past
    it; the same holds for a destination that never acknowledges). Before: not a word, no metric, and the
    dashboard showed the mirror running."""
    src, dst = stack["source"].kafka.bootstrap_servers, stack["destination"].kafka.bootstrap_servers
    topic = topic_name("stall")
    create_topic(src, topic)
    produce(src, topic, [{"value": f"before-{i}".encode()} for i in range(5)])
    # Open past librdkafka's 60 s default, which a loaded run can reach before the commit below.
    open_transaction = Producer({"bootstrap.servers": src, "transactional.id": f"tx-{topic}",
                                 "transaction.timeout.ms": 600_000})
    open_transaction.init_transactions(30)
    open_transaction.begin_transaction()
    open_transaction.produce(topic, b"in-transaction")
    assert open_transaction.flush(30) == 0
    produce(src, topic, [{"value": f"after-{i}".encode()} for i in range(5)])
    spec = write_mirror_spec(tmp_path / "mirrors.yaml", stack, f"stall-{topic}", topic, "m.", **{
        "stall-timeout-s": 2, "commit-interval-s": 1, "metrics-port": 0})
    worker = WorkerProcess(["--config", str(spec)], tmp_path)
    try:
        worker.wait_started()
        stalled = worker.wait_for_log("partition stalled", timeout=30)
        assert (stalled["topic"], stalled["partition"], stalled["committed"], stalled["waiting_up_to"]) == (topic, 0, 5, 11)
        assert _status(worker, f"stall-{topic}").stalled == (("east", topic, 0),)
        assert len(read_topic(dst, f"m.{topic}")) == 5
        open_transaction.commit_transaction(30)
        assert len(wait_for_count(dst, f"m.{topic}", 11)) == 11
        worker.wait_for_log("partition copying again", timeout=30)
        assert _eventually(lambda: _status(worker, f"stall-{topic}").stalled == ())
    finally:
        assert worker.terminate() == 0, worker.stderr


def test_incompressible_records_fill_a_topic_whose_limit_is_small(stack, topic_name, tmp_path):
    """The issue's recipe: max.message.bytes=2000 copied to the destination, 100 random bytes a record."""
    src, dst = stack["source"].kafka.bootstrap_servers, stack["destination"].kafka.bootstrap_servers
    topic = topic_name("small-limit")
    create_topic(src, topic, config={"max.message.bytes": "2000"})
    values = [os.urandom(100) for _ in range(5000)]
    _produce_sized(src, topic, values, **{"batch.size": 900})
    spec = write_mirror_spec(tmp_path / "mirrors.yaml", stack, "small", topic, "m.", **{"stall-timeout-s": 10, "commit-interval-s": 1})
    worker = WorkerProcess(["--config", str(spec)], tmp_path)
    try:
        worker.wait_started()
        assert [m.value() for m in wait_for_count(dst, f"m.{topic}", 5000, timeout=60)] == values
        assert not [e for e in worker.logs() if e.get("msg") in ("partition stalled", "partition halted")]
    finally:
        assert worker.terminate() == 0, worker.stderr


def test_a_record_over_one_megabyte_reaches_a_destination_topic_that_accepts_it(stack, topic_name, tmp_path):
    """Before: librdkafka's default message.max.bytes (1,000,000) refused it in produce() and the partition
    halted ("Broker: Message size too large" is not what the destination said: it accepts 3 MB)."""
    src, dst = stack["source"].kafka.bootstrap_servers, stack["destination"].kafka.bootstrap_servers
    topic = topic_name("big")
    create_topic(src, topic, config={"max.message.bytes": "3000000"})  # copied to the destination topic
    values = [b"a", os.urandom(1_500_000), b"b"]
    _produce_sized(src, topic, values, **{"message.max.bytes": 3_000_000})
    spec = write_mirror_spec(tmp_path / "mirrors.yaml", stack, "big", topic, "m.")
    worker = WorkerProcess(["--config", str(spec)], tmp_path)
    try:
        worker.wait_started()
        mirrored = wait_for_count(dst, f"m.{topic}", 3, timeout=30)
        assert "halted" not in worker.stderr, worker.stderr
        assert [m.value() for m in mirrored] == values
    finally:
        assert worker.terminate() == 0, worker.stderr


def test_a_halt_leaves_the_metrics_of_a_worker_that_no_longer_owns_the_partition(stack, topic_name, mirror_args,
                                                                                   tmp_path):
    """Both partitions halt on a record the destination refuses; a second worker joins and takes one. Before:
    the first worker's metrics kept both halts (and the committed offset of the partition it gave away)."""
    src, dst = stack["source"].kafka.bootstrap_servers, stack["destination"].kafka.bootstrap_servers
    topic = topic_name("halts")
    create_topic(src, topic, partitions=2)
    create_topic(dst, topic, partitions=2, config={"max.message.bytes": "2000"})
    produce(src, topic, [{"value": v, "partition": p} for p in (0, 1) for v in (b"small", b"x" * 5000, b"after")])
    args = [*mirror_args(f"g-{topic}"), "--whitelist", topic, "--preserve.partitions", "--metrics.port", "0",
            "--config.sync.interval.ms", "0", "--offset.commit.interval.ms", "1000"]
    first = WorkerProcess(args, tmp_path, "first")
    second = None
    try:
        first.wait_started()
        assert _eventually(lambda: len(_status(first, "mirror").halted) == 2), _status(first, "mirror")
        assert len(read_topic(dst, topic)) == 2  # the records before the big ones
        second = WorkerProcess(args, tmp_path, "second")
        second.wait_started()

        def settled():
            owned = {w: {int(p.split("[")[1][:-1]) for p in owned_partitions(w)} for w in (first, second)}
            if sorted(len(o) for o in owned.values()) != [1, 1]:
                return False
            return all({h[2] for h in _status(w, "mirror").halted} == owned[w] for w in (first, second))

        assert _eventually(settled, 40), (_status(first, "mirror"), _status(second, "mirror"),
                                          owned_partitions(first), owned_partitions(second))
        text = urllib.request.urlopen(first.wait_for_log("metrics endpoint")["url"], timeout=5).read().decode()
        committed = {line.split('partition="')[1].split('"')[0] for line in text.splitlines()
                     if line.startswith("mirror_committed_offset{")}
        assert committed <= {p.split("[")[1][:-1] for p in owned_partitions(first)}
    finally:
        for worker in (first, second):
            if worker is not None:
                worker.stop_quietly()


@pytest.fixture
def mirror_args(stack, tmp_path):
    def make(group: str) -> list[str]:
        consumer = write_properties(tmp_path / "source.properties", {
            "bootstrap.servers": stack["source"].kafka.bootstrap_servers, "group.id": group})
        producer = write_properties(tmp_path / "destination.properties", {
            "bootstrap.servers": stack["destination"].kafka.bootstrap_servers})
        return ["--consumer.config", consumer, "--producer.config", producer]

    return make
