"""Backpressure, stash order and exactly-once rewinds, without servers."""

from tests.unit.fakes import assign, make_worker, records

TP = ("t", 0)


def _comes_back_after(polls: int, producer) -> list[int]:
    """The stalled destination acknowledges again after `polls` polls of `producer` (the fake clock moves 50 ms a
    reading); returns the poll count, as a one-item list the test reads."""
    count = [0]

    def poll_then_come_back(timeout=None):
        count[0] += 1
        if count[0] > polls:
            producer.stalled = False
        producer._deliver()
        return 0

    producer.poll = poll_then_come_back
    return count


def test_a_full_queue_stashes_the_rest_of_the_batch_in_order_and_fetches_nothing_newer():
    worker, stream, consumer, producer = make_worker({TP: records("t", 0, range(10))}, capacity=3, queue_size=40)
    assign(worker, stream, TP)
    producer.stalled = True
    worker._consume_round(0)  # one batch of 10: 3 fit
    assert [m.offset() for m in stream.stash] == list(range(3, 10))
    assert stream.ledger.position(TP) == 3  # only what the producer took was handed over
    fetched = consumer.positions[TP]
    producer.stalled = False
    worker._consume_round(0)  # room for 3 more: the stash goes first, the consumer is not asked
    assert [m.offset() for m in stream.stash] == list(range(6, 10))
    assert consumer.positions[TP] == fetched
    for _ in range(3):
        worker._consume_round(0)
    assert stream.stash == []
    assert [m.value() for m in producer.delivered] == [f"t-0-{o}".encode() for o in range(10)]
    worker.checkpoint_and_commit()
    assert consumer.commits == [{TP: 10}]


def test_a_long_wait_for_room_pauses_the_consumers_then_resumes_them():
    worker, stream, consumer, producer = make_worker({TP: records("t", 0, range(16))}, capacity=12, queue_size=10)
    assign(worker, stream, TP)
    producer.stalled = True
    worker.hot_path.mirror(stream, consumer.consume(14))  # queue.size 10 fit, 10..13 stashed; 14..15 still in the consumer
    _comes_back_after(40, producer)
    worker.backpressure.wait_for_room()
    assert worker.metrics.backpressure_pauses.labels(mirror="m")._value.get() == 1
    assert TP not in consumer.paused  # resumed once there was room
    assert [m.offset() for m in stream.stash] == [10, 11, 12, 13]  # nothing jumped ahead of the stashed records
    worker._consume_round(0)  # the stash first, then what is newer
    assert stream.stash == []
    assert [m.value() for m in producer.delivered] == [f"t-0-{o}".encode() for o in range(16)]


def test_a_wait_that_paused_the_consumers_counts_as_behind_though_the_batches_after_it_come_partial():
    """Issue 42: librdkafka drops a paused partition's prefetch, so the batches after a pause come partial
    whatever the source holds; read as "caught up", exactly-once committed back to back (37 of 54 cycles at
    5,000 partitions, each ~0.4 s, while the destination could not keep up)."""
    worker, stream, consumer, producer = make_worker({TP: records("t", 0, range(46))}, capacity=40, queue_size=40)
    assign(worker, stream, TP)
    producer.stalled = True
    worker.hot_path.mirror(stream, consumer.consume(44))  # 40 fit, 40..43 stashed, 44..45 still in the consumer
    assert worker.backlog.cycle() is False  # nothing consumed through the loop yet
    _comes_back_after(40, producer)
    worker._consume_round(0)  # waits (consumers paused), hands the stash over, then a batch of 2 (of 10)
    assert worker.metrics.backpressure_pauses.labels(mirror="m")._value.get() == 1
    assert [m.value() for m in producer.delivered][-3:] == [b"t-0-43", b"t-0-44", b"t-0-45"]
    assert worker.backlog.cycle() is True
    worker._consume_round(0)  # an empty round, no wait: caught up
    assert worker.backlog.cycle() is False


