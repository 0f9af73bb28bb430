"""Static group membership (KIP-345): a worker restarted after a kill -9 takes its partitions back at once;
a second live process with the same slot is fenced loudly (real brokers, real processes).

The consumers keep librdkafka's session.timeout.ms (45 s): that is how long a crashed dynamic member's
partitions idle, and what static membership removes from a restart.
"""

from __future__ import annotations

import time
from datetime import datetime

import pytest
from confluent_kafka import Consumer, TopicPartition

from tests.integration.test_worker_faults import PARTITIONS, LiveProducer, _verify, mirror_workers
from tests.worker_util import committed_offsets, owned_partitions

pytestmark = pytest.mark.integration

RESUME_WITHIN_S = 5.0


@pytest.fixture
def mirror(stack, tmp_path, topic_name):
    """Workers with static membership and librdkafka's default session timeout; `mirror(name, "--worker.slot", "3")`."""
    with mirror_workers(stack, tmp_path, topic_name("static"), {"auto.offset.reset": "earliest"},
                        ["--static.membership"]) as start:
        yield start


def _destination_total(consumer: Consumer, topic: str) -> int:
    return sum(consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(PARTITIONS))


def _settled_total(consumer: Consumer, topic: str, quiet_s: float = 1.0, within_s: float = 20.0) -> int:
    """The destination's total once nothing more arrives: produce requests a killed worker had sent still land after
    its exit (a count taken at once missed 66 records at 2,000 msgs/s, and the duplicates' bound with them)."""
    deadline = time.monotonic() + within_s
    total = _destination_total(consumer, topic)
    while True:
        time.sleep(quiet_s)
        now = _destination_total(consumer, topic)
        if now == total:
            return total
        assert time.monotonic() < deadline, f"the destination still grew {within_s:g} s after the kill"
        total = now


def _logged_at(entry: dict) -> float:
    return datetime.strptime(entry["ts"], "%Y-%m-%dT%H:%M:%S.%f%z").timestamp()


@pytest.mark.parametrize("delivery", [[], ["--exactly.once"]], ids=["at-least-once", "exactly-once"])
def test_kill_9_then_restart_with_the_same_slot_resumes_within_5_seconds(mirror, record_property, delivery):
    """Exactly-once: the restarted member's transactional producers fence the dead ones' and abort what they left
    open, so read_committed readers see each record once."""
    # Held at 50,000 until the restarted worker has resumed: the restart is mid-stream however slow the machine.
    live = LiveProducer(mirror.src, mirror.topic, total=60_000, rate=2_000, hold_at=50_000)
    live.start()
    watermarks = Consumer({"bootstrap.servers": mirror.dst, "group.id": "watermarks"})
    try:
        worker = mirror("first", "--worker.slot", "1", *delivery)
        worker.wait_started()
        deadline = time.monotonic() + 60
        while _destination_total(watermarks, mirror.topic) < 3_000:
            assert time.monotonic() < deadline, "the first worker mirrored too little"
            time.sleep(0.2)
        time.sleep(1.5)  # a few commits (1 s interval) behind us
        worker.kill()
        stalled = _settled_total(watermarks, mirror.topic)
        committed = sum(max(0, o) for o in committed_offsets(mirror.src, mirror.group, mirror.topic, PARTITIONS).values())
        launched = time.time()
        restarted = mirror("second", "--worker.slot", "1", *delivery)  # the same slot
        started = _logged_at(restarted.wait_for_log("mirror started", timeout=60))
        deadline = time.monotonic() + 90
        while _destination_total(watermarks, mirror.topic) <= stalled:
            assert time.monotonic() < deadline, "mirroring did not resume within 90 s"
            time.sleep(0.05)
        resumed_after = time.time() - started
    finally:
        watermarks.close()
    since_launch = resumed_after + started - launched
    record_property("resumed_after_s", round(resumed_after, 2))
    record_property("resumed_after_launch_s", round(since_launch, 2))
    print(f"\nmirroring resumed {resumed_after:.2f} s after the restarted worker's 'mirror started' "
          f"({since_launch:.2f} s after its launch)")
    assert resumed_after < RESUME_WITHIN_S
    assert live.is_alive(), "the source producer finished before the restart: not mid-stream"
    live.release()
    live.finish()
    duplicates = _verify(mirror, 60_000, record_property)  # read_committed: nothing lost, per-partition order kept
    if delivery:
        assert duplicates == 0
    else:
        assert duplicates <= stalled - committed, "records before the last commit were mirrored again"
    assert restarted.terminate() == 0


