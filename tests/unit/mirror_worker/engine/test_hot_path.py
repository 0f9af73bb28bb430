"""The hot path (`hot_path.BatchMirror`, inside a worker and alone) driven with in-memory fakes: no server
(issue #17 a, c, j)."""

import time

import pytest

from mirror_worker.config.model import build_mirror_config
from mirror_worker.engine.backpressure import Backpressure
from mirror_worker.engine.delivery import RunDelivery
from mirror_worker.engine.halts import Halts
from mirror_worker.engine.hot_path import BatchMirror
from mirror_worker.engine.run_state import RunState
from mirror_worker.engine.schema_gate import SchemaGate
from mirror_worker.engine.source_stream import SourceStream
from mirror_worker.engine.worker import MirrorWorker
from mirror_worker.exceptions import SchemaConflict, SchemaRegistryUnavailable
from mirror_worker.metrics import MirrorMetrics
from mirror_worker.policy.naming import PrefixPolicy
from mirror_worker.policy.routing import Router
from mirror_worker.schemas import wire_format
from mirror_worker.schemas.framing import TopicFraming
from tests.unit.fakes import FakeAdmin, FakeConsumer, FakeDestination, FakeMessage, UnreadableHeadersMessage


class FakeProducer:
    """Holds what was produced until deliver() (records in flight = len)."""

    def __init__(self):
        self.queue = []
        self.timestamps = []

    def produce(self, topic, value, key, partition, on_delivery=None, _alias=None, timestamp=0, headers=None):
        # confluent-kafka's order: the hot path passes every argument by position (clients/produce_positions.py)
        self.queue.append((topic, partition, value, on_delivery, headers))
        self.timestamps.append(timestamp)

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
        worker.hot_path.mirror(stream, batch)
    # 10..14 are in the producer (exactly-once: in the open transaction); the position says so.
    assert len(producer) == 5
    assert stream.ledger.next_offsets == {("t", 0): 15}


class ConflictOnRecheck:
    """A syncer whose topic had no subject; looking again finds one the destination contradicts."""

    id_headers: dict = {}
    framing = {"t": TopicFraming(False, False, 0.0)}

    def recheck_topic(self, topic):
        raise SchemaConflict(topic, "destination version 1 differs from source version 1")


def test_a_conflict_found_by_the_framing_recheck_halts_at_the_record_that_found_it():
    """Issue #27 defect 7: not at the position before the run, whose records are in the open transaction."""
    worker = _worker()
    producer = FakeProducer()
    worker.producers.append(producer)
    stream = _stream(worker, worker.producers)
    stream.consumer = FakeConsumer()
    stream.assigned = {("t", 0), ("t", 1)}
    stream.ledger.start(("t", 0), 10)
    stream.ledger.start(("t", 1), 3)
    stream.schemas = SchemaGate(ConflictOnRecheck(), worker.halts, worker.metrics, {"mirror": "m"}, "src")
    framed = wire_format.header(77) + b"payload"
    batch = [FakeMessage("t", 0, o, value=b"plain") for o in range(10, 15)] + [FakeMessage("t", 0, 15, value=framed)]
    worker.hot_path.mirror(stream, batch)
    assert len(producer) == 5
    assert {k: h.offset for k, h in stream.ledger.halted.items()} == {("t", 0): 15, ("t", 1): 3}
    assert stream.ledger.committable(stream.ledger.checkpoint()) == {("t", 0): 15}


def test_queue_size_bounds_records_in_flight_of_the_exactly_once_producer():
    worker = _worker(queue_size=10, delivery="exactly-once")
    producers = [FakeProducer()]  # each source's one transactional producer, whatever its partitions
    stream = _stream(worker, producers)
    batch = [FakeMessage("t", p, o, value=b"v") for p in range(4) for o in range(6)]  # 24 records, 6 per partition
    worker.hot_path.mirror(stream, batch)
    assert sum(len(p) for p in producers) == 10
    assert stream.stash == batch[10:]  # the rest waits, in order
    assert stream.ledger.next_offsets == {("t", 0): 6, ("t", 1): 4}
    for producer in producers:  # delivered: room again
        producer.queue.clear()
    batch, stream.stash = stream.stash, []
    worker.hot_path.mirror(stream, batch)
    assert sum(len(p) for p in producers) == 10
    assert stream.ledger.next_offsets == {("t", 0): 6, ("t", 1): 6, ("t", 2): 6, ("t", 3): 2}


def test_each_run_carries_the_delivery_callback_of_its_source_partition():
    worker = _worker()
    producer = FakeProducer()
    worker.producers.append(producer)
    stream = _stream(worker, worker.producers)
    batch = [FakeMessage("t", 1, o, value=b"v") for o in (40, 41)] + [FakeMessage("t", 2, o, value=b"v") for o in (7, 8)]
    worker.hot_path.mirror(stream, batch)
    runs = [q[3] for q in producer.queue]
    assert all(isinstance(r, RunDelivery) for r in runs)
    assert runs[0] is runs[1] and runs[2] is runs[3]  # one per run, not per record
    assert [(r.topic, r.partition, r.first_offset) for r in (runs[0], runs[2])] == [("t", 1, 40), ("t", 2, 7)]