def test_an_aborted_transaction_rewinds_its_partition_to_the_committed_position():
    worker, stream, consumer, _ = make_worker({TP: records("t", 0, range(5))}, exactly_once=True,
                                             positions={TP: (0, "id-t")})
    assign(worker, stream, TP)
    assert stream.transactions.commits == [{TP: 0}]  # the claim, before any record of the partition
    worker._consume_round(0)
    assert stream.ledger.position(TP) == 5
    stream.transactions.abort_next = True
    assert worker.checkpoint_and_commit() is False
    assert stream.transactions.commits == [{TP: 0}]
    assert stream.ledger.position(TP) == 0 and consumer.seeks[-1] == (TP, 0)  # re-sent from the committed start
    worker._consume_round(0)
    assert worker.checkpoint_and_commit() is True
    assert stream.transactions.commits == [{TP: 0}, {TP: 5}]
    producer = stream.transactions.producers[0]
    assert [m.value() for m in producer.delivered] == [f"t-0-{o}".encode() for o in range(5)]  # once each
    assert consumer.commits == [{TP: 5}]  # the source group follows, for lag monitoring


def test_exactly_once_starts_at_the_destination_position_not_the_source_group():
    worker, stream, consumer, _ = make_worker({TP: records("t", 0, range(5))}, exactly_once=True,
                                             positions={TP: (3, "id-t")}, committed={TP: (1, "id-t")})
    assign(worker, stream, TP)
    assert consumer.positions[TP] == 3


def test_revoking_an_exactly_once_partition_commits_it_released_in_the_open_transaction():
    other = ("t", 1)
    worker, stream, consumer, _ = make_worker({TP: records("t", 0, range(4)), other: records("t", 1, range(2))},
                                             exactly_once=True)
    assign(worker, stream, TP, other)
    worker._consume_round(0)
    from confluent_kafka import TopicPartition

    worker.assignment.on_revoke(stream, [TopicPartition(*TP)])
    assert stream.transactions.commits[-1] == {TP: 4, other: 2}  # one transaction: both partitions' records
    assert stream.transactions.writers == {TP: "", other: "me"}  # the revoked one released, the other still ours
    assert TP not in stream.assigned


def test_a_partition_lost_with_records_in_the_open_transaction_aborts_it_and_re_sends_the_others():
    """The open transaction holds records of a partition the group took (not revoked: lost): committing it
    would commit them without their position, so it is aborted and the partitions kept are re-sent."""
    from confluent_kafka import TopicPartition

    other = ("t", 1)
    worker, stream, consumer, _ = make_worker({TP: records("t", 0, range(3)), other: records("t", 1, range(3))},
                                             exactly_once=True)
    assign(worker, stream, TP, other)
    worker._consume_round(0)
    worker.assignment.on_lost(stream, [TopicPartition(*TP)])
    assert stream.transactions.aborts and consumer.seeks[-1] == (other, 0)
    worker._consume_round(0)
    assert worker.checkpoint_and_commit() is True
    assert stream.transactions.commits[-1] == {other: 3}
    assert [m.value() for m in stream.transactions.producers[0].delivered] == [f"t-1-{o}".encode() for o in range(3)]


def test_a_zombie_fenced_by_the_new_owner_of_a_partition_gives_it_up_and_goes_on():
    """Resumed past max.poll.interval.ms, a worker's producer is fenced by a partition's new owner, and the
    group no longer counts it: its next polls run the rebalance that takes the partition, then it re-opens."""
    from confluent_kafka import KafkaError, KafkaException, TopicPartition

    other = ("t", 1)
    worker, stream, consumer, _ = make_worker({TP: records("t", 0, range(3)), other: records("t", 1, range(3))},
                                             exactly_once=True)
    assign(worker, stream, TP, other)
    worker._consume_round(0)
    stream.transactions.fence_next = True

    def refused(offsets=None, asynchronous=True):
        raise KafkaException(KafkaError(KafkaError.UNKNOWN_MEMBER_ID))
    consumer.commit = refused
    worker.commits.transactions.hold_consumers = \
        lambda: worker.assignment.on_lost(stream, [TopicPartition(*TP)]) or True
    assert worker.checkpoint_and_commit(from_loop=True) is False
    assert worker.state.fatal is None
    assert TP not in stream.assigned and stream.transactions.reopened == 1
    assert consumer.seeks[-1] == (other, 0)  # the aborted transaction's records of the partition kept: re-sent


