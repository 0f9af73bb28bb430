"""The dashboard's data gathering: the bounded store, the state table, rates, and the assembly of a
mirror's view from fake edges (no servers). The real edges' parsing (metrics text, task logs, reports,
the spec) is tested on files and strings."""

from __future__ import annotations

import json

import pytest

from mirror_airflow.dashboard.gather import (
    Dashboard, Edges, LagRun, MirrorSpec, WorkerStatus, cluster_faults, judge, mirror_state, no_verdict_why, step_points,
    throughput_steps,
)
from mirror_airflow.dashboard.sources import halt_lines, halt_reasons, latest_report, parse_metrics, spec_mirrors
from mirror_airflow.dashboard.store import HistoryStore, Verdict
from mirror_airflow.lag.rules import Evaluation, Finding, Heartbeat, Limits, Sample, Status

KEY_A, KEY_B = ("east", "orders", 0), ("east", "orders", 1)


class Clock:
    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def spec(name="orders", config=object(), window_s=600.0, metrics_port=None, report_dir="/nowhere") -> MirrorSpec:
    return MirrorSpec(name, config, None if config else "bad key", Limits(stop_after_s=300), window_s,
                      metrics_port, report_dir)


# --- store --------------------------------------------------------------------------------------
def test_store_keeps_samples_per_partition_oldest_first_and_bounded(tmp_path):
    clock = Clock()
    store = HistoryStore(tmp_path / "h.sqlite", keep_s=100, max_samples=6, clock=clock)
    for i in range(4):
        store.add_samples("orders", [(KEY_A, Sample(clock.now - 30 + i, i, 10)), (KEY_B, Sample(clock.now - 30 + i, 0, 3))])
    store.add_samples("other", [(KEY_A, Sample(clock.now, 1, 1))])
    kept = store.samples("orders")
    assert store.count("samples", "orders") == 6  # at most max_samples rows per mirror, newest kept
    assert [s.committed for s in kept[KEY_A]] == [1, 2, 3]
    assert [s.time for s in kept[KEY_B]] == sorted(s.time for s in kept[KEY_B])
    assert store.newest_sample_time("orders") == clock.now - 27
    assert store.count("samples", "other") == 1  # another mirror's rows are not trimmed by this one's cap
    clock.now += 200  # past keep_s: the next write drops everything older
    store.add_samples("orders", [(KEY_A, Sample(clock.now, 9, 9))])
    assert store.count("samples", "orders") == 1


def test_store_verdicts_newest_first_and_capped(tmp_path):
    clock = Clock()
    store = HistoryStore(tmp_path / "h.sqlite", max_verdicts=3, clock=clock)
    for i in range(5):
        store.add_verdict("orders", Verdict(clock.now + i, "OK" if i % 2 else "STOP", f"v{i}", i, "lag sensor"))
    assert [v.summary for v in store.verdicts("orders")] == ["v4", "v3", "v2"]
    assert store.verdicts("nobody") == []


# --- pure pieces --------------------------------------------------------------------------------
def test_throughput_steps_compare_only_rounds_of_the_same_partitions():
    history = {KEY_A: [Sample(0, 0, 9), Sample(10, 100, 900), Sample(20, 300, 900)],
               KEY_B: [Sample(10, 0, 9), Sample(20, 100, 900)]}
    assert throughput_steps(history) == [(10, 20, pytest.approx(30.0))]  # (300+100 - 100+0) / 10
    # B: from the log start 20 (no commit yet) to 30.
    assert throughput_steps({KEY_B: [Sample(0, None, 50, 20), Sample(5, 30, 50, 20)]}) == [(0, 5, pytest.approx(2.0))]
    assert throughput_steps({KEY_A: [Sample(0, 1, 1)]}) == []


def test_a_rate_over_a_long_gap_is_drawn_across_the_gap_not_as_a_spike_at_its_end():
    """The issue's chart: samples every 10 s, then none for 6 minutes, then one: before, one point at the end of
    the gap carried the 6 minutes' average, drawn as a spike at the wrong time."""
    history = {KEY_A: [Sample(0, 0, 0), Sample(10, 100, 100), Sample(370, 460, 460)]}
    steps = throughput_steps(history)
    assert steps == [(0, 10, pytest.approx(10.0)), (10, 370, pytest.approx(1.0))]
    assert step_points(steps) == [(0, 10.0), (10, 10.0), (10, 1.0), (370, 1.0)]


