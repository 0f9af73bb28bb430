"""The lag rules from one table: every case lists the expected result of every rule (Burrow's habit)."""

from __future__ import annotations

import pytest

from mirror_airflow.lag.rules import (
    PARTITION_RULES, Heartbeat, Limits, Sample, Status, covers, evaluate, evaluate_partition, latency_reason,
    merge_windows, newest_heartbeat, worker_clock_reasons,
)

NOW = 1000.0
LIMITS = Limits(allowed_lag=5, stop_after_s=120, max_lag_records=1000)


def window(*points) -> list[Sample]:
    """points: (seconds before NOW, committed, high[, low])."""
    return [Sample(NOW - ago, committed, high, *rest) for ago, committed, high, *rest in points]


W, RW, LG, ST, SP = Status.WARN, Status.REWIND, Status.LAG, Status.STALL, Status.STOP
# name: (window, rules expected to fire, overall status of the partition)
CASES = {
    "caught up, idle": (window((300, 50, 50), (150, 50, 50), (0, 50, 50)), set(), Status.OK),
    "moving, lag shrinks": (window((300, 10, 100), (150, 60, 120), (0, 118, 120)), set(), Status.OK),
    "moving, lag within allowed, growing": (window((300, 10, 11), (150, 20, 22), (0, 30, 33)), set(), Status.OK),
    "lag grows while committing": (window((300, 10, 20), (150, 30, 50), (0, 40, 90)), {W}, W),
    "lag flat but not zero while committing": (window((300, 10, 30), (150, 30, 50), (0, 50, 70)), {W}, W),
    "one dip breaks the warning": (window((300, 10, 30), (150, 45, 50), (0, 50, 90)), set(), Status.OK),
    "offset went backwards": (window((300, 40, 50), (150, 20, 50), (0, 45, 50)), {RW}, RW),
    "lag above max records": (window((300, 0, 900), (150, 500, 1400), (0, 1000, 2100)), {W, LG}, LG),
    "stalled: offset fixed, lag above allowed, not yet stop-after": (
        window((100, 40, 50), (50, 40, 60), (0, 40, 60)), {W, ST}, ST),
    "stopped: offset fixed with lag for longer than stop-after": (
        window((300, 40, 50), (150, 40, 50), (0, 40, 50)), {W, ST, SP}, SP),
    "stopped below allowed lag: STOP but not STALL": (
        window((300, 40, 42), (150, 40, 42), (0, 40, 42)), {SP}, SP),
    "offset fixed, lag came only now: not stopped": (
        window((300, 40, 40), (150, 40, 40), (0, 40, 48)), set(), Status.OK),
    "never committed, records waiting": (window((300, None, 30), (150, None, 30), (0, None, 30)), {W, ST, SP}, SP),
    "never committed, empty log": (window((300, None, 0), (0, None, 0)), set(), Status.OK),
    "committed below log start counts from log start": (window((300, 5, 100, 100), (0, 5, 100, 100)), set(), Status.OK),
    "single sample with lag: too little history": (window((0, 40, 60)), set(), Status.OK),
}


@pytest.mark.parametrize("name", list(CASES))
def test_every_rule_on_every_case(name):
    samples, expected_fired, expected_status = CASES[name]
    fired = {status for status, rule in PARTITION_RULES.items() if rule(samples, NOW, LIMITS)}
    assert fired == expected_fired
    status, reasons = evaluate_partition(samples, NOW, LIMITS)
    assert status is expected_status
    assert len(reasons) == len(expected_fired)


def beat(ago: float, *, offset: int = 0, worker_ahead: float = 0.0, broker: bool = True, worker: str = "w:1"):
    """A heartbeat appended `ago` s before NOW by a worker whose clock is `worker_ahead` s off.
    broker: the topic is LogAppendTime (the record carries the broker's append time)."""
    return Heartbeat(worker, offset, NOW - ago + worker_ahead, NOW - ago if broker else None)


