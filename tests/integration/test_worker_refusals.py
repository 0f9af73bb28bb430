"""Records the worker refuses go to the dead-letter topic when asked, which the worker makes itself.
(Records the destination refuses: tests/integration/test_delivery.py.)"""

from __future__ import annotations

import time

import pytest

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
