"""The stages around a block's attention (norms, residuals, FFN), one presentation each: formula, what it does,
what to notice, matrices, colour scale. The attention stages inside the block are app/render/attention_stages.py's,
on the block's own attention trace.

Norms and residuals read differently before (Pre-LN) and after (Post-LN) the sublayers: their formula, what they
do and what to notice follow the block's placement.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from engine.block import BlockTrace

from .arrays import to_numpy
from .cells import MatrixView, dims, matrix_view
from .page import mathml
from .presentation import Presentation, said


def _pre(trace: BlockTrace) -> bool:
    return trace.spec.placement == "pre"


def _block_input(trace: BlockTrace) -> np.ndarray:
    return to_numpy(trace.stages["ln1" if _pre(trace) else "residual1"]["input"])


def _residual1(trace: BlockTrace) -> np.ndarray:
    return to_numpy(trace.stages["residual1"]["residual1"])


# Formulas.


def norm_formula(trace: BlockTrace) -> str:
    """Both norms: LayerNorm or RMSNorm, the block's."""
    if trace.spec.norm == "layernorm":
        return mathml(r"\mathrm{LN}(x) = \gamma \odot \frac{x - \mu}{\sqrt{\sigma^2 + \epsilon}} + \beta")
    return mathml(r"\mathrm{RMSNorm}(x) = g \odot \frac{x}{\sqrt{\frac{1}{d}\sum_i x_i^2 + \epsilon}}")


def residual1_formula(trace: BlockTrace) -> str:
    return mathml(r"r = x + \mathrm{Attn}(\mathrm{LN}_1(x))" if _pre(trace) else r"r = x + \mathrm{Attn}(x)")


def ffn_hidden_formula(trace: BlockTrace) -> str:
    if trace.spec.ffn != "gelu":
        return mathml(r"h = \mathrm{SiLU}(x W_g) \odot (x W_u)")
    b = "+ b_1" if trace.weights.b_up is not None else ""
    return mathml(rf"h = \mathrm{{GELU}}(x W_1 {b})")


def ffn_out_formula(trace: BlockTrace) -> str:
    return mathml(r"f = h W_2" + (" + b_2" if trace.weights.b_down is not None else ""))


def output_formula(trace: BlockTrace) -> str:
    pre = _pre(trace)
    return mathml(r"y = r + \mathrm{FFN}(\mathrm{LN}_2(r))" if pre else r"y = \mathrm{LN}_2(r + \mathrm{FFN}(r))")


# What to notice in these numbers.


def norm_notice(trace: BlockTrace, key: str, src: np.ndarray, t: Any) -> str:
    """A norm's output `key` against what it normalised (`src`): LayerNorm's rows centred with unit spread,
    RMSNorm's with unit RMS whatever their means."""
    y = to_numpy(trace.stages[key][key])
    if trace.spec.norm == "layernorm":
        sd = src.std(-1)
        mean = float(np.abs(y.mean(-1)).max())
        return str(
            t("bnotice.layernorm", mean=mean, std=float(y.std(-1).mean()), lo=float(sd.min()), hi=float(sd.max()))
        )
    means = src.mean(-1)
    rms = float(np.sqrt((y**2).mean(-1)).mean())
    return str(t("bnotice.rmsnorm", rms=rms, lo=float(means.min()), hi=float(means.max())))


def ln1_notice(trace: BlockTrace, t: Any) -> str:
    return norm_notice(trace, "ln1", _block_input(trace) if _pre(trace) else _residual1(trace), t)


def ln2_notice(trace: BlockTrace, t: Any) -> str:
    src = _residual1(trace) if _pre(trace) else to_numpy(trace.stages["ln2"]["residual2"])
    return norm_notice(trace, "ln2", src, t)


def residual1_notice(trace: BlockTrace, t: Any) -> str:
    a = to_numpy(trace.attention.weighted_sum.output)
    return str(t("bnotice.residual1", a=float(np.abs(a).max()), x=float(np.abs(_block_input(trace)).max())))


def ffn_hidden_notice(trace: BlockTrace, t: Any) -> str:
    spec, st = trace.spec, trace.stages["ffn_hidden"]
    if spec.ffn == "gelu":
        h = to_numpy(st["ffn_hidden"])
        return str(t("bnotice.gelu", ff=spec.ff, pct=100 * float((h < 0).mean()), low=float(h.min())))
    gate = to_numpy(st["gate"])
    silu = gate / (1 + np.exp(-gate))
    return str(t("bnotice.swiglu", ff=spec.ff, pct=100 * float((np.abs(silu) < 0.1).mean())))


def ffn_out_notice(trace: BlockTrace, t: Any) -> str:
    return str(t("bnotice.ffn_out"))


def output_notice(trace: BlockTrace, t: Any) -> str:
    y = to_numpy(trace.stages["output"]["output"])
    return str(t("bnotice.output", shape=f"({y.shape[0]}, {y.shape[1]})", m=float(np.abs(y).max())))


# The matrices: every tensor of the stage, (N, d_model) or (N, d_ff), cell by cell.


def stage_tensors(trace: BlockTrace, key: str) -> list[MatrixView]:
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


def tensors(key: str) -> Callable[[BlockTrace, int], list[MatrixView]]:
    """Stage `key`'s matrices, the same for every head."""
    return lambda trace, head: stage_tensors(trace, key)


def placed(key: str) -> Callable[[BlockTrace], str]:
    """What stage `key` does, Pre-LN or Post-LN: the catalogue key of the block's placement."""
    return lambda trace: f"bexplain.{key}.{trace.spec.placement}"


# The table: one row per stage, in the Pre-LN order.
BLOCK_STAGES: dict[str, Presentation] = {
    key: Presentation(formula, explain, notice, tensors(key), "diverging")
    for key, formula, explain, notice in (
        ("ln1", norm_formula, placed("ln1"), ln1_notice),
        ("residual1", residual1_formula, placed("residual1"), residual1_notice),
        ("ln2", norm_formula, placed("ln2"), ln2_notice),
        ("ffn_hidden", ffn_hidden_formula, said("bexplain.ffn_hidden"), ffn_hidden_notice),
        ("ffn_out", ffn_out_formula, said("bexplain.ffn_out"), ffn_out_notice),
        ("output", output_formula, placed("output"), output_notice),
    )
}
