"""Stages as data: every stage key has one presentation — formula, what it does, what to notice in these numbers,
its matrices, the colour scale of its main tensor — and every page that shows the stage (the lab, the block page
around its attention, a notebook) asks this table (`REGISTRY`, `present`, `matrices`) instead of keeping an if-chain
of its own.

A presentation's functions take the trace the stage belongs to: an attention Trace for the five attention stages
(a block's own attention trace when shown inside a block, or a long context's lazy trace for the formula and what
it does: a formula reads only the trace's spec), a BlockTrace for the stages around it (norms, residuals, FFN),
whose norms and residuals read differently before (Pre-LN) and after (Post-LN) the sublayers.

Around the stages, what the lab page shows of a trace: what is small enough for cells, the weight matrices, the
arithmetic of one cell, a comparison's sides. Nothing here computes attention: every number comes from the Trace.
What is derived (row entropy, a score's terms) is derived from the trace's own tensors, so the page and the JSON
twin always agree.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import lru_cache, partial
from typing import Any, Literal, NotRequired

import numpy as np
from latex2mathml.converter import convert
from typing_extensions import TypedDict

from engine.attention import Trace
from engine.block import BlockTrace
from engine.spec import STAGES

from . import heatmap
from .arrays import to_numpy
from .cells import MatrixView, RowStats, dims, full, matrix_view, row_stats

# Traces up to these sizes show every number in cells; larger ones switch to heat maps. A classroom sentence is
# often 17–24 tokens, so tokens get more room than dimensions: an (N, N) matrix of 24 tokens still fits the page in
# its .scroll box, while a d_model past 16 turns Q, K, V and the weights into walls of numbers.
SMALL_TOKENS = 24
SMALL_DIMS = 16


TOKEN_BY_TOKEN = ("scores", "mask", "softmax")  # stages whose matrices are (N, N_kv): their size is the tokens'


def is_small(trace: Trace, key: str | None = None) -> bool:
    """Numbers in cells when they fit: every matrix of a small trace; the (N, N) matrices of a stage whose size is
    the tokens', whatever d_model (a 13-token SmolLM2 sentence shows its scores, mask and weights as cells)."""
    spec = trace.spec
    tokens_fit = spec.n_tokens <= SMALL_TOKENS and (len(spec.kv_tokens) or spec.n_tokens) <= SMALL_TOKENS
    return tokens_fit and (spec.d_model <= SMALL_DIMS or key in TOKEN_BY_TOKEN)


@lru_cache(maxsize=64)
def mathml(latex: str) -> str:
    return convert(latex, display="block")


def kv_head(spec: Any, head: int) -> int:
    """The K/V head a query head reads (GQA shares one among n_heads / n_kv_heads query heads)."""
    return head // (spec.n_heads // spec.kv_heads)


def weight_matrices(trace: Trace, key: str) -> list[MatrixView]:
    """W_Q, W_K, W_V beside stage 1 and W_O beside stage 5 (small traces only)."""
    w = trace.weights
    d = dims(trace.spec.d_model)
    names = {"projection": ("w_q", "w_k", "w_v"), "weighted_sum": ("w_o",)}.get(key, ())
    return [
        matrix_view(n, n.upper(), to_numpy(getattr(w, n)), d, d, "(d_model, d_model)", "diverging", links=False)
        for n in names
    ]


MINUS = re.compile(r"(?<![\w.])-(?=[\d.]|inf)")


def typeset(text: str) -> str:
    """A printed minus sign (U+2212) for every negative number; hyphens stay in words and subscripts."""
    return MINUS.sub("−", text).replace("−inf", "−∞")


SIGNED = re.compile(r"<mo>&#x02212;</mo><mn>([^<]*)</mn>")


class Checks(TypedDict):
    """The trace's own checks (engine `check_values`): its five stages against fused SDPA, head by head, and whether
    every row of the weights sums to one; a block's also against the reference implementation."""

    max_abs_diff_vs_sdpa: float
    rows_sum_to_one: bool
    max_abs_diff_vs_reference: NotRequired[float]


