"""A new transactional producer is connected to a broker the metadata named before its init_transactions.

Measured on the local stack: a producer whose only metadata request was answered through its bootstrap
connection (which librdkafka closes once it learns the brokers' names) spent ~500 ms in init_transactions
looking for the transaction coordinator; once broker 1 itself had answered, 3 ms. Twelve partitions opened at
startup cost the exactly-once worker ~0.6 s before its first record (bench.compare: first record 1.8 s against
1.0 s at-least-once)."""

from __future__ import annotations

from types import SimpleNamespace

from confluent_kafka import KafkaError, KafkaException

from mirror_worker.exactly_once.transactions import connect


class AnsweringProducer:
    """list_topics answered by the brokers in `answers` (-1: the bootstrap address), one per call."""

    def __init__(self, *answers) -> None:
        self.answers = list(answers)
        self.asked: list[tuple[str, float]] = []

    def list_topics(self, topic=None, timeout=None):
        self.asked.append((topic, timeout))
        answer = self.answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return SimpleNamespace(orig_broker_id=answer)


def test_asks_again_until_a_named_broker_answers():
    producer = AnsweringProducer(-1, 1, 1)
    connect(producer, "dest.t", 5.0)
    assert producer.asked == [("dest.t", 5.0), ("dest.t", 5.0)]


def test_one_request_is_enough_when_a_named_broker_answers_it():
    producer = AnsweringProducer(2)
    connect(producer, "dest.t", 5.0)
    assert len(producer.asked) == 1


def test_gives_up_after_its_attempts_and_leaves_the_wait_to_init_transactions():
    producer = AnsweringProducer(-1, -1, -1, -1)
    connect(producer, "dest.t", 5.0)
    assert len(producer.asked) == 3


def test_a_destination_that_does_not_answer_is_left_to_init_transactions():
    producer = AnsweringProducer(KafkaException(KafkaError(KafkaError._TRANSPORT)), 1)
    connect(producer, "dest.t", 5.0)
    assert len(producer.asked) == 1
