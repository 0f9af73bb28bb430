"""The consistency check's digest-first pass: windows, order segments, and what goes to the exact path."""

from __future__ import annotations

import pyarrow as pa
import pytest

from spark_jobs.check import digests as cd
from spark_jobs.check.report import render_html
from tests.unit.spark_jobs.check.test_job import copy, rows, source_partition

WINDOW = 4                                          # offsets 0-3, 4-7, 8-9 for a 10-record partition
TOPIC_MAP = {"dst.t": "t"}


def digest(spark, source_records, destination_records, ranges=None, committed=None, slices=1):
    """PartitionDigest per source partition; the destination split into `slices` Spark partitions (tasks)."""
    ranges = ranges or {("t", p): (0, 10) for p in {r[1] for r in source_records}}
    destination = rows(spark, destination_records).coalesce(1)
    if slices > 1:                                  # tasks as the Kafka source makes them: offset ranges, in order
        destination = destination.repartitionByRange(slices, "partition", "offset").sortWithinPartitions(
            "partition", "offset")
    out, _ = cd.digest_pass(rows(spark, source_records).coalesce(1), destination, ["t"], TOPIC_MAP,
                                   "CLUSTER", ranges, committed or {}, WINDOW)
    return out


def clean_copy(records, first_dest_offset=0):
    return [copy(r, first_dest_offset + i) for i, r in enumerate(records)]


@pytest.mark.spark
def test_a_clean_copy_has_no_differing_window(spark):
    src = source_partition()
    got = digest(spark, src, clean_copy(src))[("t", 0)]
    assert (got.source_count, got.windows, got.differing, got.in_order, got.positional) == (10, 3, 0, True, 0)
    assert cd.recheck_spans({("t", 0): (0, 10)}, {("t", 0): got}, WINDOW, True) == {}


@pytest.mark.spark
def test_each_kind_of_difference_marks_its_window(spark):
    src = source_partition()
    altered = clean_copy(src)
    altered[5] = copy(src[5], 5, value=b"changed")
    missing = clean_copy(src[:9])
    duplicated = clean_copy(src) + [copy(src[9], 10)]
    headers = clean_copy(src)
    headers[1] = copy(src[1], 1, headers=[("h", b"y")])
    for dst, windows in ((altered, [1]), (missing, [2]), (duplicated, [2]), (headers, [0])):
        got = digest(spark, src, dst)[("t", 0)]
        assert (got.differing_windows, got.differing, got.in_order) == (windows, 1, True), dst


@pytest.mark.spark
def test_a_missing_record_replaced_by_a_copy_of_another_still_differs(spark):
    src = source_partition()
    dst = clean_copy(src)
    dst[6] = copy(src[5], 6)                         # 6 lost, 5 copied twice: same count per window
    got = digest(spark, src, dst)[("t", 0)]
    assert got.differing_windows == [1]


@pytest.mark.spark
def test_schema_ids_and_the_provenance_header_do_not_count(spark):
    framed = lambda schema_id, body: bytes([0]) + schema_id.to_bytes(4, "big") + body  # noqa: E731
    src = [("t", 0, o, framed(1, b"k%d" % o), framed(7, b"v%d" % o), [("h", b"x")]) for o in range(10)]
    dst = [copy(r, i, key=framed(2, r[3][5:]), value=framed(9, r[4][5:])) for i, r in enumerate(src)]
    assert digest(spark, src, dst)[("t", 0)].differing == 0


@pytest.mark.spark
@pytest.mark.parametrize("slices", [1, 3])
def test_order_is_checked_inside_a_window_and_across_tasks(spark, slices):
    src = source_partition()
    swapped = clean_copy(src)
    swapped[2], swapped[3] = copy(src[3], 2), copy(src[2], 3)     # same window: digests equal
    got = digest(spark, src, swapped, slices=slices)[("t", 0)]
    assert (got.differing, got.in_order) == (0, False)
    assert cd.recheck_spans({("t", 0): (0, 10)}, {("t", 0): got}, WINDOW, True) == {("t", 0): (0, 10, "order")}
    late = clean_copy(src[:8] + src[9:]) + [copy(src[8], 9)]       # 8 copied after 9 (one window)
    late_first = [copy(src[i], d) for d, i in enumerate([0, 1, 2, 3, 8, 4, 5, 6, 7, 9])]
    for dst in (late, late_first):
        assert digest(spark, src, dst, slices=slices)[("t", 0)].in_order is False
    assert digest(spark, src, clean_copy(src), slices=slices)[("t", 0)].in_order is True


