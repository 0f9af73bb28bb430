"""On the real destination, `connect` leaves a new transactional producer answered by a broker the metadata
named (exactly_once/transactions.py): the premise of skipping init_transactions' 500 ms coordinator retry."""

from __future__ import annotations

import uuid

from confluent_kafka import Producer

from mirror_worker.exactly_once.transactions import connect
from tests.kafka_util import create_topic


class Answers:
    """The producer, its metadata answers recorded (orig_broker_id of each)."""

    def __init__(self, producer: Producer) -> None:
        self.producer, self.answered_by = producer, []

    def list_topics(self, topic=None, timeout=None):
        metadata = self.producer.list_topics(topic, timeout=timeout)
        self.answered_by.append(metadata.orig_broker_id)
        return metadata


def test_a_new_transactional_producer_is_answered_by_a_named_broker_before_its_init(stack, topic_name):
    dst = stack["destination"].kafka.bootstrap_servers
    topic = topic_name("connect")
    create_topic(dst, topic, partitions=1)
    producer = Producer({"bootstrap.servers": dst, "transactional.id": f"connect-{uuid.uuid4().hex}"})
    answers = Answers(producer)
    connect(answers, topic, 10.0)
    # At most the three requests connect makes, the last answered by broker 1 itself, not a bootstrap address.
    assert 1 <= len(answers.answered_by) <= 3 and answers.answered_by[-1] >= 0, answers.answered_by
    producer.init_transactions(10)