@dataclass(frozen=True)
class Line:
    """One line of a cell's computation: typeset mathematics (MathML, from LaTeX), or a sentence."""

    math: str | None = None
    text: str | None = None

    @classmethod
    def of(cls, latex: str) -> Line:
        # Every minus before a number here is a sign, not a subtraction: one <mn>, so it is set tight (−0.37).
        ml = SIGNED.sub(r"<mn>&#x02212;\1</mn>", convert(latex, display="inline"))
        return cls(math=ml.replace("<mo>&#x02212;</mo><mo>&#x0221E;</mo>", "<mn>&#x02212;&#x0221E;</mn>"))


@dataclass
class Arithmetic:
    title: str
    lines: list[Line]  # the computation, numbers filled in; indices count from 0, as the headers do
    result: str  # the cell's value, as its data-value

    def __post_init__(self) -> None:
        self.result = typeset(self.result)


def tex(v: float, digits: int | None = None) -> str:
    r"""A number for LaTeX: the shortest float32 text (or `digits` decimals), −∞ as \infty."""
    if not math.isfinite(v):
        return r"\mathrm{NaN}" if math.isnan(v) else (r"-\infty" if v < 0 else r"\infty")
    text = f"{v:.{digits}f}" if digits is not None else str(np.float32(v))
    return text.removeprefix("-") if float(text) == 0 else text  # no −0.000


WRITTEN_TERMS = 8  # a sum of more terms is written as its first two, ⋯, its last (768 would fill screens)


def _written(terms: list[str]) -> str:
    """A sum's terms as written: all of them, or the first two and the last around ⋯ (`elided` says so)."""
    if len(terms) <= WRITTEN_TERMS:
        return " + ".join(terms)
    return " + ".join(terms[:2]) + r" + \cdots + " + terms[-1]


def elided(n: int, t: Any) -> list[Line]:
    """The sentence under a sum of `n` terms written in part (none when every term is written)."""
    return [Line(text=str(t("cell.terms_elided", n=n, hidden=n - 3)))] if n > WRITTEN_TERMS else []


def _sum_terms(a: np.ndarray, b: np.ndarray) -> str:
    return _written([rf"({tex(float(x), 3)}) \cdot ({tex(float(y), 3)})" for x, y in zip(a, b, strict=True)])


def _affine(
    x_name: str, r: int, mat: str, col: int, x: np.ndarray, w: Any, bias: Any, out: float, t: Any
) -> list[Line]:
    """Row `r` of x times column `col` of W_mat (plus its bias, if any), term by term, and the result `out`."""
    b, bv = ("", "") if bias is None else (rf" + b_{{{mat}}}[{col}]", rf" + ({tex(float(bias[col]), 3)})")
    total = rf"\sum_{{t}} {x_name}_{{{r},t}}\, W_{{{mat}}}[t, {col}]{b} = {_sum_terms(x, to_numpy(w[:, col]))}{bv}"
    return [Line.of(total), *elided(len(x), t), Line.of(rf"= {tex(out)}")]


