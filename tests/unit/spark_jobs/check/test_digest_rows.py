"""The digest comparison on the driver (spark_jobs/check/digest_rows.py), from rows per window."""

from __future__ import annotations

from spark_jobs.check.digest_rows import POSITIONAL, destination_spans, order_by_shift, partition_digests

TOPICS = ["t"]


def dest(p, w, dp, n, lo=1, hi=2, first_do=0, last_do=None, first_src=None, last_src=None, shift=(0, 0)):
    first_src = w * 10 if first_src is None else first_src
    last_src = first_src + n - 1 if last_src is None else last_src
    last_do = first_do + n - 1 if last_do is None else last_do
    return (0, p, w, dp, n, lo, hi, first_do, last_do, first_src, last_src, *shift)


def test_windows_equal_on_both_sides_do_not_differ_and_sums_over_destination_partitions_count():
    source = [(0, 0, 0, 10, 5, 7, 0), (0, 0, 1, 10, 3, 3, 4)]
    copies = [dest(0, 0, 0, 10, 5, 7), dest(0, 1, 0, 6, 1, 1), dest(0, 1, 1, 4, 2, 2, first_src=16, shift=(16, 16))]
    digest = partition_digests(source, copies, TOPICS, [("t", 0)])[("t", 0)]
    assert (digest.windows, digest.differing, digest.source_count, digest.beyond_committed) == (2, 0, 20, 4)
    assert digest.in_order is True and digest.positional == 0


def test_a_window_differs_by_count_digest_or_presence_on_one_side_only():
    source = [(0, 0, 0, 10, 5, 7, 0), (0, 0, 1, 10, 5, 7, 0), (0, 0, 2, 10, 5, 7, 0)]
    copies = [dest(0, 0, 0, 9, 5, 7), dest(0, 1, 0, 10, 5, 8), dest(0, 3, 0, 1)]
    digest = partition_digests(source, copies, TOPICS, [("t", 0), ("t", 1)])
    assert digest[("t", 0)].windows == 4 and digest[("t", 0)].differing_windows == [0, 1, 2, 3]
    assert (digest[("t", 0)].first_differing, digest[("t", 0)].last_differing) == (0, 3)
    assert digest[("t", 1)].windows == 0 and digest[("t", 1)].differing == 0


def test_records_without_provenance_are_counted_per_partition_and_outside_rows_ignored():
    copies = [dest(2, POSITIONAL, 2, 5, first_src=-1), dest(0, -2, 0, 3)]
    digest = partition_digests([], copies, TOPICS, [("t", 2)])
    assert digest[("t", 2)].positional == 5 and digest[("t", 2)].windows == 0


def test_order_is_proven_by_one_constant_shift_and_rising_partitions_only():
    rising = [dest(0, 0, 0, 10, shift=(5, 5)), dest(0, 1, 1, 10, shift=(-3, -3))]
    assert order_by_shift(rising) == {(0, 0): True}
    spread = [dest(0, 0, 0, 10, shift=(4, 5))]
    assert order_by_shift(spread) == {(0, 0): None}
    falling = [dest(0, 1, 0, 10), dest(0, 0, 1, 10)]
    assert order_by_shift(falling) == {(0, 0): None}
    assert partition_digests([], spread, TOPICS, [("t", 0)])[("t", 0)].in_order is None


def test_destination_spans_cover_the_copies_of_the_windows_asked_for():
    copies = [dest(0, 0, 0, 10, first_do=100), dest(0, 1, 0, 10, first_do=110), dest(0, 2, 1, 10, first_do=7),
              dest(1, 1, 0, 10, first_do=500)]
    assert destination_spans(copies, TOPICS, {("t", 0): (10, 20)}, 10) == {("t", 0): (110, 120)}
    assert destination_spans(copies, TOPICS, {("t", 0): (0, 30)}, 10) == {("t", 0): (100, 120), ("t", 1): (7, 17)}
    assert destination_spans(copies, TOPICS, {}, 10) == {}
