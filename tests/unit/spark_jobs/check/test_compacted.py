"""The consistency check's compacted mode (spark_jobs/check/compacted.py): the latest value per key; and
positional mapping without preserved partitions (spark_jobs/check/records.py)."""

from __future__ import annotations

import pytest

from spark_jobs.check.compacted import compare_latest
from tests.unit.spark_jobs.check.test_job import rows

pytestmark = pytest.mark.spark

T, D = "t", "m.t"


def _source():
    # Partition 0: k1 twice (latest v1b), k2 once, k3 then a tombstone. Partition 1: k4 twice.
    return [(T, 0, 0, b"k1", b"v1a", None), (T, 0, 1, b"k2", b"v2", None), (T, 0, 2, b"k1", b"v1b", None),
            (T, 0, 3, b"k3", b"v3", None), (T, 0, 4, b"k3", None, None),
            (T, 1, 0, b"k4", b"v4a", [("h", b"1")]), (T, 1, 1, b"k4", b"v4b", [("h", b"1")])]


def check(spark, destination, committed=None, preserve=True):
    return compare_latest(rows(spark, _source()), rows(spark, destination), {D: T}, preserve,
                          committed or {(T, 0): None, (T, 1): None})


def test_a_destination_compacted_differently_is_consistent(spark):
    # Only the latest version of each key survived on the destination; the tombstoned key is gone.
    counts, examples = check(spark, [(D, 0, 7, b"k2", b"v2", None), (D, 0, 9, b"k1", b"v1b", None),
                                     (D, 1, 3, b"k4", b"v4b", [("h", b"1")])])
    assert counts == {
        (T, 0): {"topic": T, "partition": 0, "source_count": 3, "destination_count": 2, "missing": 0, "altered": 0,
                 "beyond_committed": 0, "duplicated": 0, "out_of_order": 0, "wrong_schema": 0},
        (T, 1): {"topic": T, "partition": 1, "source_count": 1, "destination_count": 1, "missing": 0, "altered": 0,
                 "beyond_committed": 0, "duplicated": 0, "out_of_order": 0, "wrong_schema": 0},
    }
    assert examples == {}


def test_missing_keys_stale_or_altered_latest_values_and_live_tombstones_are_counted(spark):
    destination = [
        (D, 0, 0, b"k1", b"v1a", None),               # k1: an older version is the latest copy -> altered
        (D, 0, 1, b"k3", b"v3", None),                # k3: deleted at the source, still live here -> altered
        # k2 has no copy -> missing
        (D, 1, 0, b"k4", b"v4b", [("h", b"2")]),      # k4: other headers -> altered
    ]
    counts, examples = check(spark, destination)
    assert {tp: (c["missing"], c["altered"]) for tp, c in counts.items()} == {(T, 0): (1, 2), (T, 1): (0, 1)}
    assert examples == {"missing": ["t:0:1"], "altered": ["t:0:2", "t:0:4", "t:1:1"], "wrong_schema": []}


def test_keys_whose_latest_record_the_mirror_has_not_reached_are_beyond_committed(spark):
    counts, _ = check(spark, [(D, 0, 0, b"k1", b"v1a", None), (D, 0, 1, b"k2", b"v2", None)],
                      committed={(T, 0): 2, (T, 1): 0})
    # k1's latest (offset 2) is past the committed 2, k4's past 0: neither missing nor altered. k3's latest
    # is a tombstone with no copy: consistent wherever the mirror is.
    assert {tp: (c["missing"], c["altered"], c["beyond_committed"]) for tp, c in counts.items()} == {
        (T, 0): (0, 0, 1), (T, 1): (0, 0, 1)}


def test_without_preserved_partitions_a_key_is_looked_for_in_any_destination_partition(spark):
    counts, _ = check(spark, [(D, 2, 0, b"k1", b"v1b", None), (D, 0, 5, b"k2", b"v2", None),
                              (D, 1, 0, b"k4", b"v4b", [("h", b"1")])], preserve=False)
    assert {tp: (c["source_count"], c["missing"], c["altered"]) for tp, c in counts.items()} == {
        (T, 0): (3, 0, 0), (T, 1): (1, 0, 0)}


# ------------------------------------------------------------------ positional ties without preserved partitions


def test_ties_between_source_partitions_are_not_altered_without_preserved_partitions(spark):
    """Same key and timestamp in two source partitions (a producer that did not partition by key): the mirror
    wrote them to one destination partition in whatever order it consumed them."""
    from tests.unit.spark_jobs.check.test_job import check as check_records, copy, summary_of

    ts = 1_714_521_600_000
    src = [("t", 0, 5, b"k", b"from-p0", [], ts), ("t", 1, 3, b"k", b"from-p1", [], ts),
           ("t", 0, 6, b"j", b"j-p0", [], ts), ("t", 1, 4, b"j", b"j-p1", [], ts)]
    # p0's record first for k, p1's first for j; j-p1 is altered on the way.
    dst = [copy(src[0], 0, provenance=False, partition=0), copy(src[1], 1, provenance=False, partition=0),
           copy(src[3], 2, provenance=False, partition=0, value=b"changed"),
           copy(src[2], 3, provenance=False, partition=0)]
    summary, examples = check_records(spark, src, dst, preserve=False)
    assert {p: (summary_of(summary, p)["altered"], summary_of(summary, p)["missing"]) for p in (0, 1)} == {
        0: (0, 0), 1: (1, 0)}
    assert examples["altered"] == ["t:1:4"]
