"""StreamTransaction's rule (W)/(F) without a broker: which writers a new owner fences, in which order with the
reads, and what a commit names (exactly_once/stream_transaction.py)."""

from __future__ import annotations

import threading

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from mirror_worker.exactly_once import stream_transaction
from mirror_worker.exactly_once.positions import RELEASED, IdentityCollision, Owner, transactional_id
from mirror_worker.exactly_once.stream_transaction import StreamTransaction
from mirror_worker.exactly_once.transactions import ProducerFenced, TransactionPending
from mirror_worker.exceptions import MirrorError

ME = "kafka-mirror-eos.g.src.me"
A, B = ("t", 0), ("t", 1)


class Producer:
    def __init__(self, commit_errors=()) -> None:
        self.calls: list[str] = []
        self.commit_errors = list(commit_errors)
        self.sent: list = []

    def init_transactions(self, timeout):
        self.calls.append("init")

    def begin_transaction(self):
        self.calls.append("begin")

    def produce(self, topic, value=None, key=None, partition=-1):
        self.calls.append(f"produce {topic}")

    def send_offsets_to_transaction(self, offsets, metadata, timeout):
        self.calls.append("send_offsets")
        self.sent.append(offsets)

    def commit_transaction(self, timeout):
        self.calls.append("commit")
        if self.commit_errors:
            raise KafkaException(self.commit_errors.pop(0))

    def abort_transaction(self, timeout):
        self.calls.append("abort")


class Store:
    """The positions group: `committed` (what read_uncommitted sees) and `stable` (after pending transactions)."""

    group_metadata = None

    def __init__(self, committed: dict, stable: dict | None = None) -> None:
        self.committed = committed  # key -> (offset, writer)
        self.stable = [stable] if stable is not None else []  # what each later stable read returns
        self.log: list[str] = []

    def refuse_foreign(self, keys):
        self.log.append("unstable read")
        return {key: self.committed[key][1] if key in self.committed else RELEASED for key in keys}

    def read(self, keys, stable_legacy=False):
        self.log.append("stable read")
        view = self.stable.pop(0) if self.stable else self.committed
        found = {key: (view[key][0], "id") if key in view else None for key in keys}
        return found, set(), {key: view[key][1] if key in view else RELEASED for key in keys}

    def record(self, producer, key):
        producer.produce("m.mirror.eos-positions", b"{}", repr(key).encode(), partition=0)

    def slot(self, key, offset=-1001, writer=""):
        return TopicPartition(key[0], key[1], offset, writer)

    def close(self):
        pass

    def warm(self):
        self.warmed = True

    def warm_legacy(self):
        self.warmed_legacy = True


@pytest.fixture
def world(monkeypatch):
    fenced: list[str] = []
    producers: list[Producer] = []

    def fence(settings, ids, topic, timeout_s, stopping=lambda: False):
        fenced.extend(sorted(set(ids)))
        store = current.get("store")
        if store is not None:
            store.log.append(f"fence {sorted(set(ids))}")

    def new_producer(settings, extra=None):
        producers.append(Producer(current.get("commit_errors", ()) if not producers else ()))
        return producers[-1]

    current: dict = {}
    monkeypatch.setattr(stream_transaction, "fence", fence)
    monkeypatch.setattr(stream_transaction, "connect", lambda *a, **k: None)
    monkeypatch.setattr(stream_transaction.factory, "producer", new_producer)

    def make(store: Store, commit_errors=()) -> StreamTransaction:
        current.update(store=store, commit_errors=commit_errors)
        return StreamTransaction("m", "src", {}, {}, lambda topic: f"dst.{topic}", lambda topic: "id", 5.0,
                                 "m.mirror.eos-positions", lambda topic: Owner("c", topic, "g"), ME, store=store)
    return make, fenced, producers


def test_a_new_owner_fences_the_writer_named_before_its_stable_read(world):
    make, fenced, _ = world
    store = Store({A: (7, "kafka-mirror-eos.g.src.other"), B: (3, RELEASED)})
    found = make(store).open([A, B])
    assert fenced == ["kafka-mirror-eos.g.src.other"]  # the released partition needs no fence
    assert store.log == ["unstable read", "fence ['kafka-mirror-eos.g.src.other']", "stable read"]
    assert found == {A: (7, "id"), B: (3, "id")}


def test_a_writer_whose_pending_transaction_carried_the_position_is_fenced_and_the_position_read_again(world):
    """The first read saw the old writer; the stable read waited for a claim by a third worker that was pending."""
    make, fenced, _ = world
    third = "kafka-mirror-eos.g.src.third"
    store = Store({A: (7, "kafka-mirror-eos.g.src.old")}, stable={A: (7, third)})
    found = make(store).open([A])
    assert fenced == ["kafka-mirror-eos.g.src.old", third]
    assert store.log == ["unstable read", "fence ['kafka-mirror-eos.g.src.old']", "stable read",
                         f"fence ['{third}']", "stable read"]
    assert found[A] == (7, "id")


def test_a_position_of_the_per_partition_layout_fences_the_partitions_own_id_and_its_own_writer_none(world):
    make, fenced, _ = world
    found = make(Store({A: (4, None), B: (5, ME)})).open([A, B])
    assert fenced == [transactional_id("dst.t", 0)]  # the upgrade's fence; the worker's own id is not fenced
    assert found[B] == (5, "id")


