"""HTML of the dashboard: the overview of every mirror and the page of one. Plain server-rendered HTML
that refreshes itself (meta refresh), so it needs no script and nothing from another host."""

from __future__ import annotations

import time
from html import escape
from urllib.parse import quote

from mirror_airflow.dashboard.chart import line_chart
from mirror_airflow.dashboard.gather import MirrorView

REFRESH_S = 15
_STYLE = """
body { font-family: system-ui, sans-serif; margin: 1.5em; color: #222; }
table { border-collapse: collapse; margin: .5em 0 1.2em; } th, td { border: 1px solid #ddd; padding: .3em .7em; }
th { background: #f3f3f3; text-align: left; } td.n { text-align: right; font-variant-numeric: tabular-nums; }
.state { display: inline-block; padding: .1em .6em; border-radius: .8em; color: #fff; font-weight: 600; }
.state.running { background: #2e7d32; } .state.paused { background: #757575; }
.state.lagging { background: #ef6c00; } .state.stalled { background: #ad1457; } .state.halted { background: #c62828; } .state.unknown { background: #546e7a; }
.empty, .note { color: #666; font-style: italic; } .legend { list-style: none; padding: 0; columns: 3; font-size: .9em; }
.swatch { display: inline-block; width: .8em; height: .8em; margin-right: .4em; }
.verdict-OK, .verdict-WARN { color: #2e7d32; } .verdict-failing { color: #c62828; font-weight: 600; }
.report-ok { color: #2e7d32; } .report-inconsistent { color: #c62828; } .report-nothing-to-check { color: #757575; }
"""


def _when(epoch: float | None) -> str:
    if epoch is None:
        return "never"
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(epoch))


def _number(value, digits: int = 0) -> str:
    if value is None:
        return '<span class="empty">no data yet</span>'
    return f"{value:,.{digits}f}"


def _rate(view: MirrorView) -> str:
    """The committed rate with the interval it was measured over (the throughput chart's newest step)."""
    if view.records_per_s is None:
        return f"{_number(None)} records/s committed"
    span = view.rate_interval_s or 0.0
    over = f"{span:.0f} s" if span < 120 else f"{span / 60:.1f} min"
    return f"{view.records_per_s:,.1f} records/s committed over the {over} between the last two samples"


def _page(title: str, body: list[str]) -> str:
    return "\n".join([
        "<!doctype html>", '<html lang="en"><head><meta charset="utf-8">',
        f'<meta http-equiv="refresh" content="{REFRESH_S}">',
        f"<title>{escape(title)}</title><style>{_STYLE}</style></head><body>",
        *body,
        f'<p class="note">Refreshes every {REFRESH_S} s. Generated {_when(time.time())}.</p>',
        "</body></html>",
    ])


def state_badge(view: MirrorView) -> str:
    return (f'<span class="state {escape(view.state)}" data-state="{escape(view.state)}" '
            f'title="{escape(view.state_reason)}">{escape(view.state)}</span>')


def overview_page(views: list[MirrorView], base: str) -> str:
    body = ["<h1>Kafka mirrors</h1>"]
    if not views:
        body.append('<p class="empty">No mirror of the spec is visible to you.</p>')
        return _page("Kafka mirrors", body)
    body.append("<table id=\"mirrors\"><tr><th>mirror</th><th>state</th><th>records/s committed</th>"
                "<th>total lag (records)</th><th>last sample</th><th>why</th></tr>")
    for view in views:
        link = f"{base}/mirrors/{quote(view.name)}"
        body.append(
            f'<tr data-mirror="{escape(view.name)}"><td><a href="{escape(link)}">{escape(view.name)}</a></td>'
            f"<td>{state_badge(view)}</td><td class=\"n\">{_number(view.records_per_s, 1)}</td>"
            f'<td class="n total-lag">{_number(view.total_lag)}</td><td>{_when(view.measured_at)}</td>'
            f"<td>{escape(view.state_reason)}{''.join(f'<br><i>{escape(n)}</i>' for n in view.notes)}</td></tr>")
    body.append("</table>")
    return _page("Kafka mirrors", body)


def _hidden(view: MirrorView, what: str) -> list[str]:
    """The line saying that the user's permissions leave this section out (gather.hidden_notes)."""
    return [f'<p class="empty hidden">{escape(n)}.</p>' for n in view.hidden if n.startswith(what)]


def _verdicts(view: MirrorView) -> list[str]:
    if hidden := _hidden(view, "lag sensor verdicts"):
        return hidden
    if not view.verdicts:
        why = view.no_verdict or "No verdict yet."
        return [f'<p class="empty" id="no-verdict">{escape(why)}</p>']
    rows = ["<table id=\"verdicts\"><tr><th>when</th><th>status</th><th>total lag</th><th>detail</th></tr>"]
    for v in view.verdicts:
        css = f"verdict-{v.status}" if v.status in ("OK", "WARN") else "verdict-failing"
        rows.append(f'<tr><td>{_when(v.time)}</td><td class="{css}">{escape(v.status)}</td>'
                    f'<td class="n">{_number(v.total_lag)}</td><td>{escape(v.summary)}</td></tr>')
    rows.append("</table>")
    return rows


