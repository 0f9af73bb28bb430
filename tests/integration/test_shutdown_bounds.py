"""Issue #17 i: bounded shutdown and a destination outage longer than max.poll.interval.ms.

Each test starts its own broker for the side that goes down; the shared stack is never stopped.
"""

from __future__ import annotations

import signal
import time

import pytest

from tests.integration.test_worker_faults import LiveProducer
from tests.kafka_util import create_topic, private_kafka, produce
from tests.worker_util import (
    WorkerProcess,
    committed_offsets,
    loss_and_duplicates,
    read_topic,
    wait_for_count,
    write_mirror_spec,
)

pytestmark = pytest.mark.integration

SHUTDOWN_TIMEOUT_S = 8
MAX_POLL_INTERVAL_MS = 10_000


@pytest.fixture
def private_node(tmp_path_factory):
    with private_kafka(tmp_path_factory.mktemp("private-kafka")) as node:
        yield node


def _spec(path, stack, src: str, dst: str, topic: str, consumer: dict[str, str], commit_interval_s: int = 1) -> list[str]:
    write_mirror_spec(path, stack, "bounded", topic, prefix="b.", source=src, destination=dst, source_kafka=consumer,
                      **{"group-id": f'"g-{topic}"', "preserve-partitions": "true", "commit-interval-s": commit_interval_s,
                         "shutdown-timeout-s": SHUTDOWN_TIMEOUT_S})
    return ["--config", str(path), "--mirror", "bounded"]


def _copied_uncommitted(stack, tmp_path, src: str, dst: str, topic: str, records: int) -> WorkerProcess:
    """A worker that copied `records` records of a new two-partition topic and committed none of them (a 600 s
    commit interval): what a stop then commits is the stop's own commit."""
    create_topic(src, topic, partitions=2)
    produce(src, topic, [{"value": f"v-{i}".encode(), "partition": i % 2} for i in range(records)])
    worker = WorkerProcess(_spec(tmp_path / "mirrors.yaml", stack, src, dst, topic, {}, commit_interval_s=600), tmp_path,
                           from_a_terminal=True)
    try:
        worker.wait_started(90)
        assert len(wait_for_count(dst, f"b.{topic}", records, timeout=60)) == records
    except BaseException:
        worker.stop_quietly()
        raise
    return worker


def test_sigterm_with_the_source_cluster_down_exits_within_the_shutdown_timeout(stack, private_node, tmp_path,
                                                                                topic_name):
    src, dst = private_node.bootstrap_servers, stack["destination"].kafka.bootstrap_servers
    # Nothing is committed before SIGTERM: the final commit meets the stopped source.
    worker = _copied_uncommitted(stack, tmp_path, src, dst, topic_name("src-down"), 100)
    try:
        private_node.stop()
        time.sleep(2)  # the worker's clients notice: connections refused
        # Bounded: terminate() raises TimeoutExpired past the shutdown timeout and a few seconds more.
        code = worker.terminate(timeout=SHUTDOWN_TIMEOUT_S + 10)
        assert code == 0, worker.stderr[-2000:]
        assert [e for e in worker.logs() if e.get("msg") == "mirror stopped"], worker.stderr[-2000:]
    finally:
        worker.stop_quietly()


def test_a_hangup_stops_like_sigterm_with_every_copied_record_committed(stack, tmp_path, topic_name):
    """The terminal a worker was started from closes (SIGHUP): flush, commit, exit 0, as on SIGTERM and SIGINT.
    SIGHUP used to kill it with neither (exit -1); nothing is committed before the stop here (a 600 s commit
    interval), so the final commit is what is counted."""
    stop = signal.SIGHUP
    src, dst = stack["source"].kafka.bootstrap_servers, stack["destination"].kafka.bootstrap_servers
    topic = topic_name("hangup")
    worker = _copied_uncommitted(stack, tmp_path, src, dst, topic, 200)
    try:
        assert worker.terminate(timeout=SHUTDOWN_TIMEOUT_S + 10, sig=stop) == 0, worker.stderr[-2000:]
    finally:
        worker.stop_quietly()
    assert [e["signal"] for e in worker.logs() if e.get("msg") == "stop requested"] == [stop.name]
    assert committed_offsets(src, f"g-{topic}", topic, 2) == {0: 100, 1: 100}


