"""bounded_call.call_within: a call that may never return is given up past its bound, and released later."""

from __future__ import annotations

import threading

import pytest

from mirror_worker.exactly_once.bounded_call import StuckCall, call_within


def test_a_call_that_returns_in_time_raises_what_it_raised():
    events: list[str] = []
    call_within(lambda: events.append("called"), 5, lambda: events.append("given up"),
                lambda: events.append("late"))
    assert events == ["called"]

    def failing():
        raise ValueError("broker said no")

    with pytest.raises(ValueError, match="broker said no"):
        call_within(failing, 5, lambda: events.append("given up"), lambda: events.append("late"))
    assert events == ["called"]


def test_a_hung_call_is_given_up_and_released_when_it_returns_after_all():
    release, returned = threading.Event(), threading.Event()
    events: list[str] = []

    def hangs():
        release.wait(10)

    def late():
        events.append("late")
        returned.set()

    with pytest.raises(StuckCall):
        call_within(hangs, 0.2, lambda: events.append("given up"), late)
    assert events == ["given up"]
    release.set()
    assert returned.wait(5), "the late return was not reported"
    assert events == ["given up", "late"]
