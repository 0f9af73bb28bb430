"""The position store keeps one reader of the positions group open, not two (issue "Production width": exactly-once
ran 36-39 threads against at-least-once's 23, the goal is 1.5x; each librdkafka consumer is 3-5 threads).

The read_uncommitted reader (who owns a partition, before any fencing) is asked only when partitions are claimed,
so it is opened for that and closed after; the read_committed one stays (its group metadata goes with every
transaction's offsets)."""

from __future__ import annotations

from unittest import mock

from confluent_kafka import TopicPartition

from mirror_worker.exactly_once import position_store as module
from mirror_worker.exactly_once.positions import Owner


class Reader:
    """A consumer of the positions group: records whether it is open, answers no position."""

    def __init__(self, opened: list, overrides: dict) -> None:
        self.isolation = overrides["isolation.level"]
        self.closed = False
        opened.append(self)

    def consumer_group_metadata(self):
        return "metadata"

    def committed(self, partitions, timeout):
        return [TopicPartition(tp.topic, tp.partition, -1001) for tp in partitions]

    def close(self) -> None:
        self.closed = True


def store(opened: list) -> module.PositionStore:
    return module.PositionStore("orders", "east", {}, lambda topic: topic, lambda topic: "id",
                                lambda topic: Owner("c1", topic, "kafka-mirror.orders"), 0.05,
                                "orders.mirror.eos-positions",
                                new_consumer=lambda settings, overrides: Reader(opened, overrides))


def open_readers(opened: list) -> list[str]:
    return [reader.isolation for reader in opened if not reader.closed]


def test_a_running_store_holds_only_the_read_committed_reader():
    opened: list = []
    positions = store(opened)
    assert open_readers(opened) == ["read_committed"]
    assert positions.group_metadata == "metadata"


def test_the_ownership_check_reads_uncommitted_through_a_reader_it_closes_after():
    opened: list = []
    positions = store(opened)
    seen_during: list = []
    real_committed = Reader.committed

    def committed(self, partitions, timeout):
        seen_during.append((self.isolation, open_readers(opened)))
        return real_committed(self, partitions, timeout)

    with mock.patch.object(Reader, "committed", committed):
        writers = positions.refuse_foreign([("orders", 0), ("orders", 1)])

    assert writers == {("orders", 0): "", ("orders", 1): ""}  # RELEASED: no position yet
    assert seen_during == [("read_uncommitted", ["read_committed", "read_uncommitted"])]
    assert open_readers(opened) == ["read_committed"]


def test_the_ownership_reader_is_closed_when_the_check_refuses():
    opened: list = []
    positions = store(opened)
    other = module.position_metadata("id", Owner("c1", "orders", "kafka-mirror.other"), "w")
    with mock.patch.object(Reader, "committed", lambda self, tps, timeout: [TopicPartition("orders", 0, 5, other)]):
        try:
            positions.refuse_foreign([("orders", 0)])
        except module.IdentityCollision:
            pass
        else:
            raise AssertionError("a position of another mirror was not refused")
    assert open_readers(opened) == ["read_committed"]


def test_the_warm_up_asks_the_kept_reader_only_for_what_does_not_matter_and_keeps_quiet_when_it_fails():
    """It connects the read_committed reader (its group's coordinator, the positions topic's leader); no reader is
    opened for it, and an error is left to the reads that matter."""
    opened: list = []
    positions = store(opened)
    asked: list = []

    def committed(self, partitions, timeout):
        asked.append(("committed", self.isolation, [(tp.topic, tp.partition) for tp in partitions]))
        return [TopicPartition(tp.topic, tp.partition, -1001) for tp in partitions]

    def watermarks(self, partition, timeout):
        asked.append(("watermarks", self.isolation, (partition.topic, partition.partition)))
        return 0, 0

    with mock.patch.object(Reader, "committed", committed), \
            mock.patch.object(Reader, "get_watermark_offsets", watermarks, create=True):
        positions.warm()
    assert asked == [("committed", "read_committed", [("orders.mirror.eos-positions", 0)]),
                     ("watermarks", "read_committed", ("orders.mirror.eos-positions", 0))]
    assert len(opened) == 1

    def unreachable(self, partitions, timeout):
        raise module.KafkaException(module.KafkaError(module.KafkaError._TIMED_OUT))

    with mock.patch.object(Reader, "committed", unreachable):
        positions.warm()  # nothing raised: the positions read that follows reports it


def test_the_warmed_reader_of_the_earlier_layouts_group_serves_the_next_read_then_is_closed():
    opened: list = []
    positions = store(opened)
    positions.warm_legacy()
    warmed = opened[-1]
    assert (warmed.isolation, warmed.closed) == ("read_uncommitted", False)
    asked: list = []
    real_committed = Reader.committed

    def committed(self, partitions, timeout):
        asked.append(self)
        return real_committed(self, partitions, timeout)

    with mock.patch.object(Reader, "committed", committed):
        found, from_legacy, _ = positions.read([("orders", 0)])
    assert found == {("orders", 0): None} and from_legacy == set()
    assert asked == [opened[0], warmed] and len(opened) == 2  # no reader opened for the read
    assert open_readers(opened) == ["read_committed"]


def test_a_warmed_reader_that_does_not_fit_the_read_is_closed_and_none_is_kept():
    opened: list = []
    positions = store(opened)
    positions.warm_legacy()
    positions.read([("orders", 0)], stable_legacy=True)  # waits for open transactions: a read_committed reader
    assert [r.isolation for r in opened[1:]] == ["read_uncommitted", "read_committed"]
    assert open_readers(opened) == ["read_committed"]
    mine = module.position_metadata("id", Owner("c1", "orders", "kafka-mirror.orders"), "w")
    with mock.patch.object(Reader, "committed",
                           lambda self, tps, timeout: [TopicPartition(tp.topic, tp.partition, 3, mine) for tp in tps]):
        positions.warm_legacy()
        positions.read([("orders", 0)])  # a position in the group: the earlier layout's is not read
    assert open_readers(opened) == ["read_committed"]
    positions.warm_legacy()
    positions.warm_legacy()  # a start that failed after its warm-up, then another: the first reader is closed
    assert open_readers(opened) == ["read_committed", "read_uncommitted"]
    positions.close()
    assert open_readers(opened) == []