def arithmetic(trace: Trace, name: str, head: int, r: int, c: int, t: Any) -> Arithmetic | None:
    """The computation behind one cell, term by term, for the tensors where it is instructive."""
    spec = trace.spec
    tok = spec.tokens
    n, dk = spec.n_tokens, spec.d_k
    n_keys = len(spec.kv_tokens) or n
    key_tok = spec.kv_tokens or tok
    # Each tensor's columns (the output's: d_model); only K and V have a row per key, every other a row per query.
    cols = dict.fromkeys(("raw", "scaled", "masked", "weights"), n_keys) | dict.fromkeys(("heads", "q", "k", "v"), dk)
    rows = n_keys if name in ("k", "v") else n
    if not (0 <= r < rows and 0 <= c < cols.get(name, spec.d_model) and 0 <= head < spec.n_heads):
        return None
    if name in ("raw", "scaled", "masked"):
        q = to_numpy(trace.projection.query[head, r])
        k = to_numpy(trace.projection.key[kv_head(spec, head), c])
        raw = float(to_numpy(trace.scores.raw[head])[r, c])
        scaled = float(to_numpy(trace.scores.scaled[head])[r, c])
        lines = [
            Line.of(rf"q_{{{r}}} \cdot k_{{{c}}} = \sum_{{t}} q_{{{r},t}}\, k_{{{c},t}} = {_sum_terms(q, k)}"),
            *elided(len(q), t),
            Line.of(rf"= {tex(raw)}"),
            Line.of(rf"\div s = {tex(raw)} \div {spec.scale_value:g} = {tex(scaled)}"),
        ]
        result = full(scaled)
        if name == "masked":
            m = float(to_numpy(trace.mask.mask)[r, c])
            lines.append(Line.of(rf"+ M_{{{r},{c}}} = {tex(scaled)} + ({tex(m)}) = {tex(scaled + m)}"))
            result = full(scaled + m)
            if m == -math.inf:
                lines.append(Line(text=str(t("cell.masked_entry"))))
        return Arithmetic(str(t("cell.score", q=tok[r], k=key_tok[c])), lines, result)
    if name == "weights":
        s = to_numpy(trace.mask.masked[head, r])
        w = float(to_numpy(trace.softmax.weights[head])[r, c])
        finite = np.isfinite(s)
        title = str(t("cell.weight", q=tok[r], k=key_tok[c]))
        if not finite.any():
            return Arithmetic(title, [Line(text=str(t("cell.masked_row")))], "0")
        m = float(s[finite].max())
        terms = _written([rf"\exp({tex(float(v) - m, 3)})" for v in s[finite]])
        denom = float(np.exp(s[finite].astype(np.float64) - m).sum())
        lines = [
            Line.of(rf"m = \max_{{j}} S'_{{{r},j}} = {tex(m, 4)}"),
            Line.of(rf"\sum_{{j}} \exp(S'_{{{r},j}} - m) = {terms} = {denom:.4f}"),
            *elided(int(finite.sum()), t),
        ]
        if s[c] == -math.inf:
            lines.append(Line(text=str(t("cell.masked_entry"))))
        else:
            lines.append(Line.of(rf"a_{{{r},{c}}} = \exp({tex(float(s[c]) - m, 4)}) / {denom:.4f} = {tex(w)}"))
        return Arithmetic(title, lines, full(w))
    if name == "heads":
        a = to_numpy(trace.softmax.weights[head, r])
        v = to_numpy(trace.projection.v[kv_head(spec, head), :, c])
        out = float(to_numpy(trace.weighted_sum.heads[head])[r, c])
        lines = [Line.of(rf"\sum_{{j}} a_{{{r},j}}\, v_{{j,{c}}} = {_sum_terms(a, v)}"), *elided(len(a), t),
                 Line.of(rf"= {tex(out)}")]  # fmt: skip
        return Arithmetic(str(t("cell.output", q=tok[r], c=c)), lines, full(out))
    if name in ("q", "k", "v"):
        p = trace.projection
        x = to_numpy((p.source if name != "q" and p.source is not None else p.x)[r])
        head = head if name == "q" else kv_head(spec, head)
        col = head * dk + c
        out = float(to_numpy(getattr(p, name)[head])[r, c])
        w, bias = getattr(trace.weights, f"w_{name}"), getattr(trace.weights, f"b_{name}")
        label = tok[r] if name == "q" else key_tok[r]
        lines = _affine("x", r, name.upper(), col, x, w, bias, out, t)
        return Arithmetic(str(t("cell.projection", q=label, m=name.upper(), c=col)), lines, full(out))
    if name == "x":
        return _input_cell(trace, r, c, t)
    if name == "output":
        x = to_numpy(trace.weighted_sum.concat[r])
        out = float(to_numpy(trace.weighted_sum.output)[r, c])
        lines = _affine(r"\mathrm{concat}", r, "O", c, x, trace.weights.w_o, trace.weights.b_o, out, t)
        return Arithmetic(str(t("cell.final", q=tok[r], c=c)), lines, full(out))
    return None


