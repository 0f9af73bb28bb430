"""The catch-up's per-task copy loop (spark_jobs/catchup/copy_range.py) and its routing, with in-memory fakes."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError

from mirror_worker.policy.naming import PrefixPolicy
from mirror_worker.policy.provenance import PROVENANCE_HEADER, provenance_value
from mirror_worker.schemas import wire_format
from spark_jobs.catchup.copy_range import CopyFailed, CopySettings, CopyTask, copy_range
from spark_jobs.catchup.spark import copy_tasks_for
from spark_jobs.common.job_config import JobTarget
from tests.unit.fakes import FakeError, FakeMessage, UnreadableHeadersMessage


class RangeConsumer:
    """One partition's log (offsets may have gaps: markers, aborted records), served in batches, then EOF."""

    def __init__(self, log: list[FakeMessage], batch_limit: int = 3, log_end: int | None = None, calls=None):
        self.log, self.batch_limit = log, batch_limit
        self.log_end = log_end if log_end is not None else (log[-1].offset() + 1 if log else 0)
        self.calls = calls if calls is not None else []
        self.position = None
        self.eof_sent = False

    def assign(self, partitions):
        (tp,) = partitions
        self.topic, self.partition, self.position = tp.topic, tp.partition, tp.offset

    def consume(self, num_messages, timeout):
        batch = [m for m in self.log if m.offset() >= self.position][:min(num_messages, self.batch_limit)]
        if batch:
            self.position = batch[-1].offset() + 1
            return batch
        if not self.eof_sent:
            self.eof_sent = True
            return [FakeMessage(self.topic, self.partition, self.log_end, error=FakeError(KafkaError._PARTITION_EOF))]
        return []

    def commit(self, offsets, asynchronous):
        assert asynchronous is False
        self.calls.append(("commit", [(tp.topic, tp.partition, tp.offset, tp.metadata) for tp in offsets]))


class RecordingProducer:
    def __init__(self, calls=None, full_once: bool = False, unflushed: int = 0):
        self.produced, self.calls = [], calls if calls is not None else []
        self.full_once, self.unflushed = full_once, unflushed

    def produce(self, topic, value, key, partition, _on_delivery=None, _alias=None, timestamp=0, headers=None):
        # confluent-kafka's order: the copy passes every argument by position (clients/produce_positions.py)
        if self.full_once:
            self.full_once = False
            raise BufferError("queue full")
        self.produced.append((topic, partition, key, value, headers, timestamp))

    def poll(self, timeout=0):
        return 0

    def flush(self, timeout):
        self.calls.append(("flush", len(self.produced)))
        return self.unflushed


def _log(offsets, topic="orders", partition=2, **fields):
    return [FakeMessage(topic, partition, o, key=f"k{o}".encode(), value=f"v{o}".encode(),
                        headers=[("n", str(o).encode())], timestamp=1000 + o, **fields) for o in offsets]


TASK = CopyTask("orders", 2, 10, 20, "cu.orders", 2, topic_id="id-orders")
SETTINGS = CopySettings(consumer={}, producer={}, destination_cluster_id="dst-cluster")


def test_copies_exactly_the_range_in_order_then_flushes_then_commits_its_end():
    calls = []
    consumer = RangeConsumer(_log(range(10, 25)), calls=calls)
    producer = RecordingProducer(calls)
    copied = copy_range(TASK, SETTINGS, consumer, producer, [], emit=lambda _e: None)
    assert copied == 10
    assert [(t, p, k, v, h, ts) for t, p, k, v, h, ts in producer.produced] == [
        ("cu.orders", 2, f"k{o}".encode(), f"v{o}".encode(), [("n", str(o).encode())], 1000 + o) for o in range(10, 20)]
    assert calls == [("flush", 10), ("commit", [("orders", 2, 20, "id-orders")])]


def test_records_stamped_at_the_epoch_go_out_one_millisecond_later_and_are_counted():
    """Issue 43 defect 9: librdkafka reads 0 as "now"; a record without a timestamp is the producer's to stamp."""
    log = [FakeMessage("orders", 2, 10, timestamp=0), FakeMessage("orders", 2, 11, timestamp=None),
           FakeMessage("orders", 2, 12, timestamp=5), FakeMessage("orders", 2, 13, timestamp=0)]
    producer, events = RecordingProducer(), []
    copy_range(CopyTask("orders", 2, 10, 14, "cu.orders", 2), SETTINGS, RangeConsumer(log), producer, [],
               emit=events.append)
    assert [ts for *_, ts in producer.produced] == [1, 0, 5, 1]
    assert events[-1]["event"] == "partition done" and events[-1]["restamped_epoch_zero"] == 2


