"""A far source's record size sampled at start (clients/record_sizes.py), with an in-memory consumer."""

import logging

import pytest
from confluent_kafka import KafkaError, KafkaException

from mirror_worker.clients.record_sizes import (
    RECORD_FRAMING_BYTES,
    SAMPLE_TAIL,
    mean_record_bytes,
    sample_partitions,
    sampled_record_bytes,
    wire_bytes,
)
from tests.unit.fakes import FakeClock, FakeError, FakeMessage


def Msg(topic, partition, value=b"", key=None, headers=None, error=None):
    """tests/unit/fakes.FakeMessage, without the key it gives by default (sizes are counted here)."""
    return FakeMessage(topic, partition, 0, key=key, value=value, headers=headers, error=error)


def eof(topic, partition):
    return Msg(topic, partition, error=FakeError(KafkaError._PARTITION_EOF))


class Reader:
    """A consumer whose records arrive in prepared batches: a consume() that may wait (timeout > 0) with nothing
    left of the last batch moves the clock on by `step` seconds and takes the next; every consume() returns at most
    `limit` of what is there."""

    def __init__(self, batches, clock=None, step=0.1):
        self.batches, self.clock, self.step = list(batches), clock, step
        self.ready, self.assigned, self.asked, self.closed = [], None, [], False

    def assign(self, partitions):
        self.assigned = [(tp.topic, tp.partition, tp.offset) for tp in partitions]

    def consume(self, limit, timeout):
        self.asked.append((limit, timeout))
        if not self.ready and timeout > 0:
            if self.clock is not None:
                self.clock.now += self.step
            if self.batches:
                self.ready = self.batches.pop(0)
        taken, self.ready = self.ready[:limit], self.ready[limit:]
        return taken

    def close(self):
        self.closed = True

    def waits(self):
        return sum(1 for _, timeout in self.asked if timeout > 0)


def test_a_records_wire_size_counts_key_value_headers_and_framing():
    message = Msg("t", 0, b"v" * 100, b"k" * 10, [("h", b"xy"), ("n", None)])
    assert wire_bytes(message) == 100 + 10 + 1 + 2 + 1 + RECORD_FRAMING_BYTES
    assert wire_bytes(Msg("t", 0, None)) == RECORD_FRAMING_BYTES  # a tombstone


def test_the_sample_spreads_over_topics_before_partitions():
    assert sample_partitions({"b": 3, "a": 2}, limit=4) == [("a", 0), ("b", 0), ("a", 1), ("b", 1)]
    assert sample_partitions({"a": 2}, limit=8) == [("a", 0), ("a", 1)]
    assert sample_partitions({}) == []


def test_the_tail_of_each_partition_is_read_and_averaged_until_each_is_done():
    clock = FakeClock(step=0)  # moved by the reader's waits only
    full = [Msg("t", 0, b"x" * 100) for _ in range(SAMPLE_TAIL)]
    reader = Reader([full[:40], full[40:] + [Msg("t", 1, b"y" * 300)], [eof("t", 1)]], clock)
    mean = mean_record_bytes(reader, [("t", 0), ("t", 1)], timeout_s=5, clock=clock)
    # librdkafka's "100 records before the end" offset, resolved by the consumer itself.
    assert reader.assigned == [("t", 0, -2000 - SAMPLE_TAIL), ("t", 1, -2000 - SAMPLE_TAIL)]
    assert mean == pytest.approx((100 * 100 + 300 + 101 * RECORD_FRAMING_BYTES) / 101)
    assert reader.waits() == 3  # done once partition 0 gave its tail and partition 1 its end
    assert all(limit == 1 for limit, timeout in reader.asked if timeout > 0)  # waits for one, never for a batch


def test_empty_partitions_give_no_sample_at_once():
    reader = Reader([[eof("t", 0), eof("t", 1)]])
    assert mean_record_bytes(reader, [("t", 0), ("t", 1)], timeout_s=5) is None
    assert reader.waits() == 1
    assert mean_record_bytes(Reader([]), [], timeout_s=5) is None


def test_what_was_read_by_the_deadline_counts_and_other_errors_are_skipped():
    clock = FakeClock(step=0)  # moved by the reader's waits only
    other = Msg("t", 0, error=FakeError(KafkaError._TRANSPORT))
    reader = Reader([[Msg("t", 0, b"x" * 50), other]], clock, step=0.6)
    assert mean_record_bytes(reader, [("t", 0)], timeout_s=2, clock=clock) == 50 + RECORD_FRAMING_BYTES
    assert 3 <= reader.waits() <= 4  # kept asking until the deadline, never past it
    assert all(timeout <= 0.5 for _, timeout in reader.asked)


def test_the_sampling_consumer_is_closed_and_a_failure_leaves_the_cap(caplog):
    reader = Reader([[Msg("t", 0, b"x" * 84)], [eof("t", 0)]])
    with caplog.at_level(logging.INFO, logger="mirror_worker"):
        assert sampled_record_bytes(lambda: reader, lambda c: {"t": 1}, 5, "east") == 84 + RECORD_FRAMING_BYTES
    assert reader.closed
    sampled = [r for r in caplog.records if r.getMessage() == "source records sampled"]
    assert sampled and sampled[0].record_bytes == 84 + RECORD_FRAMING_BYTES and sampled[0].partitions == 1

    class Failing(Reader):
        def assign(self, partitions):
            raise KafkaException(KafkaError(KafkaError._TRANSPORT))

    failing = Failing([])
    assert sampled_record_bytes(lambda: failing, lambda c: {"t": 1}, 5, "east") is None
    assert failing.closed
    nothing = Reader([])
    assert sampled_record_bytes(lambda: nothing, lambda c: None, 5, "east") is None  # the source did not answer
    assert nothing.closed and nothing.assigned is None