def test_a_commit_names_this_worker_as_writer_and_the_released_partitions_as_released(world):
    make, _, producers = world
    tx = make(Store({}))
    tx.open([A, B])
    done = tx.commit({A: 10, B: 4}, {B}, 5.0)
    assert done == {A: 10, B: 4}
    [[slot_a, slot_b]] = producers[0].sent
    assert (slot_a.metadata, slot_b.metadata) == (ME, RELEASED)
    assert producers[0].calls[-3:] == ["send_offsets", "commit", "begin"]
    assert B not in tx.held and tx.held[A] == 10


def test_a_commit_that_timed_out_is_finished_with_its_own_positions_not_the_later_ones(world):
    make, _, producers = world
    tx = make(Store({}), commit_errors=[KafkaError(KafkaError._TIMED_OUT, "timed out", retriable=True)])
    tx.open([A])
    with pytest.raises(TransactionPending):
        tx.commit({A: 5}, set(), 1.0)
    assert tx.pending_commit() == {A: 5}
    assert tx.commit({A: 9}, set(), 1.0) == {A: 5}  # the pending transaction is the one committed, not aborted
    assert producers[0].calls.count("send_offsets") == 1 and "abort" not in producers[0].calls


def test_once_fenced_nothing_is_sent_until_reopened(world):
    make, _, producers = world
    tx = make(Store({}), commit_errors=[KafkaError(KafkaError._FENCED, "fenced", fatal=True)])
    tx.open([A])
    with pytest.raises(ProducerFenced):
        tx.commit({A: 5}, set(), 1.0)
    with pytest.raises(ProducerFenced):
        tx.commit({A: 6}, set(), 1.0)
    with pytest.raises(ProducerFenced):
        tx.abort("x")
    assert producers[0].calls.count("send_offsets") == 1
    tx.reopen()  # the group confirmed what this worker owns: a new producer of the same id
    assert len(producers) == 2 and producers[1].calls == ["init", "begin"]
    assert tx.commit({A: 6}, set(), 1.0) == {A: 6}


def test_a_stop_interrupts_the_first_producers_init_but_never_one_that_replaces_a_producer(world, monkeypatch):
    """An init given up by a stop may still complete on the broker: when it replaces a producer, that one (whose
    transaction the stop's final commit needs) would be fenced under it. So only the first init may be interrupted."""
    make, _fenced, _producers = world
    asked: list[bool] = []
    monkeypatch.setattr(stream_transaction, "init_transactions",
                        lambda producer, timeout_s, what, stopping: asked.append(stopping()))
    tx = make(Store({}))
    tx.stopping = lambda: True  # a stop was asked
    tx.open([A])  # the first producer
    tx.reopen()  # its replacement (new topic limits, or after a fence)
    assert asked == [True, False]


def test_the_refusal_read_the_positions_warm_up_and_the_producers_start_run_side_by_side(world, monkeypatch):
    """Each is several round trips across a WAN: the producer's init waits here until the refusal and the warm-up
    have begun, which one after the other (start, then refusal) never happens."""
    make, _, producers = world
    refusing, seen = threading.Event(), []
    store = Store({A: (7, RELEASED)})
    refuse = store.refuse_foreign

    def refuse_foreign(keys):
        refusing.set()
        return refuse(keys)

    warming, warming_legacy = threading.Event(), threading.Event()
    monkeypatch.setattr(store, "refuse_foreign", refuse_foreign)
    monkeypatch.setattr(store, "warm", warming.set)
    monkeypatch.setattr(store, "warm_legacy", warming_legacy.set)
    monkeypatch.setattr(Producer, "init_transactions", lambda self, timeout: seen.append(
        (refusing.wait(5), warming.wait(5), warming_legacy.wait(5))))
    assert make(store).open([A]) == {A: (7, "id")}
    assert seen == [(True, True, True)] and len(producers) == 1
    assert store.log == ["unstable read", "stable read"]


def test_another_mirrors_partition_is_refused_even_when_the_producer_failed_to_start_meanwhile(world, monkeypatch):
    make, fenced, _ = world
    store = Store({A: (7, RELEASED)})

    def collide(keys):
        raise IdentityCollision("exactly-once: destination partition dst.t[0] is already written by another mirror")

    def refused_init(self, timeout):
        raise KafkaException(KafkaError(KafkaError._TIMED_OUT))

    monkeypatch.setattr(Producer, "init_transactions", refused_init)
    with pytest.raises(MirrorError, match="init of .* failed"):
        make(store).open([A])  # the refusal found nothing: the start's own error
    monkeypatch.setattr(store, "refuse_foreign", collide)
    with pytest.raises(IdentityCollision, match="already written by another mirror"):
        make(store).open([A])
    assert fenced == []


def test_every_end_of_a_transaction_is_counted_and_a_pending_commit_is_not_one(world):
    """`ended` tells a commit that waited whether the transaction holding its records is still the open one
    (engine/transaction_cycle.py): a commit, an abort and a replacement end it; a timed-out commit does not."""
    make, _, _ = world
    tx = make(Store({}), commit_errors=[KafkaError(KafkaError._TIMED_OUT, "timed out", retriable=True)])
    tx.open([A])
    assert tx.ended == 0  # the first producer replaced none
    with pytest.raises(TransactionPending):
        tx.commit({A: 5}, set(), 1.0)
    assert tx.ended == 0
    tx.commit({A: 5}, set(), 1.0)
    assert tx.ended == 1
    tx.abort("x")
    assert tx.ended == 2
    tx.reopen()
    assert tx.ended == 3