def test_a_range_ending_in_markers_or_aborted_records_ends_at_the_partition_end():
    # Offsets 15..19 are transaction markers / aborted records: never delivered; EOF at 20 closes the range.
    consumer = RangeConsumer(_log([10, 11, 12, 14]), log_end=20)
    producer = RecordingProducer()
    assert copy_range(TASK, SETTINGS, consumer, producer, [], emit=lambda _e: None) == 4
    assert consumer.calls == [("commit", [("orders", 2, 20, "id-orders")])]


def test_the_workers_transform_provenance_and_schema_ids():
    source_header, destination_header = wire_format.header(7), wire_format.header(1007)
    value = source_header + b"payload"
    key = wire_format.header(7) + b"raw key: not framed by the topic"
    log = [FakeMessage("orders", 2, 10, key=key, value=value, headers=[("a", b"1")])]
    settings = CopySettings(consumer={}, producer={}, destination_cluster_id="dst-cluster",
                            provenance=("src", "src-cluster"), id_headers={source_header: destination_header})
    task = CopyTask("orders", 2, 10, 11, "cu.orders", -1, frame_keys=False, frame_values=True)
    producer = RecordingProducer()
    copy_range(task, settings, RangeConsumer(log), producer, [], emit=lambda _e: None)
    ((topic, partition, out_key, out_value, headers, _),) = producer.produced
    assert (topic, partition, out_key) == ("cu.orders", -1, key)
    assert out_value == destination_header + b"payload"
    assert headers == [("a", b"1"), (PROVENANCE_HEADER, provenance_value("src", "src-cluster", "orders", 2, 10))]


def test_an_unmapped_schema_id_fails_the_task_before_any_commit():
    log = [FakeMessage("orders", 2, 10, value=wire_format.header(9) + b"x")]
    settings = CopySettings(consumer={}, producer={}, id_headers={wire_format.header(7): wire_format.header(8)})
    consumer = RangeConsumer(log)
    with pytest.raises(CopyFailed, match="schema id 9 is not in"):
        copy_range(CopyTask("orders", 2, 10, 11, "cu.orders", 2, frame_values=True), settings, consumer,
                   RecordingProducer(), [], emit=lambda _e: None)
    assert consumer.calls == []


def test_a_header_name_that_is_not_utf8_fails_the_task_at_that_record_before_any_commit():
    """Issue #43: the record cannot be copied as it is (mirror_worker/clients/headers.py): one line naming it."""
    log = _log(range(10, 13)) + [UnreadableHeadersMessage("orders", 2, 13)] + _log(range(14, 20))
    consumer, producer = RangeConsumer(log), RecordingProducer()
    with pytest.raises(CopyFailed) as failed:
        copy_range(TASK, SETTINGS, consumer, producer, [], emit=lambda _e: None)
    assert str(failed.value) == ("orders[2] offset 13: header name b'\\xff\\xfetrace' is not UTF-8: the Kafka "
                                 "client cannot read it, so it cannot be copied")
    assert [p[3] for p in producer.produced] == [b"v10", b"v11", b"v12"]
    assert consumer.calls == []  # nothing committed: a rerun stops at the same record


class FakeSchemas:
    """OnDemandSchemas' interface: source id -> the destination's framing header, or the syncer's errors."""

    def __init__(self, known: dict[int, int]):
        self.known, self.asked = known, []

    def header(self, topic, source_id):
        from mirror_worker.exceptions import UnknownSchemaId

        self.asked.append((topic, source_id))
        if source_id not in self.known:
            raise UnknownSchemaId(f"schema id {source_id} is in no subject of the source registry")
        return wire_format.header(self.known[source_id])


