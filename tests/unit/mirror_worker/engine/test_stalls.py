"""The stall watch with in-memory fakes: records wait and the committed offset stands still -> stalled, once."""

from __future__ import annotations

import logging

from mirror_worker.engine.ledger import OffsetLedger
from mirror_worker.engine.stalls import StallWatch
from mirror_worker.metrics import MirrorMetrics


class _Consumer:
    def __init__(self, high: int) -> None:
        self.high = high

    def get_watermark_offsets(self, tp, cached=False):
        assert cached  # never a request to the broker from the loop
        return 0, self.high


class _Stream:
    def __init__(self, high: int, topic: str = "orders") -> None:
        self.alias = "east"
        self.consumer = _Consumer(high)
        self.ledger = OffsetLedger()
        self.assigned = {(topic, 0)}
        self.ledger.start((topic, 0), 5)
        self.stash: list = []


def _gauge(metrics: MirrorMetrics) -> float | None:
    return metrics.registry.get_sample_value("mirror_partition_stalled", {
        "mirror": "m", "source": "east", "topic": "orders", "partition": "0"})


def test_a_partition_is_stalled_after_the_timeout_and_flows_again_when_its_commit_moves(caplog):
    now = [0.0]
    stream, metrics = _Stream(high=9), MirrorMetrics("m")
    watch = StallWatch([stream], metrics, {"mirror": "m"}, 10.0, lambda: now[0])
    with caplog.at_level(logging.INFO, logger="mirror_worker"):
        for t in (0.0, 5.0, 9.0):
            now[0] = t
            watch.check()
        assert _gauge(metrics) is None
        for t in (10.0, 11.0, 12.0):
            now[0] = t
            watch.check()
        assert _gauge(metrics) == 1.0
        assert [r.msg for r in caplog.records].count("partition stalled") == 1
        stream.ledger.mark_committed({("orders", 0): 7})
        now[0] = 13.0
        watch.check()
    assert _gauge(metrics) is None
    assert "partition copying again" in [r.msg for r in caplog.records]


def test_nothing_waiting_halted_or_released_is_never_stalled():
    now = [0.0]
    caught_up, halted, released = _Stream(5, "caught-up"), _Stream(9, "halted"), _Stream(9)
    halted.ledger.halt(("halted", 0), 5, "refused")
    metrics = MirrorMetrics("m")
    watch = StallWatch([caught_up, halted, released], metrics, {"mirror": "m"}, 1.0, lambda: now[0])
    for t in range(0, 5):
        now[0] = float(t)
        watch.check()
        if t == 3:
            assert watch.stalled == {("east", "orders", 0)}  # the released one, still assigned
            released.assigned.clear()
    assert watch.stalled == set() and _gauge(metrics) is None


def test_many_partitions_stalled_at_once_are_one_line_each_way_and_every_one_has_its_gauge(caplog):
    """At 5,000 partitions a destination that acknowledged nothing for 30 s logged 5,000 `partition stalled` lines
    in one second (bench.width, issue 42): one line names how many, and the first few."""
    now = [0.0]
    stream, metrics = _Stream(high=9), MirrorMetrics("m")
    stream.assigned = {("orders", p) for p in range(40)}
    for p in range(40):
        stream.ledger.start(("orders", p), 5)
    watch = StallWatch([stream], metrics, {"mirror": "m"}, 10.0, lambda: now[0])
    with caplog.at_level(logging.INFO, logger="mirror_worker"):
        for t in (0.0, 10.0):
            now[0] = t
            watch.check()
        stream.ledger.mark_committed({("orders", p): 7 for p in range(40)})
        now[0] = 11.0
        watch.check()
    lines = [r for r in caplog.records if "stalled" in r.msg or "copying again" in r.msg]
    assert [r.msg for r in lines] == ["partitions stalled", "partitions copying again"]
    assert lines[0].partitions == 40 and lines[0].examples[:2] == ["orders[0]@5", "orders[1]@5"]
    assert len(lines[0].examples) == 10 and lines[1].partitions == 40
    assert len(watch.stalled) == 0


def test_records_waiting_are_counted_from_the_cached_ends_and_counting_stops_past_the_limit():
    from mirror_worker.engine.stalls import waiting_more_than

    stream = _Stream(high=9)  # orders[0]: handed over up to 5 (its start), the source ends at 9: 4 wait
    assert waiting_more_than(stream, 3) is True and waiting_more_than(stream, 4) is False
    stream.ledger.next_offsets[("orders", 0)] = 9
    assert waiting_more_than(stream, 0) is False
    stream.consumer.high = -1001  # not fetched yet: its end is not known
    assert waiting_more_than(stream, 100) is True
    stream.consumer.high = 9
    stream.stash = ["a refused record"]
    assert waiting_more_than(stream, 100) is True
