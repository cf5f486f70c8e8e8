"""The block page's view: formulas, notices and matrices of the stages around the attention (norms, residuals,
FFN). The attention stages inside are presented exactly as on the lab page (the same functions, on the block's own
attention trace)."""

from __future__ import annotations

from typing import Any

import numpy as np

from engine import STAGES
from engine.block import BlockTrace

from ..render.arrays import to_numpy
from ..render.cells import MatrixView, dims, matrix_view
from ..render.page import mathml
from ..render.stages import Presentation, register


def block_formula(trace: BlockTrace, key: str) -> str:
    spec = trace.spec
    norm = (
        r"\mathrm{LN}(x) = \gamma \odot \frac{x - \mu}{\sqrt{\sigma^2 + \epsilon}} + \beta"
        if spec.norm == "layernorm"
        else r"\mathrm{RMSNorm}(x) = g \odot \frac{x}{\sqrt{\frac{1}{d}\sum_i x_i^2 + \epsilon}}"
    )
    pre = spec.placement == "pre"
    b = "+ b_1" if trace.weights.b_up is not None else ""
    hidden = rf"h = \mathrm{{GELU}}(x W_1 {b})" if spec.ffn == "gelu" else r"h = \mathrm{SiLU}(x W_g) \odot (x W_u)"
    down = r"f = h W_2" + (" + b_2" if trace.weights.b_down is not None else "")
    latex = {
        "ln1": norm,
        "ln2": norm,
        "residual1": r"r = x + \mathrm{Attn}(\mathrm{LN}_1(x))" if pre else r"r = x + \mathrm{Attn}(x)",
        "ffn_hidden": hidden,
        "ffn_out": down,
        "output": r"y = r + \mathrm{FFN}(\mathrm{LN}_2(r))" if pre else r"y = \mathrm{LN}_2(r + \mathrm{FFN}(r))",
    }[key]
    return mathml(latex)


def block_notice(trace: BlockTrace, key: str, t: Any) -> str:
    spec = trace.spec
    st = {k: to_numpy(v) for k, v in trace.stages[key].items()}
    residual1 = to_numpy(trace.stages["residual1"]["residual1"])
    block_input = to_numpy(trace.stages["ln1" if spec.placement == "pre" else "residual1"]["input"])
    if key in ("ln1", "ln2"):
        y = st[key]
        if spec.placement == "pre":
            src = block_input if key == "ln1" else residual1
        else:
            src = residual1 if key == "ln1" else st["residual2"]
        if spec.norm == "layernorm":
            sd = src.std(-1)
            mean = float(np.abs(y.mean(-1)).max())
            return str(
                t("bnotice.layernorm", mean=mean, std=float(y.std(-1).mean()), lo=float(sd.min()), hi=float(sd.max()))
            )
        means = src.mean(-1)
        rms = float(np.sqrt((y**2).mean(-1)).mean())
        return str(t("bnotice.rmsnorm", rms=rms, lo=float(means.min()), hi=float(means.max())))
    if key == "residual1":
        a = to_numpy(trace.attention.weighted_sum.output)
        return str(t("bnotice.residual1", a=float(np.abs(a).max()), x=float(np.abs(block_input).max())))
    if key == "ffn_hidden":
        if spec.ffn == "gelu":
            h = st["ffn_hidden"]
            return str(t("bnotice.gelu", ff=spec.ff, pct=100 * float((h < 0).mean()), low=float(h.min())))
        gate = st["gate"]
        silu = gate / (1 + np.exp(-gate))
        return str(t("bnotice.swiglu", ff=spec.ff, pct=100 * float((np.abs(silu) < 0.1).mean())))
    if key == "ffn_out":
        return str(t("bnotice.ffn_out"))
    y = st["output"]
    return str(t("bnotice.output", shape=f"({y.shape[0]}, {y.shape[1]})", m=float(np.abs(y).max())))


def block_matrices(trace: BlockTrace, key: str, head: int) -> list[MatrixView]:
    tok = list(trace.tokens)
    out = []
    for name, tensor in trace.stages[key].items():
        a = to_numpy(tensor)
        symbol = (
            "(N, d_ff)" if a.shape[1] == trace.spec.ff and a.shape[1] != trace.spec.attn.d_model else "(N, d_model)"
        )
        m = matrix_view(name, name, a, tok, dims(a.shape[1]), symbol, "diverging")
        m.links = False
        out.append(m)
    return out


def strip_box(shape: tuple[int, ...]) -> tuple[int, int]:
    """Display width and height of a heat map: wide strips for (N, d), at most 600 px tall."""
    rows, cols = shape
    height = round(min(600, max(48, 1200 * rows / cols, 6 * rows)))
    width = round(min(1200, height * cols / rows)) if 1200 * rows / cols > 600 else 1200
    return width, height


def stage_label(key: str, t: Any) -> str:
    return str(t(f"stage.{key}") if key in STAGES else t(f"bstage.{key}"))


def block_explain(trace: BlockTrace, key: str) -> str:
    """Norms and residuals read differently before (Pre-LN) and after (Post-LN) the sublayers."""
    return (
        f"bexplain.{key}.{trace.spec.placement}" if key in ("ln1", "ln2", "residual1", "output") else f"bexplain.{key}"
    )


def _block_stage(key: str) -> Presentation:
    return Presentation(
        formula=lambda trace: block_formula(trace, key),
        explain=lambda trace: block_explain(trace, key),
        notice=lambda trace, t: block_notice(trace, key, t),
        matrices=lambda trace, head: block_matrices(trace, key, head),
    )


BLOCK_STAGES = ("ln1", "residual1", "ln2", "ffn_hidden", "ffn_out", "output")  # around the five attention stages
for _key in BLOCK_STAGES:
    register(_key, _block_stage(_key))