def test_destination_down_longer_than_max_poll_interval_keeps_group_membership(stack, private_node, tmp_path,
                                                                               topic_name):
    """The commit cycle waits for the destination; meanwhile the consumer is polled (paused), so the group
    keeps the worker: no revoke or loss, nothing lost or duplicated after the destination comes back."""
    src, dst = stack["source"].kafka.bootstrap_servers, private_node.bootstrap_servers
    topic = topic_name("dst-down")
    create_topic(src, topic, partitions=2)
    consumer = {"session.timeout.ms": "6000", "heartbeat.interval.ms": "1000",
                "max.poll.interval.ms": str(MAX_POLL_INTERVAL_MS)}
    worker = WorkerProcess(_spec(tmp_path / "mirrors.yaml", stack, src, dst, topic, consumer), tmp_path)
    live = LiveProducer(src, topic, total=6000, rate=200, tag="out")
    try:
        worker.wait_started(90)
        live.start()
        wait_for_count(dst, f"b.{topic}", 200, timeout=60)
        private_node.stop()
        time.sleep(MAX_POLL_INTERVAL_MS / 1000 * 2.5)  # well past max.poll.interval.ms, records still coming
        private_node.start()
        private_node.wait_ready(120)
        live.finish()
        destination = wait_for_count(dst, f"b.{topic}", 6000, timeout=120)
        time.sleep(3)
        destination = read_topic(dst, f"b.{topic}")
        assert worker.proc.poll() is None, worker.stderr[-2000:]
        assert worker.terminate() == 0, worker.stderr[-2000:]
    finally:
        worker.stop_quietly()
    missing, duplicates, ordered = loss_and_duplicates(read_topic(src, topic, timeout=30), destination)
    assert (len(missing), duplicates, ordered) == (0, 0, True)
    messages = [entry["msg"] for entry in worker.logs()]
    assert "partitions lost (not committed)" not in messages
    assert messages.count("partitions assigned") == 1
    assert messages.count("partitions revoked") <= 1  # at most the final one, at SIGTERM


def test_sigterm_while_the_destination_is_down_exits_within_one_shutdown_timeout(stack, private_node, tmp_path,
                                                                                  topic_name):
    """The loop's commit cycle is waiting on a stopped destination when SIGTERM comes: that wait and close()'s
    final commit share one shutdown-timeout-s from the signal (they had one each, one after the other: about
    twice the bound: 17.1 s after SIGTERM here with 8 s), then the grace (CLOSE_GRACE_S, 5 s) for what librdkafka does not
    bound. Nothing is committed past what the destination acknowledged: a restart re-sends it."""
    src, dst = stack["source"].kafka.bootstrap_servers, private_node.bootstrap_servers
    topic = topic_name("dst-down-stop")
    create_topic(src, topic, partitions=2)
    worker = WorkerProcess(_spec(tmp_path / "mirrors.yaml", stack, src, dst, topic, {}), tmp_path)
    try:
        worker.wait_started(90)
        produce(src, topic, [{"value": f"a-{i}".encode(), "partition": i % 2} for i in range(100)])
        assert len(wait_for_count(dst, f"b.{topic}", 100, timeout=60)) == 100
        private_node.stop()
        produce(src, topic, [{"value": f"b-{i}".encode(), "partition": i % 2} for i in range(100)])
        time.sleep(4)  # consumed, not acknowledged: the commit cycle (every 1 s) waits on the destination
        stopped_at = time.monotonic()
        code = worker.terminate(timeout=60)
        took = time.monotonic() - stopped_at
        assert code == 0, worker.stderr[-2000:]
        # One bound and the grace, with 2 s for the process itself (start-up of nothing, exit).
        assert took < SHUTDOWN_TIMEOUT_S + 5 + 2, f"stopped {took:.1f}s after SIGTERM: {worker.stderr[-1500:]}"
        assert [e for e in worker.logs() if e.get("msg") == "mirror stopped"], worker.stderr[-2000:]
    finally:
        worker.stop_quietly()


