"""Records the destination refuses (issue #17): each is tied to its own source partition and offset, halts
only that partition (or goes to the dead-letter topic), and never stops the worker."""

from __future__ import annotations

import os
import time

import pytest
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

from tests.kafka_util import create_topic, produce
from tests.worker_util import WorkerProcess, committed_offsets, read_topic, wait_for_count, write_properties

pytestmark = pytest.mark.integration


def _flags(stack, tmp_path, group: str, **producer_extra) -> list[str]:
    consumer = write_properties(tmp_path / "source.properties", {
        "bootstrap.servers": stack["source"].kafka.bootstrap_servers, "group.id": group,
    })
    producer = write_properties(tmp_path / "destination.properties", {
        "bootstrap.servers": stack["destination"].kafka.bootstrap_servers, **producer_extra,
    })
    return ["--consumer.config", consumer, "--producer.config", producer, "--offset.commit.interval.ms", "1000"]


def test_a_dead_letter_topic_that_does_not_exist_yet_is_created_before_it_is_needed(stack, topic_name, tmp_path):
    """Before: the first refused record was produced to a missing topic, its delivery failed and the worker
    exited (`delivery to dlq-...[None] failed: Broker: Unknown topic or partition`), to be restarted into the
    same record again."""
    src, dst = stack["source"].kafka.bootstrap_servers, stack["destination"].kafka.bootstrap_servers
    topic, dead = topic_name("dlqnew-src"), topic_name("dlqnew")
    create_topic(src, topic, partitions=1)
    create_topic(dst, topic, partitions=1, config={"max.message.bytes": "1024"})  # the record below cannot fit
    produce(src, topic, [{"value": b"small"}, {"value": b"x" * 4000}, {"value": b"after"}])
    worker = WorkerProcess([*_flags(stack, tmp_path, f"g-{topic}"), "--whitelist", topic,
                            "--config.sync.interval.ms", "0", "--dead.letter.topic", dead], tmp_path)
    try:
        worker.wait_started()
        assert [m.value() for m in wait_for_count(dst, topic, 2)] == [b"small", b"after"]
        [dead_lettered] = wait_for_count(dst, dead, 1)
        assert dead_lettered.value() == b"x" * 4000
        assert worker.proc.poll() is None, worker.stderr
        assert _eventually_committed(src, f"g-{topic}", topic, {0: 3})  # past the dead-lettered record
    finally:
        assert worker.terminate() == 0, worker.stderr
    assert [m.value() for m in read_topic(dst, topic)] == [b"small", b"after"]


def _eventually_committed(bootstrap: str, group: str, topic: str, expected: dict, timeout: float = 30.0,
                          partitions_only: list[int] | None = None) -> bool:
    """The group's committed offsets reach `expected` (only the partitions listed, if given)."""
    keys = partitions_only if partitions_only is not None else list(expected)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        committed = committed_offsets(bootstrap, group, topic, len(expected))
        if all(committed.get(p) == expected[p] for p in keys):
            return True
        time.sleep(0.5)
    return False


def _lower_max_message_bytes(bootstrap: str, topic: str, limit: int) -> None:
    """After the worker cached the topic's limit: the broker refuses what the worker's own check lets by."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
        ConfigEntry("max.message.bytes", str(limit), incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([resource])[resource].result(30)


@pytest.mark.parametrize("provenance", [False, True], ids=["plain", "provenance"])
def test_a_refused_delivery_halts_its_own_source_partition_whatever_the_headers_say(
        stack, topic_name, tmp_path, provenance):
    """Issue #17 c. Records carry a `mirror.source` header written by an upstream hop (same alias, another
    cluster, another topic and partition). Before: without --provenance.headers that header decided which
    partition halted (none of ours), so the real partition went on committing past the refused record; and
    a refused record without a usable header made the worker exit, into a restart loop."""
    src, dst = stack["source"].kafka.bootstrap_servers, stack["destination"].kafka.bootstrap_servers
    topic = topic_name("refused")
    create_topic(src, topic, partitions=2)
    upstream = [("mirror.source", b"source:UpstreamClusterId:elsewhere:7:123456")]
    produce(src, topic, [{"value": f"a-{i}".encode(), "partition": i % 2, "headers": upstream} for i in range(10)])
    flags = [*_flags(stack, tmp_path, f"g-{topic}"), "--whitelist", topic, "--preserve.partitions",
             "--config.sync.interval.ms", "0"]
    if provenance:
        flags.append("--provenance.headers")
    worker = WorkerProcess(flags, tmp_path)
    try:
        worker.wait_started()
        wait_for_count(dst, topic, 10)
        assert _eventually_committed(src, f"g-{topic}", topic, {0: 5, 1: 5})
        _lower_max_message_bytes(dst, topic, 2000)
        # Partition 1: offset 5 fits, offset 6 (incompressible 6,000 bytes) is refused by the broker.
        produce(src, topic, [{"value": b"b-fits", "partition": 1, "headers": upstream},
                             {"value": os.urandom(6000), "partition": 1, "headers": upstream}])
        halted = worker.wait_for_log("partition halted", timeout=60)
        # Partition 0 goes on, and commits.
        produce(src, topic, [{"value": f"c-{i}".encode(), "partition": 0, "headers": upstream} for i in range(5)])
        assert _eventually_committed(src, f"g-{topic}", topic, {0: 10, 1: None}, partitions_only=[0])
        time.sleep(3)  # a few more commit intervals: partition 1 must stay below the refused record
        committed = committed_offsets(src, f"g-{topic}", topic, 2)
        assert worker.proc.poll() is None, worker.stderr
    finally:
        worker.stop_quietly()
    assert (halted["topic"], halted["partition"]) == (topic, 1), halted
    assert 5 <= halted["offset"] <= 6, halted
    assert committed[1] <= 6, committed
    assert f"partition {topic}[1] of source 'source' halted" in worker.stderr
    assert "elsewhere" not in worker.stderr
