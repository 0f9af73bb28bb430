"""The dashboard's rendering and its FastAPI app: the SVG chart, the pages (honest "no data yet"), and
Airflow authentication on every route (anonymous requests refused; no servers)."""

from __future__ import annotations

import re
import time

import pytest
from fastapi.testclient import TestClient

from mirror_airflow.dashboard.app import Permissions, create_app, permissions
from mirror_airflow.dashboard.chart import MAX_SERIES, line_chart, nice_ceiling
from mirror_airflow.dashboard.gather import Dashboard, Edges, MirrorSpec, MirrorView, Report, WorkerStatus
from mirror_airflow.dashboard.pages import mirror_page, overview_page
from mirror_airflow.dashboard.store import HistoryStore, Verdict
from mirror_airflow.lag.rules import Limits, Sample


@pytest.mark.parametrize("value, top", [(0, 1), (1, 1), (3, 5), (7, 10), (11, 20), (240, 250), (1001, 2000)])
def test_nice_ceiling(value, top):
    assert nice_ceiling(value) == top


def _points(svg: str) -> list[list[tuple[float, float]]]:
    return [[tuple(map(float, p.split(","))) for p in m.split()] for m in re.findall(r'points="([^"]+)"', svg)]


def test_line_chart_scales_series_into_the_plot():
    svg = line_chart({"a/0": [(100, 0), (110, 50), (120, 100)], "a/1": [(100, 100), (120, 0)]}, "lag", "records", "c")
    assert svg.startswith("<svg") and "<script" not in svg and "http" not in svg.replace("http://www.w3.org/2000/svg", "")
    first, second = _points(svg)
    assert first[0][0] == second[0][0] and first[-1][0] == second[-1][0]  # one time axis
    assert first[0][1] > first[1][1] > first[2][1]  # growing lag goes up the page
    assert first[2][1] == second[0][1]  # the same value at the same height (axis top 100)
    assert 'data-series="a/0"' in svg and "(now 100)" in svg


def test_lines_that_lie_on_one_another_stay_visible_and_are_named():
    """Issue 44 item 4: three partitions all at lag 0 drew three lines of one width on one another, so only the
    last colour showed. Each line is now thinner than the one under it, and the legend says which coincide."""
    flat = [(0, 0), (10, 0), (20, 0)]
    svg = line_chart({"a/0": flat, "a/1": flat, "a/2": flat, "a/3": [(0, 5), (20, 9)]}, "lag", "records", "c")
    widths = [float(w) for w in re.findall(r'stroke-width="([0-9.]+)"', svg)]
    assert widths == sorted(widths, reverse=True) and len(set(widths)) == 4 and widths[-1] >= 1.5
    assert "a/1 (now 0, on the line of a/0)" in svg and "a/2 (now 0, on the line of a/0)" in svg
    assert "a/0 (now 0)" in svg and "a/3 (now 9)" in svg


def test_line_chart_without_two_points_says_no_data_yet():
    assert "no data yet" in line_chart({}, "lag", "records", "c")
    assert "no data yet" in line_chart({"a/0": [(1, 5)]}, "lag", "records", "c")


def test_line_chart_draws_the_highest_series_when_there_are_many():
    series = {f"t/{i}": [(0, i), (10, i)] for i in range(MAX_SERIES + 3)}
    svg = line_chart(series, "lag", "records", "c")
    assert svg.count("<polyline") == MAX_SERIES
    assert 'data-series="t/0"' not in svg and f'data-series="t/{MAX_SERIES + 2}"' in svg
    assert "3 more not drawn" in svg


def test_overview_page_lists_state_rate_and_lag_with_links():
    views = [MirrorView("orders", "lagging", "lag rules: STALL", total_lag=1234, records_per_s=2.5, measured_at=0),
             MirrorView("fresh", "running", "its lifecycle DAG is unpaused")]
    html = overview_page(views, "/mirror-dashboard")
    assert 'href="/mirror-dashboard/mirrors/orders"' in html
    assert 'data-state="lagging"' in html and "1,234" in html and "2.5" in html
    fresh_row = html[html.index('data-mirror="fresh"'):]
    assert "no data yet" in fresh_row
    assert "No mirror" in overview_page([], "")