def evaluation(status: Status) -> Evaluation:
    return Evaluation(status, (Finding("east/orders/0", status, ("because",), 7),))


@pytest.mark.parametrize("paused, worker, evaluation_status, verdict, expected", [
    (False, None, None, None, "running"),
    (True, None, None, None, "paused"),
    (None, None, None, None, "unknown"),
    (True, WorkerStatus(halted=(KEY_A,)), None, None, "halted"),
    (False, WorkerStatus(conflicts=(("east", "orders"),)), None, None, "halted"),
    (False, WorkerStatus(error="refused"), None, None, "running"),
    (False, WorkerStatus(not_mirrored=(("east", "orders"),)), None, None, "halted"),
    (False, WorkerStatus(stalled=(KEY_A,)), Status.STALL, None, "stalled"),
    (True, WorkerStatus(selects_nothing=("east",)), None, None, "stalled"),
    (False, WorkerStatus(halted=(KEY_A,), stalled=(KEY_A,)), None, None, "halted"),
    (False, None, Status.STALL, None, "lagging"),
    (False, None, Status.WARN, None, "running"),  # WARN does not fail the check
    (True, None, Status.STOP, None, "paused"),  # paused explains the stop
    (False, None, None, Verdict(990, "LAG", "lag 9 > max 1", 9, "lag sensor"), "lagging"),
    (False, None, None, Verdict(990, "OK", "OK", 0, "lag sensor"), "running"),
    (False, None, None, Verdict(100, "STOP", "old", 9, "lag sensor"), "running"),  # older than the window
])
def test_mirror_state_table(paused, worker, evaluation_status, verdict, expected):
    state, why = mirror_state(paused=paused, worker=worker,
                              evaluation=evaluation(evaluation_status) if evaluation_status else None,
                              latest_verdict=verdict, window_s=600, now=1000)
    assert state == expected
    assert why


def test_judge_waits_until_the_history_covers_the_window_then_applies_the_rules():
    now = 10_000.0
    short = {KEY_A: [Sample(now - 120, 5, 50), Sample(now, 5, 60)]}
    result, why = judge(short, spec(window_s=600), now)
    assert result is None and "need 10 min" in why and "2.0 min" in why
    stalled = {KEY_A: [Sample(now - 700, 5, 50), Sample(now - 300, 5, 55), Sample(now, 5, 60)]}
    result, why = judge(stalled, spec(window_s=600), now)
    assert why is None and result.status is Status.STOP
    assert judge({}, spec(), now) == (None, "no lag samples in the window yet")


# --- assembly with fake edges -------------------------------------------------------------------
class FakeEdges:
    def __init__(self, specs, paused=None, worker=None):
        self.specs, self.paused_map, self.worker_status = specs, paused or {}, worker
        self.ends = {KEY_A: 10, KEY_B: 4}
        self.committed = {KEY_A: 10, KEY_B: 4}
        self.measured = 0
        self.fail = None

    def measure(self, spec_):
        self.measured += 1
        if self.fail:
            raise RuntimeError(self.fail)
        return [(k, Sample(self.clock(), self.committed[k], self.ends[k])) for k in self.ends]

    def edges(self, clock):
        self.clock = clock
        return Edges(mirrors=lambda: self.specs, paused=lambda ids: {d: self.paused_map[d] for d in ids if d in self.paused_map},
                     measure=self.measure, worker=lambda s: self.worker_status,
                     halt_reasons=lambda s: {("orders", 1): "record too large"}, report=lambda s: None)


def test_dashboard_samples_on_view_at_most_every_interval_and_sees_lag_grow(tmp_path):
    clock = Clock()
    fake = FakeEdges([spec()], paused={"mirror__orders": False})
    board = Dashboard(fake.edges(clock), HistoryStore(tmp_path / "h.sqlite", clock=clock), min_interval_s=10, clock=clock)
    view = board.mirror("orders")
    assert (view.state, view.total_lag, view.records_per_s) == ("running", 0, None)
    clock.now += 5
    board.overview()
    assert fake.measured == 1  # the newest sample is younger than min_interval_s
    # The worker stops; 40 records arrive on partition 0 and the DAG gets paused.
    clock.now += 10
    fake.ends[KEY_A] += 40
    fake.paused_map["mirror__orders"] = True
    view = board.mirror("orders")
    assert fake.measured == 2
    assert (view.state, view.total_lag, view.records_per_s) == ("paused", 40, 0.0)
    assert [p["lag"] for p in view.partitions] == [40, 0]
    assert view.history["east/orders/0"][-1][1] == 40 and len(view.history["east/orders/0"]) == 2
    assert "metrics-port" in " ".join(view.notes)  # said, not hidden
    assert view.worker_produced is None
    assert view.verdicts == [] and view.report is None


