"""The commit rule, without servers: never commit past what a completed flush confirmed."""

import pytest
from confluent_kafka import KafkaError

from tests.unit.fakes import FakeError, FakeMessage, assign, make_worker, records

TP = ("t", 0)


def test_nothing_is_committed_before_the_producer_confirmed_it():
    worker, stream, consumer, producer = make_worker({TP: records("t", 0, range(5))})
    assign(worker, stream, TP)
    producer.stalled = True  # the destination does not acknowledge
    worker._consume_round(0)
    assert stream.ledger.position(TP) == 5  # handed over ...
    assert worker.checkpoint_and_commit(deadline=worker.clock()) is False  # ... the flush did not complete
    assert consumer.commits == []
    producer.stalled = False
    assert worker.checkpoint_and_commit() is True
    assert consumer.commits == [{TP: 5}]
    assert [m.value() for m in producer.delivered] == [f"t-0-{o}".encode() for o in range(5)]


def test_a_checkpoint_covers_only_what_was_handed_over_before_the_flush():
    worker, stream, consumer, producer = make_worker({TP: records("t", 0, range(8))}, queue_size=20)
    assign(worker, stream, TP)
    worker.hot_path.mirror(stream, consumer.consume(3))
    checkpoint = stream.ledger.checkpoint()
    worker.hot_path.mirror(stream, consumer.consume(5))  # after the checkpoint: not covered by its flush
    assert stream.ledger.committable(checkpoint) == {TP: 3}


def test_a_delivery_error_halts_its_own_partition_at_or_before_the_refused_offset():
    logs = {TP: records("t", 0, range(6)), ("t", 1): records("t", 1, range(4))}
    worker, stream, consumer, producer = make_worker(logs)
    assign(worker, stream, TP, ("t", 1))
    producer.refuse = lambda record: record.value() == b"t-0-2"
    worker._consume_round(0)
    assert worker.checkpoint_and_commit() is True and worker.fatal is None  # the worker goes on
    assert consumer.commits == [{("t", 1): 4}]  # partition 1 is not held back by partition 0
    # Tied to the run the record was produced in (offsets 0..5), never past the refused record.
    assert stream.ledger.halted[TP].offset == 0 and TP in consumer.paused
    consumer.logs[TP] += records("t", 0, range(6, 9))
    consumer.paused.clear()  # even fetched again, nothing past the halt is committed
    worker._consume_round(0)
    worker.checkpoint_and_commit()
    assert all(TP not in commit for commit in consumer.commits)


def test_a_record_stamped_beyond_the_destination_limit_halts_with_the_setting_to_raise(capsys):
    """Issue 43 defect 4: a Kafka 4 destination refuses a record stamped over an hour ahead (INVALID_TIMESTAMP).
    The partition halts (never a silent skip), and the halt line names the destination topic's setting."""
    import time

    ahead = int(time.time() * 1000) + 2 * 3_600_000
    logs = {TP: [FakeMessage("t", 0, o, timestamp=ahead if o == 1 else 1_000) for o in range(3)]}
    worker, stream, consumer, producer = make_worker(logs)
    assign(worker, stream, TP)
    producer.refusal = FakeError(KafkaError.INVALID_TIMESTAMP, "Broker: Invalid timestamp")
    producer.refuse = lambda record: record.timestamp()[1] == ahead
    worker._consume_round(0)
    assert worker.checkpoint_and_commit() is True and worker.fatal is None
    assert stream.ledger.halted[TP].offset == 0 and consumer.commits == []
    line = [s for s in capsys.readouterr().err.splitlines() if "halted at offset 0" in s]
    assert len(line) == 1 and line[0].endswith(
        "Broker: Invalid timestamp: raise message.timestamp.after.max.ms (a record ahead of the broker's clock) or "
        "message.timestamp.before.max.ms (behind it) on destination topic dst.t"), line


def test_an_upstream_provenance_header_never_decides_which_partition_halts():
    upstream = [("mirror.source", b"src:other-cluster:elsewhere:7:123")]
    logs = {TP: [FakeMessage("t", 0, o, b"k", f"t-0-{o}".encode(), upstream) for o in range(3)]}
    worker, stream, consumer, producer = make_worker(logs)  # no provenance headers: the header passes through
    assign(worker, stream, TP)
    producer.refuse = lambda record: record.value() == b"t-0-1"
    worker._consume_round(0)
    assert list(stream.ledger.halted) == [TP] and worker.fatal is None
    assert worker.checkpoint_and_commit() is True
    assert consumer.commits == []

def test_a_record_larger_than_the_destination_limit_halts_its_partition():
    big = FakeMessage("t", 0, 2, value=b"x" * 100)
    log = records("t", 0, range(2)) + [big] + records("t", 0, range(3, 5))
    worker, stream, consumer, producer = make_worker({TP: log})
    worker.topics.max_bytes.update({"dst.t": 50})
    assign(worker, stream, TP)
    worker._consume_round(0)
    worker.checkpoint_and_commit()
    assert consumer.commits == [{TP: 2}]
    assert [m.value() for m in producer.delivered] == [b"t-0-0", b"t-0-1"]  # nothing after the halt is sent
    assert "max.message.bytes=50" in stream.ledger.halted[TP].reason


