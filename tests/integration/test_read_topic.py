"""The tests' own reader: exactly-once tests count duplicates with it, so it must read what a read_committed
consumer reads unless told otherwise (a change that set read_uncommitted as its default made CI count the
records of aborted transactions as duplicates in four exactly-once tests)."""

from __future__ import annotations

from confluent_kafka import Producer

from tests.kafka_util import create_topic
from tests.worker_util import read_topic


def _aborted_then_committed(bootstrap: str, topic: str) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"tx-{topic}"})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, b"aborted")
    producer.flush(30)
    producer.abort_transaction(30)
    producer.begin_transaction()
    producer.produce(topic, b"committed")
    producer.commit_transaction(30)


def test_read_topic_skips_aborted_transactions_by_default(stack, topic_name):
    bootstrap = stack["destination"].kafka.bootstrap_servers
    topic = topic_name("read-topic")
    create_topic(bootstrap, topic)
    _aborted_then_committed(bootstrap, topic)
    assert [m.value() for m in read_topic(bootstrap, topic)] == [b"committed"]
    assert [m.value() for m in read_topic(bootstrap, topic, isolation="read_uncommitted")] == [b"aborted", b"committed"]
