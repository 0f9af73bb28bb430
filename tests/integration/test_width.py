"""Exactly-once at production width on the real stack (issue "Production width"): 1,000 partitions (100 topics of
10), a worker held to 1,024 open files, a second worker joining, then the first frozen past its session (a
zombie) while the second takes everything over, then resumed. Every record once, read_committed, in order.

Before one transactional producer per source, a worker opened one per partition (~4 threads and ~8 files each):
under `ulimit -n 1024` a 200-partition mirror never got past its assignment (`Too many open files`), and at 1,000
partitions it ran 4,042 threads (tests/probes/width_baseline.py).
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from mirror_worker.exactly_once.positions import POSITIONS_GROUP
from tests.worker_util import WorkerProcess, owned_partitions, wait_while_running, write_properties

pytestmark = pytest.mark.integration

TOPICS, PARTITIONS = 100, 10
WIDTH = TOPICS * PARTITIONS
FROZEN = {"session.timeout.ms": "6000", "heartbeat.interval.ms": "1000", "max.poll.interval.ms": "10000"}


def _produce(bootstrap: str, topics: list[str], phase: str, per_partition: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "acks": "all"})
    for topic in topics:
        for p in range(PARTITIONS):
            for i in range(per_partition):
                producer.produce(topic, f"{topic}/{p}/{phase}/{i}".encode(), partition=p)
        producer.poll(0)
    assert producer.flush(60) == 0


def _threads_and_files(pid: int) -> tuple[int, int]:
    status = Path(f"/proc/{pid}/status").read_text()
    threads = int(next(line.split()[1] for line in status.splitlines() if line.startswith("Threads:")))
    return threads, len(os.listdir(f"/proc/{pid}/fd"))


def _read_all(bootstrap: str, topics: list[str]) -> list:
    """Every record of `topics` now, read_committed, by one consumer assigned every partition."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "test-width-read", "enable.auto.commit": False,
                         "enable.partition.eof": True, "isolation.level": "read_committed"})
    try:
        consumer.assign([TopicPartition(t, p, 0) for t in topics for p in range(PARTITIONS)])
        done, out = set(), []
        deadline = time.monotonic() + 120
        while len(done) < len(topics) * PARTITIONS and time.monotonic() < deadline:
            for msg in consumer.consume(5000, 1.0):
                if msg.error():
                    if msg.error().code() == KafkaError._PARTITION_EOF:
                        done.add((msg.topic(), msg.partition()))
                        continue
                    raise KafkaException(msg.error())
                out.append(msg)
        return out
    finally:
        consumer.close()


def _sequences(messages, prefix: str = "") -> dict[tuple[str, int], list[bytes]]:
    out: dict[tuple[str, int], list[bytes]] = {}
    for m in sorted(messages, key=lambda m: (m.topic(), m.partition(), m.offset())):
        out.setdefault((m.topic().removeprefix(prefix), m.partition()), []).append(m.value())
    return out


def _committed(dst: str, topics: list[str]) -> int:
    """Records the mirror committed: the sum of its exactly-once positions on the destination."""
    consumer = Consumer({"bootstrap.servers": dst, "group.id": POSITIONS_GROUP, "isolation.level": "read_committed"})
    try:
        positions = consumer.committed([TopicPartition(f"w.{t}", p) for t in topics for p in range(PARTITIONS)],
                                       timeout=30)
        return sum(tp.offset for tp in positions if tp.offset > 0)
    except KafkaException:
        return 0
    finally:
        consumer.close()


def _wide_mirror(stack, tmp_path: Path, base: str, consumer_settings: dict) -> tuple[list[str], list[str]]:
    """TOPICS topics of PARTITIONS on the source named `base`-i, and an exactly-once worker's arguments mirroring
    them to `w.`-prefixed topics (its source consumer: `consumer_settings` added)."""
    src, dst = stack["source"].kafka.bootstrap_servers, stack["destination"].kafka.bootstrap_servers
    topics = [f"{base}-{i}" for i in range(TOPICS)]
    admin = AdminClient({"bootstrap.servers": src})
    for future in admin.create_topics([NewTopic(t, PARTITIONS, 1) for t in topics]).values():
        future.result(120)
    consumer = write_properties(tmp_path / "source.properties", {
        "bootstrap.servers": src, "auto.offset.reset": "earliest", **consumer_settings})
    producer = write_properties(tmp_path / "destination.properties", {"bootstrap.servers": dst})
    return topics, ["--consumer.config", consumer, "--producer.config", producer, "--whitelist", f"{base}-.*",
                    "--name", base, "--prefix", "w.", "--preserve.partitions", "--exactly.once",
                    "--offset.commit.interval.ms", "1000"]


