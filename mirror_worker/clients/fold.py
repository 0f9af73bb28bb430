"""Repeated client errors folded: the first of a kind logged, the ones after it counted and reported with the next
one logged, at most one a minute per kind.

A cluster nobody answers for made librdkafka report every reconnection, ~20 a second per client, each twice
(its own log line and the error callback's): hundreds of identical lines before the start-up wait ended
(issue 44), and as many each minute a broker stays down in a running worker. Folded, an outage still shows at
once (its first report) and while it lasts (one line a minute with `repeats_folded`, the reports left out
since the last line); a different error, or the same one from another cluster, is a kind of its own.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Hashable

# What changes between two reports of one failure: librdkafka's timings ("after 0ms in state CONNECT"), its own
# count of suppressed repeats, and the counts of brokers down.
_VARYING = re.compile(r"\d+ms\b|\d+ identical error\(s\) suppressed|\d+/\d+ brokers")

REPEATS_FIELD = "repeats_folded"


def kind_of(text: str) -> str:
    """`text` without the parts that vary between reports of one failure."""
    return _VARYING.sub("#", text)


class RepeatFold:
    """Which reports to log: the first of each kind, then one per `every_s` at most. Thread-safe (librdkafka's
    callbacks run in whichever thread polls the client); remembers the `kinds` most recent kinds."""

    def __init__(self, every_s: float = 60.0, clock: Callable[[], float] = time.monotonic, kinds: int = 512) -> None:
        self.every_s = every_s
        self.clock = clock
        self.kinds = kinds
        self._lock = threading.Lock()
        self._seen: dict[Hashable, list] = {}  # kind -> [when last logged, reports left out since]

    def admit(self, kind: Hashable) -> int | None:
        """None: leave this report out; else log it, with the number of reports of its kind left out before it."""
        now = self.clock()
        with self._lock:
            seen = self._seen.get(kind)
            if seen is not None and now - seen[0] < self.every_s:
                seen[1] += 1
                return None
            self._seen.pop(kind, None)  # re-inserted last: the oldest kind is the first forgotten
            self._seen[kind] = [now, 0]
            if len(self._seen) > self.kinds:
                del self._seen[next(iter(self._seen))]
            return seen[1] if seen is not None else 0


class FoldRepeats(logging.Filter):
    """A logger's repeated lines folded by a RepeatFold (the same logger, level and text, timings aside)."""

    def __init__(self, fold: RepeatFold | None = None) -> None:
        super().__init__()
        self.fold = fold or RepeatFold()

    def filter(self, record: logging.LogRecord) -> bool:
        folded = self.fold.admit((record.name, record.levelno, kind_of(record.getMessage())))
        if folded is None:
            return False
        if folded:
            setattr(record, REPEATS_FIELD, folded)
        return True
