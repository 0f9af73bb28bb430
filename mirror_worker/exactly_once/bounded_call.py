"""A blocking client call that may never return, run in a thread of its own and given up past a bound.

librdkafka 2.16's send_offsets_to_transaction was seen blocking without end after a kill -9 and restart of
the destination broker (its coordinator request never times out: librdkafka issues 5456 and 5511): the
worker's main loop must not hang with it. Only that call is bounded this way: the others honour their
timeout, and a given-up abort or init could still bump the producer epoch later and fence its replacement.
"""

from __future__ import annotations

import threading
from typing import Callable

# How long past its own timeout a bounded call may block before its client is given up.
STUCK_AFTER_S = 10.0


class StuckCall(Exception):
    """The call did not return within its bound; its client must not be called again."""


def call_within(call: Callable[[], object], bound_s: float, on_given_up: Callable[[], None],
                on_returned_late: Callable[[], None]) -> None:
    """call() in a daemon thread; what it raises is raised here. Past `bound_s`: on_given_up() and StuckCall;
    on_returned_late() runs in that thread once the call returns after all (never concurrently with
    on_given_up: both run under one lock)."""
    outcome: list[BaseException | None] = []
    given_up: list[bool] = []
    lock = threading.Lock()

    def run() -> None:
        try:
            call()
            result = None
        except BaseException as exc:  # noqa: BLE001 - handed to the caller
            result = exc
        with lock:
            outcome.append(result)
            if given_up:
                on_returned_late()

    thread = threading.Thread(target=run, name="bounded-call", daemon=True)
    thread.start()
    thread.join(bound_s)
    with lock:
        if not outcome:
            given_up.append(True)
            on_given_up()
            raise StuckCall()
    if outcome[0] is not None:
        raise outcome[0]