@pytest.fixture
def transactionless_node(tmp_path_factory):
    """A destination whose transaction coordinator never becomes available: the transaction log asks for three
    replicas of a one-node cluster, so every init_transactions there waits (retriable) until its timeout."""
    with private_kafka(tmp_path_factory.mktemp("no-transactions"), **{
            "transaction.state.log.replication.factor": "3", "transaction.state.log.min.isr": "2"}) as node:
        yield node


def test_sigterm_while_exactly_once_waits_for_the_destinations_transaction_coordinator_exits_clean_and_promptly(
        stack, transactionless_node, tmp_path, topic_name):
    """Exactly-once: the worker's transactional producer waits on a destination whose coordinator never answers
    (since stop 60, as it fences its new assignment's earlier writers) when SIGTERM comes. Nothing was copied or
    claimed; the stop is honoured within its bound and exits 0 like any stop. Before: exit 1 ("exactly-once init
    of ... failed: Timed out ..."), 81 s after SIGTERM, the init having waited its whole start-up timeout (120 s
    here) in one call; in CI (2026-11-29) test_width's second worker, stopped while it fenced the partitions the
    first had just left, exited 1 the same way ("exactly-once fencing stopped: the worker is stopping")."""
    src, dst = stack["source"].kafka.bootstrap_servers, transactionless_node.bootstrap_servers
    topic = topic_name("eos-stop")
    create_topic(src, topic, partitions=2)
    produce(src, topic, [{"value": f"v-{i}".encode(), "partition": i % 2} for i in range(10)])
    path = write_mirror_spec(tmp_path / "mirrors.yaml", stack, "eos-stop", topic, prefix="e.", destination=dst,
                             delivery="exactly-once", **{
                                 "group-id": f'"g-{topic}"', "preserve-partitions": "true", "startup-timeout-s": 120,
                                 "shutdown-timeout-s": SHUTDOWN_TIMEOUT_S})
    worker = WorkerProcess(["--config", str(path), "--mirror", "eos-stop"], tmp_path)
    try:
        deadline = time.monotonic() + 90
        while not any(e.get("msg") == "created destination topic" and e.get("topic") == f"e.{topic}"
                      for e in worker.logs()):
            assert worker.proc.poll() is None, worker.stderr[-2000:]
            assert time.monotonic() < deadline, "the worker never created its destination topic"
            time.sleep(0.2)
        time.sleep(5)  # its transactional producer waits on the coordinator (up to the 120-s start-up timeout)
        assert worker.proc.poll() is None, worker.stderr[-2000:]
        stopped_at = time.monotonic()
        code = worker.terminate(timeout=150)
        took = time.monotonic() - stopped_at
        messages = [entry["msg"] for entry in worker.logs()]
        assert code == 0, worker.stderr[-2000:]
        assert took < SHUTDOWN_TIMEOUT_S + 5 + 2, f"stopped {took:.1f}s after SIGTERM: {worker.stderr[-1500:]}"
        # The wait is the assignment's (its earlier writers fenced): start-up itself no longer inits a transactional
        # producer since it stopped replacing the producers it made (stop 60); before, the replacement's init
        # waited inside start() and the stop logged "stopped before start".
        assert "partitions not taken up: the worker is stopping" in messages, messages
        assert "partitions assigned" not in messages, messages
    finally:
        worker.stop_quietly()
    assert read_topic(dst, f"e.{topic}", timeout=5, idle=1) == []
