"""What /cost shows, as data: one transformer block's FLOPs per stage counted from its shapes (app/cost/flops.py)
and the same stages timed on this machine as N grows for a fixed d, with the crossover where attention's N² terms
overtake the projections' N·d² ones, for the toy, GPT-2's block and SmolLM2's."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field

from ..render.charts import Series, line_chart
from ..web.state import AsciiInt, PageQuery
from ..web.view import HIDDEN, View
from .flops import SHAPES, STAGES, crossover, flops, grid, measure, measured_crossover


class CostQuery(PageQuery):
    """The block's shapes and how far N goes."""

    model_config = ConfigDict(extra="ignore")

    model: Literal["toy", "gpt2", "smollm2"] = Field("gpt2", description="the block's shapes: toy, gpt2, smollm2")
    n_max: AsciiInt = Field(1024, ge=64, le=2048, description="the longest sequence timed (64 to 2048)")


@dataclass(frozen=True)
class Row:
    n: int
    flops: dict[str, int]  # per stage
    attention: int  # scores + weighted sum
    projections: int  # Q, K, V and W_O
    seconds: dict[str, float] | None  # per stage, measured (up to n_max; beyond it counted only)
    attention_share: float  # of the block's FLOPs


class CostView(View):
    """/cost: the block's stages counted and timed over N."""

    template = "cost.html"
    blocks = ()
    kind = "cost"

    model: str
    d: int
    heads: int
    kv_heads: int
    d_k: int
    d_ff: int
    gated: bool
    n_max: int
    n_counted: int  # the longest sequence counted
    rows: list[Row]
    crossover: float  # N where attention's FLOPs equal the projections'
    crossover_ffn: float  # … the projections' and the FFN's together
    measured_crossover: float | None  # N where attention's measured time reaches the projections'
    models: list[tuple[str, str]]  # each shape and its link
    flops_chart: Annotated[str, HIDDEN] = ""
    time_chart: Annotated[str, HIDDEN] = ""


def href(model: str, n_max: int, lang: str) -> str:
    return f"/cost?model={model}&n_max={n_max}&lang={lang}"


N_COUNTED = 16384  # counting is arithmetic: far enough for every shape's crossovers


def cost_view(q: CostQuery, t: Any, lang: str) -> CostView:
    s = SHAPES[q.model]
    ns = grid(q.n_max)
    counted = grid(N_COUNTED)
    timed = measure(q.model, q.n_max)
    rows = []
    for n in sorted(set(ns) | set(counted)):
        f = flops(s, n)
        attention, projections = f["scores"] + f["weighted_sum"], f["projections"] + f["output"]
        seconds = {k: timed[k][ns.index(n)] for k in STAGES} if n in ns else None
        rows.append(Row(n, f, attention, projections, seconds, attention / sum(f.values())))
    n1, n2 = crossover(s)
    att_t = [timed["scores"][i] + timed["weighted_sum"][i] for i in range(len(ns))]
    proj_t = [timed["projections"][i] + timed["output"][i] for i in range(len(ns))]
    xs = [float(n) for n in ns]
    cs = [float(r.n) for r in rows]
    per_token = [r.attention / r.n / 1e6 for r in rows], [r.projections / r.n / 1e6 for r in rows]
    ffn = [r.flops["ffn"] / r.n / 1e6 for r in rows]
    low, high = min(*per_token[0], *per_token[1], *ffn), max(*per_token[0], *per_token[1], *ffn)
    # Both axes log: per token, the projections' line is flat and attention's a straight rise (4·N·d), so they meet
    # at N* whatever the shapes; on a linear axis the toy's projections (0.008 MFLOPs a token) lie on the floor
    # under attention's 2 MFLOPs at N = 16384 and its crossover at N = 64 cannot be seen. The crossover is also
    # drawn as a vertical line, named in the legend.
    flops_series = [
        Series(t("cost.series.attention"), cs, per_token[0]),
        Series(t("cost.series.projections"), cs, per_token[1]),
        Series(t("cost.series.ffn"), cs, ffn, dashed=True),
        Series(t("cost.series.crossover", n=round(n1)), [n1, n1], [low, high], dashed=True),
    ]
    time_series = [
        Series(t("cost.series.attention"), xs, [x * 1e3 for x in att_t]),
        Series(t("cost.series.projections"), xs, [x * 1e3 for x in proj_t]),
        Series(t("cost.series.ffn"), xs, [x * 1e3 for x in timed["ffn"]], dashed=True),
    ]

    # Two drawings of each (the page's CSS shows one): the page's 560 units wide, and a phone's 340, whose 13-unit
    # texts stay about 13 px on a 390 px screen instead of shrinking to 8 (its title shorter: 340 units hold ~35
    # characters).
    def drawn(series: list[Series], title: str, y_label: str, name: str) -> str:
        return line_chart(series, title, "N", y_label, x_log=True, y_log=True, chart_id=name) + line_chart(
            series, t(f"cost.chart.{name}.short"), "N", y_label, x_log=True, y_log=True, width=340, height=340,
            chart_id=name + "-narrow",
        )  # fmt: skip

    flops_chart = drawn(flops_series, t("cost.chart.flops", n=round(n1)), t("cost.chart.mflops"), "flops")
    time_chart = drawn(time_series, t("cost.chart.time"), "ms", "time")
    return CostView(
        model=q.model, d=s.d, heads=s.heads, kv_heads=s.kv_heads, d_k=s.d_k, d_ff=s.d_ff, gated=s.gated,
        n_max=q.n_max, n_counted=N_COUNTED, rows=rows, crossover=n1, crossover_ffn=n2,
        measured_crossover=measured_crossover(ns, att_t, proj_t),
        models=[(m, href(m, q.n_max, lang)) for m in SHAPES], flops_chart=flops_chart, time_chart=time_chart,
    )  # fmt: skip
