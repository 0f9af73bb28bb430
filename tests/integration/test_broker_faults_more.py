"""More faults on the three-node clusters behind Toxiproxy (see test_broker_faults.py for the pattern):
a worker frozen past max.poll.interval.ms while a second worker takes its partitions (a zombie), and a
rolling restart of every broker of both clusters under a steady load.

Each test reads every record afterwards (in source order per partition; exactly-once: once, read_committed),
checks that no worker exited, and prints and records what an operator would see: seconds until records flow
again, records sent twice.
"""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient

from mirror_worker.exactly_once.positions import POSITIONS_GROUP
from tests.integration.test_broker_faults import (
    PARTITIONS, RATE, Watch, _assert_running, _converged, _wait_for_total, clusters,  # noqa: F401  (fixture)
)
from tests.integration.test_worker_faults import LiveProducer
from tests.kafka_util import create_topic
from tests.worker_util import (
    WorkerProcess, by_partition, loss_and_duplicates, read_topic, wait_while_running, write_properties,
)

pytestmark = [pytest.mark.integration, pytest.mark.faults]

FROZEN_CONSUMER = {"session.timeout.ms": "6000", "heartbeat.interval.ms": "1000", "max.poll.interval.ms": "10000"}


def _worker(clusters, tmp_path, topic: str, delivery: str, name: str, consumer_settings: dict[str, str]) -> WorkerProcess:
    # Every worker of the mirror reads the same files: the source's alias is the consumer file's name, and it
    # names the exactly-once positions group and transactional ids the workers must share.
    consumer = write_properties(tmp_path / "source.properties", {
        "bootstrap.servers": clusters["source"].bootstrap_servers, "group.id": f"g-{topic}",
        "auto.offset.reset": "earliest", "session.timeout.ms": "6000", "heartbeat.interval.ms": "1000",
        **consumer_settings,
    })
    producer = write_properties(tmp_path / "destination.properties",
                                {"bootstrap.servers": clusters["destination"].bootstrap_servers})
    return WorkerProcess([
        "--consumer.config", consumer, "--producer.config", producer, "--whitelist", topic, "--name", topic,
        "--preserve.partitions", "--offset.commit.interval.ms", "1000",
        *(["--exactly.once"] if delivery == "exactly-once" else []),
    ], tmp_path, name)


class Positions(threading.Thread):
    """Samples, every 0.3 s, the mirror's committed positions and then the destination's high watermarks per
    partition. A committed position never goes back, and never passes what the destination holds (with
    --preserve.partitions, source offset n of a partition is its n-th record, so a position past the
    destination's end would skip records). Violations are kept, not raised, for the test's thread."""

    def __init__(self, committed_at: str, group: str, destination: str, topic: str) -> None:
        super().__init__(daemon=True)
        self.committed_at, self.group, self.destination, self.topic = committed_at, group, destination, topic
        self.samples: list[tuple[float, dict[int, int], dict[int, int]]] = []  # (at, committed, destination ends)
        self.violations: list[str] = []
        self.done = threading.Event()

    def run(self) -> None:
        # read_uncommitted: the high watermark itself (read_committed would give the last stable offset).
        ends = Consumer({"bootstrap.servers": self.destination, "group.id": "positions-watch", "log_level": 0,
                         "isolation.level": "read_uncommitted"})
        committed = Consumer({"bootstrap.servers": self.committed_at, "group.id": self.group, "log_level": 0,
                              "isolation.level": "read_committed"})
        last: dict[int, int] = {}
        try:
            while not self.done.is_set():
                self.done.wait(0.3)
                try:
                    positions = {tp.partition: tp.offset for tp in committed.committed(
                        [TopicPartition(self.topic, p) for p in range(PARTITIONS)], timeout=5) if tp.offset >= 0}
                    high = {p: ends.get_watermark_offsets(TopicPartition(self.topic, p), timeout=2, cached=False)[1]
                            for p in range(PARTITIONS)}
                except Exception:  # a coordinator or leader moving: no sample
                    continue
                at = time.monotonic()
                self.samples.append((at, positions, high))
                for p, offset in positions.items():
                    if offset < last.get(p, 0):
                        self.violations.append(f"{at:.1f}: partition {p}: committed position went back {last[p]} -> {offset}")
                    if offset > high[p]:
                        self.violations.append(f"{at:.1f}: partition {p}: committed {offset} past the destination's end "
                                               f"{high[p]}")
                    last[p] = max(last.get(p, 0), offset)
        finally:
            ends.close()
            committed.close()

    def resumed_after(self, fault_at: float, partitions: set[int]) -> float | None:
        """Seconds from `fault_at` until the destination grew on `partitions` (None: never)."""
        before = [s for s in self.samples if s[0] <= fault_at]
        if not before:
            return None
        at_fault = sum(before[-1][2][p] for p in partitions)
        return next((at - fault_at for at, _, high in self.samples
                     if at > fault_at and sum(high[p] for p in partitions) > at_fault), None)

    def stop(self) -> None:
        self.done.set()
        if self.is_alive():
            self.join(15)