def _partitions(view: MirrorView) -> list[str]:
    if not view.partitions:
        return ['<p class="empty">No data yet: the mirror has not been measured.</p>']
    rows = ["<table id=\"partitions\"><tr><th>source/topic/partition</th><th>lag</th><th>committed</th>"
            "<th>log start</th><th>log end</th></tr>"]
    for p in view.partitions:
        committed = "none yet" if p["committed"] is None else f"{p['committed']:,}"
        rows.append(f'<tr><td>{escape(p["partition"])}</td><td class="n">{p["lag"]:,}</td>'
                    f'<td class="n">{committed}</td><td class="n">{p["start"]:,}</td><td class="n">{p["end"]:,}</td></tr>')
    rows.append("</table>")
    return rows


def _halts(view: MirrorView) -> list[str]:
    out = _hidden(view, "halt reasons")
    if view.halted:
        out.append("<table id=\"halted\"><tr><th>source</th><th>topic</th><th>partition</th><th>reason</th></tr>")
        out.extend(f"<tr><td>{escape(h['source'])}</td><td>{escape(h['topic'])}</td><td class=\"n\">{h['partition']}</td>"
                   f"<td>{escape(h['reason'])}</td></tr>" for h in view.halted)
        out.append("</table>")
    else:
        out.append('<p class="empty" id="halted">No halted partition reported.</p>')
    if view.stalled:
        out.append("<h3>Stalled partitions</h3><table id=\"stalled\"><tr><th>source</th><th>topic</th>"
                   "<th>partition</th></tr>")
        out.extend(f"<tr><td>{escape(h['source'])}</td><td>{escape(h['topic'])}</td><td class=\"n\">{h['partition']}</td>"
                   "</tr>" for h in view.stalled)
        out.append("</table>")
    if view.not_mirrored:
        out.append("<h3>Topics not mirrored</h3><table id=\"not-mirrored\"><tr><th>source</th><th>topic</th>"
                   "<th>reason</th></tr>")
        out.extend(f"<tr><td>{escape(t['source'])}</td><td>{escape(t['topic'])}</td><td>{escape(t['reason'])}</td></tr>"
                   for t in view.not_mirrored)
        out.append("</table>")
    out.append("<h3>Schema conflicts</h3>")
    if view.conflicts:
        out.append("<ul id=\"conflicts\">" + "".join(
            f"<li>{escape(c['source'])}: <code>{escape(c['topic'])}</code></li>" for c in view.conflicts) + "</ul>")
    else:
        out.append('<p class="empty" id="conflicts">No schema conflict reported.</p>')
    return out


def _report(view: MirrorView, base: str) -> list[str]:
    report = view.report
    if hidden := _hidden(view, "verification report"):
        return hidden
    if report is None:
        return ['<p class="empty">No verification report yet (DAG '
                f'<code>mirror__{escape(view.name)}__verify</code> writes one per run).</p>']
    totals = ", ".join(f"{k} {v:,}" for k, v in report.totals.items()) or "no totals"
    css = "report-" + report.status.replace(" ", "-")
    out = [f'<p id="report">Status <b class="{escape(css)}">{escape(report.status)}</b> ({escape(totals)}), '
           f"written {_when(report.created)}."]
    if report.status == "nothing to check":  # spark_jobs/check/report.py: zero records compared proves nothing
        out.append(" Nothing was compared: the check read no source record in its window, so it proves nothing yet.")
    if report.html_path:
        out.append(f' <a href="{escape(base)}/mirrors/{quote(view.name)}/report">Open the full report</a>.')
    out.append("</p>")
    return out


def mirror_page(view: MirrorView, base: str) -> str:
    body = [f'<p><a href="{escape(base)}/">All mirrors</a></p>',
            f'<h1>Mirror {escape(view.name)} {state_badge(view)}</h1>',
            f'<p id="summary">{escape(view.state_reason)}. Total lag <b class="total-lag">{_number(view.total_lag)}</b> '
            f"records; {_rate(view)}; last sample {_when(view.measured_at)}.</p>"]
    body.extend(f'<p class="note">{escape(n)}</p>' for n in view.notes)
    if view.cluster_faults:  # while a broker or the network fails: what the worker sees of the clusters
        body.append('<ul class="note" id="cluster-faults">'
                    + "".join(f"<li>{escape(f)}</li>" for f in view.cluster_faults) + "</ul>")
    body.append(f"<p>Lag rules over the dashboard's history: {escape(view.evaluation or 'no data yet')}</p>")
    body.append("<h2>Lag per partition</h2>")
    body.append(line_chart({k: [(t, float(v)) for t, v in pts] for k, pts in view.history.items()},
                           "lag per partition", "records", "lag-chart"))
    body.extend(_partitions(view))
    body.append("<h2>Throughput</h2>")
    body.append(line_chart({"committed": view.throughput} if view.throughput else {}, "records/s committed",
                           "records/s", "throughput-chart"))
    if view.worker_produced is not None:
        retries = f" ({_number(view.worker_retries)} delivery retries)" if view.worker_retries else ""
        body.append(f'<p id="worker-produced">The worker\'s metrics: {_number(view.worker_produced)} records '
                    f"produced to the destination since it started{retries}.</p>")
    body.append("<h2>Halted partitions</h2>")
    body.extend(_halts(view))
    body.append("<h2>Lag sensor verdicts</h2>")
    body.extend(_verdicts(view))
    body.append("<h2>Last verification report</h2>")
    body.extend(_report(view, base))
    return _page(f"Mirror {view.name}", body)


def refused_page(login_url: str) -> str:
    return _page("Log in to Airflow", [
        "<h1>Not logged in</h1>",
        f'<p>The mirror dashboard needs an Airflow login. <a href="{escape(login_url)}">Log in</a>.</p>'])