def _input_cell(trace: Trace, r: int, c: int, t: Any) -> Arithmetic:
    """An input number: where it comes from (a real model's hidden state, the numbers the user gave, or a vector
    drawn for the token's text), and the position added to it when the positions are a table."""
    spec, p = trace.spec, trace.projection
    out = float(to_numpy(p.x)[r, c])
    lines = []
    if spec.token_ids:  # a pretrained model: what its layer's attention reads
        lines.append(Line(text=str(t("cell.input_model", layer=spec.layer))))
    elif spec.x is not None:
        lines.append(Line(text=str(t("cell.input_given"))))
    else:
        lines.append(Line(text=str(t("cell.input_seeded", tok=spec.tokens[r]))))
    if p.embedding is not None and p.positions is not None:
        e, pe = float(to_numpy(p.embedding)[r, c]), float(to_numpy(p.positions)[r, c])
        lines.append(Line.of(rf"x_{{{r},{c}}} = e_{{{r},{c}}} + p_{{{r},{c}}} = {tex(e)} + ({tex(pe)}) = {tex(out)}"))
        lines.append(Line(text=str(t("cell.input_position", kind=t(f"positions.{spec.positions}"), pos=r))))
    return Arithmetic(str(t("cell.input", q=spec.tokens[r], c=c)), lines, full(out))


def compared(trace: Trace, head: int, key: str) -> tuple[str, np.ndarray]:
    """What a comparison compares for the stage on screen: up to stage 3 the masked scores S′ (where a mask or a
    scale shows first), from stage 4 the weights A."""
    if STAGES.index(key) < STAGES.index("softmax"):
        return "masked", to_numpy(trace.mask.masked[head])
    return "weights", to_numpy(trace.softmax.weights[head])


@dataclass(frozen=True)
class SideSpec:
    """What sets one side of a comparison apart: its mask, its scale and its tokens."""

    mask: str
    scale: str
    tokens: tuple[str, ...]

    @classmethod
    def of(cls, trace: Trace) -> SideSpec:
        return cls(trace.spec.mask, trace.spec.scale, tuple(trace.spec.tokens))


@dataclass(frozen=True)
class CellSide:
    """One side of a short comparison: its matrix cell by cell (the cells that differ outlined), the weights' row
    statistics (None for the masked scores) and what sets it apart."""

    matrix: MatrixView
    stats: list[RowStats] | None
    spec: SideSpec


def compare_side(trace: Trace, head: int, key: str, hit: np.ndarray) -> CellSide:
    """One side of a comparison, cell by cell, for the stage on screen (see `compared`; the weights with each row's
    entropy and largest weight), the cells where `hit` (over the cells both sides have) is true outlined."""
    tok = list(trace.spec.tokens)
    keys = list(trace.spec.kv_tokens) or tok
    name, a = compared(trace, head, key)
    if name == "masked":
        bound = float(np.abs(to_numpy(trace.scores.scaled[head])).max())
        mv = matrix_view("masked", "S′ = S + M", a, tok, keys, "(N, N)", "diverging", head, bound=bound, links=False)
        stats = None
    else:
        hidden = ~np.isfinite(to_numpy(trace.mask.mask))
        mv = matrix_view("weights", "A", a, tok, keys, "(N, N)", "sequential", head, masked=hidden, links=False)
        stats = row_stats(a, keys)
    for r, c in np.argwhere(hit):
        mv.cells[r][c] = replace(mv.cells[r][c], cls=mv.cells[r][c].cls + " changed")
    return CellSide(mv, stats, SideSpec.of(trace))


