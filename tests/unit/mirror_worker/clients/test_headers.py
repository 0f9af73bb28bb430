"""`read_headers`: a header name that is not UTF-8 gives UnreadableHeaders naming it, from the real client
(librdkafka's in-process mock cluster, the record written through librdkafka's C API) and from the fake."""

import pytest
from confluent_kafka import Consumer, Producer

from mirror_worker.clients.headers import UnreadableHeaders, read_headers
from tests.raw_headers import produce_with_header_name
from tests.unit.fakes import FakeMessage, UnreadableHeadersMessage


def test_readable_headers_are_returned_as_the_client_gives_them():
    assert read_headers(FakeMessage("t", 0, 1, headers=[("a", b"1"), ("b", None)])) == [("a", b"1"), ("b", None)]
    assert read_headers(FakeMessage("t", 0, 1, headers=None)) is None


def test_a_header_name_that_is_not_utf8_is_named_and_read_only_once():
    msg = UnreadableHeadersMessage("t", 0, 5)
    with pytest.raises(UnreadableHeaders) as caught:
        read_headers(msg)
    assert str(caught.value) == ("header name b'\\xff\\xfetrace' is not UTF-8: the Kafka client cannot read it, "
                                 "so it cannot be copied")


def test_the_real_client_on_a_mock_cluster():
    """What confluent-kafka does with such a record, on librdkafka's mock broker: read in one loop as the worker
    reads, so that the interpreter specialises the call (a plain `msg.headers()` there returns the list holding
    a NULL with the error left pending, and the process dies further on)."""
    cluster = Producer({"bootstrap.servers": "unused:1", "test.mock.num.brokers": 1, "log_level": 0})
    broker = next(iter(cluster.list_topics(timeout=10).brokers.values()))
    bootstrap = f"{broker.host}:{broker.port}"
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(20):
        producer.produce("t", b"before", partition=0, headers=[("ok", b"%d" % i)])
    assert producer.flush(10) == 0
    produce_with_header_name(bootstrap, "t", 0, b"odd", UnreadableHeadersMessage.NAME)  # offset 20
    for i in range(5):
        producer.produce("t", b"after", partition=0, headers=[("ok", b"%d" % i)])
    assert producer.flush(10) == 0
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "g", "auto.offset.reset": "earliest",
                         "log_level": 0})
    consumer.subscribe(["t"])
    seen = {}
    try:
        for _ in range(30):
            for msg in consumer.consume(100, 1):
                if msg.error() is None:
                    try:
                        seen[msg.offset()] = [name for name, _value in read_headers(msg)]
                    except UnreadableHeaders as exc:
                        seen[msg.offset()] = (str(exc), msg.value())  # the rest of the record is readable
            if len(seen) == 26:
                break
    finally:
        consumer.close()
    assert seen.pop(20) == ("header name b'\\xff\\xfetrace' is not UTF-8: the Kafka client cannot read it, so it "
                            "cannot be copied", b"odd")
    assert seen == {o: ["ok"] for o in [*range(20), *range(21, 26)]}
