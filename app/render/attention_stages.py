"""The five attention stages, one presentation each: formula, what it does, what to notice, matrices, colour scale.

Every function reads the stage's numbers from the Trace it is given (a block's own attention trace inside a block);
a formula reads only the trace's spec, so a long context's lazy trace has one too.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from engine.attention import Trace

from .arrays import to_numpy
from .cells import MatrixView, dims, matrix_view, row_stats
from .page import kv_head, mathml
from .presentation import Presentation, Scale, said


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
