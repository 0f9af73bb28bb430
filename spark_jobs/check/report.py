"""The consistency check's report on disk: the JSON document and a readable HTML summary beside it."""

from __future__ import annotations

import json
import os
from html import escape
from pathlib import Path

COUNT_COLUMNS = ("source_count", "destination_count", "missing", "duplicated", "altered", "out_of_order",
                 "wrong_schema", "beyond_committed")
PROBLEMS = ("missing", "duplicated", "altered", "out_of_order", "wrong_schema")
OK, INCONSISTENT, NOTHING_TO_CHECK = "ok", "inconsistent", "nothing to check"

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; }
.status { display: inline-block; padding: .3em .8em; border-radius: .3em; font-weight: bold; color: #fff; }
.status.ok { background: #2e7d32; } .status.inconsistent { background: #c62828; }
.status.nothing-to-check { background: #757575; } tr.empty td { color: #757575; }
table { border-collapse: collapse; margin: 1em 0; } th, td { border: 1px solid #ccc; padding: .25em .6em; }
td.n { text-align: right; font-variant-numeric: tabular-nums; } tr.bad td { background: #fdecea; }
td.bad { font-weight: bold; color: #c62828; } code { font-size: .95em; }
.windows td { border: none; padding: .1em .6em; } .windows svg { display: block; }
"""


def verdict(totals: dict) -> str:
    """Any problem makes the mirror inconsistent. Without one, a check that compared no source record proved
    nothing (an empty window, a mirror before its first record): "nothing to check", never "ok"."""
    if any(totals.get(k) for k in PROBLEMS):
        return INCONSISTENT
    return OK if totals.get("checked") else NOTHING_TO_CHECK


def exit_code(report: dict) -> int:
    """The job's exit code: 1 for an inconsistent mirror; 0 for a consistent one and for nothing to check (no
    failure to alert on: the status says it, and the Airflow task is skipped on it)."""
    return 1 if report["status"] == INCONSISTENT else 0


def status_class(status: str) -> str:
    return status.replace(" ", "-")


def html_path(json_path: Path) -> Path:
    return Path(json_path).with_suffix(".html")


def write_report(report: dict, json_path: Path) -> Path:
    """Writes the JSON report and its HTML summary (each atomically); returns the HTML path."""
    json_path = Path(json_path)
    html = html_path(json_path)
    json_path.parent.mkdir(parents=True, exist_ok=True)
    _write_atomically(json_path, json.dumps(report, indent=2) + "\n")
    _write_atomically(html, render_html(report))
    return html


def _write_atomically(path: Path, text: str) -> None:
    partial = path.with_name(path.name + ".tmp")
    partial.write_text(text, encoding="utf-8")
    os.replace(partial, path)


def render_html(report: dict) -> str:
    status = report["status"]
    totals = report["totals"]
    source, destination, window = report["source"], report["destination"], report["window"]
    parts = [
        "<!doctype html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>Consistency check: {escape(status)}</title><style>{_STYLE}</style></head><body>",
        f'<h1>Consistency check <span class="status {escape(status_class(status))}">{escape(status)}</span></h1>',
        *(["<p><b>No source record was in the window</b>: nothing was compared, so this report does not show "
           "the mirror consistent. Check again once the source topics hold records.</p>"]
          if status == NOTHING_TO_CHECK else []),
        "<p>",
        f"source <code>{escape(str(source.get('bootstrap_servers')))}</code> "
        f"topics <code>{escape(', '.join(source.get('topics', [])))}</code>"
        + (f" group <code>{escape(str(source['group_id']))}</code>" if source.get("group_id") else "")
        + "<br>",
        f"destination <code>{escape(str(destination.get('bootstrap_servers')))}</code> "
        f"topics <code>{escape(', '.join(destination.get('topics', [])))}</code><br>",
        f"window: {escape(_describe_window(window))}<br>",
        *(f"{escape(t['topic'])}[{t['partition']}] {escape(t['reason'])}: last stable offset "
          f"{t['last_stable_offset']}, high watermark {t['high_watermark']}<br>"
          for t in window.get("open_transactions", [])),
        f"schema ids: {escape(_describe_schemas(report.get('schemas')))}<br>",
        f"generated at {escape(report['generated_at'])}",
        "</p>",
        "<h2>Totals</h2>",
        _table(["checked", *PROBLEMS], [[totals.get(k, 0) for k in ("checked", *PROBLEMS)]], bad_from=1),
        *_modes_table(report),
        "<h2>Partitions</h2>",
        _partition_table(report["partitions"]),
        *_window_charts(report),
    ]
    examples = {k: v for k, v in (report.get("examples") or {}).items() if v}
    if examples:
        parts.append("<h2>Offending source records</h2>")
        for kind in PROBLEMS:
            if kind in examples:
                shown = examples[kind]
                more = totals.get(kind, len(shown)) - len(shown)
                parts.append(f"<h3>{escape(kind.replace('_', ' '))} ({totals.get(kind, len(shown))})</h3><ul>")
                parts.extend(f"<li><code>{escape(c)}</code></li>" for c in shown)
                if more > 0:
                    parts.append(f"<li>... and {more} more</li>")
                parts.append("</ul>")
    parts.append("</body></html>\n")
    return "\n".join(parts)


def _describe_schemas(schemas: dict | None) -> str:
    if not schemas:
        return "not reported"
    if not schemas.get("checked"):
        return f"not proven: {schemas.get('reason', '')}"
    framed = sorted({*schemas.get("framed_keys", []), *schemas.get("framed_values", [])})
    return ("proven against both registries (a copy's ids name the source's schemas) for "
            + (", ".join(framed) if framed else "no topic: none has a subject"))


def _describe_window(window: dict) -> str:
    kind = window.get("kind")
    if kind == "timestamps":
        return f"timestamps from {window.get('from_timestamp')} to {window.get('to_timestamp')} (epoch ms)"
    if kind == "offsets":
        ranges = ", ".join(f"{r['topic']}:{r['partition']}:{r['from']}-{r['to']}" for r in window.get("ranges", []))
        return f"offsets {ranges}"
    return "everything from the low watermark to the last stable offset"


def _modes_table(report: dict) -> list[str]:
    """Each source topic's mode (every record, or the latest value per key) and why it was chosen."""
    modes = report.get("modes")
    if not modes:
        return []
    rows = "".join(f"<tr><td>{escape(topic)}</td><td>{escape(m['mode'])}</td><td>{escape(m['reason'])}</td></tr>"
                   for topic, m in sorted(modes.items()))
    return [f"<h2>Topics (mode {escape(str(report.get('mode')))})</h2>",
            f"<table><tr><th>topic</th><th>mode</th><th>why</th></tr>{rows}</table>"]


def _table(header: list[str], rows: list[list], bad_from: int) -> str:
    out = ["<table><tr>", *(f"<th>{escape(h.replace('_', ' '))}</th>" for h in header), "</tr>"]
    for row in rows:
        out.append("<tr>")
        for i, value in enumerate(row):
            bad = i >= bad_from and isinstance(value, int) and value > 0
            out.append(f'<td class="n{" bad" if bad else ""}">{escape(str(value))}</td>')
        out.append("</tr>")
    out.append("</table>")
    return "".join(out)


def _partition_table(partitions: list[dict]) -> str:
    header = ["topic", "partition", *COUNT_COLUMNS]
    out = ["<table><tr>", *(f"<th>{escape(h.replace('_', ' '))}</th>" for h in header), "</tr>"]
    for p in partitions:
        bad = any(p.get(k) for k in PROBLEMS)
        row_class = "bad" if bad else "ok" if p.get("source_count") else "empty"
        out.append(f'<tr class="{row_class}"><td>{escape(p["topic"])}</td>'
                   f'<td class="n">{p["partition"]}</td>')
        for k in COUNT_COLUMNS:
            cls = "n bad" if k in PROBLEMS and p.get(k) else "n"
            out.append(f'<td class="{cls}">{int(p.get(k) or 0)}</td>')
        out.append("</tr>")
    out.append("</table>")
    return "".join(out)


CHART_WIDTH, CHART_HEIGHT = 480, 14


def _window_charts(report: dict) -> list[str]:
    """Per source partition, a bar over its checked offsets: green where the digests matched, amber over
    the offsets compared record by record, red for each window whose digests differed."""
    digest = report.get("digest")
    if not digest:
        return []
    ranges = {(r["topic"], r["partition"]): (r["from"], r["to"]) for r in report["window"].get("ranges", [])}
    size = digest["window_offsets"]
    out = [f"<h2>Windows</h2><p>{digest['windows']} windows of {size:,} offsets: {digest['windows_by_digest']} "
           f"verified by digest, {digest['windows_record_by_record']} record by record "
           f"({digest['records_record_by_record']:,} offsets).</p>", '<table class="windows">']
    for p in digest["partitions"]:
        start, end = ranges.get((p["topic"], p["partition"]), (0, 0))
        span = p.get("record_by_record")
        label = (f"{p['windows_differing']} of {p['windows']} windows differ"
                 + (f"; offsets {span['from']}-{span['to']} record by record ({span['reason']})" if span else ""))
        out.append(f"<tr><td>{escape(p['topic'])}[{p['partition']}]</td><td>{_chart(start, end, size, p)}</td>"
                   f"<td>{escape(label)}</td></tr>")
    out.append("</table>")
    return out


def _chart(start: int, end: int, size: int, partition: dict) -> str:
    width = max(end - start, 1)
    x = lambda offset: round((min(max(offset, start), end) - start) * CHART_WIDTH / width, 1)  # noqa: E731
    shapes = [f'<rect x="0" y="0" width="{CHART_WIDTH}" height="{CHART_HEIGHT}" fill="#a5d6a7">'
              f"<title>offsets {start}-{end}</title></rect>"]
    span = partition.get("record_by_record")
    if span:
        shapes.append(f'<rect class="exact" x="{x(span["from"])}" y="0" width="{max(x(span["to"]) - x(span["from"]), 1)}" '
                      f'height="{CHART_HEIGHT}" fill="#ffcc80"><title>record by record {span["from"]}-{span["to"]}'
                      f"</title></rect>")
    for w in partition.get("differing_windows", []):
        left = x(w * size)
        shapes.append(f'<rect class="differs" x="{left}" y="2" width="{max(x((w + 1) * size) - left, 2)}" '
                      f'height="{CHART_HEIGHT - 4}" fill="#c62828"><title>window {w}: offsets {w * size}-'
                      f"{(w + 1) * size} differ</title></rect>")
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{CHART_WIDTH}" height="{CHART_HEIGHT}" role="img" '
            f'aria-label="offsets {start}-{end}">{"".join(shapes)}</svg>')
