"""At-least-once, a record not delivered in time is resent from its run: what the producers still queue behind it is
purged once, at the next round of a flush, so that none of its partition's later records lands before the resend."""

from __future__ import annotations

from mirror_worker.engine.commits import CommitCycle
from mirror_worker.engine.run_state import RunState
from mirror_worker.metrics import MirrorMetrics


class QueuedProducer:
    """Holds `queued` records until purged (a destination that acknowledges nothing); each flush(t) takes t seconds."""

    def __init__(self, queued: int) -> None:
        self.queued = queued
        self.purges: list[dict] = []
        self.now = 0.0

    def flush(self, timeout: float) -> int:
        self.now += timeout
        return self.queued

    def purge(self, **how) -> None:
        self.purges.append(how)
        self.queued = 0


def _cycle(producer: QueuedProducer) -> CommitCycle:
    clock = lambda: producer.now  # noqa: E731
    return CommitCycle([], lambda: [producer], MirrorMetrics("m"), {"mirror": "m"}, RunState(5.0, clock), clock,
                       exactly_once=False)


def test_a_requested_purge_empties_the_queues_once_and_keeps_what_is_in_flight():
    producer = QueuedProducer(queued=3)
    cycle = _cycle(producer)
    cycle.request_purge()
    assert cycle.flush(10.0) is True
    assert producer.purges == [{"in_queue": True, "in_flight": False, "blocking": False}]
    producer.queued = 2
    assert cycle.flush(1.0) is False  # no purge asked this time: the queue is waited on, never purged
    assert len(producer.purges) == 1


def test_a_flush_that_completes_forgets_a_purge_asked_before_it():
    producer = QueuedProducer(queued=0)
    cycle = _cycle(producer)
    cycle.request_purge()
    assert cycle.flush(10.0) is True and producer.purges == []
    producer.queued = 2
    assert cycle.flush(1.0) is False and producer.purges == []
