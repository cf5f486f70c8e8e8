"""Stages as data: every stage key has one presentation — formula, what it does, what to notice in these numbers,
its matrices, the colour scale of its main tensor — and every page that shows the stage (the lab, the block page
around its attention, a notebook) asks this table (`REGISTRY`, `present`, `matrices`) instead of keeping an if-chain
of its own.

A presentation's functions take the trace the stage belongs to: an attention Trace for the five attention stages
(a block's own attention trace when shown inside a block, or a long context's lazy trace for the formula and what
it does: a formula reads only the trace's spec), a BlockTrace for the stages around it (norms, residuals, FFN),
whose norms and residuals read differently before (Pre-LN) and after (Post-LN) the sublayers.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from engine.attention import Trace
from engine.block import BlockTrace

from .arrays import to_numpy
from .cells import MatrixView, dims, matrix_view, row_stats
from .page import kv_head, mathml

Scale = Literal["diverging", "sequential", "plain"]  # how a matrix's numbers map to colours (cells.matrix_view)


@dataclass(frozen=True)
class Presentation:
    formula: Callable[[Any], str]  # trace -> MathML
    explain: Callable[[Any], str]  # trace -> the catalogue key of "what happens"
    notice: Callable[[Any, Any], str]  # trace, translator -> "what to notice" in these numbers
    matrices: Callable[[Any, int], list[MatrixView]]  # trace, head -> the matrices shown cell by cell
    scale: Scale  # the colour scale of the stage's main tensor (its heat map when the trace is large)


def said(key: str) -> Callable[[Any], str]:
    """An `explain` that reads nothing from the trace: always the catalogue key `key`."""
    return lambda trace: key


# --- The five attention stages -----------------------------------------------------------------------------------


def _bias(spec: Any, name: str) -> str:
    return f" + b_{name}" if spec.bias else ""


def _axes(spec: Any) -> tuple[list[str], list[str], str]:
    """The rows (queries), the columns (keys) and the shape symbol of an (N, N_kv) matrix."""
    tok = list(spec.tokens)
    return tok, list(spec.kv_tokens) or tok, "(N, N_kv)" if spec.kv_tokens else "(N, N)"


# Formulas.


def projection_formula(trace: Trace) -> str:
    spec = trace.spec
    rope = (
        rf",\qquad \tilde q_m = R_m q_m,\ \tilde k_n = R_n k_n,\ \theta_i = {spec.rope_base:g}^{{-2i/d_k}}"
        if spec.positions == "rope"
        else ""
    )
    pos = r"X = E + P,\quad " if spec.positions in ("sinusoidal", "learned") else ""
    src = "S" if spec.kv_tokens else "X"
    q, k, v = (_bias(spec, n) for n in "QKV")
    return mathml(rf"{pos}Q = XW_Q{q},\quad K = {src}W_K{k},\quad V = {src}W_V{v}{rope}")


def scores_formula(trace: Trace) -> str:
    spec = trace.spec
    s = {"sqrt_dk": rf"\sqrt{{d_k}} = {spec.scale_value:g}", "none": "1", "dk": rf"d_k = {spec.d_k}"}[spec.scale]
    return mathml(rf"S = \frac{{QK^\top}}{{s}},\qquad s = {s}")


def mask_formula(trace: Trace) -> str:
    spec = trace.spec
    cases = {
        "none": r"M_{ij} = 0",
        "causal": r"M_{ij} = \begin{cases} 0 & j \le i \\ -\infty & j > i \end{cases}",
        "padding": r"M_{ij} = \begin{cases} 0 & j \notin \mathrm{pad} \\ -\infty & j \in \mathrm{pad} \end{cases}",
        "document": r"M_{ij} = \begin{cases} 0 & \mathrm{doc}_j = \mathrm{doc}_i,\ j \le i \\ -\infty & \mathrm{otherwise}"
        r" \end{cases}",
        "sliding_window": rf"M_{{ij}} = \begin{{cases}} 0 & i - {spec.window} < j \le i \\ -\infty & \mathrm{{otherwise}}"
        r" \end{cases}",
        "prefix_lm": rf"M_{{ij}} = \begin{{cases}} 0 & j < {spec.prefix} \ \mathrm{{or}}\ j \le i \\ -\infty & "
        r"\mathrm{otherwise} \end{cases}",
        "custom": r"M_{ij} = \begin{cases} 0 & \mathrm{allowed}(i, j) \\ -\infty & \mathrm{otherwise} \end{cases}",
    }
    return mathml(rf"S' = S + M,\qquad {cases[spec.mask]}")


def softmax_formula(trace: Trace) -> str:
    return mathml(r"A_{ij} = \frac{\exp(S'_{ij} - m_i)}{\sum_{k} \exp(S'_{ik} - m_i)},\qquad m_i = \max_k S'_{ik}")


def weighted_sum_formula(trace: Trace) -> str:
    return mathml(
        r"\mathrm{head}_h = A_h V_h,\qquad O = \mathrm{Concat}(\mathrm{head}_0, \dots, \mathrm{head}_{H-1})\,W_O"
        + _bias(trace.spec, "O")
    )


# What to notice in these numbers.


def projection_notice(trace: Trace, t: Any) -> str:
    spec = trace.spec
    if spec.kv_tokens:
        return str(t("notice.projection.cross", n=spec.n_tokens, m=len(spec.kv_tokens)))
    if spec.positions == "rope":
        return str(t("notice.projection.rope", base=spec.rope_base, pairing=t(f"pairing.{spec.rope_pairing}")))
    if spec.positions in ("sinusoidal", "learned"):
        return str(t("notice.projection.absolute"))
    if spec.kv_heads != spec.n_heads:
        return str(t("notice.projection.gqa", kv=spec.kv_heads, h=spec.n_heads, g=spec.n_heads // spec.kv_heads))
    return str(t("notice.projection"))


def scores_notice(trace: Trace, t: Any) -> str:
    spec = trace.spec
    raw, scaled = to_numpy(trace.scores.raw), to_numpy(trace.scores.scaled)
    return str(
        t(
            f"notice.scores.{spec.scale}",
            max=float(np.abs(scaled).max()),
            std=float(scaled.std()),
            raw_std=float(raw.std()),
            s=spec.scale_value,
        )
    )


def mask_notice(trace: Trace, t: Any) -> str:
    spec = trace.spec
    n = spec.n_tokens
    count = int(np.isinf(to_numpy(trace.mask.mask)).sum())
    pads = ", ".join(str(p) for p in spec.pad_positions) or "—"
    total = n * (len(spec.kv_tokens) or n)
    text = t(f"notice.mask.{spec.mask}", count=count, total=total, pads=pads, window=spec.window, prefix=spec.prefix)
    return str(text) + " " + str(t("notice.mask.loss"))


def softmax_notice(trace: Trace, t: Any) -> str:
    spec = trace.spec
    n = spec.n_tokens
    w = to_numpy(trace.softmax.weights)
    if spec.mask in ("causal", "document") and w[0, 0, 0] == 1.0:
        return str(t("notice.softmax.causal", first=spec.tokens[0]))
    stats = row_stats(w[0], list(spec.kv_tokens or spec.tokens))
    best = max(range(n), key=lambda i: stats[i].max)
    flat = max(s.entropy for s in stats)
    top = stats[best].max
    return str(t("notice.softmax.other", token=spec.tokens[best], max=top, entropy=flat, n=n, uniform=math.log(n)))


def weighted_sum_notice(trace: Trace, t: Any) -> str:
    return str(t("notice.weighted_sum" if trace.spec.mask == "causal" else "notice.weighted_sum.none"))


# The matrices each stage shows for one head (small traces).


def projection_matrices(trace: Trace, head: int) -> list[MatrixView]:
    spec, p = trace.spec, trace.projection
    tok, keys, _ = _axes(spec)
    h, g = head, kv_head(spec, head)
    dm, dk = dims(spec.d_model), dims(spec.d_k)
    out = []
    if p.embedding is not None and p.positions is not None:
        out += [
            matrix_view("embedding", "E", to_numpy(p.embedding), tok, dm, "(N, d_model)", "diverging"),
            matrix_view("positions", "P", to_numpy(p.positions), tok, dm, "(N, d_model)", "diverging"),
        ]
    out.append(matrix_view("x", "X", to_numpy(p.x), tok, dm, "(N, d_model)", "diverging"))
    if p.source is not None:
        out.append(matrix_view("source", "S", to_numpy(p.source), keys, dm, "(N_kv, d_model)", "diverging"))
    rows_kv = "(N_kv, d_k)" if spec.kv_tokens else "(N, d_k)"
    out += [
        matrix_view("q", "Q", to_numpy(p.q[h]), tok, dk, "(N, d_k)", "diverging", h),
        matrix_view("k", "K", to_numpy(p.k[g]), keys, dk, rows_kv, "diverging", g),
        matrix_view("v", "V", to_numpy(p.v[g]), keys, dk, rows_kv, "diverging", g),
    ]
    if p.q_rot is not None and p.k_rot is not None:
        out += [
            matrix_view("q_rot", "Q̃ = RoPE(Q)", to_numpy(p.q_rot[h]), tok, dk, "(N, d_k)", "diverging", h),
            matrix_view("k_rot", "K̃ = RoPE(K)", to_numpy(p.k_rot[g]), keys, dk, rows_kv, "diverging", g),
        ]
    return out


def scores_matrices(trace: Trace, head: int) -> list[MatrixView]:
    tok, keys, nn = _axes(trace.spec)
    s = trace.scores
    return [
        matrix_view("raw", "QKᵀ", to_numpy(s.raw[head]), tok, keys, nn, "diverging", head),
        matrix_view("scaled", "S = QKᵀ / s", to_numpy(s.scaled[head]), tok, keys, nn, "diverging", head),
    ]


def mask_matrices(trace: Trace, head: int) -> list[MatrixView]:
    tok, keys, nn = _axes(trace.spec)
    m = trace.mask
    # S′ keeps the colours of S: the mask changes which cells are −∞, not the scale of the others.
    scaled = to_numpy(trace.scores.scaled[head])
    return [
        matrix_view("mask", "M", to_numpy(m.mask), tok, keys, nn, "plain"),
        matrix_view("masked", "S′ = S + M", to_numpy(m.masked[head]), tok, keys, nn, "diverging", head,
                    bound=float(np.abs(scaled).max()) if scaled.size else 0.0),
    ]  # fmt: skip


def softmax_matrices(trace: Trace, head: int) -> list[MatrixView]:
    tok, keys, nn = _axes(trace.spec)
    hidden = ~np.isfinite(to_numpy(trace.mask.mask))
    return [
        matrix_view("weights", "A", to_numpy(trace.softmax.weights[head]), tok, keys, nn, "sequential", head,
                    masked=hidden),
    ]  # fmt: skip


def weighted_sum_matrices(trace: Trace, head: int) -> list[MatrixView]:
    spec, ws = trace.spec, trace.weighted_sum
    tok = list(spec.tokens)
    dm = dims(spec.d_model)
    return [
        matrix_view("heads", f"head{head} = A V", to_numpy(ws.heads[head]), tok, dims(spec.d_k), "(N, d_k)",
                    "diverging", head),
        matrix_view("concat", "Concat", to_numpy(ws.concat), tok, dm, "(N, d_model)", "diverging"),
        matrix_view("output", "O", to_numpy(ws.output), tok, dm, "(N, d_model)", "diverging"),
    ]  # fmt: skip


# The table: one row per stage, in order — key, formula, notice, matrices, the main tensor's colour scale.
Row = tuple[str, Callable[[Trace], str], Callable[[Trace, Any], str], Callable[[Trace, int], list[MatrixView]], Scale]
ROWS: tuple[Row, ...] = (
    ("projection", projection_formula, projection_notice, projection_matrices, "diverging"),
    ("scores", scores_formula, scores_notice, scores_matrices, "diverging"),
    ("mask", mask_formula, mask_notice, mask_matrices, "diverging"),  # S′ = S + M keeps the colours of S
    ("softmax", softmax_formula, softmax_notice, softmax_matrices, "sequential"),  # weights from 0 to 1
    ("weighted_sum", weighted_sum_formula, weighted_sum_notice, weighted_sum_matrices, "diverging"),
)
ATTENTION_STAGES: dict[str, Presentation] = {
    key: Presentation(formula, said(f"explain.{key}"), notice, matrices, scale)
    for key, formula, notice, matrices, scale in ROWS
}


# --- The stages around a block's attention ---------------------------------------------------------------


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


REGISTRY: dict[str, Presentation] = ATTENTION_STAGES | BLOCK_STAGES
if ATTENTION_STAGES.keys() & BLOCK_STAGES.keys():
    raise ValueError(f"stages presented twice: {sorted(ATTENTION_STAGES.keys() & BLOCK_STAGES.keys())}")


def owner(trace: Any, key: str) -> Any:
    """The trace a stage belongs to: a block's attention stages live in its attention trace."""
    attention = getattr(trace, "attention", None)
    return attention if attention is not None and key in attention.order else trace


def present(trace: Any, key: str, t: Any) -> dict[str, str]:
    """What every page shows above a stage's numbers: its formula, what it does and what to notice."""
    p, target = REGISTRY[key], owner(trace, key)
    return {"formula": p.formula(target), "explain": str(t(p.explain(target))), "notice": p.notice(target, t)}


def matrices(trace: Any, key: str, head: int) -> list[MatrixView]:
    return REGISTRY[key].matrices(owner(trace, key), head)
