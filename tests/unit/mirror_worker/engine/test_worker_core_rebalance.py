"""Rebalances and start positions, without servers: revoke, lost, cooperative assignment, data loss on assign."""

from confluent_kafka import TopicPartition

from tests.unit.fakes import assign, make_worker, records

P0, P1 = ("t", 0), ("t", 1)


def _two_partitions(**kwargs):
    return make_worker({P0: records("t", 0, range(4)), P1: records("t", 1, range(3))}, **kwargs)


def test_revoke_commits_only_the_revoked_partitions_then_forgets_them():
    worker, stream, consumer, producer = _two_partitions()
    assign(worker, stream, P0, P1)
    worker._consume_round(0)
    worker.assignment.on_revoke(stream, [TopicPartition(*P0)])
    assert consumer.commits == [{P0: 4}]  # P1 stays owned: committed later, by this worker
    assert stream.assigned == {P1} and stream.ledger.position(P0) is None
    worker.checkpoint_and_commit()
    assert consumer.commits[-1] == {P1: 3}


def test_lost_partitions_commit_nothing_and_drop_their_stash():
    worker, stream, consumer, producer = _two_partitions(capacity=2)
    assign(worker, stream, P0, P1)
    worker.hot_path.mirror(stream, consumer.consume(7))  # the queue takes 2: the rest waits in the stash
    assert {(m.topic(), m.partition()) for m in stream.stash} == {P0, P1}
    worker.assignment.on_lost(stream, [TopicPartition(*P0)])
    assert consumer.commits == []
    assert {(m.topic(), m.partition()) for m in stream.stash} == {P1}
    assert stream.ledger.position(P0) is None and stream.rebalances == 1


def test_cooperative_assignment_adds_partitions_incrementally():
    worker, stream, consumer, producer = _two_partitions(incremental=True)
    assign(worker, stream, P0)
    assign(worker, stream, P1)
    assert consumer.assign_calls == ["incremental_assign", "incremental_assign"]
    assert consumer.assignment == {P0, P1} and stream.assigned == {P0, P1}


def test_eager_assignment_replaces_the_assignment():
    worker, stream, consumer, producer = _two_partitions()
    assign(worker, stream, P0, P1)
    assert consumer.assign_calls == ["assign"]


def test_an_assigned_partition_starts_at_its_committed_offset():
    worker, stream, consumer, producer = _two_partitions(committed={P0: (2, "id-t")})
    assign(worker, stream, P0)
    assert consumer.positions[P0] == 2 and stream.ledger.committed[P0] == 2
    worker._consume_round(0)
    assert [m.value() for m in producer.delivered] == [b"t-0-2", b"t-0-3"]


def test_records_deleted_before_they_were_mirrored_halt_the_partition_by_default():
    worker, stream, consumer, producer = make_worker(
        {P0: records("t", 0, range(5, 8))}, low={P0: 5}, committed={P0: (2, "id-t")})
    assign(worker, stream, P0)
    assert stream.ledger.halted[P0].offset == 2 and "records 2..4 were deleted" in stream.ledger.halted[P0].reason
    assert P0 in consumer.paused
    worker._consume_round(0)
    worker.checkpoint_and_commit()
    assert producer.delivered == [] and consumer.commits == []


def test_on_data_loss_reset_resumes_at_the_earliest_record_still_there():
    worker, stream, consumer, producer = make_worker(
        {P0: records("t", 0, range(5, 8))}, low={P0: 5}, committed={P0: (2, "id-t")}, on_data_loss="reset")
    assign(worker, stream, P0)
    assert not stream.ledger.halted and consumer.positions[P0] == 5
    worker._consume_round(0)
    worker.checkpoint_and_commit()
    assert consumer.commits == [{P0: 8}]


def test_a_recreated_topic_halts_its_partition_on_assign():
    worker, stream, consumer, producer = make_worker({P0: records("t", 0, range(3))}, committed={P0: (1, "old-id")})
    assign(worker, stream, P0)
    assert "deleted and recreated" in stream.ledger.halted[P0].reason


def test_a_worker_assigned_partitions_while_a_catchup_holds_the_group_mirrors_nothing():
    import pytest

    from mirror_worker.engine.catchup_lease import CatchupRunning

    worker, stream, consumer, producer = _two_partitions()
    stream.admin.group_members["g.catchup"] = 1  # the catch-up's lease member (mirror_worker/engine/catchup_lease.py)
    with pytest.raises(CatchupRunning, match="a catch-up is copying the backlog of consumer group 'g'"):
        assign(worker, stream, P0, P1)
    assert consumer.assignment == set() and stream.assigned == set()
    assert producer.delivered == [] and consumer.commits == []
    stream.admin.group_members["g.catchup"] = 0  # the catch-up ended: the next assignment mirrors
    assign(worker, stream, P0, P1)
    worker._consume_round(0)
    assert len(producer.delivered) == 7


def test_a_worker_not_authorized_to_describe_the_lease_group_still_mirrors():
    from confluent_kafka import KafkaError, KafkaException

    worker, stream, consumer, producer = _two_partitions()

    def refused(groups, request_timeout=None):
        raise KafkaException(KafkaError(KafkaError.GROUP_AUTHORIZATION_FAILED, "Group authorization failed"))

    stream.admin.describe_consumer_groups = refused
    assign(worker, stream, P0, P1)
    worker._consume_round(0)
    assert len(producer.delivered) == 7


def test_a_stop_during_an_exactly_once_assignment_leaves_its_partitions_paused_unclaimed_and_raises_nothing():
    """The partitions' earlier writers were being fenced when the stop came (fencing raises StopInterrupted): the
    callback hands them to the consumer paused, starts nothing in the ledger and lets the stop go on. The exception
    left to the consumer's poll made the worker exit 1 (CI, test_width)."""
    from mirror_worker.exceptions import StopInterrupted

    worker, stream, consumer, _ = _two_partitions(exactly_once=True, incremental=True)

    def interrupted(keys):
        raise StopInterrupted("exactly-once fencing stopped: the worker is stopping")

    stream.transactions.open = interrupted
    assign(worker, stream, P0, P1)
    assert consumer.assignment == {P0, P1} and consumer.paused == {P0, P1}
    assert stream.assigned == set() and stream.ledger.position(P0) is None
    worker._consume_round(0)  # paused: nothing fetched, nothing handed over
    assert stream.ledger.next_offsets == {} and stream.stash == []
