"""Whether a worker keeps running: a stop request (signal), a fatal error, the shutdown deadline."""

from __future__ import annotations

import threading
from collections.abc import Callable


class RunState:
    def __init__(self, shutdown_timeout_s: float, clock: Callable[[], float]) -> None:
        self.shutdown_timeout_s = shutdown_timeout_s
        self.clock = clock
        self.stop_event = threading.Event()
        self.fatal: str | None = None
        self.closing_deadline: float | None = None

    def fail(self, reason: str) -> None:
        """Stop the loop; the worker exits with `reason` (nothing more is committed)."""
        if self.fatal is None:  # the first reason is the cause; later ones follow from it
            self.fatal = reason

    @property
    def running(self) -> bool:
        return not self.stop_event.is_set() and self.fatal is None

    def request_stop(self) -> float:
        """Stop (SIGTERM/SIGINT) and start the shutdown clock, once: every wait from now on (a flush or commit
        under way, close()'s final commit, a rebalance callback) ends by this one deadline, which it returns."""
        self.stop_event.set()
        if self.closing_deadline is None:
            self.closing_deadline = self.clock() + self.shutdown_timeout_s
        return self.closing_deadline

    def close(self) -> float:
        """The shutdown: the stop request's deadline (the clock starts now if nothing asked to stop)."""
        return self.request_stop()

    def shutdown_deadline(self) -> float | None:
        """While stopping: when waiting must end; None while running. A stop set on stop_event directly
        starts the clock at the first look."""
        if self.closing_deadline is not None:
            return self.closing_deadline
        return self.request_stop() if self.stop_event.is_set() else None
