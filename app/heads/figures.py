"""The drawings of /heads, as SVG drawn by the server from the View's numbers: the pruning curve (the lab's line
chart, app/render/charts.py: axes, their titles, tick numbers, a legend) and the chosen head's weights on the
induction probe (queries down, keys across, tick numbers, both copies marked, the induction diagonal dashed).

Colours are presentation attributes, never style attributes: the page's Content-Security-Policy allows no inline
style."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from html import escape

from ..render.charts import Series, line_chart

DIAGONAL = "#d7191c"  # the induction diagonal: red, dashed (the lesson's "red dashed line")
WEIGHT = "#440154"  # a weight: this purple at its value's opacity (0 … 1)
EDGE = "#5b6470"  # axes, ticks and the copies' brackets
INK = "#1b1f24"


def pruning_chart(
    mean_loss: Sequence[float | None], clean: float | None, rise: float, can_go: int, t: Callable[..., str]
) -> str:
    """The pruning curve as the lab's line chart: the mean loss (nats) against the number of heads removed, least
    important first; the plain loss + `rise` dashed; a vertical line at the `can_go` heads that can go."""
    points = [(k, v) for k, v in enumerate(mean_loss) if v is not None and math.isfinite(v)]
    xs, ys = [k for k, _ in points], [v for _, v in points]
    series = [Series(t("heads.prune.chart.loss"), xs, ys)]
    last = max(len(mean_loss) - 1, 1)
    if clean is not None:
        limit = clean * (1 + rise)
        series.append(Series(t("heads.prune.chart.limit", rise=f"{100 * rise:.0f}"), [0, last], [limit, limit], True))
    if ys:
        series.append(Series(t("heads.prune.chart.can_go", k=can_go), [can_go, can_go], [0.0, max(ys)]))
    texts = t("heads.prune.chart.title"), t("heads.prune.chart.x"), t("heads.prune.chart.y")
    # Two drawings: the page's, and one for a phone's width (lab.css shows one), whose texts stay 13 px there
    # instead of shrinking to 6 with a 560-unit drawing, and whose legend takes a row per line.
    return line_chart(series, *texts, chart_id="prune") + line_chart(
        series, *texts, width=340, height=320, chart_id="prune-narrow"
    )


def nice_step(span: int, most: int = 7) -> int:
    """The tick step (1, 2 or 5 × a power of ten) that puts at most `most` ticks on 0 … `span`."""
    step = 1
    while True:
        for m in (1, 2, 5):
            if span // (step * m) + 1 <= most:
                return step * m
        step *= 10


def probe_pattern(
    weights: Sequence[Sequence[float]], n: int, offset: int, t: Callable[..., str], plot: int = 360
) -> str:
    """The chosen head's softmax weights on the probe (BOS when the model has one, n random tokens, the same n
    again): one square per (query, key), darker for more weight; tick numbers on both axes and their titles; the two
    copies bracketed above (keys) and on the right (queries) and split by a thin line; the induction diagonal
    (key i − `offset`, for the second copy's queries) dashed in red, its dashes between the squares it marks so they
    stay visible. `plot` is the square's side in px."""
    m = len(weights)
    bos = m - 2 * n
    c = plot / max(m, 1)
    left, top, right, bottom = 64, 32, 34, 54
    width, height = left + plot + right, top + plot + bottom
    tick, title = 14, 15

    def x(k: float) -> float:
        return left + k * c

    def y(i: float) -> float:
        return top + i * c

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="probe-pattern" viewBox="0 0 {width} {height}" '
        f'width="{width}" height="{height}" role="img" aria-label="{escape(t("heads.pattern.aria", n=n))}" '
        f'data-n="{n}" data-offset="{offset}">',
        f'<rect x="{left}" y="{top}" width="{plot}" height="{plot}" fill="#f7f7f7" stroke="{EDGE}"/>',
        f'<g transform="translate({left} {top}) scale({c:.6g})" shape-rendering="crispEdges">',
    ]
    for i, row in enumerate(weights):
        for k, w in enumerate(row):
            if w > 0.02:
                out.append(
                    f'<rect x="{k}" y="{i}" width="1" height="1" fill="{WEIGHT}" fill-opacity="{min(w, 1):.3g}"/>'
                )
    out.append("</g>")
    # The copies: a thin line where the second begins, across and down.
    split = bos + n
    for x1, y1, x2, y2 in ((x(split), top, x(split), top + plot), (left, y(split), left + plot, y(split))):
        out.append(f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" stroke="{EDGE}" stroke-width="1"/>')
    for label, lo, hi in ((t("heads.pattern.copy1"), bos, bos + n), (t("heads.pattern.copy2"), bos + n, m)):
        a, b = x(lo) + 2, x(hi) - 2  # keys: a bracket above the square
        out.append(f'<path d="M{a:.1f} {top - 4}V{top - 9}H{b:.1f}V{top - 4}" fill="none" stroke="{EDGE}"/>')
        out.append(f'<text x="{(a + b) / 2:.1f}" y="{top - 13}" font-size="{tick}" text-anchor="middle" '
                   f'fill="{INK}" data-copy="{label}">{escape(label)}</text>')  # fmt: skip
        a, b = y(lo) + 2, y(hi) - 2  # queries: a bracket on the right
        r = left + plot
        out.append(f'<path d="M{r + 4} {a:.1f}H{r + 9}V{b:.1f}H{r + 4}" fill="none" stroke="{EDGE}"/>')
        mid = (a + b) / 2  # its label along the bracket, read from below as the query axis's title is
        out.append(f'<text x="{r + 26}" y="{mid:.1f}" font-size="{tick}" text-anchor="middle" fill="{INK}" '
                   f'data-copy="{label}" transform="rotate(-90 {r + 26} {mid:.1f})">{escape(label)}</text>')  # fmt: skip
    # The induction diagonal: from the top-left corner of its first square (query bos + n, key bos + n − offset) to
    # the bottom-right corner of its last; each dash crosses the corner between two squares, each gap a square's
    # centre, so the weights it marks show through.
    q0 = bos + n
    k0 = q0 - offset
    if 0 <= k0 < m and q0 < m:
        half = c * math.sqrt(2) / 2
        out.append(
            f'<line class="induction-diagonal" x1="{x(k0):.2f}" y1="{y(q0):.2f}" x2="{x(m - offset):.2f}" '
            f'y2="{y(m):.2f}" stroke="{DIAGONAL}" stroke-width="{max(2.5, 0.45 * c):.2f}" stroke-linecap="butt" '
            f'stroke-dasharray="{half:.2f} {half:.2f}" stroke-dashoffset="{half / 2:.2f}"/>'
        )
    # Tick numbers: every `step` positions, at the squares' centres.
    step = nice_step(m - 1)
    for v in range(0, m, step):
        px, py = x(v + 0.5), y(v + 0.5)
        out.append(f'<line x1="{px:.1f}" y1="{top + plot}" x2="{px:.1f}" y2="{top + plot + 5}" stroke="{EDGE}"/>')
        out.append(f'<text x="{px:.1f}" y="{top + plot + 6 + tick}" font-size="{tick}" text-anchor="middle" '
                   f'fill="{INK}" class="tick">{v}</text>')  # fmt: skip
        out.append(f'<line x1="{left - 5}" y1="{py:.1f}" x2="{left}" y2="{py:.1f}" stroke="{EDGE}"/>')
        out.append(f'<text x="{left - 8}" y="{py + tick / 3:.1f}" font-size="{tick}" text-anchor="end" fill="{INK}" '
                   f'class="tick">{v}</text>')  # fmt: skip
    cx, cy = left + plot / 2, top + plot / 2
    out.append(f'<text x="{cx:.1f}" y="{height - 8}" font-size="{title}" text-anchor="middle" fill="{INK}" '
               f'class="axis-title" data-axis="x">{escape(t("heads.pattern.x"))}</text>')  # fmt: skip
    out.append(f'<text x="16" y="{cy:.1f}" font-size="{title}" text-anchor="middle" fill="{INK}" class="axis-title" '
               f'data-axis="y" transform="rotate(-90 16 {cy:.1f})">{escape(t("heads.pattern.y"))}</text>')  # fmt: skip
    out.append("</svg>")
    return "".join(out)


def loss_bars(
    positions: Sequence[float], n: int, knocked: Sequence[float] | None, t: Callable[..., str], width: int = 800
) -> str:
    """The probe's loss at each position as bars (blue while the target is in the first copy, red in the second),
    the loss with the heads knocked out as a black line over them; the loss axis (nats) and the positions numbered
    and titled."""
    left, right, top, bottom, height = 58, 12, 12, 46, 200
    tick, title = 14, 15
    count = max(len(positions), 1)
    highest = max([*positions, *(knocked or ()), 1.0])
    step = nice_step(math.ceil(highest), 5)
    ceiling = step * math.ceil(highest / step)
    plot_w, plot_h = width - left - right, height - top - bottom
    bar = plot_w / count

    def y(v: float) -> float:
        return top + plot_h * (1 - min(v, ceiling) / ceiling)

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="loss-bars" viewBox="0 0 {width} {height}" width="{width}" '
        f'height="{height}" role="img" aria-label="{escape(t("heads.probe.bars"))}">'
    ]
    for level in range(0, ceiling + 1, step):  # the loss axis: its grid lines and numbers
        at = y(level)
        out.append(f'<line x1="{left}" y1="{at:.1f}" x2="{width - right}" y2="{at:.1f}" stroke="#e4e9ef"/>')
        out.append(f'<text x="{left - 7}" y="{at + tick / 3:.1f}" font-size="{tick}" text-anchor="end" '
                   f'fill="{INK}" class="tick">{level}</text>')  # fmt: skip
    for p, v in enumerate(positions):
        colour = "#2166ac" if p < n else "#b2182b"
        out.append(f'<rect x="{left + p * bar + 0.12 * bar:.2f}" y="{y(v):.2f}" width="{0.76 * bar:.2f}" '
                   f'height="{top + plot_h - y(v):.2f}" fill="{colour}"><title>{p}: {v:.2f}</title></rect>')  # fmt: skip
    if knocked:
        pts = " ".join(f"{left + (p + 0.5) * bar:.1f},{y(v):.1f}" for p, v in enumerate(knocked))
        out.append(f'<polyline points="{pts}" fill="none" stroke="#000" stroke-width="2.2" data-knocked/>')
    base = top + plot_h
    out.append(f'<line x1="{left}" y1="{base}" x2="{width - right}" y2="{base}" stroke="{EDGE}"/>')
    out.append(f'<line x1="{left}" y1="{top}" x2="{left}" y2="{base}" stroke="{EDGE}"/>')
    for p in range(0, count, nice_step(count - 1, 9)):  # the positions
        px = left + (p + 0.5) * bar
        out.append(f'<line x1="{px:.1f}" y1="{base}" x2="{px:.1f}" y2="{base + 5}" stroke="{EDGE}"/>')
        out.append(f'<text x="{px:.1f}" y="{base + 6 + tick}" font-size="{tick}" text-anchor="middle" fill="{INK}" '
                   f'class="tick">{p}</text>')  # fmt: skip
    out.append(f'<text x="{left + plot_w / 2:.1f}" y="{height - 6}" font-size="{title}" text-anchor="middle" '
               f'fill="{INK}" class="axis-title" data-axis="x">{escape(t("heads.probe.x"))}</text>')  # fmt: skip
    cy = top + plot_h / 2
    out.append(f'<text x="16" y="{cy:.1f}" font-size="{title}" text-anchor="middle" fill="{INK}" class="axis-title" '
               f'data-axis="y" transform="rotate(-90 16 {cy:.1f})">{escape(t("heads.probe.y"))}</text>')  # fmt: skip
    out.append("</svg>")
    return "".join(out)