def _partitions(worker: WorkerProcess) -> set[int]:
    """The source partitions `worker` holds now, from its logs (names are `topic[p]`)."""
    return {int(name.rsplit("[", 1)[1].rstrip("]")) for parts in worker.owned().values() for name in parts}


@pytest.mark.parametrize("delivery", ["exactly-once", "at-least-once"])
def test_zombie_worker_frozen_past_max_poll_interval(clusters, tmp_path, topic_name, delivery, record_property):
    """Two workers of one mirror share its partitions; one is frozen (SIGSTOP) until the other holds every
    partition and max.poll.interval.ms has passed, then resumed (SIGCONT). The zombie must not move a
    position it no longer owns (none goes back or past the destination's end), and under exactly-once its
    open transactions are fenced: nothing read_committed twice."""
    topic = topic_name("zombie")
    src, dst = clusters["source"], clusters["destination"]
    create_topic(src.bootstrap_servers, topic, PARTITIONS, replication_factor=3)
    total = 40 * RATE
    live = LiveProducer(src.bootstrap_servers, topic, total=total, rate=RATE)
    live.start()
    zombie = _worker(clusters, tmp_path, topic, delivery, "zombie", FROZEN_CONSUMER)
    other = _worker(clusters, tmp_path, topic, delivery, "other", FROZEN_CONSUMER)
    workers = [zombie, other]
    if delivery == "exactly-once":  # the positions are on the destination (see exactly_once.py)
        positions = Positions(dst.bootstrap_servers, POSITIONS_GROUP, dst.bootstrap_servers, topic)
    else:
        positions = Positions(src.bootstrap_servers, f"g-{topic}", dst.bootstrap_servers, topic)
    watch = Watch(clusters, topic, zombie)
    frozen = False
    try:
        zombie.wait_started(90)
        other.wait_started(90)
        watch.start()
        positions.start()
        wait_while_running(lambda: _partitions(zombie) and _partitions(other), "both workers own partitions", workers, 90)
        _wait_for_total(watch, 5 * RATE)
        taken = _partitions(zombie)
        fault_at = time.monotonic()
        os.kill(zombie.pid, signal.SIGSTOP)
        frozen = True
        wait_while_running(lambda: _partitions(other) == set(range(PARTITIONS)), "the other worker takes every partition", [other])
        time.sleep(max(0.0, fault_at + 12 - time.monotonic()))  # past max.poll.interval.ms (10 s)
        os.kill(zombie.pid, signal.SIGCONT)
        frozen = False
        resumed_at = time.monotonic()
        frozen_s = resumed_at - fault_at
        wait_while_running(lambda: bool(_partitions(zombie)), "the zombie rejoins and gets partitions again", workers, 60)
        live.finish()
        source = read_topic(src.bootstrap_servers, topic, timeout=30)
        assert len(source) == total
        _assert_running(other, watch, fault_at)
        mirrored = _converged(source, dst.bootstrap_servers, topic, zombie, watch, fault_at)
        converged_s = time.monotonic() - fault_at
        time.sleep(2)  # anything sent twice still in flight shows up now
        mirrored = read_topic(dst.bootstrap_servers, topic, timeout=30)
        for worker in workers:
            _assert_running(worker, watch, fault_at)
        statuses, shutdown_s = [], []
        for worker in workers:
            stop_at = time.monotonic()
            statuses.append(worker.terminate())
            shutdown_s.append(round(time.monotonic() - stop_at, 1))
    finally:
        if frozen:
            os.kill(zombie.pid, signal.SIGCONT)
        positions.stop()
        watch.stop()
        for worker in workers:
            worker.stop_quietly()
    missing, duplicates, ordered = loss_and_duplicates(source, mirrored)
    resumed_s = positions.resumed_after(fault_at, taken)
    figures = {"frozen_s": round(frozen_s, 1), "resumed_s": resumed_s and round(resumed_s, 1),
               "converged_s": round(converged_s, 1), "duplicates": duplicates, "exit_statuses": statuses,
               "shutdown_s": shutdown_s,
               "position_samples": len(positions.samples)}
    for name, value in figures.items():
        record_property(name, value)
    print(f"\n{delivery} zombie: {figures}")
    assert statuses == [0, 0], [w.stderr[-1500:] for w in workers]
    assert positions.samples and positions.violations == [], (f"fault at {fault_at:.1f}, resumed at {resumed_at:.1f}",
                                                              positions.violations)
    assert (missing, ordered) == ([], True)
    if delivery == "exactly-once":
        assert duplicates == 0
        src_parts, dst_parts = by_partition(source), by_partition(mirrored)
        for partition in range(PARTITIONS):
            assert [m.value() for m in dst_parts[partition]] == [m.value() for m in src_parts[partition]]


