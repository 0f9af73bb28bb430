"""The benchmark pages' charts (bench/charts.py): drawn from the committed results, they are the committed SVG
files byte for byte (a result re-run without its charts, or a chart edited by hand, fails here), every chart is
shown by a docs page, and the bars measure what the rows say."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from bench.charts import CHARTS, KINDS, PAGES, RESULTS, bar_chart, nice_top, write_charts

DOCS = Path(__file__).resolve().parents[3] / "docs"


@pytest.mark.parametrize("stem, kind", PAGES)
def test_the_committed_charts_are_what_the_committed_results_draw(stem, kind, tmp_path):
    drawn = write_charts(stem, kind, out=tmp_path)
    assert drawn
    for path in drawn:
        committed = CHARTS / path.name
        assert committed.is_file(), f"{committed} missing: run python -m bench.charts"
        assert committed.read_text() == path.read_text(), f"{committed.name}: redraw with python -m bench.charts"


def test_every_chart_is_drawn_from_a_result_and_shown_on_a_page():
    drawn = {f"{name}.svg" for stem, kind in PAGES
             for name in KINDS[kind](json.loads((RESULTS / f"{stem}.json").read_text()), stem)}
    assert {p.name for p in CHARTS.glob("*.svg")} == drawn
    pages = (DOCS / "benchmarks").glob("*.md")
    shown = {m for page in pages for m in re.findall(r"\(charts/([^)]+\.svg)\)", page.read_text())}
    assert shown == drawn


def test_bars_are_as_tall_as_their_values_on_a_nice_axis():
    svg = bar_chart({"100 B": {"worker": 400.0, "mm2": 100.0}, "1 KiB": {"worker": 250.0}}, "rate", "records/s")
    heights = [float(h) for h in re.findall(r'<rect x="[^"]+" y="[^"]+" width="[^"]+" height="([^"]+)" fill', svg)]
    assert heights[0] == pytest.approx(4 * heights[1]) and heights[2] == pytest.approx(2.5 * heights[1])
    assert heights[0] == pytest.approx(214 * 400 / 500)  # plot height 214 px, axis top 500
    assert [nice_top(v) for v in (0, 0.7, 3, 240, 475_443, 1001)] == [1, 1, 5, 250, 500_000, 2000]