def test_a_schema_id_met_mid_copy_is_mapped_once_then_rewritten_as_the_worker_does():
    log = [FakeMessage("orders", 2, 10 + i, key=wire_format.header(5) + b"k", value=wire_format.header(9) + b"v")
           for i in range(3)]
    schemas = FakeSchemas({5: 1005, 9: 1009})
    settings = CopySettings(consumer={}, producer={}, id_headers={wire_format.header(7): wire_format.header(8)},
                            schemas=schemas)
    producer = RecordingProducer()
    copy_range(CopyTask("orders", 2, 10, 13, "cu.orders", 2, frame_keys=True, frame_values=True), settings,
               RangeConsumer(log), producer, [], emit=lambda _e: None)
    assert [(k, v) for _t, _p, k, v, _h, _ts in producer.produced] == [
        (wire_format.header(1005) + b"k", wire_format.header(1009) + b"v")] * 3
    assert sorted(schemas.asked) == [("orders", 5), ("orders", 9)]  # once each, then from the task's map
    assert settings.id_headers == {wire_format.header(7): wire_format.header(8)}  # the shared settings untouched


def test_an_id_the_source_registry_does_not_know_fails_the_task_before_any_commit():
    log = [FakeMessage("orders", 2, 10, value=wire_format.header(9) + b"x")]
    settings = CopySettings(consumer={}, producer={}, schemas=FakeSchemas({}))
    consumer = RangeConsumer(log)
    with pytest.raises(CopyFailed, match=r"orders\[2\] offset 10: schema id 9 is in no subject"):
        copy_range(CopyTask("orders", 2, 10, 11, "cu.orders", 2, frame_values=True), settings, consumer,
                   RecordingProducer(), [], emit=lambda _e: None)
    assert consumer.calls == []


def test_a_tasks_copy_failure_is_reported_by_its_own_line_not_sparks_wrapper():
    from spark_jobs.catchup.job import failure_line

    wrapped = Exception("An exception was thrown from the Python worker:\nTraceback (most recent call last):\n"
                        '  File "copy_range.py", line 1\n'
                        'spark_jobs.catchup.copy_range.CopyFailed: orders[2] offset 10: '
                        "schema id 9 is in no subject of the source registry; not committed\n")
    assert failure_line(wrapped) == ("CopyFailed: orders[2] offset 10: schema id 9 is in no subject of the source "
                                     "registry; not committed")
    assert failure_line(RuntimeError("first\nsecond")) == "RuntimeError: first"


def test_a_record_that_came_from_the_destination_is_a_cycle():
    looped = provenance_value("back", "dst-cluster", "orders", 0, 3)
    consumer = RangeConsumer([FakeMessage("orders", 2, 10, headers=[(PROVENANCE_HEADER, looped)])])
    with pytest.raises(CopyFailed, match="cycle"):
        copy_range(CopyTask("orders", 2, 10, 11, "cu.orders", 2), SETTINGS, consumer, RecordingProducer(), [],
                   emit=lambda _e: None)
    assert consumer.calls == []


def test_a_failback_pair_skips_records_that_came_from_the_destination_as_the_worker_does():
    looped = [FakeMessage("orders", 2, o, value=b"looped", headers=[(PROVENANCE_HEADER, provenance_value(
        "back", "dst-cluster", "orders", 0, o))]) for o in (10, 12, 14)]
    calls = []
    consumer = RangeConsumer(sorted(looped + _log([11, 13]), key=lambda m: m.offset()), log_end=15, calls=calls)
    producer = RecordingProducer(calls)
    settings = CopySettings(consumer={}, producer={}, destination_cluster_id="dst-cluster", skip_origin=True)
    task = CopyTask("orders", 2, 10, 15, "cu.orders", 2, topic_id="id-orders")
    assert copy_range(task, settings, consumer, producer, [], emit=lambda _e: None) == 2
    assert [v for _, _, _, v, _, _ in producer.produced] == [b"v11", b"v13"]
    assert calls[-1] == ("commit", [("orders", 2, 15, "id-orders")])  # past the last skipped record


@pytest.mark.parametrize("errors, unflushed", [(["Broker: Message size too large"], 0), ([], 3)])
def test_a_delivery_error_or_an_unfinished_flush_fails_the_task_without_commit(errors, unflushed):
    consumer = RangeConsumer(_log(range(10, 20)))
    with pytest.raises(CopyFailed, match="not committed"):
        copy_range(TASK, SETTINGS, consumer, RecordingProducer(unflushed=unflushed), list(errors), emit=lambda _e: None)
    assert consumer.calls == []


def test_a_full_producer_queue_is_waited_out_without_losing_or_reordering_records():
    producer = RecordingProducer(full_once=True)
    copy_range(TASK, SETTINGS, RangeConsumer(_log(range(10, 20))), producer, [], emit=lambda _e: None)
    assert [key for _, _, key, *_ in producer.produced] == [f"k{o}".encode() for o in range(10, 20)]