def _under_replicated(bootstrap: str) -> list[str]:
    """Partitions of the cluster (internal topics included) whose in-sync replicas are fewer than their
    replicas; or one entry naming the error while the metadata cannot be had."""
    try:
        metadata = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0}).list_topics(timeout=5)
    except Exception as exc:  # a broker still coming back
        return [f"no metadata: {exc}"]
    return [f"{topic}[{p}]" for topic, t in metadata.topics.items() for p, partition in t.partitions.items()
            if len(partition.isrs) < len(partition.replicas) or partition.leader < 0]


def _roll(cluster, workers: list[WorkerProcess], restarts: list[dict]) -> None:
    """Restart each broker of `cluster` in turn (SIGTERM, start, wait until the cluster has no under-replicated
    partition), as a rolling upgrade does; note each restart's timings."""
    for node in cluster.nodes:
        began = time.monotonic()
        node.stop()
        stopped = time.monotonic()
        node.start()
        node.wait_ready(240)  # 121 s from SIGTERM to started once in a CI run, beside a wheel's venv being built
        wait_while_running(lambda: not _under_replicated(cluster.bootstrap_servers),
              f"{cluster.name} broker {node.node_id}: replicas in sync again", workers, 120)
        restarts.append({"broker": f"{cluster.name}.{node.node_id}", "stop_s": round(stopped - began, 1),
                         "in_sync_s": round(time.monotonic() - began, 1)})


# Exactly-once was a known gap of issue 28 here (2 of 6 runs failed): a hung send_offsets_to_transaction (librdkafka
# issue 5456) was waited out one partition after another, and a replaced producer's fatal error escaped the loop.
# Since the pending commits are retried together and a producer's fatal error is its partition's: 6 of 6 passed.
# Each run rolls one cluster, three restarts, each bounded by its own waits (240 s up, 120 s in sync). Both
# clusters rolled in the at-least-once run took 175 s in a full make test here and 630 s in CI (stop 51), the
# longest link of the fault tests' chain, which the late Spark group waits for. pytest-timeout's 600 s would end
# the whole test process (thread method) should a loaded CI run stretch it: 1,200 s.
@pytest.mark.timeout(1200)
@pytest.mark.parametrize("delivery", ["at-least-once", "exactly-once"])
def test_rolling_restart_of_both_clusters(clusters, tmp_path, topic_name, delivery, record_property):
    """Every broker of a cluster restarted in turn (SIGTERM, back, replicas in sync) under a steady load: the
    worker never exits and every record arrives, in order. At-least-once rolls the source (its fetch sessions,
    group coordinator and offset commits move), exactly-once the destination (its transactions and positions
    live there; every record read_committed once): both clusters between them. A destination broker killed, not
    stopped, under at-least-once is test_broker_faults.py's."""
    topic = topic_name("rolling")
    src, dst = clusters["source"], clusters["destination"]
    create_topic(src.bootstrap_servers, topic, PARTITIONS, replication_factor=3)
    rate = 500  # the roll takes minutes on a loaded machine: a steady stream for all of it, not a big one
    live = LiveProducer(src.bootstrap_servers, topic, total=10**9, rate=rate)  # until stop()
    worker = _worker(clusters, tmp_path, topic, delivery, "rolling", {})
    watch = Watch(clusters, topic, worker)
    restarts: list[dict] = []
    try:
        live.start()
        worker.wait_started(90)
        watch.start()
        _wait_for_total(watch, 3 * rate)
        fault_at = time.monotonic()
        _roll(src if delivery == "at-least-once" else dst, [worker], restarts)
        roll_s = time.monotonic() - fault_at
        _assert_running(worker, watch, fault_at)
        live.stop()
        live.finish()
        source = read_topic(src.bootstrap_servers, topic, timeout=60)
        mirrored = _converged(source, dst.bootstrap_servers, topic, worker, watch, fault_at)
        converged_s = time.monotonic() - fault_at
        time.sleep(2)
        mirrored = read_topic(dst.bootstrap_servers, topic, timeout=60)
        _assert_running(worker, watch, fault_at)
        status = worker.terminate()
    finally:
        live.stop()
        watch.stop()
        worker.stop_quietly()
    missing, duplicates, ordered = loss_and_duplicates(source, mirrored)
    stalls = _stalls(watch, fault_at)
    figures = {"roll_s": round(roll_s, 1), "converged_s": round(converged_s, 1), "records": len(source),
               "duplicates": duplicates, "longest_stall_s": stalls, "exit_status": status, "restarts": restarts}
    for name, value in figures.items():
        record_property(name, value)
    print(f"\n{delivery} rolling restart: {figures}")
    assert status == 0, worker.stderr[-1500:]
    assert (missing, ordered) == ([], True)
    if delivery == "exactly-once":
        assert duplicates == 0


def _stalls(watch: Watch, since: float) -> float:
    """The longest time, after `since`, that the destination did not grow (the worker's worst recovery)."""
    longest, last_growth, last_total = 0.0, since, None
    for sample in watch.samples:
        if sample.at < since or sample.destination is None:
            continue
        if last_total is None or sample.destination > last_total:
            longest = max(longest, sample.at - last_growth)
            last_growth, last_total = sample.at, sample.destination
    return round(longest, 1)
