"""bench.width_group's gap of a partition that kept its owner: the mirror's wait, not the live stream's.

At 1,000 partitions the source broker answered the bench's own producer 2-45 s late after a worker was killed
(its librdkafka statistics: rtt up to 45 s, 19,000 records awaiting a response), and the raw gap between two
arrivals counted that as the mirror's (3.8-13.95 s at the kill, 25 s at the add, docs/benchmarks/width.md).
"""

from bench.width_group import mirror_gap, most_behind

SINCE, UNTIL = 100.0, 125.0


def _steady(start: float, end: float, lag: float, step: float = 0.05) -> list[tuple[float, float]]:
    """(arrival, source append time) of records appended every `step` s, each arriving `lag` s later."""
    out, t = [], start
    while t < end:
        out.append((t + lag, t))
        t += step
    return out


def test_a_live_stream_the_source_took_late_is_not_the_mirrors_gap():
    # Nothing reached the source from 105 to 117 (its broker did not answer the producer); each record that did
    # arrived 0.2 s after its append: the destination went 12 s without a record, the mirror waited 0.2 s.
    arrivals = _steady(95, 105, 0.2) + _steady(117, 130, 0.2)
    assert mirror_gap(arrivals, [], SINCE, UNTIL) < 0.3


def test_records_the_source_had_and_the_mirror_did_not_copy_are_its_gap():
    # Appended on time all along, but nothing copied from 108.15 to 114.5, when the records held meanwhile
    # arrive together (in order: a partition's records never overtake each other).
    arrivals = [(max(a, 114.5) if s >= 108 else a, s) for a, s in _steady(95, 130, 0.2)]
    gap = mirror_gap(arrivals, [], SINCE, UNTIL)
    assert 6.3 <= gap <= 6.4


def test_a_mirror_that_stops_for_good_is_counted_up_to_the_window_end():
    # The last record arrived at 110.2; the source had more from 110.05 on (delivery reports), none arrived.
    arrivals = _steady(95, 110.05, 0.2)
    appended = [s for _, s in _steady(95, 130, 0)]
    gap = mirror_gap(arrivals, appended, SINCE, UNTIL)
    assert 14.7 <= gap <= 15.0


def test_no_record_on_the_source_and_none_arrived_is_no_gap_of_the_mirror():
    assert mirror_gap(_steady(95, 99, 0.2), [s for _, s in _steady(95, 99, 0)], SINCE, UNTIL) == 0.0


def test_only_the_window_counts():
    # A 10-s stall that ended before the window, and steady copying within it.
    arrivals = [(a, s) for a, s in _steady(80, 130, 0.2) if not 85 <= s < 95] + [(95.1, 85.0)]
    assert mirror_gap(arrivals, [], SINCE, UNTIL) < 0.3


def test_the_readers_backlog_is_reported_within_the_window_only():
    samples = [(95.0, 9000), (101.0, 40), (110.0, 6975), (124.0, 12), (126.0, 8000)]
    assert most_behind(samples, SINCE, UNTIL) == 6975
    assert most_behind([], SINCE, UNTIL) == 0
