"""The worker survives a destination broker that crashes (kill -9) and comes back: it never exits, and every
source record ends on the destination in order per partition (exactly-once: once, read_committed)."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest
from confluent_kafka import Consumer, KafkaException, TopicPartition

from mirror_worker.engine.ledger import OffsetLedger
from mirror_worker.engine.run_state import RunState
from mirror_worker.engine.transaction_cycle import CommitOutcome, TransactionCommits
from mirror_worker.exactly_once.positions import POSITIONS_GROUP, Owner
from mirror_worker.exactly_once.stream_transaction import StreamTransaction
from mirror_worker.exceptions import MirrorError
from mirror_worker.metrics import MirrorMetrics
from tests.integration.test_worker_faults import LiveProducer, mirror_workers
from tests.kafka_util import create_topic
from tests.worker_util import loss_and_duplicates, read_topic, wait_for_count

# kill -9 of the destination broker: one of the module's own (outage_stack), beside the shared source
pytestmark = pytest.mark.integration

TOTAL, RATE = 30_000, 1_500  # 20 s of a steady producer
GROUP_SETTINGS = {"session.timeout.ms": "6000", "heartbeat.interval.ms": "1000"}


def _outage(stack, worker, down_s: float, cluster: str = "destination") -> float:
    """kill -9 of the cluster's broker mid-stream, started again after `down_s`; the worker stays up
    throughout. Returns when the broker answered again (monotonic)."""
    # mid-stream: some mirrored, some not
    assert len(wait_for_count(worker.dst, worker.topic, 2_000, timeout=30, read_timeout=5, interval=0.5)) >= 2_000, \
        "nothing mirrored before the outage"
    broker = stack[cluster].kafka
    broker.kill()
    try:
        waited = time.monotonic() + down_s
        while time.monotonic() < waited:
            assert worker.proc.poll() is None, f"worker exited during the outage: {worker.stderr[-3000:]}"
            time.sleep(0.5)
    finally:
        broker.start()
        # The broker's own recovery after kill -9 (its log, the KRaft quorum): over 90 s once on a full make test
        # beside the fault tests' rolling restarts; the worker's recovery is timed from here.
        broker.wait_ready(180)
    return time.monotonic()


def _verify_after(start, worker, live, back: float, record_property, exactly_once: bool, in_order: bool = True) -> None:
    live.finish()
    source = read_topic(start.src, start.topic, timeout=30)
    assert len(source) == TOTAL
    destination = wait_for_count(start.dst, start.topic, TOTAL, timeout=60)
    record_property("recovery_s", round(time.monotonic() - back, 1))
    assert worker.proc.poll() is None, f"worker exited after the outage: {worker.stderr[-3000:]}"
    if exactly_once:
        time.sleep(2)  # anything beyond the expected count would show up as a duplicate now
        destination = read_topic(start.dst, start.topic, timeout=30)
    missing, duplicates, ordered = loss_and_duplicates(source, destination)
    record_property("duplicates", duplicates)
    print(f"\n{start.topic}: {TOTAL} source records, {len(destination)} mirrored, {duplicates} duplicates")
    assert missing == [], _loss_report(start, worker, source, missing)
    record_property("ordered", ordered)
    if in_order:
        assert ordered, "per-partition order of first occurrences not kept"
    if exactly_once:
        assert duplicates == 0
    assert worker.terminate() == 0, worker.stderr[-3000:]


def _loss_report(start, worker, source: list, missing: list) -> str:
    """What a failure needs to be told apart: where the lost records were in their source partitions, whether
    the destination holds them in aborted transactions (read_uncommitted), and what the worker warned of."""
    at = {m.value(): (m.partition(), m.offset()) for m in source}
    ranges: dict[int, list[int]] = {}
    for value in missing:
        partition, offset = at[value]
        ranges.setdefault(partition, []).append(offset)
    uncommitted = {m.value() for m in read_topic(start.dst, start.topic, timeout=30, isolation="read_uncommitted")}
    warned = [f"{e.get('ts')} {e.get('msg')} {e.get('partition', '')} {e.get('offset', '')} {e.get('error', '')}"[:240]
              for e in worker.logs() if e.get("level") in ("warning", "error") and not e.get("msg", "").startswith(
                  ("FAIL ", "client error", "offset syncs not written", "waiting for the destination"))]
    return (f"{len(missing)} records lost, first {missing[:3]}; by source partition (count, first..last offset): "
            f"{ {p: (len(o), min(o), max(o)) for p, o in sorted(ranges.items())} }; "
            f"{sum(1 for v in missing if v in uncommitted)} of them on the destination in aborted transactions; "
            f"the worker's warnings:\n" + "\n".join(warned[-40:]))


# Exactly-once on one node was a known gap (issue 28) while each partition had a transactional producer of its
# own: send_offsets_to_transaction hung past its timeout on one producer after another (librdkafka 5456), each
# hang costing 15 s, and the mirror did not catch up in time beside busy loops (0 of 3). With one producer per
# source (issue "Production width") a hang costs one replacement: passed under a load of 12-16.
@pytest.mark.parametrize("mode", ["at-least-once", "exactly-once"])
def test_destination_broker_kill_9_and_restart(outage_stack, tmp_path, topic_name, mode, record_property):
    exactly_once = mode == "exactly-once"
    args = ["--exactly.once"] if exactly_once else []
    with mirror_workers(outage_stack, tmp_path, topic_name("crash"), GROUP_SETTINGS, args) as start:
        live = LiveProducer(start.src, start.topic, total=TOTAL, rate=RATE)
        live.start()
        worker = start("worker")
        worker.wait_started()
        worker.dst, worker.topic = start.dst, start.topic
        back = _outage(outage_stack, worker, down_s=15)
        _verify_after(start, worker, live, back, record_property, exactly_once)


def test_destination_down_longer_than_the_delivery_timeout(outage_stack, tmp_path, topic_name, record_property):
    """message.timeout.ms 5 s, destination down 15 s: records fail delivery; none is skipped, the worker
    re-sends them from its last commit once the destination is back, by itself. Order is not asserted: a
    record that timed out just before the broker came back may land after later ones of its partition
    (librdkafka delivers those), before its resend; the worker's default (message.timeout.ms=0) never gives
    up on a record and keeps the order (the tests above)."""
    with mirror_workers(outage_stack, tmp_path, topic_name("timeout"), GROUP_SETTINGS, []) as start:
        (tmp_path / "destination.properties").write_text(
            f"bootstrap.servers={start.dst}\nmessage.timeout.ms=5000\n")
        live = LiveProducer(start.src, start.topic, total=TOTAL, rate=RATE)
        live.start()
        worker = start("worker")
        worker.wait_started()
        worker.dst, worker.topic = start.dst, start.topic
        back = _outage(outage_stack, worker, down_s=15)
        _verify_after(start, worker, live, back, record_property, exactly_once=False, in_order=False)
        resends = [e for e in worker.logs() if e.get("msg") == "re-sending from the committed position"]
        assert resends, "no record timed out: the outage did not outlast message.timeout.ms"


def test_a_transaction_ended_while_its_commit_waited_on_the_destination_does_not_commit_its_positions(
        outage_stack, topic_name):
    """A defect that loses what a CI run lost (855 of 30,000 records, a window of those in flight at the kill; the
    kill test above, exactly-once; whether it is what that run met is not known): a commit waiting on a killed
    destination polls the consumers to keep the group; a rebalance callback that poll served (partitions lost) ended
    the open transaction, aborting its records, and the commit's next attempt committed their positions in the
    next, empty transaction. Real transactional producer and positions group on a real broker, killed -9; the
    callback is played by the poll hook (as assignment._abort_with does, with the producer replaced)."""
    broker = outage_stack["destination"].kafka
    dst, topic, positions_topic = broker.bootstrap_servers, topic_name("ended"), topic_name("positions")
    create_topic(dst, topic)
    create_topic(dst, positions_topic)
    key, records = (topic, 0), 100

    def position() -> TopicPartition:
        """The partition's committed position in the positions group (its coordinator loads on a young broker)."""
        reader = Consumer({"bootstrap.servers": dst, "group.id": POSITIONS_GROUP, "enable.auto.commit": False})
        deadline = time.monotonic() + 60
        try:
            while True:
                try:
                    return reader.committed([TopicPartition(topic, 0)], timeout=10)[0]
                except KafkaException:
                    assert time.monotonic() < deadline, "the positions group's coordinator did not answer"
                    time.sleep(1)
        finally:
            reader.close()

    assert position().offset < 0
    tx = StreamTransaction("m", "src", {"bootstrap.servers": dst}, {"bootstrap.servers": dst}, lambda t: t,
                           lambda t: "id", 5.0, positions_topic, lambda t: Owner("c", t, "g"),
                           f"kafka-mirror-eos.{topic}.src.me")
    try:
        assert tx.open([key]) == {key: None}
        tx.commit({key: 0}, set(), 10.0)  # the claim: position 0, this writer
        for i in range(records):
            tx.producers[0].produce(topic, f"v{i}".encode(), None, 0)
        assert tx.producers[0].flush(10) == 0  # on the broker, in the open transaction
        stream = SimpleNamespace(alias="src", assigned={key}, ledger=OffsetLedger({key: records}, {key: 0}),
                                 transactions=tx, pending={}, topic_ids={}, stash=[], interrupted=False)
        ended_by_callback: list[bool] = []

        def rebalance_during_the_wait() -> None:
            if ended_by_callback:
                return
            broker.start()
            broker.wait_ready(180)
            tx.broken = True  # partitions lost: the transaction is aborted, its producer replaced
            deadline = time.monotonic() + 120
            while True:
                try:
                    tx.abort("partitions lost with records in the open transaction")
                    break
                except MirrorError:
                    assert time.monotonic() < deadline, "the producer was not replaced"
                    time.sleep(1)
            ended_by_callback.append(True)

        commits = TransactionCommits(MirrorMetrics("m"), {"mirror": "m"}, RunState(30.0, time.monotonic),
                                     time.monotonic, lambda *a: None, lambda *a: None, lambda *a: None,
                                     rebalance_during_the_wait, lambda: None, 3600.0)
        broker.kill()
        outcome = CommitOutcome(True)
        commits.commit_stream(stream, outcome, deadline=None, from_loop=True, source_group=False)
        assert ended_by_callback, "the commit did not wait on the destination"
        committed, mirrored = position().offset, read_topic(dst, topic, timeout=30)
        assert committed <= len(mirrored), (
            f"position {committed} committed past the {len(mirrored)} records committed: skipped for good")
        assert [k for _, k, _ in outcome.aborted] == [key]  # re-sent by the caller
    finally:
        if not broker.process.is_running():
            broker.start()
            broker.wait_ready(180)
        tx.close_all()
