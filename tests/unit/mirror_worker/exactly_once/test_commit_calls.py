"""PartitionTransactions' calls on a partition's producer when the destination is slow (librdkafka's rules)."""

from __future__ import annotations

from confluent_kafka import KafkaError, KafkaException, TopicPartition

from mirror_worker.exactly_once.positions import Owner
from mirror_worker.exactly_once.transactions import PartitionTransactions, TransactionPending

KEY = ("t", 0)


class TimingOutProducer:
    """A transactional producer whose first commit_transaction times out (retriable, "retry call to resume")."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.commit_timeouts = 1

    def __len__(self) -> int:
        return 0  # like a Producer with an empty queue: falsy

    def send_offsets_to_transaction(self, offsets, metadata, timeout):
        self.calls.append(f"send_offsets {offsets[0].offset}")

    def commit_transaction(self, timeout):
        self.calls.append("commit")
        if self.commit_timeouts:
            self.commit_timeouts -= 1
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT, "retry call to resume", retriable=True))

    def abort_transaction(self, timeout):
        self.calls.append("abort")

    def begin_transaction(self):
        self.calls.append("begin")

    def produce(self, *args, **kwargs):
        self.calls.append("produce")


class MemoryStore:
    """The PositionStore surface a commit uses: a partition's slot and the group metadata sent with it."""

    group_metadata = None

    def slot(self, key, offset: int = -1001, writer: str = "") -> TopicPartition:
        return TopicPartition(key[0], key[1], offset)

    def close(self) -> None:
        pass


def _transactions(producer) -> PartitionTransactions:
    tx = PartitionTransactions("m", "src", {}, {}, lambda topic: topic, lambda topic: None, 1.0,
                               "m.mirror.eos-positions", lambda topic: Owner("cluster", topic, "m-group"),
                               store=MemoryStore())
    tx.producers[KEY] = producer
    tx.recorded.add(KEY)
    return tx


def test_a_commit_that_timed_out_is_finished_not_aborted():
    producer = TimingOutProducer()
    tx = _transactions(producer)
    try:
        try:
            tx.commit(KEY, 5, 1.0)
            raise AssertionError("the timed-out commit was not reported")
        except TransactionPending:
            pass
        assert tx.pending_commit(KEY) == 5
        # Records moved on meanwhile: the pending transaction is still the one committed, never aborted.
        assert tx.commit(KEY, 9, 1.0) == 5
        assert producer.calls == ["send_offsets 5", "commit", "commit", "begin"]
        assert tx.pending_commit(KEY) is None and tx.held[KEY] == 5
    finally:
        tx.store.close()
