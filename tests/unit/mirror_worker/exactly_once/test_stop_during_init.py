"""A stop while exactly-once waits on the destination: init_transactions and fencing give up with StopInterrupted
(a clean stop), and notice the stop within a slice of the wait, not at the end of a whole start-up timeout."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from confluent_kafka import KafkaError, KafkaException

from mirror_worker.exactly_once import fencing
from mirror_worker.exceptions import MirrorError, StopInterrupted


class WaitingProducer:
    """init_transactions that times out (retriable: "retry call to resume") `timeouts` times, then succeeds."""

    def __init__(self, timeouts: int, code: int = KafkaError._TIMED_OUT, retriable: bool = True) -> None:
        self.timeouts, self.code, self.retriable = timeouts, code, retriable
        self.calls: list[float] = []

    def init_transactions(self, timeout: float) -> None:
        self.calls.append(timeout)
        if len(self.calls) <= self.timeouts:
            raise KafkaException(KafkaError(self.code, "waiting", retriable=self.retriable))

    def list_topics(self, topic=None, timeout=None):
        return SimpleNamespace(orig_broker_id=1)


def test_each_call_waits_a_slice_and_a_stop_between_two_gives_up_as_a_stop():
    producer = WaitingProducer(timeouts=100)
    stops = iter([False, False, True])
    with pytest.raises(StopInterrupted, match="stopped: the worker is stopping"):
        fencing.init_transactions(producer, 120.0, "w", stopping=lambda: next(stops))
    assert producer.calls == [fencing.STOP_CHECK_S] * 3


def test_the_same_init_is_resumed_until_it_finishes():
    producer = WaitingProducer(timeouts=2)
    fencing.init_transactions(producer, 120.0, "w")
    assert len(producer.calls) == 3


def test_a_refusal_that_is_not_retriable_is_a_failure_even_while_stopping():
    producer = WaitingProducer(timeouts=1, code=KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, retriable=False)
    with pytest.raises(MirrorError, match="exactly-once init of w failed") as raised:
        fencing.init_transactions(producer, 120.0, "w", stopping=lambda: True)
    assert not isinstance(raised.value, StopInterrupted)


def test_fencing_stops_as_a_stop(monkeypatch):
    made = []
    monkeypatch.setattr(fencing.factory, "producer", lambda settings, extra: made.append(extra) or WaitingProducer(0))
    with pytest.raises(StopInterrupted):
        fencing.fence({}, ["a", "b", "c"], "dest.t", 30.0, stopping=lambda: True)
    assert made == []  # not one more producer once the stop was asked


def test_an_init_that_never_answers_names_its_bound():
    producer = WaitingProducer(timeouts=10**6)
    with pytest.raises(MirrorError, match=r"^exactly-once init of w failed: no answer within 1s \(startup-timeout-s\)"):
        fencing.init_transactions(producer, 1.0, "w")
