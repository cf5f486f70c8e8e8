"""Line charts as SVG, drawn by the server: a title, both axes titled and numbered, a legend, one polyline per series.

Every text is sized from `font` (the tick numbers' size, in the drawing's units) and the margins from what they hold
(the widest tick number, the legend's rows), so a larger font never runs off the drawing. The drawing scales with
its box (a viewBox): a page that shows it wider shows its numbers larger (presenter mode, static/train.css). The
texts carry classes (`chart-title`, `axis-title`, `tick`, `legend`) that tests and style sheets find them by.

Colours are presentation attributes, not style attributes, so the page's Content-Security-Policy needs no
'unsafe-inline'. Series colours come from Okabe and Ito's colour-blind-safe palette.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape
from typing import Any

OKABE_ITO = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#D55E00", "#56B4E9")
INK = "#1b1f24"
AXIS = "#5b6470"
GRID = "#e4e9ef"
MARKERS_UP_TO = 60  # a series of more points is drawn as its line alone (a dot on each of 200 steps is a smear)


@dataclass(frozen=True)
class Series:
    label: str
    xs: Sequence[float]
    ys: Sequence[float]
    dashed: bool = False


@dataclass(frozen=True)
class Chart:
    """One line chart's data and words: drawn inline by `line_chart` (`svg`), or for print by matplotlib
    (app/render/figure.py `chart_figure`) from the same object."""

    series: Sequence[Series]
    title: str
    x_label: str
    y_label: str
    x_log: bool = False
    y_log: bool = False
    chart_id: str = ""

    def svg(self, **size: Any) -> str:
        return line_chart(self.series, self.title, self.x_label, self.y_label, self.x_log, self.y_log,
                          chart_id=self.chart_id, **size)  # fmt: skip


def _ticks(lo: float, hi: float, log: bool) -> list[float]:
    """Tick values from `lo` to `hi`: powers of two on a log axis, else steps of 1, 2 or 5 × a power of ten (at most
    six intervals), from the first multiple of the step at or above `lo`."""
    if log:
        return [2.0**e for e in range(math.floor(math.log2(lo)), math.ceil(math.log2(hi)) + 1)]
    step = _step(lo, hi)
    start = math.ceil(lo / step - 1e-9) * step
    return [start + i * step for i in range(int((hi - start) / step + 1e-9) + 1)]


def _step(lo: float, hi: float) -> float:
    span = hi - lo or 1.0
    step = 10 ** math.floor(math.log10(span / 5))
    for m in (1, 2, 5, 10):
        if span / (step * m) <= 6:
            return step * m
    return step * 10


def _fmt(v: float) -> str:
    if v == 0:
        return "0"
    return f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.4g}"


def _width(text: str, size: float) -> float:
    """About how wide `text` is drawn at `size` (a CJK character is square, a Latin one about 0.6 of it)."""
    return sum(size * (1.0 if ord(c) >= 0x2E80 else 0.6) for c in text)


def line_chart(
    series: Sequence[Series],
    title: str,
    x_label: str,
    y_label: str,
    x_log: bool = False,
    y_log: bool = False,
    width: int = 560,
    height: int = 320,
    chart_id: str = "",
    font: float = 13.0,
    x_range: tuple[float, float] | None = None,
) -> str:
    """`series` drawn against shared axes: `x_label` below the x axis, `y_label` along the y axis, each numbered;
    `font` is the tick numbers' size (the axis titles, the legend and the title a little larger); `x_range`, the x
    axis's extent at least (a run's steps: the curve grows across a fixed axis as it trains)."""
    f, fa, ft = font, round(font * 1.1, 1), round(font * 1.25, 1)
    xs = [x for s in series for x in s.xs if not x_log or x > 0] or [0.0, 1.0]
    ys = [y for s in series for y in s.ys if math.isfinite(y) and (not y_log or y > 0)] or [0.0, 1.0]
    x0, x1 = min(xs), max(xs)
    if x_range is not None:
        x0, x1 = min(x0, x_range[0]), max(x1, x_range[1])
    y0, y1 = min(ys), max(ys)
    if not y_log:
        y0 = min(0.0, y0)
        if y1 == y0:
            y1 = y0 + 1
        step = _step(y0, y1)
        y1 = math.ceil(y1 / step - 1e-9) * step  # the top of the axis is a numbered tick
    elif y1 == y0:
        y1 = y0 * 2

    eps = 1e-9 * max(abs(y0), abs(y1), 1.0)
    y_ticks = [t for t in _ticks(y0, y1, y_log) if y0 - eps <= t <= y1 + eps]
    if y_log and len(y_ticks) < 3:
        y_ticks = sorted({y0, *y_ticks, y1})
    y_texts = [_fmt(t) for t in y_ticks]
    left = math.ceil(fa * 1.8 + max((_width(s, f) for s in y_texts), default=f) + 12)
    right = 16 + math.ceil(_width(_fmt(x1), f) / 2)
    plot_w = width - left - right
    # The legend sits between the title and the plot, as many entries to a row as fit, never over a line.
    fits = [c for c in (3, 2, 1) if all(30 + _width(s.label, f) <= plot_w / c for s in series)]
    cols = fits[0] if fits else 1
    rows = -(-len(series) // cols)
    legend_top = ft + 10
    top = math.ceil(legend_top + rows * f * 1.45 + f * 0.6)
    bottom = math.ceil(f + 10 + fa * 1.3 + 8)

    def fx(x: float) -> float:
        a, b, v = (math.log2(x0), math.log2(x1), math.log2(x)) if x_log else (x0, x1, x)
        return left + (v - a) / ((b - a) or 1) * plot_w

    def fy(y: float) -> float:
        a, b, v = (math.log2(y0), math.log2(y1), math.log2(max(y, y0))) if y_log else (y0, y1, y)
        return height - bottom - (v - a) / ((b - a) or 1) * (height - top - bottom)

    base = height - bottom
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" width="{width}" height="{height}" '
        f'role="img" aria-label="{escape(title)}" class="chart" data-chart="{escape(chart_id)}">',
        f'<text class="chart-title" x="{left}" y="{ft}" font-size="{ft}" font-weight="600" fill="{INK}">'
        f"{escape(title)}</text>",
    ]
    for t, text in zip(y_ticks, y_texts, strict=True):
        y = fy(t)
        out.append(f'<line x1="{left}" y1="{y:.1f}" x2="{width - right}" y2="{y:.1f}" stroke="{GRID}"/>')
        out.append(
            f'<text class="tick y" x="{left - 6}" y="{y + f * 0.35:.1f}" font-size="{f}" text-anchor="end" '
            f'fill="{INK}">{text}</text>'
        )
    x_ticks = [t for t in _ticks(x0, x1, x_log) if x0 <= t <= x1]
    if x_log and len(x_ticks) < 3:  # a short log axis (a run's first steps): its ends numbered too
        x_ticks = sorted({x0, *x_ticks, x1})
    widest = max((_width(_fmt(t), f) for t in x_ticks), default=f) + f
    labelled = -math.inf
    for t in x_ticks:
        x = fx(t)
        out.append(f'<line x1="{x:.1f}" y1="{base}" x2="{x:.1f}" y2="{base + 5}" stroke="{AXIS}"/>')
        if x - labelled >= widest:  # a number that would touch the one before is left out; its tick stays
            labelled = x
            out.append(
                f'<text class="tick x" x="{x:.1f}" y="{base + 7 + f:.1f}" font-size="{f}" text-anchor="middle" '
                f'fill="{INK}">{_fmt(t)}</text>'
            )
    out.append(f'<line x1="{left}" y1="{base}" x2="{width - right}" y2="{base}" stroke="{AXIS}"/>')
    out.append(f'<line x1="{left}" y1="{top}" x2="{left}" y2="{base}" stroke="{AXIS}"/>')
    mid_y = (top + base) / 2
    out.append(
        f'<text class="axis-title x" x="{left + plot_w / 2:.0f}" y="{height - 6}" font-size="{fa}" '
        f'text-anchor="middle" fill="{INK}">{escape(x_label)}</text>'
    )
    out.append(
        f'<text class="axis-title y" x="{fa:.0f}" y="{mid_y:.0f}" font-size="{fa}" text-anchor="middle" fill="{INK}" '
        f'transform="rotate(-90 {fa:.0f} {mid_y:.0f})">{escape(y_label)}</text>'
    )
    for i, s in enumerate(series):
        colour = OKABE_ITO[i % len(OKABE_ITO)]
        shown = [(x, y) for x, y in zip(s.xs, s.ys, strict=True) if math.isfinite(y) and (not x_log or x > 0)]
        pts = " ".join(f"{fx(x):.1f},{fy(y):.1f}" for x, y in shown)
        dash = ' stroke-dasharray="6 4"' if s.dashed else ""
        out.append(
            f'<polyline points="{pts}" fill="none" stroke="{colour}" stroke-width="2.4"{dash} '
            f'data-series="{escape(s.label)}"/>'
        )
        if len(shown) <= MARKERS_UP_TO:
            for x, y in shown:
                out.append(
                    f'<circle cx="{fx(x):.1f}" cy="{fy(y):.1f}" r="3" fill="{colour}"><title>{escape(s.label)}: '
                    f"{_fmt(x)} → {y:.4g}</title></circle>"
                )
        lx = left + (i % cols) * (plot_w / cols)
        ly = legend_top + f * 1.45 * (i // cols) + f * 0.5
        out.append(
            f'<line x1="{lx:.0f}" y1="{ly:.1f}" x2="{lx + 24:.0f}" y2="{ly:.1f}" stroke="{colour}" stroke-width="2.4"'
            f"{dash}/>"
        )
        out.append(
            f'<text class="legend" x="{lx + 30:.0f}" y="{ly + f * 0.35:.1f}" font-size="{f}" fill="{INK}">'
            f"{escape(s.label)}</text>"
        )
    out.append("</svg>")
    return "".join(out)