LA, SK = Status.LATENCY, Status.SKEW
LATENCY_CASES = [
    # (each worker's newest heartbeat, max latency, status fired or None)
    ([beat(5)], 60, None),
    ([beat(61)], 60, LA),
    ([], 60, LA),
    ([], None, None),  # no latency limit configured
    ([beat(3600)], None, None),
    # The broker's append time decides: the worker's clock is not used for the age.
    ([beat(5, worker_ahead=-600)], 60, None),  # worker 10 min behind, mirror alive
    ([beat(400, worker_ahead=3600)], 60, LA),  # worker an hour ahead, dead for 400 s
    # A CreateTime topic: the worker's stamp is all there is; from the future beyond the bound it cannot be judged.
    ([beat(400, worker_ahead=3600, broker=False)], 60, SK),
    ([beat(5, worker_ahead=30, broker=False)], 60, None),  # within the bound: fresh
    ([beat(5, worker_ahead=-600, broker=False)], 60, LA),  # behind: stale, as far as the worker's stamp tells
    ([beat(0, worker_ahead=3600)], 60, None),  # a worker ahead but the broker's stamp is now
    # The broker's own clock ahead of the sensor's: SKEW too.
    ([Heartbeat("w:1", 0, NOW + 3600, NOW + 3600)], 60, SK),
    # Newest by offset, not by stamp: worker b (correct clock, offset 7) wrote after worker a (from the future).
    ([beat(700, offset=3, worker_ahead=3600, broker=False, worker="a:1"),
      beat(400, offset=7, broker=False, worker="b:1")], 60, LA),
]


@pytest.mark.parametrize("beats,max_latency,fires", LATENCY_CASES)
def test_latency_rule(beats, max_latency, fires):
    fired = latency_reason(beats, NOW, Limits(max_latency_s=max_latency, max_clock_skew_s=60))
    assert (fired and fired[0]) == fires
    assert fires is not SK or "ahead of the sensor's clock" in fired[1]


def test_newest_heartbeat_is_the_last_written():
    assert newest_heartbeat([]) is None
    honest, future = beat(10, offset=9), beat(20, offset=4, worker_ahead=3600)
    assert newest_heartbeat([future, honest]) is honest


def test_worker_clock_skew_is_a_warning_naming_the_worker():
    heartbeats = {"east": [beat(5, offset=1, worker_ahead=-600, worker="a:1"), beat(5, offset=2, worker="b:1")],
                  "west": [beat(5, offset=3, worker_ahead=120, worker="c:1"),
                           beat(5, offset=4, broker=False, worker="d:1")]}
    reasons = worker_clock_reasons(heartbeats, Limits(max_clock_skew_s=60))
    assert sorted(reasons) == ["a:1", "c:1"]  # d:1 has no broker stamp to compare with
    assert reasons["a:1"].startswith("clock 600s behind") and reasons["c:1"].startswith("clock 120s ahead of")
    result = evaluate({}, heartbeats, NOW, Limits(max_latency_s=60, max_clock_skew_s=60))
    assert result.status is Status.WARN and not result.status.failing
    assert [f.where for f in result.findings] == ["worker a:1", "worker c:1"]


def test_evaluate_reports_the_worst_status_and_worst_partitions_first():
    windows = {
        ("src", "orders", 0): CASES["lag grows while committing"][0],
        ("src", "orders", 1): CASES["stopped: offset fixed with lag for longer than stop-after"][0],
        ("src", "orders", 2): CASES["caught up, idle"][0],
    }
    result = evaluate(windows, {"src": [beat(400)]}, NOW, Limits(**{**LIMITS.__dict__, "max_latency_s": 60}))
    assert result.status is Status.STOP and result.status.failing
    assert [(f.where, f.status) for f in result.findings] == [
        ("src/orders/1", Status.STOP), ("src", Status.LATENCY), ("src/orders/0", Status.WARN),
    ]
    assert result.summary(limit=2).startswith("STOP: src/orders/1 STOP: no commit for 300s")
    assert result.summary(limit=2).endswith("(+1 more)")
    healthy = evaluate({("src", "orders", 2): windows[("src", "orders", 2)]}, {"src": [beat(1)]}, NOW, LIMITS)
    assert healthy.status is Status.OK and not healthy.status.failing and healthy.summary() == "OK"
    assert not Status.WARN.failing


def test_sliding_window_keeps_one_sample_before_the_window_and_drops_gone_partitions():
    key, gone = ("s", "t", 0), ("s", "old", 0)
    windows = {key: window((700, 1, 1), (400, 2, 2), (100, 3, 3)), gone: window((500, 1, 1))}
    merged = merge_windows(windows, [(key, Sample(NOW, 4, 4))], NOW, window_s=300)
    assert [s.committed for s in merged[key]] == [2, 3, 4]
    assert gone not in merged
    assert covers(merged, NOW, 300) and not covers(merged, NOW, 500)
    fresh = merge_windows({}, [(key, Sample(NOW, 1, 1))], NOW, window_s=300)
    assert not covers(fresh, NOW, 300)
    # After a gap of more than two windows the old samples do not count: the window fills again.
    after_gap = merge_windows({key: window((900, 1, 1))}, [(key, Sample(NOW, 2, 2))], NOW, window_s=300)
    assert [s.committed for s in after_gap[key]] == [2] and not covers(after_gap, NOW, 300)