def test_dashboard_halted_partitions_carry_the_logged_reason(tmp_path):
    clock = Clock()
    worker = WorkerStatus(halted=(("east", "orders", 1),), records_produced=12)
    fake = FakeEdges([spec(metrics_port=9400)], paused={"mirror__orders": False}, worker=worker)
    board = Dashboard(fake.edges(clock), HistoryStore(tmp_path / "h.sqlite", clock=clock), clock=clock)
    view = board.mirror("orders")
    assert view.state == "halted" and view.worker_produced == 12
    assert view.halted == [{"source": "east", "topic": "orders", "partition": 1, "reason": "record too large"}]
    overview = board.overview()
    assert overview[0].halted == [] and overview[0].state == "halted"  # details only on the mirror's page


def test_dashboard_reports_measurement_errors_and_invalid_entries_honestly(tmp_path):
    clock = Clock()
    fake = FakeEdges([spec(), spec("broken", config=None)], paused={"mirror__orders": False})
    fake.fail = "source unreachable"
    board = Dashboard(fake.edges(clock), HistoryStore(tmp_path / "h.sqlite", clock=clock), clock=clock)
    views = {v.name: v for v in board.overview()}
    assert views["orders"].total_lag is None and views["orders"].partitions == []
    assert any("source unreachable" in n for n in views["orders"].notes)
    assert views["broken"].state == "unknown" and "bad key" in views["broken"].state_reason
    fake.worker_status = WorkerStatus(error="http://127.0.0.1:1/metrics: ConnectionError (is the worker running?)")
    clock.now += 60
    view = board.mirror("orders")
    assert view.state == "running" and view.worker_produced is None
    assert any("worker metrics not readable" in n and "ConnectionError" in n for n in view.notes)
    assert board.mirror("nobody") is None


# --- the real edges' parsing --------------------------------------------------------------------
METRICS = """\
# TYPE mirror_partition_halted gauge
mirror_partition_halted{mirror="orders",source="east",topic="orders",partition="2"} 1.0
mirror_partition_halted{mirror="orders",source="east",topic="orders",partition="0"} 0.0
mirror_partition_halted{mirror="other",source="east",topic="x",partition="0"} 1.0
# TYPE mirror_schema_conflict gauge
mirror_schema_conflict{mirror="orders",source="east",topic="payments"} 1.0
# TYPE mirror_partition_stalled gauge
mirror_partition_stalled{mirror="orders",source="east",topic="orders",partition="1"} 1.0
# TYPE mirror_topic_not_mirrored gauge
mirror_topic_not_mirrored{mirror="orders",source="east",topic="a-long-name"} 1.0
# TYPE mirror_selects_no_topic gauge
mirror_selects_no_topic{mirror="orders",source="west"} 1.0
mirror_selects_no_topic{mirror="orders",source="east"} 0.0
# TYPE mirror_records_produced counter
mirror_records_produced_total{mirror="orders",source="east",topic="orders"} 40.0
mirror_records_produced_total{mirror="orders",source="east",topic="payments"} 2.0
# TYPE mirror_destination_brokers_down gauge
mirror_destination_brokers_down{mirror="orders"} 1.0
mirror_destination_brokers_down{mirror="other"} 2.0
# TYPE mirror_source_brokers_down gauge
mirror_source_brokers_down{mirror="orders",source="east"} 0.0
# TYPE mirror_destination_partitions_without_leader gauge
mirror_destination_partitions_without_leader{mirror="orders"} 2.0
# TYPE mirror_source_partitions_without_leader gauge
mirror_source_partitions_without_leader{mirror="orders",source="west"} 3.0
# TYPE mirror_delivery_retries counter
mirror_delivery_retries_total{mirror="orders"} 240.0
"""