def test_mirror_page_shows_every_section_or_says_there_is_nothing():
    empty = mirror_page(MirrorView("orders", "paused", "its lifecycle DAG is paused"), "/d")
    for text in ("No data yet", "no data yet", "No halted partition", "No schema conflict", "No verdict yet",
                 "No verification report yet"):
        assert text in empty
    full = MirrorView(
        "orders", "halted", "the worker reports 1 halted partition(s)", total_lag=7, records_per_s=1.0,
        partitions=[{"partition": "east/orders/0", "lag": 7, "committed": None, "end": 9, "start": 2, "time": 0}],
        history={"east/orders/0": [(0, 0), (10, 7)]}, throughput=[(10, 1.0), (20, 3.0)],
        halted=[{"source": "east", "topic": "orders", "partition": 0, "reason": "MSG_SIZE_TOO_LARGE <b>"}],
        conflicts=[{"source": "east", "topic": "payments"}],
        stalled=[{"source": "east", "topic": "orders", "partition": 1}],
        not_mirrored=[{"source": "east", "topic": "a-long-name", "reason": "cannot create destination topic <x>"}],
        verdicts=[Verdict(0, "STOP", "east/orders/0 STOP: no commit", 7, "lag sensor")],
        report=Report("/r/check.json", "/r/check.html", "inconsistent", {"missing": 3}, 0))
    full.worker_produced, full.worker_retries = 4321, 240
    full.cluster_faults = ["destination: 1 broker(s) the worker needs cannot be reached"]
    html = mirror_page(full, "/d")
    assert html.count("<svg") == 2 and "4,321 records produced" in html and "(240 delivery retries)" in html
    assert "worker-produced" not in empty
    assert 'id="cluster-faults"' in html and "destination: 1 broker(s)" in html and "cluster-faults" not in empty
    assert "MSG_SIZE_TOO_LARGE &lt;b&gt;" in html  # escaped
    assert 'id="stalled"' in html and 'id="not-mirrored"' in html and "cannot create destination topic &lt;x&gt;" in html
    assert 'id="stalled"' not in empty and 'id="not-mirrored"' not in empty
    assert "payments" in html and "verdict-failing" in html and "none yet" in html
    assert 'href="/d/mirrors/orders/report"' in html and "missing 3" in html


def test_a_report_that_checked_nothing_is_neither_ok_nor_green():
    view = MirrorView("orders", "running", "copying", report=Report(
        "/r/check.json", "/r/check.html", "nothing to check", {"checked": 0, "missing": 0}, 0))
    html = mirror_page(view, "/d")
    report = html[html.index('id="report"'):]
    assert 'class="report-nothing-to-check"' in report and "nothing to check" in report
    assert "the check read no source record" in report and "checked 0" in report
    ok = mirror_page(MirrorView("orders", "running", "copying", report=Report(
        "/r/check.json", None, "ok", {"checked": 5}, 0)), "/d")
    assert 'class="report-ok"' in ok and "the check read no source record" not in ok
    assert ".report-ok { color: #2e7d32" in html and ".report-nothing-to-check { color: #757575" in html


# --- the app: authentication and routes ---------------------------------------------------------
ROUTES = ["/", "/api/mirrors", "/mirrors/orders", "/api/mirrors/orders", "/mirrors/orders/report"]


@pytest.fixture
def board(tmp_path):
    html = tmp_path / "check.html"
    html.write_text("<html>the check's own report</html>")
    specs = [MirrorSpec(n, object(), None, Limits(), 600, None, str(tmp_path)) for n in ("orders", "secret")]
    edges = Edges(mirrors=lambda: specs, paused=lambda ids: {i: False for i in ids},
                  measure=lambda s: [(("east", s.name, 0), Sample(time.time(), 3, 10))], worker=lambda s: WorkerStatus(),
                  halt_reasons=lambda s: {}, report=lambda s: Report("/x.json", str(html), "ok", {}, 0))
    return Dashboard(edges, HistoryStore(tmp_path / "h.sqlite"))


@pytest.mark.parametrize("path", ROUTES)
def test_anonymous_requests_are_refused(board, path):
    client = TestClient(create_app(lambda: board))
    response = client.get(path)
    assert response.status_code == 401
    assert "the check's own report" not in response.text and "orders" not in response.text.split("next=")[0]


def test_logged_in_user_sees_only_mirrors_of_dags_it_may_read(board):
    app = create_app(lambda: board)
    app.dependency_overrides[permissions] = lambda: Permissions(lambda dag_id, logs: "secret" not in dag_id)
    client = TestClient(app, root_path="/mirror-dashboard")
    listed = client.get("/api/mirrors").json()["mirrors"]
    assert [m["name"] for m in listed] == ["orders"]
    assert listed[0]["total_lag"] == 7 and listed[0]["state"] == "running"
    page = client.get("/")
    assert page.status_code == 200 and 'href="/mirror-dashboard/mirrors/orders"' in page.text
    assert "secret" not in page.text
    assert client.get("/mirrors/orders").status_code == 200
    assert client.get("/mirrors/secret").status_code == 403
    assert client.get("/api/mirrors/secret").status_code == 403
    assert client.get("/mirrors/nobody").status_code == 404
    assert client.get("/mirrors/orders/report").text == "<html>the check's own report</html>"
    app.dependency_overrides[permissions] = lambda: Permissions(lambda dag_id, logs: False)
    assert client.get("/api/mirrors").json() == {"mirrors": []}
    assert [client.get(p).status_code for p in ("/mirrors/nobody", "/mirrors/orders", "/mirrors/orders/report")] == [403] * 3


