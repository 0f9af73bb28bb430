"""Charts for the benchmark pages, drawn from the results the benches write (bench/results/*.json), as SVG files
under docs/benchmarks/charts/. The benches call `write_charts` after writing their results, so a new run redraws
its charts; tests/unit/bench/test_charts.py redraws them from the committed results and compares, so a chart
cannot disagree with its table.

    python -m bench.charts            # redraw every chart from bench/results/
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Callable, Iterable
from html import escape
from pathlib import Path

from bench.harness import RESULTS

ROOT = Path(__file__).resolve().parents[1]
CHARTS = ROOT / "docs" / "benchmarks" / "charts"

# One colour per system, the same on every chart (colour-blind-safe palette).
COLOURS = {"worker": "#0072b2", "worker-eos": "#56b4e9", "mm2": "#d55e00", "mm2-eos": "#e69f00", "bare": "#009e73"}
OTHER_COLOURS = ("#cc79a7", "#999999", "#f0e442", "#000000")

Groups = dict[str, dict[str, float]]  # group label (x axis) -> series (system) -> value


def nice_top(value: float) -> float:
    """The axis top: the smallest of 1, 2, 2.5, 5 x 10^k at or above `value`."""
    if value <= 0:
        return 1.0
    power = 10 ** math.floor(math.log10(value))
    return next(step * power for step in (1, 2, 2.5, 5, 10) if step * power >= value)


def _label(value: float) -> str:
    if value >= 10_000:
        return f"{value / 1000:,.1f}k".replace(".0k", "k")
    if value >= 100:
        return f"{value:,.0f}"
    return f"{value:.3g}"


def bar_chart(groups: Groups, title: str, unit: str, width: int = 720, height: int = 300) -> str:
    """Grouped bars: one group per x label, one bar per series in it, value labels on the bars, a legend."""
    series = list(dict.fromkeys(s for values in groups.values() for s in values))
    colours = {s: COLOURS.get(s) or OTHER_COLOURS[i % len(OTHER_COLOURS)] for i, s in enumerate(series)}
    left, right, top, bottom = 64, 12, 40, 46
    plot_w, plot_h = width - left - right, height - top - bottom
    top_value = nice_top(max((v for values in groups.values() for v in values.values()), default=0))
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" width="{width}" '
           f'height="{height}" role="img" aria-label="{escape(title)}" font-family="sans-serif" font-size="11">',
           f'<text x="{left}" y="16" font-size="13" font-weight="bold">{escape(title)}</text>',
           f'<text x="{left}" y="30" fill="#555">{escape(unit)}</text>']
    for i in range(5):
        value = top_value * i / 4
        y = top + plot_h - plot_h * i / 4
        out.append(f'<line x1="{left}" x2="{width - right}" y1="{y:.1f}" y2="{y:.1f}" stroke="#ddd"/>')
        out.append(f'<text x="{left - 4}" y="{y + 4:.1f}" text-anchor="end" fill="#555">{_label(value)}</text>')
    slot = plot_w / max(1, len(groups))
    bar = min(36.0, slot * 0.8 / max(1, len(series)))
    for g, (group, values) in enumerate(groups.items()):
        present = [s for s in series if s in values]
        x0 = left + g * slot + (slot - bar * len(present)) / 2
        for b, name in enumerate(present):
            h = plot_h * values[name] / top_value
            x, y = x0 + b * bar, top + plot_h - h
            tip = f"{escape(name)}, {escape(group)}: {values[name]:,}"
            out.append(f'<rect x="{x:.1f}" y="{y:.1f}" width="{bar - 2:.1f}" height="{h:.1f}" '
                       f'fill="{colours[name]}"><title>{tip}</title></rect>')
            out.append(f'<text x="{x + (bar - 2) / 2:.1f}" y="{y - 3:.1f}" text-anchor="middle" '
                       f'font-size="9">{_label(values[name])}</text>')
        out.append(f'<text x="{left + g * slot + slot / 2:.1f}" y="{top + plot_h + 14}" '
                   f'text-anchor="middle">{escape(group)}</text>')
    x = left
    for name in series:
        out.append(f'<rect x="{x}" y="{height - 16}" width="10" height="10" fill="{colours[name]}"/>')
        out.append(f'<text x="{x + 14}" y="{height - 7}">{escape(name)}</text>')
        x += 28 + 6 * len(name)
    out.append("</svg>")
    return "\n".join(out) + "\n"


def _size(record_bytes: int) -> str:
    return "1 KiB" if record_bytes == 1024 else f"{record_bytes} B"


def grouped(rows: Iterable[dict], group: Callable[[dict], str], value: Callable[[dict], float | None]) -> Groups:
    out: Groups = {}
    for row in rows:
        number = value(row)
        if number is not None:
            out.setdefault(group(row), {})[row["system"]] = number
    return out


def compare_charts(rows: list[dict], stem: str) -> dict[str, str]:
    """`make bench` (bench/compare.py): rates, CPU per million records, peak RSS and p99 latency per system."""
    by_size = lambda r: _size(r["record_bytes"])  # noqa: E731
    return {
        f"{stem}-copy-rate": bar_chart(grouped(rows, by_size, lambda r: r.get("copy_msgs_per_s")),
                                       "Copy rate, first to last record", "records/s (higher is better)"),
        f"{stem}-launch-rate": bar_chart(grouped(rows, by_size, lambda r: r.get("msgs_per_s")),
                                         "Rate from launch (start-up included)", "records/s (higher is better)"),
        f"{stem}-cpu": bar_chart(grouped(rows, by_size, lambda r: r.get("cpu_s")),
                                 "CPU of the mirror process for the run's records", "CPU-seconds (lower is better)"),
        f"{stem}-rss": bar_chart(grouped(rows, by_size, lambda r: r.get("peak_rss_mib")),
                                 "Peak resident memory", "MiB (lower is better)"),
        f"{stem}-p99": bar_chart(grouped(rows, by_size, lambda r: r.get("p99_ms_10000")),
                                 "Latency at 10,000 records/s, 99th percentile", "ms (lower is better)"),
    }


def wan_charts(rows: list[dict], stem: str) -> dict[str, str]:
    """`make bench-wan` (bench/wan.py): the rate from launch and first to last, loopback then each side and round
    trip of the run."""
    def where(row: dict) -> str:
        if row["side"] == "loopback":
            return "loopback"
        lost = f", {row['loss_pct']:g}% loss" if row.get("loss_pct") else ""
        return f"{row['side']} {row['rtt_ms']} ms{lost}"

    ordered = sorted(rows, key=lambda r: (r["side"] != "loopback", r["side"], r.get("loss_pct") or 0, r["rtt_ms"]))
    return {
        f"{stem}-launch-rate": bar_chart(grouped(ordered, where, lambda r: r.get("msgs_per_s")),
                                         "Rate from launch across a WAN", "records/s (higher is better)"),
        f"{stem}-copy-rate": bar_chart(grouped(ordered, where, lambda r: r.get("copy_msgs_per_s")),
                                       "Copy rate across a WAN, first to last record", "records/s (higher is better)"),
    }


KINDS = {"compare": compare_charts, "wan": wan_charts}
# The results the benchmark pages show, whose charts are drawn: (result file stem, kind).
PAGES = [("latest", "compare"), ("wan", "wan"), ("wan-100", "wan"), ("wan-1024", "wan"), ("wan-1m-50ms-quiet", "wan"),
         ("wan-1m-50ms-wan-settings", "wan")]


def redraw(stem: str, results: Path = RESULTS) -> list[Path]:
    """What a bench calls after writing `results/<stem>.json`: its charts, when a page shows that result."""
    kinds = [kind for page_stem, kind in PAGES if page_stem == stem]
    return write_charts(stem, kinds[0]) if kinds and results.resolve() == RESULTS.resolve() else []


def write_charts(stem: str, kind: str, results: Path = RESULTS, out: Path = CHARTS) -> list[Path]:
    rows = json.loads((results / f"{stem}.json").read_text())
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, svg in KINDS[kind](rows, stem).items():
        path = out / f"{name}.svg"
        path.write_text(svg)
        written.append(path)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.charts", description=__doc__.splitlines()[0])
    parser.parse_args(argv)
    for stem, kind in PAGES:
        for path in write_charts(stem, kind):
            print(path.relative_to(ROOT))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