def test_parse_metrics_keeps_this_mirrors_halts_and_conflicts():
    status = parse_metrics(METRICS, "orders")
    assert status.halted == (("east", "orders", 2),)
    assert status.conflicts == (("east", "payments"),)
    assert status.records_produced == 42.0
    assert status.stalled == (("east", "orders", 1),)
    assert status.not_mirrored == (("east", "a-long-name"),)
    assert status.selects_nothing == ("west",)
    assert status.brokers_down == (("destination", 1),)
    assert status.partitions_without_leader == (("destination", 2), ("west", 3))
    assert status.delivery_retries == 240.0
    assert cluster_faults(status) == [
        "destination: 1 broker(s) the worker needs cannot be reached; 2 partition(s) without a reachable leader",
        "west: 3 partition(s) without a reachable leader"]
    assert cluster_faults(parse_metrics(METRICS, "nobody")) == []


def test_halt_reasons_from_the_newest_run_worker_logs(tmp_path):
    def worker_line(entry: dict) -> str:
        return json.dumps({"event": "worker: " + json.dumps(entry), "level": "info"})

    folder = tmp_path / "dag_id=mirror__orders" / "run_id=r1" / "task_id=run_worker"
    folder.mkdir(parents=True)
    (folder / "attempt=1.log").write_text("\n".join([
        worker_line({"msg": "records mirrored", "topic": "orders"}),
        worker_line({"msg": "partition halted", "topic": "orders", "partition": 2, "offset": 7,
                     "reason": "destination refused: MSG_SIZE_TOO_LARGE"}),
        'plain text worker: {"msg": "schema conflict: topic not mirrored", "topic": "payments", "error": "subject differs"}',
        worker_line({"msg": "partition halted", "topic": "payments", "partition": 0, "reason": "subject differs"}),
    ]))
    assert halt_lines((folder / "attempt=1.log").read_text())[("orders", 2)] == "destination refused: MSG_SIZE_TOO_LARGE"
    reasons = halt_reasons(spec(), logs_dir=tmp_path)
    assert reasons == {("orders", 2): "destination refused: MSG_SIZE_TOO_LARGE", ("payments", 0): "subject differs"}
    assert halt_reasons(spec("nobody"), logs_dir=tmp_path) == {}


def test_latest_report_is_the_newest_readable_check(tmp_path):
    folder = tmp_path / "orders"
    folder.mkdir()
    assert latest_report(spec(report_dir=str(tmp_path))) is None
    (folder / "check-20260101T000000Z.json").write_text(json.dumps({"status": "ok", "totals": {"checked": 5}}))
    (folder / "check-20260102T000000Z.json").write_text(json.dumps({"status": "inconsistent", "totals": {"missing": 1}}))
    (folder / "check-20260102T000000Z.html").write_text("<html>report</html>")
    (folder / "check-20260103T000000Z.json").write_text("{half written")
    report = latest_report(spec(report_dir=str(tmp_path)))
    assert (report.status, report.totals) == ("inconsistent", {"missing": 1})
    assert report.html_path.endswith("check-20260102T000000Z.html")


def test_spec_mirrors_reads_lag_settings_and_metrics_port(tmp_path):
    path = tmp_path / "mirrors.yaml"
    path.write_text(json.dumps({"groups": [{
        "name": "g", "source": {"name": "east", "kafka": {"bootstrap.servers": "127.0.0.1:1"}},
        "destination": {"kafka": {"bootstrap.servers": "127.0.0.1:2"}},
        "mirrors": [
            {"name": "orders", "whitelist": "orders", "metrics-port": 9555,
             "airflow": {"lag": {"window-minutes": 5, "stop-after-seconds": 60}, "verify-report-dir": "/r"}},
            {"name": "typo", "whitelist": "x", "airflow": {"lag": {"window-minute": 5}}},
            {"name": "off", "whitelist": "y", "enabled": False},
        ]}]}))
    mirrors = {m.name: m for m in spec_mirrors(path)}
    assert set(mirrors) == {"orders", "typo"}
    orders = mirrors["orders"]
    assert (orders.window_s, orders.limits.stop_after_s, orders.metrics_port, orders.report_dir) == (300, 60, 9555, "/r")
    assert mirrors["typo"].config is None and "window-minute" in mirrors["typo"].error


