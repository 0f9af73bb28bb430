"""The digest pass's readers with in-memory records (no servers): reading a range with librdkafka and
normalising (spark_jobs/check/rdkafka.py), and the aggregates per window of both sides, each test run
against both implementations: librdkafka's Python (spark_jobs/check/rdkafka.py) and the JVM's
(java/check/src/mirror/check/WindowRows.java, through tests/unit/jvm_rows.py)."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError

from spark_jobs.check import rdkafka as check_rdkafka
from spark_jobs.check.rdkafka import (
    POSITIONAL, DestinationScope, ProvenanceRule, ReadFailed, normalised, read_range, split_headers,
)
from spark_jobs.check.rdkafka_spark import ReadTask, plan_tasks
from tests.unit.fakes import FakeError, FakeMessage, UnreadableHeadersMessage
from tests.unit.jvm_rows import JvmRows

PROV = "mirror.source"
WINDOW = 4


class ScriptedConsumer:
    """Hands out the given batches, one per consume() call, then nothing."""

    def __init__(self, batches: list[list]) -> None:
        self.batches = list(batches)
        self.assigned = None

    def assign(self, partitions) -> None:
        self.assigned = [(tp.topic, tp.partition, tp.offset) for tp in partitions]

    def consume(self, num_messages=1, timeout=-1) -> list:
        return self.batches.pop(0) if self.batches else []


def eof(offset: int) -> FakeMessage:
    return FakeMessage("s", 0, offset, error=FakeError(KafkaError._PARTITION_EOF))


def source(offset: int, value: bytes | None = None, headers=None, key=b"k") -> FakeMessage:
    return FakeMessage("s", 0, offset, key=key, value=value if value is not None else b"v%d" % offset,
                       headers=headers if headers is not None else [("n", b"%d" % offset)])


def copy(record: FakeMessage, dest_offset: int, partition: int = 0, cluster: str = "c1",
         value: bytes | None = None) -> FakeMessage:
    headers = [*(record.headers() or []), (PROV, f"src:{cluster}:s:{partition}:{record.offset()}".encode())]
    return FakeMessage("d", 0, dest_offset, key=record.key(), value=value if value is not None else record.value(),
                       headers=headers)


def scope(ranges=None, cluster="c1") -> DestinationScope:
    return DestinationScope(0, ProvenanceRule("s", cluster), ranges or {0: (0, 100)}, WINDOW)


def counts(rows, key_len=3):
    """(p, w) -> (n, lo, hi) of SOURCE_WINDOWS or DESTINATION_WINDOWS rows."""
    return {(r[1], r[2]): tuple(r[key_len:key_len + 3]) for r in rows}


# ------------------------------------------------------------------ reading


def test_a_range_stops_at_its_end_within_a_batch():
    consumer = ScriptedConsumer([[source(5), source(6)], [source(7), source(8), source(9)]])
    batches = list(read_range(consumer, "s", 0, 5, 8))
    assert [[m.offset() for m in b] for b in batches] == [[5, 6], [7]]
    assert consumer.assigned == [("s", 0, 5)]


def test_a_range_ending_in_aborted_records_or_markers_ends_at_the_partition_end():
    # offsets 2..4: an aborted transaction and its marker, never delivered read_committed
    consumer = ScriptedConsumer([[source(0), source(1), eof(5)]])
    assert [m.offset() for b in read_range(consumer, "s", 0, 0, 5) for m in b] == [0, 1]


def test_a_consumer_error_fails_the_read():
    broken = FakeMessage("s", 0, 3, error=FakeError(KafkaError._TRANSPORT, "broker down"))
    with pytest.raises(ReadFailed, match="broker down"):
        list(read_range(ScriptedConsumer([[source(0), broken]]), "s", 0, 0, 10))


def test_a_read_that_gets_nothing_fails_after_the_stall_timeout():
    clock = iter(range(0, 1000, 10))
    with pytest.raises(ReadFailed, match="nothing read"):
        list(read_range(ScriptedConsumer([]), "s", 0, 0, 10, stall_timeout_s=30, clock=lambda: next(clock)))


# ------------------------------------------------------------------ normalising


def test_framed_bytes_compare_without_their_schema_id_and_apart_from_plain_bytes():
    assert normalised(b"\x00\x00\x00\x00\x01body") == normalised(b"\x00\x00\x00\x00\x07body")
    assert normalised(b"\x00\x00\x00\x00\x01body") != normalised(b"body")
    assert normalised(b"\x00abc") == b"\x00abc"          # too short for framing: plain bytes
    assert normalised(None) is None and normalised(b"") == b""


def test_headers_keep_their_order_without_any_provenance_header():
    assert split_headers(None) == ((), None)
    assert split_headers([]) == ((), None)
    assert split_headers([("a", b"1"), (PROV, b"x")]) == ((("a", b"1"),), b"x")
    assert split_headers([(PROV, b"x"), ("a", b"1"), (PROV, b"y")]) == ((("a", b"1"),), b"y")
    assert split_headers([(PROV, b"x"), ("a", None)]) == ((("a", None),), b"x")
    assert split_headers([("b", b""), ("a", b"1")]) == ((("b", b""), ("a", b"1")), None)


# ------------------------------------------------------------------ windows, both implementations


@pytest.fixture(scope="module")
def jvm_rows():
    rows = JvmRows()
    yield rows
    rows.close()


@pytest.fixture(params=["python", "jvm"])
def impl(request):
    """The window rows of one reader: `source_window_rows` and `destination_window_rows`."""
    return check_rdkafka if request.param == "python" else request.getfixturevalue("jvm_rows")


def test_a_clean_copy_has_the_digests_of_its_source_with_one_constant_shift(impl):
    records = [source(o) for o in range(10)]
    source_rows = impl.source_window_rows([records[:3], records[3:]], 0, 0, WINDOW, None)
    dest_rows = impl.destination_window_rows([[copy(r, r.offset() + 100) for r in records]], 0, scope())
    assert counts(source_rows) == counts(dest_rows, 4)
    assert [r[2] for r in source_rows] == [0, 1, 2] and [r[3] for r in source_rows] == [4, 4, 2]
    for t, p, w, dp, n, lo, hi, first_do, last_do, first_src, last_src, least, greatest in dest_rows:
        assert least == greatest == -100 and last_src - first_src == last_do - first_do == n - 1


def test_schema_ids_and_the_provenance_header_do_not_alter_a_copy(impl):
    record = source(1, value=b"\x00\x00\x00\x00\x05payload")
    mirrored = copy(record, 0, value=b"\x00\x00\x00\x00\x09payload")
    assert counts(impl.source_window_rows([[record]], 0, 0, WINDOW, None)) == counts(
        impl.destination_window_rows([[mirrored]], 0, scope()), 4)


@pytest.mark.parametrize("change", [
    {"value": b"other"}, {"headers": [("n", b"x")]}, {"headers": [("n", None)]}, {"headers": []},
    {"key": None}, {"key": b"k2"},
])
def test_an_altered_copy_changes_its_window_digest(change, impl):
    record = source(2)
    altered = FakeMessage("d", 0, 0, **{"key": record.key(), "value": record.value(), **change})
    altered._headers = [*(change.get("headers", record.headers())), (PROV, b"src:c1:s:0:2")]
    assert counts(impl.source_window_rows([[record]], 0, 0, WINDOW, None)) != counts(
        impl.destination_window_rows([[altered]], 0, scope()), 4)


def test_a_copy_of_another_offset_with_the_same_content_is_not_the_same_record(impl):
    a, b = source(0, value=b"same"), source(1, value=b"same")
    assert counts(impl.source_window_rows([[a, b]], 0, 0, WINDOW, None)) != counts(
        impl.destination_window_rows([[copy(a, 0), copy(a, 1)]], 0, scope()), 4)


def test_records_at_or_after_the_committed_offset_are_counted_beyond_it(impl):
    rows = impl.source_window_rows([[source(o) for o in range(7)]], 0, 0, WINDOW, 3)
    assert [(r[2], r[6]) for r in rows] == [(0, 1), (1, 3)]


def test_records_without_usable_provenance_are_positional_in_their_destination_partition(impl):
    plain = FakeMessage("d", 0, 7, headers=[("n", b"1")])
    other_topic = FakeMessage("d", 0, 8, headers=[(PROV, b"src:c1:other:0:1")])
    other_cluster = FakeMessage("d", 0, 9, headers=[(PROV, b"src:c9:s:0:1")])
    not_a_number = FakeMessage("d", 0, 10, headers=[(PROV, b"src:c1:s:0:+1")])
    too_many_fields = FakeMessage("d", 0, 11, headers=[(PROV, b"a:b:c1:s:0:1")])
    rows = impl.destination_window_rows([[plain, other_topic, other_cluster, not_a_number, too_many_fields]], 3, scope())
    assert [(r[1], r[2], r[3], r[4]) for r in rows] == [(3, POSITIONAL, 3, 5)]


def test_no_cluster_in_the_header_is_usable_and_copies_outside_the_range_are_left_out(impl):
    records = [FakeMessage("d", 0, o, headers=[(PROV, b"src::s:0:%d" % src)]) for o, src in enumerate((1, 50, 2))]
    rows = impl.destination_window_rows([records], 0, scope({0: (0, 10)}))
    assert [(r[2], r[4], r[9], r[10]) for r in rows] == [(0, 2, 1, 2)]


def test_interleaved_copies_report_the_spread_of_their_shifts(impl):
    records = [source(o) for o in range(4)]
    dest = [copy(records[0], 0), copy(records[2], 1), copy(records[1], 2), copy(records[3], 3)]
    (row,) = impl.destination_window_rows([dest], 0, scope())
    assert row[11:] == (-1, 1)                        # least and greatest shift differ: order unknown


def test_source_tasks_are_cut_on_window_edges_and_destination_tasks_anywhere():
    tasks = plan_tasks({("s", 0): (3, 25)}, {("d", 1): (0, 25)}, 4, 10)
    assert sorted((t.start, t.end) for t in tasks if t.side == "source") == [(3, 8), (8, 16), (16, 24), (24, 25)]
    assert sorted((t.start, t.end) for t in tasks if t.side == "destination") == [(0, 10), (10, 20), (20, 25)]
    assert tasks[0].end - tasks[0].start == 10 and ReadTask("source", "s", 0, 3, 8) in tasks


def test_a_record_whose_header_name_is_not_utf8_counts_as_a_difference_on_either_side():
    """Issue #43: confluent-kafka cannot read such headers (mirror_worker/clients/headers.py). A source record of
    that kind never matches a copy: its window differs, whatever the destination holds (here: nothing, as the
    worker halts there, or a copy whose headers read); on the destination one has no readable provenance."""
    records = [source(o) for o in range(4)]
    odd = UnreadableHeadersMessage("s", 0, 2, key=b"k", value=b"v2")
    source_rows = check_rdkafka.source_window_rows([records[:2] + [odd, records[3]]], 0, 0, WINDOW, None)
    assert [r[3] for r in source_rows] == [4]  # counted, not left out
    without = check_rdkafka.destination_window_rows([[copy(r, r.offset()) for r in records if r.offset() != 2]],
                                                    0, scope())
    with_copy = check_rdkafka.destination_window_rows([[copy(r, r.offset()) for r in records]], 0, scope())
    assert counts(source_rows) != counts(without, 4) and counts(source_rows) != counts(with_copy, 4)
    dest_odd = UnreadableHeadersMessage("d", 0, 7)
    rows = check_rdkafka.destination_window_rows([[dest_odd]], 3, scope())
    assert [(r[1], r[2], r[3], r[4]) for r in rows] == [(3, POSITIONAL, 3, 1)]
