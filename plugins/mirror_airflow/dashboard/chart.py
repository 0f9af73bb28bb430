"""A server-side SVG line chart: series of (time, value) points, a time axis, a value axis, a legend.

No JavaScript and nothing loaded from elsewhere: the page works offline and inside the Airflow UI's frame.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from html import escape

WIDTH, HEIGHT = 760, 260
LEFT, RIGHT, TOP, BOTTOM = 64, 12, 12, 28
COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf",
           "#7f7f7f", "#bcbd22")
MAX_SERIES = 12


def nice_ceiling(value: float) -> float:
    """The smallest of 1, 2, 2.5, 5 × 10^k at or above `value` (an axis top); 1 for nothing."""
    if value <= 0:
        return 1.0
    magnitude = 1.0
    while magnitude * 10 <= value:
        magnitude *= 10
    while magnitude > value:
        magnitude /= 10
    for step in (1, 2, 2.5, 5, 10):
        if step * magnitude >= value:
            return step * magnitude
    return 10 * magnitude


def _label(value: float) -> str:
    if value >= 1_000_000:
        return f"{value / 1_000_000:g}M"
    if value >= 1_000:
        return f"{value / 1_000:g}k"
    return f"{value:g}"


def _width(index: int, count: int) -> float:
    """Stroke widths from 6 px (the first line, drawn first) down to 1.5 px (the last, drawn on top)."""
    return 6.0 - 4.5 * index / max(1, count - 1) if count > 1 else 2.0


def line_chart(series: Mapping[str, Sequence[tuple[float, float]]], title: str, unit: str, chart_id: str) -> str:
    """An <svg> of the series (the MAX_SERIES with the highest last value when there are more);
    a text note instead when no series has two points."""
    drawable = {name: sorted(points) for name, points in series.items() if len(points) >= 2}
    if not drawable:
        return f'<p class="empty">{escape(title)}: no data yet (a line needs two samples).</p>'
    hidden = 0
    if len(drawable) > MAX_SERIES:
        ranked = sorted(drawable, key=lambda name: -drawable[name][-1][1])
        hidden = len(ranked) - MAX_SERIES
        drawable = {name: drawable[name] for name in sorted(ranked[:MAX_SERIES])}
    t0 = min(p[0] for points in drawable.values() for p in points)
    t1 = max(p[0] for points in drawable.values() for p in points)
    top = nice_ceiling(max(p[1] for points in drawable.values() for p in points))
    span = max(t1 - t0, 1.0)
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def x(t: float) -> float:
        return LEFT + (t - t0) / span * plot_w

    def y(v: float) -> float:
        return TOP + plot_h - v / top * plot_h

    parts = [f'<svg id="{escape(chart_id)}" class="chart" role="img" viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}" '
             f'xmlns="http://www.w3.org/2000/svg"><title>{escape(title)}</title>',
             f'<rect x="{LEFT}" y="{TOP}" width="{plot_w}" height="{plot_h}" fill="#fafafa" stroke="#ccc"/>']
    for i in range(5):
        value = top * i / 4
        parts.append(f'<line x1="{LEFT}" x2="{LEFT + plot_w}" y1="{y(value):.1f}" y2="{y(value):.1f}" stroke="#e4e4e4"/>'
                     f'<text x="{LEFT - 6}" y="{y(value) + 4:.1f}" text-anchor="end" font-size="11">'
                     f'{_label(value)}</text>')
    for i, anchor in enumerate(("start", "middle", "middle", "end")):  # the outer labels stay inside
        t = t0 + span * i / 3
        parts.append(f'<text x="{x(t):.1f}" y="{HEIGHT - 8}" text-anchor="{anchor}" font-size="11">'
                     f'{time.strftime("%H:%M:%S", time.gmtime(t))}</text>')
    parts.append(f'<text x="12" y="{TOP + plot_h / 2:.0f}" font-size="11" transform="rotate(-90 12 '
                 f'{TOP + plot_h / 2:.0f})" text-anchor="middle">{escape(unit)}</text>')
    legend: list[str] = []
    first_with: dict[tuple, str] = {}
    for index, (name, points) in enumerate(drawable.items()):
        colour = COLOURS[index % len(COLOURS)]
        path = " ".join(f"{x(t):.1f},{y(v):.1f}" for t, v in points)
        # Each line is drawn thinner than the one before, over it: lines that lie on one another (partitions all
        # at lag 0) still show every colour, and the legend says which ones coincide.
        parts.append(f'<polyline class="series" data-series="{escape(name)}" fill="none" stroke="{colour}" '
                     f'stroke-width="{_width(index, len(drawable)):.2f}" points="{path}"/>')
        same = first_with.setdefault(tuple(points), name)
        under = f", on the line of {escape(same)}" if same != name else ""
        legend.append(f'<li><span class="swatch" style="background:{colour}"></span>{escape(name)} '
                      f'(now {_label(points[-1][1])}{under})</li>')
    parts.append("</svg>")
    note = f"<li>{hidden} more not drawn (the {MAX_SERIES} highest are)</li>" if hidden else ""
    return "".join(parts) + f'<ul class="legend">{"".join(legend)}{note}</ul>'