def test_the_hot_path_alone_routes_adds_provenance_and_halts_a_record_over_the_destination_limit():
    """BatchMirror built from its collaborators only (no MirrorWorker)."""
    metrics, label, refused, consume_errors = MirrorMetrics("m"), {"mirror": "m"}, [], []
    router = Router(PrefixPolicy("dc1."), preserve_partitions=True, preserve_order=False)
    router.set_destination_partitions("t", 8)
    producer = FakeProducer()
    consumer = FakeConsumer()
    stream = SourceStream("src", consumer=consumer, cluster_id="c1", same_cluster_as_destination=False,
                          producers=[producer])
    state = RunState(5.0, time.monotonic)
    halts = Halts(metrics, label, None, lambda topic, partition: 0)
    backpressure = Backpressure([stream], lambda: [producer], 100, 10, metrics, label, state, time.monotonic)
    hot_path = BatchMirror(router, halts, backpressure, metrics, label, max_bytes={"dc1.t": 50},
                           destination_cluster_id=lambda: "dst",
                           on_refused_delivery=lambda *args: refused.append(args),
                           on_consume_error=lambda *args: consume_errors.append(args), provenance_headers=True)
    batch = [FakeMessage("t", 3, 10, value=b"a", headers=[("h", b"1")]), FakeMessage("t", 3, 11, value=b"x" * 100),
             FakeMessage("t", 3, 12, value=b"b"), FakeMessage("t", 4, 0, value=b"c")]

    hot_path.mirror(stream, batch)

    assert [(topic, partition, value, headers) for topic, partition, value, _, headers in producer.queue] == [
        ("dc1.t", 3, b"a", [("h", b"1"), ("mirror.source", b"src:c1:t:3:10")]),
        ("dc1.t", 4, b"c", [("mirror.source", b"src:c1:t:4:0")]),
    ]
    assert stream.ledger.halted[("t", 3)].offset == 11            # over max.message.bytes: halted there
    assert consumer.paused == {("t", 3)}
    assert stream.ledger.next_offsets == {("t", 3): 11, ("t", 4): 1}
    assert stream.pending["t"][:2] == [2, 4]                        # records, key and value bytes handed over
    assert not refused and not consume_errors


def test_records_stamped_at_the_epoch_go_out_one_millisecond_later_counted_and_logged_once_per_partition(caplog):
    """Issue 43 defect 9: librdkafka reads a produce timestamp of 0 as "now"."""
    worker = _worker()
    producer = FakeProducer()
    stream = _stream(worker, [producer])
    batch = [FakeMessage("t", 3, 10, timestamp=0), FakeMessage("t", 3, 11, timestamp=None),
             FakeMessage("t", 3, 12, timestamp=0), FakeMessage("t", 4, 0, timestamp=0), FakeMessage("t", 4, 1)]
    with caplog.at_level("WARNING", logger="mirror_worker"):
        worker.hot_path.mirror(stream, batch)
        worker.hot_path.mirror(stream, [FakeMessage("t", 3, 13, timestamp=0)])
    assert producer.timestamps == [1, 0, 1, 1, 1_000, 1]
    restamped = worker.metrics.records_restamped.labels(mirror="m", source="src", topic="t")._value.get()
    assert restamped == 4
    logged = [(r.partition, r.offset) for r in caplog.records if r.getMessage().startswith("record stamped at the epoch")]
    assert logged == [(3, 10), (4, 0)]


@pytest.mark.parametrize("dead_letter_topic", [None, "dlq"])
def test_a_header_name_that_is_not_utf8_halts_only_its_partition_at_that_record(dead_letter_topic, capsys):
    """Issue #43 defect 1: the record cannot be copied as it is (not even dead-lettered: its headers cannot be
    read); its partition halts there with one line, the other partitions' records are copied, nothing raises."""
    worker = _worker(dead_letter_topic=dead_letter_topic)
    producer = FakeProducer()
    worker.producers.append(producer)
    stream = _stream(worker, worker.producers)
    stream.consumer = FakeConsumer()
    stream.assigned = {("t", 0), ("t", 1)}
    batch = [FakeMessage("t", 0, 10, value=b"a"), UnreadableHeadersMessage("t", 0, 11), FakeMessage("t", 0, 12),
             FakeMessage("t", 1, 3, value=b"b", headers=[("h", b"1")]), FakeMessage("t", 1, 4, value=b"c")]
    worker.hot_path.mirror(stream, batch)
    assert [(q[1], q[2]) for q in producer.queue] == [(0, b"a"), (1, b"b"), (1, b"c")]
    assert {k: h.offset for k, h in stream.ledger.halted.items()} == {("t", 0): 11}
    assert stream.consumer.paused == {("t", 0)}
    assert stream.ledger.next_offsets == {("t", 0): 11, ("t", 1): 5}
    # (the JSON log line goes to stderr too once a test before this one has configured logging)
    assert [line for line in capsys.readouterr().err.splitlines() if line.startswith("mirror_worker:")] == [
        "mirror_worker: partition t[0] of source 'src' halted at offset 11: header name b'\\xff\\xfetrace' is not "
        "UTF-8: the Kafka client cannot read it, so it cannot be copied"]


def test_a_refused_record_whose_headers_cannot_be_read_is_halted_not_dead_lettered():
    """Halts.refuse reads the headers for the dead letter: a dead letter without them would not be the record."""
    worker = _worker(dead_letter_topic="dlq")
    producer = FakeProducer()
    worker.producers.append(producer)
    stream = _stream(worker, worker.producers)
    stream.consumer = FakeConsumer()
    worker.halts.refuse(stream, UnreadableHeadersMessage("t", 2, 7), "record of 9 bytes exceeds destination")
    assert not producer.queue
    halt = stream.ledger.halted[("t", 2)]
    assert (halt.offset, halt.reason) == (7, "record of 9 bytes exceeds destination; header name "
                                             "b'\\xff\\xfetrace' is not UTF-8: the Kafka client cannot read it, "
                                             "so it cannot be copied")