def difference(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """|a − b| over the cells both sides' matrices have (their first rows and columns): a cell masked on one side
    only is +∞, the largest difference there is; a cell masked on both sides is 0."""
    r, c = min(a.shape[0], b.shape[0]), min(a.shape[1], b.shape[1])
    a, b = a[:r, :c], b[:r, :c]
    fa, fb = np.isfinite(a), np.isfinite(b)
    d = np.zeros((r, c), dtype=np.float64)
    both = fa & fb
    d[both] = np.abs(a[both].astype(np.float64) - b[both])
    d[fa != fb] = np.inf
    return d


def difference_top(d: np.ndarray, tol: float) -> float | None:
    """The |Δ| the difference map's brightest colour stands for: the largest finite |Δ| (a cell masked on one side
    only is drawn brightest too), or None when no cell differs by more than `tol` (the map is all the darkest)."""
    finite = d[np.isfinite(d)]
    return float(finite.max()) if finite.size and finite.max() > tol else None


def difference_floor(top: float, tol: float) -> float:
    """The |Δ| the difference map's darkest colour stands for (and any less): 10⁻⁴ of the largest, `top`, or the
    tolerance `tol` where that is larger (a |Δ| within it is not counted, so the scale does not reach below it)."""
    return max(top * heatmap.LOG_FLOOR, tol)


def difference_png(d: np.ndarray, tol: float, size: int) -> bytes:
    """The difference map: each cell's |Δ| relative to the largest, on a log scale (`difference_floor` and less is
    the darkest colour, so a small change still shows), max-pooled when the picture is smaller than the matrix so
    that no changed cell vanishes in an average; cells within `tol` are 0. Its colour bar reads `difference_top`
    and `difference_floor`."""
    top = difference_top(d, tol) or 1.0
    rel = np.where(np.isfinite(d), d / top, 1.0)
    rel[d <= tol] = 0.0
    floor = difference_floor(top, tol) / top
    if floor > heatmap.LOG_FLOOR:  # rel ** (log 10⁻⁴ / log floor): the floor falls on heatmap's 10⁻⁴, 1 stays 1
        with np.errstate(divide="ignore", under="ignore"):
            rel = np.where(rel > 0, rel ** (np.log10(heatmap.LOG_FLOOR) / np.log10(floor)), 0.0)
    r, c = rel.shape
    k = max(1, math.ceil(max(r, c) / size))
    if k > 1:
        pr, pc = -(-r // k) * k, -(-c // k) * k
        padded = np.zeros((pr, pc))
        padded[:r, :c] = rel
        rel = padded.reshape(pr // k, k, pc // k, k).max(axis=(1, 3))
    return heatmap.png(np.clip(rel, 0.0, 1.0).astype(np.float32), "sequential", size, "log")


# --- Stages as data ----------------------------------------------------------------------------------------------

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


# The table: one row per stage, in order — key, formula, notice, matrices. The main tensor's colour scale is
# sequential for the weights (from 0 to 1), diverging for the rest (S′ = S + M keeps the colours of S).
ATTENTION_STAGES: dict[str, Presentation] = {
    key: Presentation(
        formula, said(f"explain.{key}"), notice, matrices, "sequential" if key == "softmax" else "diverging"
    )
    for key, formula, notice, matrices in (
        ("projection", projection_formula, projection_notice, projection_matrices),
        ("scores", scores_formula, scores_notice, scores_matrices),
        ("mask", mask_formula, mask_notice, mask_matrices),
        ("softmax", softmax_formula, softmax_notice, softmax_matrices),
        ("weighted_sum", weighted_sum_formula, weighted_sum_notice, weighted_sum_matrices),
    )
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


def stage_tensors(trace: BlockTrace, head: int, key: str) -> list[MatrixView]:
    """Stage `key`'s matrices, the same for every head."""
    tok, ff = list(trace.tokens), trace.spec.ff
    out = []
    for name, tensor in trace.stages[key].items():
        a = to_numpy(tensor)
        symbol = "(N, d_ff)" if a.shape[1] == ff != trace.spec.attn.d_model else "(N, d_model)"
        out.append(matrix_view(name, name, a, tok, dims(a.shape[1]), symbol, "diverging", links=False))
    return out


def placed(key: str) -> Callable[[BlockTrace], str]:
    """What stage `key` does, Pre-LN or Post-LN: the catalogue key of the block's placement."""
    return lambda trace: f"bexplain.{key}.{trace.spec.placement}"


# The table: one row per stage, in the Pre-LN order.
BLOCK_STAGES: dict[str, Presentation] = {
    key: Presentation(formula, explain, notice, partial(stage_tensors, key=key), "diverging")
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
