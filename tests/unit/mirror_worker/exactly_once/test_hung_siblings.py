"""After one partition's send_offsets_to_transaction hangs, the producers that lived through the same fault are
replaced before their own calls, not each after a hang of its own.

Seen on the one-node stack (tests/integration/test_broker_failures.py, exactly-once, kill -9 of the destination
broker): once the broker was back, the first send_offsets_to_transaction of every producer made before the kill
hung (librdkafka 5456/5511), one partition after another as their pending commits finished: replacements
15 s apart, about a minute before the mirror copied again, and the test's 60 s ran out (24,921 of 30,000
missing). Producers made after the hang never hung.
"""

from __future__ import annotations

import threading

import pytest

from mirror_worker.exactly_once import transactions as transactions_module
from mirror_worker.exactly_once.positions import Owner
from mirror_worker.exactly_once.transactions import PartitionTransactions, TransactionAborted, TransactionPending
from tests.unit.mirror_worker.exactly_once.test_commit_calls import MemoryStore, TimingOutProducer

K0, K1, K2 = ("t", 0), ("t", 1), ("t", 2)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        self.now += 1.0  # every look is a second later: the order of events is the order of looks
        return self.now


class HangingProducer(TimingOutProducer):
    """send_offsets_to_transaction never returns (until the test ends); `during()` runs while it hangs."""

    def __init__(self, release: threading.Event, during=lambda: None) -> None:
        super().__init__()
        self.release, self.during = release, during
        self.commit_timeouts = 0

    def send_offsets_to_transaction(self, offsets, metadata, timeout):
        self.calls.append(f"send_offsets {offsets[0].offset}")
        self.during()
        self.release.wait(30)


@pytest.fixture
def release():
    event = threading.Event()
    yield event
    event.set()


def _transactions(monkeypatch, producers: dict) -> tuple[PartitionTransactions, list]:
    monkeypatch.setattr(transactions_module, "STUCK_AFTER_S", 0.2)  # a hang is given up 0.2 s past the timeout
    tx = PartitionTransactions("m", "src", {}, {}, lambda topic: topic, lambda topic: None, 0.1,
                               "m.mirror.eos-positions", lambda topic: Owner("cluster", topic, "m-group"),
                               clock=Clock(), store=MemoryStore())
    made = []

    def new_producer(key):
        producer = TimingOutProducer()
        producer.commit_timeouts = 0
        made.append((key, producer))
        return producer

    tx._new_producer = new_producer
    for key, producer in producers.items():
        tx.producers[key] = producer
        tx.sound[key] = tx.clock()  # as open() does
        tx.recorded.add(key)
    return tx, made


def test_a_producer_older_than_a_hang_is_replaced_before_its_own_send_offsets(monkeypatch, release):
    during: list = []
    hanging, pending, sound = HangingProducer(release, lambda: during.append(tx.commit(K2, 7, 0.1))), \
        TimingOutProducer(), TimingOutProducer()
    sound.commit_timeouts = 0
    tx, made = _transactions(monkeypatch, {K0: hanging, K1: pending, K2: sound})
    with pytest.raises(TransactionPending):
        tx.commit(K1, 5, 0.1)  # sent its offsets, then its commit timed out: pending through the fault
    with pytest.raises(TransactionAborted, match="commit hung"):
        tx.commit(K0, 5, 0.1)  # hangs (K2 commits meanwhile): given up and replaced
    assert during == [7]
    assert tx.commit(K2, 10, 0.1) == 10  # its send_offsets answered after the hang began: kept
    assert tx.commit(K1, 9, 0.1) == 5  # the pending commit finishes (commit_transaction only)
    with pytest.raises(TransactionAborted, match="another partition's hung"):
        tx.commit(K1, 12, 0.1)  # its next send_offsets would be its first since the fault: replaced first
    assert "send_offsets 12" not in pending.calls
    assert [key for key, _ in made] == [K0, K1]
    assert tx.producers[K1] is made[1][1] and tx.producers[K2] is sound
    assert tx.commit(K1, 12, 0.1) == 12 and made[1][1].calls[0] == "send_offsets 12"  # the new one is used
    assert tx.commit(K2, 15, 0.1) == 15 and tx.producers[K2] is sound  # never replaced


def test_without_a_hang_nothing_is_replaced(monkeypatch, release):
    tx, made = _transactions(monkeypatch, {K0: TimingOutProducer(), K1: TimingOutProducer()})
    for key in (K0, K1):
        tx.producers[key].commit_timeouts = 0
        assert tx.commit(key, 3, 0.1) == 3
        assert tx.commit(key, 6, 0.1) == 6
    assert made == []