def test_a_producer_fenced_while_the_group_no_longer_answers_for_this_worker_stops_it(monkeypatch):
    """Fenced, the group refuses this worker's membership and no rebalance comes: another process writes as
    this mirror."""
    from confluent_kafka import KafkaError, KafkaException

    monkeypatch.setattr("mirror_worker.engine.transaction_cycle.FENCED_WAIT_S", 0.5)
    worker, stream, consumer, _ = make_worker({TP: records("t", 0, range(3))}, exactly_once=True)
    assign(worker, stream, TP)
    worker._consume_round(0)
    stream.transactions.fence_next = True

    def refused(offsets=None, asynchronous=True):
        raise KafkaException(KafkaError(KafkaError.UNKNOWN_MEMBER_ID))
    consumer.commit = refused
    worker.commits.transactions.hold_consumers = lambda: True  # polls, and no rebalance comes
    assert worker.checkpoint_and_commit(from_loop=True) is False
    assert "fenced by another worker" in worker.state.fatal


def test_a_short_exactly_once_cycle_commits_transactions_and_leaves_the_source_group_to_the_commit_interval():
    """transaction.interval.ms: records visible to read_committed readers each short cycle; the source group's
    offsets (lag monitoring) follow at the next full cycle, with every position committed since."""
    other = ("t", 1)
    worker, stream, consumer, _ = make_worker({TP: records("t", 0, range(3)), other: records("t", 1, range(2))},
                                             exactly_once=True)
    assign(worker, stream, TP, other)
    worker._consume_round(0)
    assert worker.checkpoint_and_commit(from_loop=True, source_group=False) is True
    assert stream.transactions.commits[-1] == {TP: 3, other: 2} and consumer.commits == []
    assert worker.checkpoint_and_commit(from_loop=True) is True
    assert consumer.commits == [{TP: 3, other: 2}]


def _fatal_on_poll(producer) -> None:
    """confluent-kafka raises a client's fatal error from poll() instead of handing it to error_cb (seen after a
    destination leader's kill -9: OUT_OF_ORDER_SEQUENCE_NUMBER of a transactional producer)."""
    from confluent_kafka import KafkaError, KafkaException

    def poll(timeout=None):
        raise KafkaException(KafkaError(KafkaError.OUT_OF_ORDER_SEQUENCE_NUMBER, "sequence desynchronization",
                                        fatal=True))
    producer.poll = poll


def test_a_fatal_error_of_an_exactly_once_producer_is_its_partitions_not_the_workers():
    worker, stream, _, _ = make_worker({TP: records("t", 0, range(3))}, exactly_once=True)
    assign(worker, stream, TP)
    _fatal_on_poll(stream.producers[0])
    worker._consume_round(0)  # the worker exited on it (KafkaException out of run())
    assert worker.state.fatal is None
    assert worker.metrics.errors.labels(kind="transaction_producer", **worker._label)._value.get() == 1


def test_a_fatal_error_of_an_at_least_once_producer_still_stops_the_worker():
    import pytest
    from confluent_kafka import KafkaException

    worker, stream, _, producer = make_worker({TP: records("t", 0, range(3))})
    assign(worker, stream, TP)
    _fatal_on_poll(producer)
    with pytest.raises(KafkaException, match="sequence desynchronization"):
        worker._consume_round(0)