# --- the lag sensor feeds the store -------------------------------------------------------------
def test_lag_sensor_runs_write_their_samples_and_verdicts(tmp_path, monkeypatch):
    import time

    from mirror_airflow.lag import measure as lag_measure
    from mirror_airflow.sensors import lag as sensors
    from tests.unit.mirror_airflow.lag.sensor_util import orders_lag_sensor

    monkeypatch.setenv("MIRROR_DASHBOARD_DB", str(tmp_path / "h.sqlite"))
    kept = {}
    monkeypatch.setattr(sensors.Variable, "get", staticmethod(lambda key, default=None: kept.get(key, default)))
    monkeypatch.setattr(sensors.Variable, "set", staticmethod(lambda key, value, description=None: kept.update({key: value})))
    monkeypatch.setattr(lag_measure, "newest_heartbeats", lambda mirror, lookback, timeout: {
        "east": [Heartbeat("w:1", 0, time.time(), time.time())]})
    committed = {"offset": 5}
    monkeypatch.setattr(lag_measure, "measure_partitions", lambda mirror, timeout: [
        (("east", "orders.a", 0), Sample(time.time(), committed["offset"], 20))])
    sensor = orders_lag_sensor(Limits(max_lag_records=100))
    sensor._judge(sensor._observe())
    store = HistoryStore()
    assert [s.lag for s in store.samples("orders")[("east", "orders.a", 0)]] == [15]
    assert [(v.status, v.total_lag, v.origin) for v in store.verdicts("orders")] == [("OK", 15, "lag sensor")]
    # A failing verdict is kept too, with its one-line summary, before the task fails.
    sensor.limits = Limits(max_lag_records=10)
    committed["offset"] = 8  # it moved, but the lag (12) is still above the limit
    with pytest.raises(sensors.LagCheckFailed):
        sensor._judge(sensor._observe())
    newest = store.verdicts("orders")[0]
    assert newest.status == "LAG" and "lag 12 > max 10 records" in newest.summary and newest.total_lag == 12
    assert store.count("samples", "orders") == 2


def test_the_header_rate_is_the_throughput_charts_newest_step(tmp_path):
    """Issue 44 item 4: the header said "8.4 records/s committed" (each partition's last two samples) while the
    throughput section said "no data yet" (it compares rounds of the same partitions). Both now come from the
    same steps: a partition new in the last round leaves both empty, the next round fills both alike."""
    clock = Clock()
    fake = FakeEdges([spec()], paused={"mirror__orders": False})
    fake.ends, fake.committed = {KEY_A: 10}, {KEY_A: 10}
    board = Dashboard(fake.edges(clock), HistoryStore(tmp_path / "h.sqlite", clock=clock), min_interval_s=10, clock=clock)
    board.mirror("orders")
    clock.now += 10
    fake.ends, fake.committed = {KEY_A: 94, KEY_B: 5}, {KEY_A: 94, KEY_B: 5}  # a partition appears
    view = board.mirror("orders")
    assert view.records_per_s is None and view.throughput == []
    clock.now += 20
    fake.ends, fake.committed = {KEY_A: 154, KEY_B: 5}, {KEY_A: 154, KEY_B: 5}
    view = board.mirror("orders")
    assert (view.records_per_s, view.rate_interval_s) == (pytest.approx(3.0), pytest.approx(20.0))
    assert view.throughput[-1] == (pytest.approx(clock.now), pytest.approx(3.0))


@pytest.mark.parametrize("run, says", [
    (None, "Airflow has not parsed the lag DAG mirror__orders__lag"),
    (LagRun(True), "mirror__orders__lag is paused, so nothing judges the lag"),
    (LagRun(False), "has not run yet"),
    (LagRun(False, "running", 1_000_000.0), "is measuring since 13:46:40 UTC; it gives its verdict once it has "
                                            "watched the lag for its window (10 min)"),
    (LagRun(False, "failed", 1.0), "ended failed without writing one"),
])
def test_no_verdict_says_why_from_the_lag_dags_state(run, says):
    assert says in no_verdict_why("orders", run, 600)


def test_a_mirror_without_a_verdict_says_why_and_one_with_a_verdict_asks_nothing(tmp_path):
    """Issue 44 item 4: the first verdict section read "the lag sensor has not run" while its run had been
    deferred, measuring, for minutes."""
    clock, asked = Clock(), []
    fake = FakeEdges([spec()], paused={"mirror__orders": False})
    edges = fake.edges(clock)
    edges.lag_run = lambda dag_id: asked.append(dag_id) or LagRun(False, "running", clock.now - 120)
    store = HistoryStore(tmp_path / "h.sqlite", clock=clock)
    board = Dashboard(edges, store, clock=clock)
    assert "is measuring since" in board.mirror("orders").no_verdict and asked == ["mirror__orders__lag"]
    store.add_verdict("orders", Verdict(clock.now, "OK", "fine", 0, "lag sensor"))
    assert board.mirror("orders").no_verdict is None and asked == ["mirror__orders__lag"]