@pytest.mark.spark
def test_copies_in_a_row_are_in_order_but_differ(spark):
    src = source_partition()
    dst = [copy(src[i], d) for d, i in enumerate([0, 1, 2, 2, 3, 4, 5, 6, 7, 8, 9])]
    got = digest(spark, src, dst)[("t", 0)]
    assert (got.in_order, got.differing_windows) == (True, [0])
    assert cd.recheck_spans({("t", 0): (0, 10)}, {("t", 0): got}, WINDOW, True) == {("t", 0): (0, 4, "windows")}


@pytest.mark.spark
def test_copies_outside_the_range_are_ignored_and_beyond_committed_is_counted(spark):
    src = source_partition()
    dst = clean_copy(src) + [copy(("t", 0, 55, b"k", b"v", []), 10)]
    got = digest(spark, src, dst, ranges={("t", 0): (0, 10)}, committed={("t", 0): 7})[("t", 0)]
    assert (got.differing, got.in_order, got.beyond_committed) == (0, True, 3)


@pytest.mark.spark
def test_records_without_provenance_send_their_partition_to_the_exact_path(spark):
    src = source_partition(0) + source_partition(1)
    dst = clean_copy(src[:10]) + [copy(r, i, provenance=False) for i, r in enumerate(src[10:])]
    got = digest(spark, src, dst, slices=2)
    assert (got[("t", 0)].positional, got[("t", 1)].positional) == (0, 10)
    ranges = {("t", 0): (0, 10), ("t", 1): (0, 10)}
    assert cd.recheck_spans(ranges, got, WINDOW, True) == {("t", 1): (0, 10, "positional")}
    assert cd.recheck_spans(ranges, got, WINDOW, False) == {("t", 0): (0, 10, "positional"),
                                                            ("t", 1): (0, 10, "positional")}


def test_recheck_spans_take_the_differing_windows_within_the_range():
    differing = cd.PartitionDigest(source_count=90, windows=23, differing=2, first_differing=3, last_differing=5)
    ranges = {("t", 0): (10, 100), ("t", 1): (10, 100), ("t", 2): (10, 100), ("t", 3): (10, 10)}
    digests = {("t", 0): differing, ("t", 1): cd.PartitionDigest(source_count=90, windows=23),
               ("t", 2): cd.PartitionDigest(windows=23, differing=1, first_differing=2, last_differing=2,
                                            in_order=False)}
    assert cd.recheck_spans(ranges, digests, WINDOW, True) == {("t", 0): (12, 24, "windows"),
                                                               ("t", 2): (10, 100, "order")}


def _batch(**columns):
    types = {"t": pa.int32(), "p": pa.int32(), "dp": pa.int32()}
    return pa.RecordBatch.from_pydict({k: pa.array(v, types.get(k, pa.int64())) for k, v in columns.items()})


