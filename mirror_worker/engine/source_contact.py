"""A source cluster that does not answer: never silent (a `source unreachable` warning and `mirror_errors`).

With every source broker out of reach (a WAN link down, a black hole that swallows packets) the worker has
nothing to copy, and while a commit to the source hangs its loop is blocked: nothing in the loop notices, and
librdkafka reports nothing until its requests time out, if at all (a 2-minute black hole: not one line). A
thread of its own asks each source for its metadata every `every_s`; once one has not answered for `after_s`
it logs `source unreachable` (again at most every `repeat_s` while it lasts) and counts
mirror_errors{kind="source_unreachable"} per line; `source reachable again` when it answers. The worker keeps
running all along: its clients reconnect by themselves and the mirror resumes from its positions.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from confluent_kafka import KafkaException

from mirror_worker.clients.callbacks import error_text
from mirror_worker.metrics import MirrorMetrics

log = logging.getLogger("mirror_worker")


class SourceContact(threading.Thread):
    """`sources`: (alias, client with list_topics) pairs; `note()` holds the logic, `run()` only probes."""

    def __init__(self, sources: list[tuple[str, object]], metrics: MirrorMetrics, label: dict, after_s: float,
                 every_s: float = 5.0, repeat_s: float = 60.0, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(name="source-contact", daemon=True)
        self.sources, self.metrics, self.label = sources, metrics, label
        self.after_s, self.every_s, self.repeat_s, self.clock = after_s, every_s, repeat_s, clock
        self._failing: dict[str, float] = {}  # alias -> when it first did not answer
        self._warned: dict[str, float] = {}  # alias -> when the last warning was logged
        self._stopping = threading.Event()

    def run(self) -> None:
        while not self._stopping.wait(self.every_s):
            for alias, client in self.sources:
                asked_at = self.clock()
                try:
                    client.list_topics(timeout=self.every_s)
                    error = None
                except KafkaException as exc:
                    error = error_text(exc)
                if self._stopping.is_set():
                    return
                self.note(alias, error, asked_at)

    def note(self, alias: str, error: str | None, asked_at: float) -> None:
        """The answer to the question asked at `asked_at`: None if the source answered, else the error."""
        now = self.clock()
        if error is None:
            since = self._failing.pop(alias, None)
            if self._warned.pop(alias, None) is not None:
                log.info("source reachable again", extra={
                    **self.label, "source": alias, "unreachable_s": round(asked_at - since, 1)})
            return
        since = self._failing.setdefault(alias, asked_at)
        last = self._warned.get(alias)
        if now - since >= self.after_s and (last is None or now - last >= self.repeat_s):
            self._warned[alias] = now
            self.metrics.errors.labels(kind="source_unreachable", **self.label).inc()
            log.warning("source unreachable", extra={
                **self.label, "source": alias, "seconds": round(now - since, 1), "error": error,
                "what": "no copying from this source: the worker keeps retrying and resumes from its committed "
                        "positions when the source answers again"})

    def stop(self) -> None:
        self._stopping.set()
