"""Line charts as SVG, drawn by the server: axes, ticks, a legend, and one polyline per series.

Colours are presentation attributes, not style attributes, so the page's Content-Security-Policy needs no
'unsafe-inline'. Series colours come from Okabe and Ito's colour-blind-safe palette.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

OKABE_ITO = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#D55E00", "#56B4E9")


@dataclass(frozen=True)
class Series:
    label: str
    xs: Sequence[float]
    ys: Sequence[float]
    dashed: bool = False


def _ticks(lo: float, hi: float, log: bool) -> list[float]:
    if log:
        return [2.0**e for e in range(math.floor(math.log2(lo)), math.ceil(math.log2(hi)) + 1)]
    span = hi - lo or 1.0
    step = 10 ** math.floor(math.log10(span / 5))
    for m in (1, 2, 5, 10):
        if span / (step * m) <= 6:
            step *= m
            break
    start = math.ceil(lo / step) * step
    return [start + i * step for i in range(int((hi - start) / step) + 1)]


def _fmt(v: float) -> str:
    return f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.4g}"


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
) -> str:
    left, right, top, bottom = 64, 16, 34 + 18 * ((len(series) + 2) // 3), 48
    xs = [x for s in series for x in s.xs]
    ys = [y for s in series for y in s.ys if math.isfinite(y)]
    x0, x1 = min(xs), max(xs)
    y0, y1 = (min(ys), max(ys)) if ys else (0.0, 1.0)
    if not y_log:
        y0 = min(0.0, y0)
    if y1 == y0:
        y1 = y0 + 1

    def fx(x: float) -> float:
        a, b, v = (math.log2(x0), math.log2(x1), math.log2(x)) if x_log else (x0, x1, x)
        return left + (v - a) / ((b - a) or 1) * (width - left - right)

    def fy(y: float) -> float:
        a, b, v = (math.log2(y0), math.log2(y1), math.log2(max(y, y0))) if y_log else (y0, y1, y)
        return height - bottom - (v - a) / ((b - a) or 1) * (height - top - bottom)

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" width="{width}" height="{height}" '
        f'role="img" aria-label="{escape(title)}" class="chart" data-chart="{escape(chart_id)}">',
        f'<text x="{left}" y="20" font-size="15" font-weight="600" fill="#1b1f24">{escape(title)}</text>',
        f'<line x1="{left}" y1="{height - bottom}" x2="{width - right}" y2="{height - bottom}" stroke="#5b6470"/>',
        f'<line x1="{left}" y1="{top}" x2="{left}" y2="{height - bottom}" stroke="#5b6470"/>',
    ]
    for t in _ticks(x0, x1, x_log):
        if x0 <= t <= x1:
            x = fx(t)
            out.append(
                f'<line x1="{x:.1f}" y1="{height - bottom}" x2="{x:.1f}" y2="{height - bottom + 4}" stroke="#5b6470"/>'
            )
            out.append(
                f'<text x="{x:.1f}" y="{height - bottom + 17}" font-size="11" text-anchor="middle" fill="#1b1f24">{_fmt(t)}</text>'
            )
    for t in _ticks(y0 if not y_log else max(y0, 1e-9), y1, y_log):
        if y0 <= t <= y1:
            y = fy(t)
            out.append(f'<line x1="{left}" y1="{y:.1f}" x2="{width - right}" y2="{y:.1f}" stroke="#e4e9ef"/>')
            out.append(
                f'<text x="{left - 6}" y="{y + 4:.1f}" font-size="11" text-anchor="end" fill="#1b1f24">{_fmt(t)}</text>'
            )
    out.append(
        f'<text x="{(left + width - right) / 2:.0f}" y="{height - 8}" font-size="12" text-anchor="middle" fill="#1b1f24">{escape(x_label)}</text>'
    )
    out.append(
        f'<text x="14" y="{(top + height - bottom) / 2:.0f}" font-size="12" text-anchor="middle" fill="#1b1f24" transform="rotate(-90 14 {(top + height - bottom) / 2:.0f})">{escape(y_label)}</text>'
    )
    for i, s in enumerate(series):
        colour = OKABE_ITO[i % len(OKABE_ITO)]
        pts = " ".join(f"{fx(x):.1f},{fy(y):.1f}" for x, y in zip(s.xs, s.ys, strict=True) if math.isfinite(y))
        dash = ' stroke-dasharray="5 4"' if s.dashed else ""
        out.append(
            f'<polyline points="{pts}" fill="none" stroke="{colour}" stroke-width="2.2"{dash} data-series="{escape(s.label)}"/>'
        )
        for x, y in zip(s.xs, s.ys, strict=True):
            if math.isfinite(y):
                out.append(
                    f'<circle cx="{fx(x):.1f}" cy="{fy(y):.1f}" r="3" fill="{colour}"><title>{escape(s.label)}: {_fmt(x)} → {y:.4g}</title></circle>'
                )
        # The legend sits between the title and the plot, three entries to a row, never over a line.
        lx = left + (i % 3) * ((width - left - right) // 3)
        ly = 38 + 18 * (i // 3)
        out.append(f'<line x1="{lx}" y1="{ly}" x2="{lx + 24}" y2="{ly}" stroke="{colour}" stroke-width="2.2"{dash}/>')
        out.append(f'<text x="{lx + 30}" y="{ly + 4}" font-size="12" fill="#1b1f24">{escape(s.label)}</text>')
    out.append("</svg>")
    return "".join(out)
