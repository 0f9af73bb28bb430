"""Exactly-once cycles at an ordinary rate start an interval after the previous cycle's start, not its end;
the loop counts as behind only while it never empties what a consumer holds (Backlog)."""

from __future__ import annotations

import pytest

from mirror_worker.engine.cadence import (
    FULL,
    MIN_CONSUME_SHARE,
    TRANSACTION_SHARE_FACTOR,
    TRANSACTIONS,
    Backlog,
    Cadence,
    next_cycle_at,
)


def test_an_ordinary_rate_counts_the_interval_from_the_cycles_start():
    # A 12 ms cycle at 30 ms: the next one 30 ms after this one began, not 42 ms (which made every record
    # wait one cycle longer: the p99 at 10,000 msgs/s was the interval plus two cycles).
    assert next_cycle_at(10.0, 10.012, 0.03, behind=False) == pytest.approx(10.03)


def test_a_cycle_longer_than_the_interval_leaves_the_loop_a_share_of_it_to_consume():
    assert next_cycle_at(10.0, 10.2, 0.03, behind=False) == pytest.approx(10.2 + MIN_CONSUME_SHARE * 0.03)


def test_while_behind_commits_take_at_most_a_share_of_the_loop():
    assert next_cycle_at(10.0, 10.05, 0.03, behind=True) == pytest.approx(10.05 + TRANSACTION_SHARE_FACTOR * 0.05)
    assert next_cycle_at(10.0, 10.001, 0.03, behind=True) == pytest.approx(10.031)  # never sooner than the interval


def test_the_full_batch_after_a_slow_cycle_is_not_a_backlog():
    # 10,000 msgs/s, batches of 5,000: a 600 ms cycle (a GC pause, a cold broker) leaves 6,000 records in the
    # consumer; the first batch comes full, the next one empties it. Read as "behind", the next cycle waited
    # ten times 600 ms, and the one after that found a full batch again.
    backlog = Backlog()
    backlog.took("src", 5000, 5000)
    backlog.took("src", 1000, 5000)
    backlog.took("src", 40, 5000)
    assert backlog.cycle() is False


def test_batches_that_all_come_full_are_a_backlog_and_counting_starts_again_at_each_cycle():
    backlog = Backlog()
    for _ in range(4):
        backlog.took("src", 5000, 5000)
    assert backlog.cycle() is True
    backlog.took("src", 0, 5000)  # it held nothing
    assert backlog.cycle() is False
    assert backlog.cycle() is False  # no round since: nothing says it is behind


def test_rounds_held_back_by_full_producers_are_not_caught_up():
    backlog = Backlog()
    backlog.held_back("src")
    assert backlog.cycle() is True
    backlog.took("src", 10, 5000)
    backlog.held_back("src")  # a round that emptied the consumer before: caught up all the same
    assert backlog.cycle() is False


def test_one_source_behind_is_enough():
    backlog = Backlog()
    backlog.took("a", 5000, 5000)
    backlog.took("b", 3, 5000)
    assert backlog.cycle() is True


def test_a_pause_for_the_destination_is_a_backlog_whatever_the_batches_after_it_and_counting_starts_again():
    backlog = Backlog()
    backlog.took("src", 5000, 5000)
    backlog.paused()
    backlog.took("src", 12, 5000)  # the prefetch was dropped by the pause: partial, however much the source holds
    assert backlog.cycle() is True
    backlog.took("src", 12, 5000)
    assert backlog.cycle() is False


def test_catch_up_spacing_is_bounded():
    assert next_cycle_at(10.0, 16.0, 0.03, behind=True, limit_s=15.0) == pytest.approx(31.0)
    assert next_cycle_at(10.0, 10.5, 0.03, behind=True, limit_s=15.0) == pytest.approx(15.5)


def test_exactly_once_the_commit_interval_joins_the_next_cycle_instead_of_starting_one():
    """Issue 42: the commit interval started a cycle of its own 30 ms after the last, whatever the catch-up
    spacing: at 5,000 partitions (a commit ~6 s) commits were more than half of the copy."""
    cadence = Cadence(0.0, commit_interval_s=5.0, transaction_interval_s=0.03, catch_up_limit_s=15.0)
    assert cadence.due(0.01) is None and cadence.due(0.03) == TRANSACTIONS
    cadence.done(TRANSACTIONS, 0.03, 6.0, behind=True)  # a 6-s cycle while behind: the next at 6 + 15
    assert cadence.next_transactions == pytest.approx(21.0)
    assert cadence.due(8.0) is None  # the commit interval passed, the catch-up spacing has not
    assert cadence.wait(8.0, 0.5) == 0.5 and cadence.wait(20.9, 0.5) == pytest.approx(0.1)
    assert cadence.due(21.0) == FULL  # the source group with the next cycle
    cadence.done(FULL, 21.0, 21.2, behind=False)
    assert cadence.next_commit == pytest.approx(26.2) and cadence.next_transactions == pytest.approx(21.206)
    assert cadence.due(21.3) == TRANSACTIONS


def test_at_least_once_commits_every_commit_interval_and_waits_as_long_as_it_likes():
    cadence = Cadence(0.0, commit_interval_s=5.0, transaction_interval_s=None, catch_up_limit_s=15.0)
    assert cadence.due(4.9) is None and cadence.due(5.0) == FULL
    cadence.done(FULL, 5.0, 5.4, behind=False)
    assert cadence.next_commit == pytest.approx(10.4) and cadence.wait(6.0, 0.5) == 0.5


def test_a_catch_up_window_ends_once_the_loop_caught_up():
    """bench.width at 1,000 partitions: after the backlog, a live 1,000 msgs/s stream was visible 16.7 s late
    (p50; p99 21.3 s): the last backlog cycle spaced the next one up to 15 s away, and the live records waited
    for it although the loop had caught up long before (the worker asks stalls.waiting_more_than)."""
    cadence = Cadence(0.0, commit_interval_s=5.0, transaction_interval_s=0.03, catch_up_limit_s=15.0)
    cadence.done(TRANSACTIONS, 1.0, 2.5, behind=True)
    assert cadence.spaced and cadence.next_transactions == pytest.approx(17.5)
    cadence.caught_up(3.2)
    assert cadence.next_transactions == pytest.approx(3.2) and not cadence.spaced
    cadence.done(TRANSACTIONS, 3.2, 3.25, behind=False)
    assert cadence.next_transactions == pytest.approx(3.256)  # a 50-ms cycle: a fifth of the interval after it
    cadence.caught_up(3.24)  # not spaced for catch-up: nothing to end
    assert cadence.next_transactions == pytest.approx(3.256)


def test_clearing_forgets_the_rounds_before():
    backlog = Backlog()
    backlog.took("src", 5000, 5000)
    backlog.paused()
    backlog.clear()
    assert backlog.cycle() is False
