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


def test_the_order_is_the_one_the_hot_paths_pass():
    assert POSITIONS == ("topic", "value", "key", "partition", "callback", "on_delivery", "timestamp", "headers")


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
