"""Pure logic behind partition growth, exactly-once position keep-alive and bounded shutdown (issue #17 f, h, i)."""

from __future__ import annotations

import threading

import pytest

from mirror_worker.commands.runner import close_within
from mirror_worker.exactly_once.positions import (
    KEEPALIVE_MAX_S, keepalive_due, keepalive_interval_s, legacy_position_record_key, position_record_key,
)
from mirror_worker.topics.admin import TopicInfo, outgrown_topics


@pytest.mark.parametrize("assigned, expected", [
    ([], set()),
    ([("a", 0), ("a", 1)], set()),
    ([("a", 2)], {"a"}),
    ([("a", 0), ("b", 5)], {"b"}),
    ([("unknown", 9)], set()),  # not mirrored yet: the next refresh creates its destination topic
])
def test_outgrown_topics_are_those_assigned_a_partition_beyond_their_known_count(assigned, expected):
    known = {"a": TopicInfo("a", 2, 1), "b": TopicInfo("b", 5, 1)}
    assert outgrown_topics(assigned, known) == expected


@pytest.mark.parametrize("retention_ms, expected", [
    (None, KEEPALIVE_MAX_S),                 # not readable: hourly, far below the 7-day default
    (7 * 24 * 3600 * 1000, KEEPALIVE_MAX_S),  # the default retention
    (3600 * 1000, 900.0),                    # a quarter of the retention when that is shorter
    (60_000, 15.0),
    (1000, 1.0),                             # never busier than once a second
])
def test_keepalive_interval_is_a_quarter_of_the_retention_at_most_an_hour(retention_ms, expected):
    assert keepalive_interval_s(retention_ms) == expected


def test_keepalive_is_due_for_owned_positions_not_committed_within_the_interval():
    held = {("t", 0): 10, ("t", 1): 20, ("t", 2): 30, ("u", 0): 5}
    committed_at = {("t", 0): 100.0, ("t", 1): 80.0}  # ("t", 2): read at assignment, never committed here
    owned = {("t", 0), ("t", 1), ("t", 2)}  # ("u", 0) belongs to another worker now
    assert keepalive_due(held, committed_at, owned, now=110.0, interval_s=15.0) == {("t", 1): 20, ("t", 2): 30}
    assert keepalive_due(held, committed_at, owned, now=90.0, interval_s=15.0) == {("t", 2): 30}


def test_position_records_are_keyed_per_destination_partition():
    keys = {position_record_key(t, p) for t in ("a.b", "a", "dc1.a") for p in (0, 1)}
    assert len(keys) == 6
    assert position_record_key("a.b", 1) == position_record_key("a.b", 1)
    assert position_record_key("a.b", 1) not in {legacy_position_record_key(a, ("a.b", 1)) for a in ("east", "")}


def test_close_within_gives_up_on_a_close_that_does_not_return():
    release = threading.Event()
    assert close_within(lambda: release.wait(30), 0.2, "m") is False
    release.set()


def test_close_within_that_gives_up_prints_where_the_close_is_stuck(capfd):
    release = threading.Event()

    def consumer_close_that_hangs():
        release.wait(30)

    assert close_within(consumer_close_that_hangs, 0.2, "m") is False
    release.set()
    err = capfd.readouterr().err
    assert "shutdown did not finish within 0s" in err
    assert "consumer_close_that_hangs" in err  # the stuck thread's stack, not only the main thread's


def test_close_within_returns_after_a_close_that_finished_and_reraises_its_error():
    closed = []
    assert close_within(lambda: closed.append(True), 5, "m") is True
    assert closed == [True]

    def broken():
        raise RuntimeError("consumer close failed")

    with pytest.raises(RuntimeError, match="consumer close failed"):
        close_within(broken, 5, "m")
