"""Lag samples for the overview at breadth: every stale mirror is measured on a bounded pool of threads, and a
page waits for them only up to its budget.

Each measurement opens clients to the mirror's clusters and waits on brokers (tens to hundreds of ms each on a
busy host), so 100 mirrors measured one after the other took longer than anyone waits for a page. Here they run
`threads` at a time; one that has not finished when the page's budget is spent goes on in the background and
writes its samples to the store, and the next view (the page refreshes itself) shows them; one that failed in
the background is measured again by the next view, which says why when it fails again. A mirror is never
measured twice at once: a view during a measurement waits for that one instead of starting another.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor, wait

from mirror_airflow.dashboard.store import HistoryStore

STILL_MEASURING = "lag still being measured (slower than the page waits): shown from the last sample"


class Sampler:
    """Measures mirrors into `store` through `measure(spec)`, at most `threads` at once."""

    def __init__(self, measure: Callable, store: HistoryStore, threads: int = 8) -> None:
        if threads < 1:
            raise ValueError(f"threads must be at least 1, got {threads}")
        self.measure = measure
        self.store = store
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="mirror-dashboard-sampler")
        self._lock = threading.Lock()
        self._running: dict[str, Future] = {}

    def _take(self, spec) -> None:
        self.store.add_samples(spec.name, self.measure(spec))

    def _done(self, name: str, future: Future) -> None:
        with self._lock:
            if self._running.get(name) is future:
                del self._running[name]

    def _start(self, spec) -> Future:
        with self._lock:
            future = self._running.get(spec.name)
            if future is not None:
                return future
            future = self._running[spec.name] = self._pool.submit(self._take, spec)
        # Outside the lock: a future that is already done runs the callback at once, in this thread.
        future.add_done_callback(lambda f, name=spec.name: self._done(name, f))
        return future

    def sample(self, specs: Iterable, budget_s: float | None) -> dict[str, str]:
        """Measure each of `specs` (one already being measured is waited for, not measured again), waiting at
        most `budget_s` (None: until all are done). Returns a note per mirror whose lag is not current."""
        futures = {spec.name: self._start(spec) for spec in specs}
        wait(futures.values(), timeout=budget_s)
        notes = {}
        for name, future in futures.items():
            if not future.done():
                notes[name] = STILL_MEASURING
            elif future.exception() is not None:
                notes[name] = f"lag not measured now: {future.exception()}"
        return notes

    def wait_idle(self, timeout: float) -> bool:
        """Wait until no measurement runs (tests, shutdown); False when some still run after `timeout`."""
        with self._lock:
            running = list(self._running.values())
        done, not_done = wait(running, timeout=timeout)
        return not not_done