def test_no_commit_mode_copies_without_moving_the_group():
    consumer = RangeConsumer(_log(range(10, 20)))
    settings = CopySettings(consumer={}, producer={}, commit=False)
    assert copy_range(TASK, settings, consumer, RecordingProducer(), [], emit=lambda _e: None) == 10
    assert consumer.calls == []


def test_a_consume_error_fails_the_task():
    log = _log([10]) + [FakeMessage("orders", 2, 11, error=FakeError(KafkaError._AUTO_OFFSET_RESET, "offset out of range"))]
    with pytest.raises(CopyFailed, match="offset out of range"):
        copy_range(TASK, SETTINGS, RangeConsumer(log), RecordingProducer(), [], emit=lambda _e: None)


def test_a_stalled_range_fails_after_the_stall_timeout():
    class Silent(RangeConsumer):
        def consume(self, num_messages, timeout):
            return []

    now = [0.0]

    def clock():
        now[0] += 10.0
        return now[0]

    settings = CopySettings(consumer={}, producer={}, stall_timeout_s=60)
    with pytest.raises(CopyFailed, match="nothing read for 60s at offset 10, range end 20"):
        copy_range(TASK, settings, Silent([]), RecordingProducer(), [], clock=clock, emit=lambda _e: None)


def test_exactly_once_transactions_commit_by_time_however_slowly_records_come():
    """Records coming at 3 per 4 s: the transaction commits once 10 s went by, long before the count bound
    (100,000); counted only, it stayed open past librdkafka's transaction.timeout.ms (60 s) on any copy slower
    than ~1,667 records/s, and the coordinator's abort failed the task as "fenced" (issue 43, defect 6)."""
    from spark_jobs.catchup.eos import ExactlyOnce

    now = [0.0]

    class Slow(RangeConsumer):
        def consume(self, num_messages, timeout):
            now[0] += 4.0
            return super().consume(num_messages, timeout)

    eos = ExactlyOnce("m", "src", "positions", {})
    checkpoints = []
    copy_range(TASK, SETTINGS, Slow(_log(range(10, 20))), RecordingProducer(), [], clock=lambda: now[0],
               emit=lambda _e: None, checkpoint=checkpoints.append, checkpoint_every=eos.commit_every,
               checkpoint_every_s=eos.commit_every_s)
    assert (eos.commit_every, eos.commit_every_s) == (100_000, 10.0)
    assert checkpoints == [19, 20]  # 3 batches (12 s), then the range end


def test_progress_lines_carry_copied_rate_and_time_left_then_a_done_line():
    now = [0.0]

    def clock():
        return now[0]

    class Ticking(RangeConsumer):
        def consume(self, num_messages, timeout):
            now[0] += 1.0  # one second per batch of 3
            return super().consume(num_messages, timeout)

    events = []
    settings = CopySettings(consumer={}, producer={}, progress_interval_s=2.0)
    copy_range(TASK, settings, Ticking(_log(range(10, 25))), RecordingProducer(), [], clock=clock, emit=events.append)
    progress = [e for e in events if e["event"] == "partition progress"]
    assert progress[0] == {"event": "partition progress", "topic": "orders", "partition": 2, "copied": 6,
                           "position": 16, "end": 20, "offsets_left": 4, "msgs_per_s": 3, "seconds": 2.0,
                           "eta_s": 1.3}
    assert events[-1]["event"] == "partition done" and events[-1]["copied"] == 10 and events[-1]["offsets_left"] == 0


@pytest.mark.parametrize("preserve_partitions, preserve_order, expected", [
    (True, False, [2, 5]), (False, True, [2, 1]), (False, False, [-1, -1])])
def test_tasks_are_routed_by_the_workers_router(preserve_partitions, preserve_order, expected):
    target = JobTarget("s:9092", "d:9092", ("orders",), policy=PrefixPolicy("cu."),
                       preserve_partitions=preserve_partitions, preserve_order=preserve_order)
    tasks = copy_tasks_for(target, [("orders", 2, 0, 10), ("orders", 5, 3, 9)], {"orders": "id-o"},
                           {"cu.orders": 4}, {"orders": (False, True)})
    assert [t.destination_partition for t in tasks] == expected
    assert {(t.destination_topic, t.topic_id, t.frame_keys, t.frame_values) for t in tasks} == {
        ("cu.orders", "id-o", False, True)}
    assert [(t.partition, t.start, t.end) for t in tasks] == [(2, 0, 10), (5, 3, 9)]
