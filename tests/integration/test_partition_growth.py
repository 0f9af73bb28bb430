"""Issue #17 f: a source topic that gains partitions, mirrored with preserve-partitions.

The records of the new source partitions reach the same-numbered new destination partitions within the
worker's topic-refresh window: no partition halts and nothing is dead-lettered.
"""

from __future__ import annotations

import time

import pytest

from tests.kafka_util import create_topic, grow_partitions, produce
from tests.worker_util import WorkerProcess, by_partition, read_topic, wait_for_count, write_mirror_spec

pytestmark = pytest.mark.integration

REFRESH_S = 2
# Topic refresh, the consumer's metadata refresh (10 s by default) and a rebalance, with room for a busy machine.
WINDOW_S = 60


def _records(tag: str, partitions: range, per_partition: int) -> list[dict]:
    return [{"value": f"{tag}-{p}-{i}".encode(), "partition": p} for p in partitions for i in range(per_partition)]


def _mirroring_worker(stack, tmp_path, topic: str, prefix: str, per_partition: int, settings: dict,
                      source_kafka: dict | None = None) -> WorkerProcess:
    """A worker mirroring `topic` (2 partitions, `per_partition` records each) to `prefix` + topic, once it
    has mirrored those records."""
    spec = write_mirror_spec(tmp_path / "mirrors.yaml", stack, "grow", topic, prefix=prefix,
                             source_kafka=source_kafka, **settings)
    produce(stack["source"].kafka.bootstrap_servers, topic, _records("before", range(2), per_partition))
    worker = WorkerProcess(["--config", str(spec), "--mirror", "grow"], tmp_path)
    try:
        worker.wait_started()
        mirrored = wait_for_count(stack["destination"].kafka.bootstrap_servers, prefix + topic, 2 * per_partition,
                                  timeout=60)
        assert len(mirrored) == 2 * per_partition
    except BaseException:
        worker.stop_quietly()
        raise
    return worker


def _values(messages: list, partitions: int) -> dict[int, list]:
    """The values of `messages` per partition, in order."""
    grouped = by_partition(messages)
    return {p: [m.value() for m in grouped[p]] for p in range(partitions)}


@pytest.mark.parametrize("dead_letter", [False, True], ids=["halt-on-refusal", "dead-letter-topic"])
def test_new_source_partitions_reach_the_new_destination_partitions(stack, topic_name, tmp_path, dead_letter):
    src, dst = stack["source"].kafka.bootstrap_servers, stack["destination"].kafka.bootstrap_servers
    topic = topic_name("grow-pp")
    create_topic(src, topic, partitions=2)
    settings = {"preserve-partitions": "true", "topic-refresh-interval-s": REFRESH_S, "commit-interval-s": 1}
    dead = f"{topic}.dead"
    if dead_letter:
        create_topic(dst, dead, partitions=1)
        settings["dead-letter-topic"] = dead
    remote = f"pp.{topic}"
    worker = _mirroring_worker(stack, tmp_path, topic, "pp.", 20, settings)
    try:
        grow_partitions(src, topic, 4)
        produce(src, topic, _records("after", range(2, 4), 20))
        produce(src, topic, _records("later", range(4), 5))

        mirrored = wait_for_count(dst, remote, 40 + 40 + 20, timeout=WINDOW_S)
        time.sleep(1)
        mirrored = read_topic(dst, remote)
        assert worker.proc.poll() is None, worker.stderr[-2000:]
        halted = [(e["msg"], e.get("partition"), e.get("reason")) for e in worker.logs()
                  if e.get("msg") in ("partition halted", "record dead-lettered")]
        assert halted == []
        assert _values(mirrored, 4) == _values(read_topic(src, topic), 4)
        if dead_letter:
            assert read_topic(dst, dead) == []
        assert worker.terminate() == 0, worker.stderr[-2000:]
    finally:
        worker.stop_quietly()