def test_records_failed_by_their_producers_state_are_re_sent_not_halted():
    """After a destination leader's kill -9 a transactional producer's sequence broke (fatal); librdkafka failed
    every record it held with OUT_OF_ORDER_SEQUENCE_NUMBER, and the worker halted the partition for good as if the
    destination had refused the records."""
    from confluent_kafka import KafkaError

    from tests.unit.fakes import FakeError

    worker, stream, _, _ = make_worker({TP: records("t", 0, range(3))}, exactly_once=True)
    assign(worker, stream, TP)
    producer = stream.producers[0]
    producer.stalled = True
    worker._consume_round(0)
    for record in producer.queue:
        record.report(FakeError(KafkaError.OUT_OF_ORDER_SEQUENCE_NUMBER, "sequence desynchronization", fatal=True),
                      record)
    assert stream.ledger.halted[TP].resend  # held for a resend from the committed position, not halted for good
    assert TP in stream.ledger.resends()


def test_start_positions_ask_the_log_bounds_of_every_partition_in_two_requests_not_two_per_partition():
    keys = [("t", p) for p in range(12)]
    worker, stream, consumer, _ = make_worker({k: records(*k, range(5)) for k in keys}, low={("t", 3): 2})
    asked = []
    consumer.get_watermark_offsets = lambda tp, **_: asked.append(tp)  # one partition at a time: 2 round trips each
    assign(worker, stream, *keys)
    assert (asked, stream.admin.list_offsets_calls) == ([], 2)
    assert [consumer.positions[k] for k in keys] == [2 if k == ("t", 3) else 0 for k in keys]


def test_a_claim_refused_while_the_destination_learns_new_topics_is_tried_again_until_it_commits(monkeypatch):
    """bench/width.py at 5,000 partitions: the transaction's offset commit refused the destination topics the worker
    had just created (its coordinator did not know them yet); three quick attempts ended the worker."""
    import time

    from mirror_worker.exactly_once.transactions import TransactionAborted

    monkeypatch.setattr(time, "sleep", lambda s: None)
    worker, stream, consumer, _ = make_worker({TP: records("t", 0, range(3))}, exactly_once=True)
    commit, refusals = stream.transactions.commit, [6]

    def refused_at_first(positions, released, timeout_s):
        if refusals[0] > 0:
            refusals[0] -= 1
            raise TransactionAborted("UNKNOWN_TOPIC_OR_PARTITION")
        return commit(positions, released, timeout_s)
    stream.transactions.commit = refused_at_first
    assign(worker, stream, TP)
    assert stream.transactions.commits == [{TP: 0}] and consumer.positions[TP] == 0


def test_a_producer_full_below_queue_size_is_waited_for_not_spun_on():
    """A producer's byte bound (queue.buffering.max.kbytes, from the memory budget) refuses records while fewer than
    queue.size are in flight: the wait lasts until half a batch was delivered, instead of returning at once."""
    worker, stream, consumer, producer = make_worker({TP: records("t", 0, range(30))}, capacity=12, queue_size=40)
    assign(worker, stream, TP)
    producer.stalled = True
    worker.hot_path.mirror(stream, consumer.consume(30))  # the producer takes 12 of them, far below queue.size 40
    assert len(stream.stash) == 18
    polls = _comes_back_after(5, producer)
    worker.backpressure.wait_for_room()
    assert polls[0] > 5  # it waited for deliveries
    assert len(producer) <= 12 - worker.batch_size // 2


def test_the_in_flight_peak_counts_only_batches_that_handed_records_over():
    """A full run read mirror_records_in_flight_max 41 with queue.size 40 (test_delivery.py, exactly-once): len() of
    a producer also counts librdkafka events not yet served (a log line), and a batch that found the queue full
    (40 records and an event) handed nothing over yet noted 41. Nothing was over the bound."""
    worker, stream, consumer, producer = make_worker({TP: records("t", 0, range(50))}, capacity=1000, queue_size=40)
    assign(worker, stream, TP)
    producer.stalled = True
    worker.hot_path.mirror(stream, consumer.consume(40))
    peak = worker.metrics.in_flight_max.labels(mirror="m")
    assert peak._value.get() == 40
    producer.queue.append(("an event", None, None, None, None))  # len() 41: 40 records and one event
    worker.hot_path.mirror(stream, consumer.consume(5))  # nothing handed over: all stashed
    assert len(stream.stash) == 5
    assert peak._value.get() == 40