def test_task_segments_merge_batches_in_their_order():
    def rows_for(srcs, dos):
        n = len(srcs)
        return _batch(t=[0] * n, p=[0] * n, w=[s // WINDOW for s in srcs], dp=[0] * n, do=dos, src=srcs,
                      lo=[1] * n, hi=[2] * n)

    clean = list(cd.task_segments(iter([rows_for([0, 1, 2], [10, 11, 12]), rows_for([3, 4], [13, 14])])))[0]
    got = {(r["w"], r["n"], r["lo"], r["hi"], r["first_do"], r["last_do"], r["first_src"], r["last_src"], r["ordered"])
           for r in clean.to_pylist()}
    assert got == {(0, 4, 4, 8, 10, 13, 0, 3, True), (1, 1, 1, 2, 14, 14, 4, 4, True)}
    stepping_back = list(cd.task_segments(iter([rows_for([0, 2], [10, 11]), rows_for([1, 3], [12, 13])])))[0]
    assert [r["ordered"] for r in stepping_back.to_pylist()] == [False]


def test_html_draws_the_differing_windows():
    partition = {"topic": "t", "partition": 0, "source_count": 10, "destination_count": 10, "missing": 0,
                 "duplicated": 0, "altered": 1, "out_of_order": 0, "beyond_committed": 0}
    report = {
        "status": "inconsistent", "totals": {"checked": 10, "altered": 1}, "partitions": [partition],
        "window": {"kind": "all", "ranges": [{"topic": "t", "partition": 0, "from": 0, "to": 10, "committed": None}]},
        "source": {"topics": ["t"]}, "destination": {"topics": ["t"]}, "generated_at": "now", "examples": {},
        "digest": {"window_offsets": 4, "windows": 3, "windows_by_digest": 2, "windows_record_by_record": 1,
                   "records_record_by_record": 4,
                   "partitions": [{"topic": "t", "partition": 0, "windows": 3, "windows_differing": 1,
                                   "differing_windows": [1], "windows_by_digest": 2, "windows_record_by_record": 1,
                                   "record_by_record": {"from": 4, "to": 8, "reason": "windows"}}]},
    }
    html = render_html(report)
    assert html.count("<svg") == 1
    assert '<rect class="differs" x="192.0" y="2" width="192.0"' in html
    assert '<rect class="exact" x="192.0"' in html
    assert "1 of 3 windows differ; offsets 4-8 record by record (windows)" in html
    del report["digest"]
    assert "<svg" not in render_html(report)


@pytest.mark.spark
def test_null_header_values_are_not_confused_with_others(spark):
    src = [("t", 0, 0, b"k", b"v", [("a", None), ("b", b"b")]), ("t", 0, 1, b"k", b"v", [("a", b"")]),
           ("t", 0, 2, b"k", b"v", [("a", None)]), ("t", 0, 3, b"k", b"v", [("a", None), ("c", b"")])]
    same = digest(spark, src, clean_copy(src), ranges={("t", 0): (0, 4)})[("t", 0)]
    assert same.differing == 0
    swapped = [copy(src[0], 0, headers=[("a", b"b"), ("b", None)]), copy(src[1], 1, headers=[("a", None)]),
               copy(src[2], 2, headers=[("a", b"")]), copy(src[3], 3, headers=[("a", b""), ("c", None)])]
    for i in range(4):
        dst = clean_copy(src)
        dst[i] = swapped[i]
        assert digest(spark, src, dst, ranges={("t", 0): (0, 4)})[("t", 0)].differing == 1, i


@pytest.mark.spark
def test_order_with_gaps_or_interleaved_partitions_is_proven_by_the_order_segments(spark):
    src = source_partition(0) + source_partition(1)
    gaps = [copy(r, 2 * i) for i, r in enumerate(src[:10])] + clean_copy(src[10:])   # shift not constant
    interleaved = [copy(r, i, partition=0) for i, r in enumerate(x for pair in zip(src[:10], src[10:]) for x in pair)]
    for dst in (gaps, interleaved):
        got = digest(spark, src, dst)
        assert [(got[("t", p)].differing, got[("t", p)].in_order) for p in (0, 1)] == [(0, True), (0, True)]
    order = [0, 1, 4, 2, 3, 5, 6, 7, 8, 9]            # 2 and 3 copied after 4, in both partitions
    late = [copy(r, i, partition=0) for i, r in enumerate(x for o in order for x in (src[o], src[10 + o]))]
    got = digest(spark, src, late)
    assert [(got[("t", p)].differing, got[("t", p)].in_order) for p in (0, 1)] == [(0, False), (0, False)]


def test_digest_summary_counts_the_windows_each_path_took():
    ranges = {("t", 0): (0, 10), ("t", 1): (0, 10), ("t", 2): (0, 10)}
    digests = {("t", 0): cd.PartitionDigest(windows=3), ("t", 2): cd.PartitionDigest(windows=3, in_order=False),
               ("t", 1): cd.PartitionDigest(windows=3, differing=1, differing_windows=[1], first_differing=1,
                                            last_differing=1)}
    spans = {("t", 1): (4, 8, "windows"), ("t", 2): (0, 10, "order")}
    got = cd.digest_summary(ranges, WINDOW, digests, spans)
    assert [(p["windows_by_digest"], p["windows_record_by_record"], p["record_by_record"]) for p in got["partitions"]] == [
        (3, 0, None), (2, 1, {"from": 4, "to": 8, "reason": "windows"}), (0, 3, {"from": 0, "to": 10, "reason": "order"})]
    assert (got["windows"], got["windows_by_digest"], got["windows_record_by_record"],
            got["records_record_by_record"]) == (9, 5, 4, 14)
