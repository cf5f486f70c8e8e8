"""The lab's line chart (app/render/charts.py) is a chart a class can read (#42): a title, both axes titled and
numbered, the top of the y axis a numbered tick, no tick numbers touching, every text inside the drawing however
large its font, the x axis as long as asked (a run's steps, while it trains); its signature stays what its callers
(/train, /demos, /heads) pass."""

from __future__ import annotations

import itertools
import math
import re

import pytest
from bs4 import BeautifulSoup

from app.render.charts import Series, _width, line_chart

LOSS = [Series("training", list(range(1, 301)), [4.2 - 2 * s / 300 for s in range(1, 301)]),
        Series("held out", [0, 100, 200, 300], [4.16, 3.9, 2.5, 2.2], dashed=True)]  # fmt: skip


def texts(svg: str, cls: str) -> list[str]:
    return [t.get_text() for t in BeautifulSoup(svg, "html.parser").select(f"text.{cls.replace(' ', '.')}")]


def test_both_axes_are_titled_and_numbered() -> None:
    svg = line_chart(LOSS, "Loss", "step", "nats per token", chart_id="loss")
    assert texts(svg, "chart-title") == ["Loss"]
    assert texts(svg, "axis-title x") == ["step"] and texts(svg, "axis-title y") == ["nats per token"]
    assert texts(svg, "tick x") == ["0", "50", "100", "150", "200", "250", "300"]
    assert texts(svg, "tick y") == ["0", "1", "2", "3", "4", "5"]  # up to a numbered top above the data's 4.2
    assert texts(svg, "legend") == ["training", "held out"]
    assert 'data-chart="loss"' in svg and 'data-series="held out"' in svg


def test_the_callers_signature_holds() -> None:
    """Positional as /demos passes it (title, x label, y label, x_log, y_log, width, height, chart_id)."""
    svg = line_chart([Series("a", [1, 2, 4, 8], [1, 2, 4, 8])], "t", "d_k", "Var", True, True, 400, 240, "variance")
    assert 'viewBox="0 0 400 240"' in svg and 'data-chart="variance"' in svg
    assert texts(svg, "tick x") == ["1", "2", "4", "8"] and texts(svg, "tick y")


def test_the_x_axis_spans_the_run_while_it_trains() -> None:
    svg = line_chart(LOSS, "Loss", "step", "nats", x_range=(0, 1000))
    assert texts(svg, "tick x")[-1] == "1,000"


@pytest.mark.parametrize("font", [13.0, 20.0])
def test_every_text_stays_inside_the_drawing_and_no_tick_numbers_touch(font: float) -> None:
    """A log axis of many powers of two at a large font: the numbers thinned, each still at its tick."""
    series = [Series(f"L{i}.H{j} induction score", [2**k for k in range(13)], [0.1 * k for k in range(13)])
              for i in range(2) for j in range(2)]  # fmt: skip
    svg = line_chart(series, "Induction score of each head", "step", "mean A[i, i−n+1]", x_log=True, font=font)
    soup = BeautifulSoup(svg, "html.parser")
    width, height = 560, 320
    xs = []
    for t in soup.select("text"):
        x, y, size = float(t["x"]), float(t["y"]), float(t["font-size"])
        w = _width(t.get_text(), size)
        left = {"end": x - w, "middle": x - w / 2}.get(t.get("text-anchor", ""), x)
        if "y" in t["class"] and "axis-title" in t["class"]:
            left, w = x - size / 2, size  # rotated: its height is across
        assert left >= 0 and left + w <= width + 1 and 0 <= y <= height, (t, left, w)
        if t["class"] == ["tick", "x"]:
            xs.append((x, w))
    assert len(xs) >= 4
    assert all(b[0] - a[0] >= (a[1] + b[1]) / 2 for a, b in itertools.pairwise(xs)), xs
    tick_y = [float(t["y"]) for t in soup.select("text.tick.y")]
    assert min(tick_y) > max(float(t["y"]) for t in soup.select("text.legend"))  # the legend above the plot


def test_markers_only_on_a_few_points() -> None:
    many = line_chart([Series("a", list(range(200)), [math.sin(i) for i in range(200)])], "t", "x", "y")
    few = line_chart([Series("a", list(range(20)), [math.sin(i) for i in range(20)])], "t", "x", "y")
    assert "<circle" not in many and len(re.findall("<circle", few)) == 20
