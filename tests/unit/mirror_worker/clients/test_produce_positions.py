"""The installed confluent-kafka takes produce()'s arguments in the order the hot paths pass them by position
(mirror_worker/clients/produce_positions.py). A real Producer with no broker: records are only queued, then purged,
which reports each to its delivery callback."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, Producer

from mirror_worker.clients.produce_positions import POSITIONS


@pytest.fixture
def producer():
    producer = Producer({"bootstrap.servers": "127.0.0.1:1", "log_level": 0})
    yield producer
    producer.purge()
    producer.poll(0)


def purged(producer) -> None:
    producer.purge()
    producer.poll(0)


def test_a_call_built_in_the_order_of_positions_is_taken_with_its_callback(producer):
    reported = []
    values = {"topic": "t", "value": b"v", "key": b"k", "partition": 2,
              "callback": lambda err, msg: reported.append((err.code(), msg.topic(), msg.partition(), msg.value())),
              "on_delivery": None, "timestamp": 1700000000123, "headers": [("h", b"1")]}
    producer.produce(*[values[name] for name in POSITIONS])
    purged(producer)
    assert reported == [(KafkaError._PURGE_QUEUE, "t", 2, b"v")]
    assert len(POSITIONS) == len(set(POSITIONS)) == 8  # every parameter produce() has, once


def test_the_fifth_is_the_delivery_callback_and_the_sixth_its_alias_unused_once_the_fifth_is_given(producer):
    fifth, sixth = [], []
    producer.produce("t", b"v", b"k", 2, lambda err, msg: fifth.append((err.code(), msg.partition(), msg.key())),
                     None, 1700000000123, [("h", b"1")])
    # The alias counts only when the fifth is left out, which a call by position cannot: None there is given.
    producer.produce("t", b"w", b"l", 3, None, lambda err, msg: sixth.append(err.code()))
    purged(producer)
    assert fifth == [(KafkaError._PURGE_QUEUE, 2, b"k")]
    assert sixth == []


def test_the_seventh_is_the_timestamp_and_the_eighth_the_headers(producer):
    with pytest.raises(TypeError, match="headers"):
        producer.produce("t", b"v", b"k", 0, None, None, 0, 5)
    with pytest.raises(TypeError, match="integer"):  # headers one place early: taken as the timestamp
        producer.produce("t", b"v", b"k", 0, None, None, [("h", b"1")], None)
    with pytest.raises(TypeError, match="at most 8"):
        producer.produce("t", b"v", b"k", 0, None, None, 0, None, None)
    reported = []
    producer.produce("t", b"v", b"k", 0, lambda err, msg: reported.append(msg.value()), None, 1700000000123,
                     [("h", b"1")])  # in order: taken
    purged(producer)
    assert reported == [b"v"]