def test_exactly_once_at_1000_partitions_under_1024_open_files_with_a_zombie(stack, tmp_path, topic_name):
    src, dst = stack["source"].kafka.bootstrap_servers, stack["destination"].kafka.bootstrap_servers
    base = topic_name("width")
    topics, args = _wide_mirror(stack, tmp_path, base, {
        "group.id": f"g-{base}", "partition.assignment.strategy": "cooperative-sticky", **FROZEN})
    _produce(src, topics, "a", 2)
    first = WorkerProcess(args, tmp_path, "first", open_files=1024)
    workers = [first]
    try:
        wait_while_running(lambda: _committed(dst, topics) == WIDTH * 2, "the first records copied", workers, 240)
        threads, files = _threads_and_files(first.pid)
        assert threads < 100 and files < 300, f"{threads} threads, {files} open files at {WIDTH} partitions"
        second = WorkerProcess(args, tmp_path, "second")
        workers.append(second)
        wait_while_running(lambda: owned_partitions(first) and owned_partitions(second), "both workers own partitions", workers, 120)
        _produce(src, topics, "b", 2)
        os.kill(first.pid, signal.SIGSTOP)  # a zombie: its session and poll interval pass while it holds records
        try:
            wait_while_running(lambda: len(owned_partitions(second)) == WIDTH, "the second worker takes every partition",
                  [second], 120)
            _produce(src, topics, "c", 2)
        finally:
            os.kill(first.pid, signal.SIGCONT)
        wait_while_running(lambda: owned_partitions(first) and len(owned_partitions(second)) < WIDTH,
              "the resumed worker rejoins and gets partitions again", workers, 120)
        _produce(src, topics, "d", 2)
        expected = WIDTH * 8
        wait_while_running(lambda: _committed(dst, topics) >= expected, "every record copied", workers, 300)
        source = _read_all(src, topics)
        copies = _read_all(dst, [f"w.{t}" for t in topics])
        assert len(source) == expected
        # Exactly once and in order: each destination partition holds its source partition's records, as they are.
        copied = _sequences(copies, prefix="w.")
        differing = [key for key, values in _sequences(source).items() if copied.get(key) != values]
        assert (len(copies), differing[:3]) == (expected, []), f"{len(differing)} partitions differ"
        for worker in workers:
            assert worker.terminate() == 0, worker.stderr[-2000:]
    finally:
        for worker in workers:
            worker.stop_quietly()


def test_exactly_once_claims_and_commits_positions_larger_than_one_offsets_batch(stack, tmp_path, topic_name):
    """The positions one transaction commits go to __consumer_offsets as one batch, which the broker refuses past
    its message.max.bytes (1 MiB) with "Unknown broker error" for every partition. Each position carries ~260 B
    of metadata at usual name lengths, so from ~4,000 partitions moving at once (the claim at start, a worker
    that takes over a dead one's partitions) the claim was refused until the start-up timeout and the worker
    exited 1 (bench/width.py at 5,000 partitions). Here a 1,400-character group id (named twice in each position)
    makes 1,000 positions ~3 MB."""
    src, dst = stack["source"].kafka.bootstrap_servers, stack["destination"].kafka.bootstrap_servers
    base = topic_name("wide-positions")
    topics, args = _wide_mirror(stack, tmp_path, base, {"group.id": f"g-{base}-{'x' * 1400}"})
    _produce(src, topics, "a", 2)
    worker = WorkerProcess(args, tmp_path, "wide")
    try:
        wait_while_running(lambda: _committed(dst, topics) == WIDTH * 2, "every record copied and committed",
                           [worker], 240)
        copied = _sequences(_read_all(dst, [f"w.{t}" for t in topics]), prefix="w.")
        assert copied == _sequences(_read_all(src, topics))
        assert worker.terminate() == 0, worker.stderr[-2000:]
    finally:
        worker.stop_quietly()