def test_a_refused_record_goes_to_the_dead_letter_topic_when_configured():
    big = FakeMessage("t", 0, 1, value=b"x" * 100)
    worker, stream, consumer, producer = make_worker({TP: records("t", 0, [0]) + [big]}, dead_letter_topic="dlq")
    worker.topics.max_bytes.update({"dst.t": 50})
    assign(worker, stream, TP)
    worker._consume_round(0)
    worker.checkpoint_and_commit()
    assert consumer.commits == [{TP: 2}] and not stream.ledger.halted
    assert [m.topic() for m in producer.delivered] == ["dst.t", "dlq"]


def test_a_fatal_consume_error_stops_the_worker():
    worker, stream, consumer, producer = make_worker({TP: [FakeMessage("t", 0, 0, error=FakeError(
        KafkaError._FATAL, "broker gone", fatal=True))]})
    assign(worker, stream, TP)
    worker._consume_round(0)
    assert worker.fatal == "source 'src' consumer failed: broker gone"


@pytest.mark.parametrize("exactly_once", [False, True], ids=["at-least-once", "exactly-once"])
def test_a_batch_ended_by_an_exception_never_lets_a_commit_step_over_what_it_did_not_hand_over(exactly_once):
    """Records 3..5 were returned by the consumer (its position is 6) but never handed over: the commit on
    the way out stops at 3. Found when the step over transaction markers (issue #17 g) met the exception
    path (a): the final commit took position 6 and records 3..5 were never mirrored."""
    worker, stream, consumer, producer = make_worker({TP: records("t", 0, range(6))}, exactly_once=exactly_once)
    assign(worker, stream, TP)
    batch = consumer.consume(6)
    producers = list(stream.producers) if exactly_once else [producer]
    for target in producers:
        original = target.produce

        def fail_at_3(topic, value=None, *args, _original=original, **kwargs):
            if value == b"t-0-3":
                raise RuntimeError("registry went away")
            return _original(topic, value, *args, **kwargs)

        target.produce = fail_at_3
    with pytest.raises(RuntimeError):
        worker.hot_path.mirror(stream, batch)
    assert worker.checkpoint_and_commit() is True
    assert stream.ledger.committed[TP] == 3


def test_offset_syncs_go_through_the_producers_in_use_after_start_up_replaced_them(monkeypatch):
    """Start-up replaces the producers to fit the destination topics (fit_batches: every start logs
    `producer message.max.bytes raised`); the offset syncs went on through the replaced one, which nothing polls
    or flushes, so a stop's last syncs were lost with the process (issue 43, defect 8)."""
    from mirror_worker.clients import factory
    from mirror_worker.dr.offset_syncs import OffsetSyncWriter
    from tests.unit.fakes import FakeAdmin, FakeDestination, FakeProducer

    worker, stream, consumer, first = make_worker({TP: records("t", 0, range(5))})
    worker.assemble(FakeAdmin(watermarks=lambda tp: (0, 5)), FakeDestination(),
                    OffsetSyncWriter("syncs", FakeAdmin(watermarks=lambda tp: (0, 5)), lambda t: f"dst.{t}"))
    replacements = []
    monkeypatch.setattr(factory, "producer", lambda settings: replacements.append(FakeProducer()) or replacements[-1])
    # A destination topic taking records larger than librdkafka's 1 MB default.
    worker.mirrored_producers.fit_batches([8_000_000])
    assert worker.producers == replacements and first not in worker.producers
    stream.producers = worker.producers
    assign(worker, stream, TP)
    worker._consume_round(0)
    assert worker.checkpoint_and_commit() is True
    assert [m.topic() for m in first.queue + first.delivered] == []
    # The assignment's sync (offset 0), the records, the commit's sync (offset 5).
    assert [m.topic() for m in replacements[0].delivered + replacements[0].queue] == ["syncs"] + ["dst.t"] * 5 + ["syncs"]


def test_exactly_once_steps_over_transaction_markers_at_the_commit_interval_not_at_every_transaction():
    """Issue 42: asking the consumer for the position of every assigned partition (5,000) at every 30-ms
    transaction cycle took 4.4 s of a 5,000-partition copy's main loop (py-spy). Stepping over markers is an
    optimisation (a record's own offset is always committable): the cycles that also commit the source group,
    every commit interval, are often enough."""
    worker, stream, consumer, _ = make_worker({TP: records("t", 0, range(4))}, exactly_once=True)
    assign(worker, stream, TP)
    asked = []
    original = consumer.position
    consumer.position = lambda partitions: asked.append(len(partitions)) or original(partitions)
    worker._consume_round(0)
    consumer.positions[TP] = 5  # a transaction marker at 4: the consumer passed it without returning a record
    worker.checkpoint_and_commit(from_loop=True, source_group=False)
    assert asked == [] and stream.ledger.committed[TP] == 4
    worker.checkpoint_and_commit(from_loop=True)
    assert asked == [1] and stream.ledger.committed[TP] == 5