def test_growth_met_in_a_rebalance_with_librdkafka_logging_keeps_the_worker_running(stack, topic_name, tmp_path):
    """The worker follows partitions it is assigned beyond what it knows of their topic from inside the
    consumer's on_assign. It used to look the topic up with a metadata request on that same consumer: the
    request's end clears confluent-kafka's per-client call state, so the next callback served by the same
    consume() (a log line, an error, statistics) aborted the process (`CallState_get: Assertion cs != NULL`,
    exit -6). Seen once in a full run on a busy machine; librdkafka's debug logs, served as callbacks, make
    it happen every time. The worker's own refresh is slow here, so the rebalance is where growth is met."""
    src, dst = stack["source"].kafka.bootstrap_servers, stack["destination"].kafka.bootstrap_servers
    topic = topic_name("grow-cb")
    create_topic(src, topic, partitions=2)
    remote = f"cb.{topic}"
    worker = _mirroring_worker(
        stack, tmp_path, topic, "cb.", 10,
        {"preserve-partitions": "true", "topic-refresh-interval-s": 600, "commit-interval-s": 1},
        source_kafka={"debug": "cgrp,topic", "topic.metadata.refresh.interval.ms": "1000"})
    try:
        grow_partitions(src, topic, 4)
        produce(src, topic, _records("after", range(4), 10))
        deadline = time.monotonic() + WINDOW_S
        while len(read_topic(dst, remote)) < 60 and worker.proc.poll() is None and time.monotonic() < deadline:
            time.sleep(1)
        assert worker.proc.poll() is None, worker.stderr[-2000:]
        assert any(e.get("msg") == "partitions assigned" and f"{topic}[3]" in str(e.get("partitions"))
                   for e in worker.logs()), "the grown partitions were not assigned in a rebalance"
        assert _values(read_topic(dst, remote), 4) == _values(read_topic(src, topic), 4)
        assert worker.terminate() == 0, worker.stderr[-2000:]
    finally:
        worker.stop_quietly()


def test_a_topic_found_later_with_more_partitions_gives_the_producers_room_for_them(stack, topic_name, tmp_path):
    """Stop 67: a producer's bytes hold three batches for each partition it writes to, counted at start (here 2: the
    8 MiB floor). A topic found later by a refresh brings 12 more: the producers are made again (after a flush) with
    room for 14 partitions' batches, logged and exported, and every record of both topics is copied once, in order."""
    from mirror_worker.config.inflight import BATCHES_PER_PARTITION, MIN_PRODUCER_QUEUE_BYTES
    from mirror_worker.engine.producer_sizing import ProducerSizing

    src, dst = stack["source"].kafka.bootstrap_servers, stack["destination"].kafka.bootstrap_servers
    first = topic_name("room")
    wide = f"{first}-wide"
    create_topic(src, first, partitions=2)
    produce(src, first, _records("a", range(2), 10))
    spec = write_mirror_spec(tmp_path / "mirrors.yaml", stack, "room", f"{first}.*", prefix="room.",
                             **{"preserve-partitions": "true", "topic-refresh-interval-s": REFRESH_S,
                                "commit-interval-s": 1})
    worker = WorkerProcess(["--config", str(spec), "--mirror", "room"], tmp_path)
    message = "producer bytes bounded by its partitions' batches"
    try:
        worker.wait_started()
        assert len(wait_for_count(dst, f"room.{first}", 20, timeout=60)) == 20
        create_topic(src, wide, partitions=12)
        produce(src, wide, _records("w", range(12), 5))
        produce(src, first, _records("b", range(2), 5))
        assert len(wait_for_count(dst, f"room.{wide}", 60, timeout=WINDOW_S)) == 60
        wait_for_count(dst, f"room.{first}", 30, timeout=30)
        bounded = [e for e in worker.logs() if e.get("msg") == message]
        assert worker.terminate() == 0, worker.stderr[-2000:]
    finally:
        worker.stop_quietly()
    batch = ProducerSizing({}, 1, {}).batch_bytes  # topics at Kafka's default limit: the batches made at start
    assert [(e["partitions"], e["producer_queue_kbytes"]) for e in bounded] == [
        (2, MIN_PRODUCER_QUEUE_BYTES // 1024), (14, BATCHES_PER_PARTITION * 14 * batch // 1024)], bounded
    for topic, partitions in ((first, 2), (wide, 12)):
        assert _values(read_topic(dst, f"room.{topic}"), partitions) == _values(read_topic(src, topic), partitions)