def test_each_part_of_a_mirror_is_shown_only_with_the_permission_on_its_dag(tmp_path):
    """Read access on mirror__orders alone: the page shows the mirror, but not the lag DAG's verdicts, the
    verify DAG's report (its route refused) nor the halt reasons read from the task log; each says why. With
    the three permissions all are shown. Before, the lifecycle DAG's read access showed everything."""
    html = tmp_path / "check.html"
    html.write_text("<html>the check's own report</html>")
    spec = MirrorSpec("orders", object(), None, Limits(), 600, 9100, str(tmp_path))
    edges = Edges(mirrors=lambda: [spec], paused=lambda ids: {i: False for i in ids},
                  measure=lambda s: [(("east", "orders", 0), Sample(time.time(), 3, 10))],
                  worker=lambda s: WorkerStatus(halted=(("east", "orders", 0),)),
                  halt_reasons=lambda s: {("orders", 0): "destination refused the record: SECRET-REASON"},
                  report=lambda s: Report("/x.json", str(html), "inconsistent", {"missing": 4}, 0))
    store = HistoryStore(tmp_path / "h.sqlite")
    store.add_verdict("orders", Verdict(time.time(), "lag too high", "SECRET-VERDICT", 7, "lag sensor"))
    app = create_app(lambda: Dashboard(edges, store))
    client = TestClient(app, root_path="/mirror-dashboard")
    readable: set[tuple[str, bool]] = set()
    app.dependency_overrides[permissions] = lambda: Permissions(lambda dag_id, logs: (dag_id, logs) in readable)

    readable.add(("mirror__orders", False))
    view = client.get("/api/mirrors/orders").json()
    assert view["verdicts"] == [] and view["report"] is None
    assert [h["reason"] for h in view["halted"]] == ["not shown"]
    assert view["hidden"] == ["lag sensor verdicts not shown: no read access to DAG mirror__orders__lag",
                              "verification report not shown: no read access to DAG mirror__orders__verify",
                              "halt reasons not shown: no access to the task logs of DAG mirror__orders"]
    page = client.get("/mirrors/orders").text
    assert "SECRET" not in page and "missing 4" not in page and 'id="report"' not in page
    assert page.count('class="empty hidden"') == 3
    assert client.get("/mirrors/orders/report").status_code == 403
    overview = client.get("/api/mirrors").json()["mirrors"][0]
    assert "SECRET-VERDICT" not in overview["state_reason"] and overview["state"] == "halted"

    readable.update({("mirror__orders__lag", False), ("mirror__orders__verify", False), ("mirror__orders", True)})
    view = client.get("/api/mirrors/orders").json()
    assert [v["summary"] for v in view["verdicts"]] == ["SECRET-VERDICT"] and view["report"]["status"] == "inconsistent"
    assert [h["reason"] for h in view["halted"]] == ["destination refused the record: SECRET-REASON"]
    assert view["hidden"] == []
    assert client.get("/mirrors/orders/report").text == "<html>the check's own report</html>"


def test_airflow_loads_the_plugin_from_the_plugins_folder():
    """What the api-server does with AIRFLOW__CORE__PLUGINS_FOLDER=plugins/ (tests/airflow_support.py
    and devstack set it): one plugin with the mounted app and the nav entry, no import errors, and the
    library package is not imported file by file (plugins/.airflowignore)."""
    import sys

    from airflow import plugins_manager

    apps, _middlewares = plugins_manager.get_fastapi_plugins()
    assert plugins_manager.get_import_errors() == {}
    mounted = [a for a in apps if a["url_prefix"] == "/mirror-dashboard"]
    assert len(mounted) == 1 and mounted[0]["name"] == "Kafka mirror dashboard"
    views, _react = plugins_manager._get_ui_plugins()
    assert [v["href"] for v in views if v["name"] == "Kafka mirrors"] == ["/mirror-dashboard/"]
    assert "gather" not in sys.modules and "sensors" not in sys.modules
