"""The hot path (`MirrorWorker._mirror`) driven with in-memory fakes: no server (issue #17 a, c, j)."""

import pytest

from mirror_worker.config import build_mirror_config
from mirror_worker.delivery import RunDelivery
from mirror_worker.exceptions import SchemaRegistryUnavailable
from mirror_worker.source_stream import SourceStream
from mirror_worker.worker import MirrorWorker
from mirror_worker import wire_format
from tests.unit.fakes import FakeAdmin, FakeDestination, FakeMessage


class FakeProducer:
    """Holds what was produced until deliver() (records in flight = len)."""

    def __init__(self):
        self.queue = []

    def produce(self, topic, value, key, partition, timestamp=0, headers=None, on_delivery=None):
        self.queue.append((topic, partition, value, on_delivery))

    def __len__(self):
        return len(self.queue)

    def poll(self, _timeout=0):
        return 0


class UnreachableRegistry:
    """A schema gate whose source registry does not answer."""

    id_headers: dict = {}

    def fields(self, topic):
        return True, True  # the topic's values are framed (forced)

    def new_schema_ids(self, stream, msg, keys=True, values=True):
        raise SchemaRegistryUnavailable("source schema registry: connection refused")


def _worker(**fields):
    config = build_mirror_config({
        "name": "m", "sources": [{"name": "src", "consumer": {"bootstrap.servers": "a:1"}}],
        "producer": {"bootstrap.servers": "b:1"}, "whitelist": "t", "group_id": "g", "preserve_partitions": True,
        **fields,
    })
    worker = MirrorWorker(config)
    worker.assemble(FakeAdmin(), FakeDestination())
    worker.router.set_destination_partitions("t", 8)
    return worker


def _stream(worker, producers):
    stream = SourceStream("src", consumer=None, cluster_id="c1", same_cluster_as_destination=False, producers=producers)
    worker.streams.append(stream)
    return stream


def test_a_batch_ended_by_an_exception_still_advances_the_position_over_what_was_handed_over():
    worker = _worker()
    producer = FakeProducer()
    worker.producers.append(producer)
    stream = _stream(worker, worker.producers)
    stream.schemas = UnreachableRegistry()
    framed_unknown = wire_format.header(77) + b"payload"
    batch = [FakeMessage("t", 0, o, value=b"plain") for o in range(10, 15)] + [FakeMessage("t", 0, 15, value=framed_unknown)]
    with pytest.raises(SchemaRegistryUnavailable):
        worker._mirror(stream, batch)
    # 10..14 are in the producer (exactly-once: in the open transaction); the position says so.
    assert len(producer) == 5
    assert stream.ledger.next_offsets == {("t", 0): 15}


def test_queue_size_bounds_records_in_flight_across_all_producers():
    worker = _worker(queue_size=10, delivery="exactly-once")
    producers = {("t", p): FakeProducer() for p in range(4)}
    stream = _stream(worker, producers)
    batch = [FakeMessage("t", p, o, value=b"v") for p in range(4) for o in range(6)]  # 24 records, 6 per partition
    worker._mirror(stream, batch)
    assert sum(len(p) for p in producers.values()) == 10
    assert stream.stash == batch[10:]  # the rest waits, in order
    assert stream.ledger.next_offsets == {("t", 0): 6, ("t", 1): 4}
    for producer in producers.values():  # delivered: room again
        producer.queue.clear()
    batch, stream.stash = stream.stash, []
    worker._mirror(stream, batch)
    assert sum(len(p) for p in producers.values()) == 10
    assert stream.ledger.next_offsets == {("t", 0): 6, ("t", 1): 6, ("t", 2): 6, ("t", 3): 2}


def test_each_run_carries_the_delivery_callback_of_its_source_partition():
    worker = _worker()
    producer = FakeProducer()
    worker.producers.append(producer)
    stream = _stream(worker, worker.producers)
    batch = [FakeMessage("t", 1, o, value=b"v") for o in (40, 41)] + [FakeMessage("t", 2, o, value=b"v") for o in (7, 8)]
    worker._mirror(stream, batch)
    runs = [q[3] for q in producer.queue]
    assert all(isinstance(r, RunDelivery) for r in runs)
    assert runs[0] is runs[1] and runs[2] is runs[3]  # one per run, not per record
    assert [(r.topic, r.partition, r.first_offset) for r in (runs[0], runs[2])] == [("t", 1, 40), ("t", 2, 7)]
