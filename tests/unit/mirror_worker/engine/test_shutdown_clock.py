"""One shutdown clock, started by the stop request: a SIGTERM that arrives while the main loop's flush waits on
the destination must not give that flush shutdown-timeout-s and then close() shutdown-timeout-s more.

Before, the loop's flush took its own deadline (now + shutdown_timeout_s, when it first saw the stop) and
RunState.close() started a fresh one, so a stop could take twice the bound before close_within's grace.
"""

from __future__ import annotations

from types import SimpleNamespace

from mirror_worker.engine.commits import CommitCycle
from mirror_worker.engine.run_state import RunState
from mirror_worker.metrics import MirrorMetrics


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class SilentProducer:
    """A destination that never acknowledges: each flush(t) returns 1 record still in flight after t seconds."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock

    def flush(self, timeout: float) -> int:
        self.clock.now += timeout
        return 1


def test_the_deadline_is_the_stop_requests_and_close_keeps_it():
    clock = Clock()
    state = RunState(25.0, clock)
    clock.now = 100.0
    assert state.request_stop() == 125.0
    clock.now = 120.0
    assert state.shutdown_deadline() == 125.0
    assert state.close() == 125.0  # not 145: the clock started at the stop request


def test_a_stop_seen_first_by_a_wait_starts_the_clock_there_once():
    clock = Clock()
    state = RunState(25.0, clock)
    state.stop_event.set()  # set directly (as a test or a parent's stop may): the first look starts the clock
    clock.now = 10.0
    assert state.shutdown_deadline() == 35.0
    clock.now = 30.0
    assert state.shutdown_deadline() == 35.0
    assert state.close() == 35.0


def test_a_flush_under_way_at_the_stop_and_the_close_after_it_share_one_bound():
    clock = Clock()
    state = RunState(25.0, clock)
    producer = SilentProducer(clock)
    stream = SimpleNamespace(alias="src", assigned=set(), pending={}, interrupted=True, stash=[],
                             ledger=SimpleNamespace(checkpoint=dict, committable=lambda c: {}, resends=dict))
    cycle = CommitCycle([stream], lambda: [producer], MirrorMetrics("m"), {"mirror": "m"}, state, clock,
                        exactly_once=False)
    clock.now = 50.0
    state.stop_event.set()  # SIGTERM while the loop is about to flush (the signal handler's whole act before)
    assert cycle.flush(None) is False  # the loop's flush gives up at the stop's deadline...
    assert 75.0 <= clock.now < 76.0  # (its first look at the stop, after one 0.5 s wait, started the clock)
    assert state.close() < 76.0  # ...and close() has what is left of the same bound, not 25 s more