def _live_and_two_workers(mirror, *workers: tuple[str, str]):
    """20 000 records produced live, and two workers (name, slot) started one after the other."""
    live = LiveProducer(mirror.src, mirror.topic, total=20_000, rate=2_000)
    live.start()
    started = []
    for name, slot in workers:
        started.append(mirror(name, "--worker.slot", slot))
        started[-1].wait_started()
    return live, *started


def test_a_second_process_with_the_same_slot_fences_the_first_loudly(mirror, record_property):
    """The broker hands a static member's id to the newest consumer that joins with it (KIP-345) and fences
    the older one: librdkafka reports FENCED_INSTANCE_ID as fatal, so the first worker exits non-zero with a
    line naming the instance, and the second alone mirrors on."""
    live, first, second = _live_and_two_workers(mirror, ("first", "3"), ("second", "3"))
    code = first.wait(timeout=60)
    print(f"\nfirst worker exited {code}: {first.stderr.strip()}")
    assert code not in (0, None)
    lines = first.stderr.strip().splitlines()
    assert len(lines) == 1 and "fenced" in lines[0] and f"g-{mirror.topic}.source.slot-3.stream-0" in lines[0], lines
    live.finish()
    _verify(mirror, 20_000, record_property)
    assert second.proc.poll() is None, second.stderr
    assert second.terminate() == 0


def _membership_changes(worker) -> int:
    return sum(1 for e in worker.logs() if e.get("msg") in (
        "partitions assigned", "partitions revoked", "partitions lost (not committed)"))


def test_a_restarted_member_gets_its_own_partitions_back_without_moving_the_others(mirror, record_property):
    live, steady, crashing = _live_and_two_workers(mirror, ("slot-0", "0"), ("slot-1", "1"))
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        owned = [owned_partitions(w) for w in (steady, crashing)]
        if all(owned) and len(owned[0] | owned[1]) == PARTITIONS:
            break
        time.sleep(0.5)
    assert all(owned) and len(owned[0] | owned[1]) == PARTITIONS, owned
    time.sleep(2.0)
    changes = _membership_changes(steady)
    crashing.kill()
    restarted = mirror("slot-1-again", "--worker.slot", "1")
    restarted.wait_started()
    time.sleep(5.0)  # a rebalance, had there been one, would show in the steady worker's logs by now
    assert owned_partitions(restarted) == owned[1]
    assert _membership_changes(steady) == changes, "the other worker's partitions moved"
    live.finish()
    _verify(mirror, 20_000, record_property)
    assert steady.terminate() == 0 and restarted.terminate() == 0


def test_num_streams_processes_of_one_slot_get_ids_of_their_own(mirror):
    """Two --num.streams processes with one --worker.slot: were their ids the same, one would fence the other."""
    worker = mirror("streams", "--worker.slot", "2", "--num.streams", "2")
    deadline = time.monotonic() + 60
    while len(worker.owned()) < 2:
        assert time.monotonic() < deadline and worker.proc.poll() is None, worker.stderr[-2000:]
        time.sleep(0.5)
    time.sleep(3.0)  # a fenced process would stop at its next commit (1 s interval)
    assert worker.proc.poll() is None, worker.stderr[-2000:]
    assert len(worker.owned()) == 2 and "fenced" not in worker.stderr
    assert worker.terminate() == 0
