"""Exactly-once cycles at an ordinary rate start an interval after the previous cycle's start, not its end."""

from __future__ import annotations

import pytest

from mirror_worker.engine.cadence import MIN_CONSUME_SHARE, TRANSACTION_SHARE_FACTOR, next_cycle_at


def test_an_ordinary_rate_counts_the_interval_from_the_cycles_start():
    # A 12 ms cycle at 30 ms: the next one 30 ms after this one began, not 42 ms (which made every record
    # wait one cycle longer: the p99 at 10,000 msgs/s was the interval plus two cycles).
    assert next_cycle_at(10.0, 10.012, 0.03, behind=False) == pytest.approx(10.03)


def test_a_cycle_longer_than_the_interval_leaves_the_loop_a_share_of_it_to_consume():
    assert next_cycle_at(10.0, 10.2, 0.03, behind=False) == pytest.approx(10.2 + MIN_CONSUME_SHARE * 0.03)


def test_while_behind_commits_take_at_most_a_share_of_the_loop():
    assert next_cycle_at(10.0, 10.05, 0.03, behind=True) == pytest.approx(10.05 + TRANSACTION_SHARE_FACTOR * 0.05)
    assert next_cycle_at(10.0, 10.001, 0.03, behind=True) == pytest.approx(10.031)  # never sooner than the interval
