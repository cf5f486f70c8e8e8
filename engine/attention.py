"""The five stages of scaled dot-product attention, computed one at a time and kept as data.

This is nanoGPT's manual attention path (project, QKᵀ, scale, mask, softmax, AV, W_O) with every intermediate
returned in a `Trace` instead of thrown away. It is the only place the stages are computed; the fused
`scaled_dot_product_attention` serves as the independent reference every trace is checked against.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, fields

import torch

from . import masks, positions, reference
from .arena import ARENA
from .errors import Message
from .memo import python_bytes, tensor_bytes
from .sources import Weights
from .spec import STAGES, OfSpec, Spec, SpecError


@dataclass(frozen=True)
class Projection:
    x: torch.Tensor  # (N, d)  what W_Q reads: the token vectors, plus absolute positions when they are added
    q: torch.Tensor  # (H, N, d_k)
    k: torch.Tensor  # (H_kv, N_kv, d_k)  H_kv < H under GQA/MQA: head h reads K head h // (H / H_kv)
    v: torch.Tensor  # (H_kv, N_kv, d_k)
    embedding: torch.Tensor | None = None  # (N, d) the token vectors alone (sinusoidal or learned positions)
    positions: torch.Tensor | None = None  # (N, d) the position table added to them
    q_rot: torch.Tensor | None = None  # (H, N, d_k) q after RoPE
    k_rot: torch.Tensor | None = None  # (H_kv, N_kv, d_k) k after RoPE
    source: torch.Tensor | None = None  # (N_kv, d) cross-attention: what W_K and W_V read

    @property
    def query(self) -> torch.Tensor:
        return self.q if self.q_rot is None else self.q_rot

    @property
    def key(self) -> torch.Tensor:
        return self.k if self.k_rot is None else self.k_rot


@dataclass(frozen=True)
class Scores:
    raw: torch.Tensor  # (H, N, N)  QKᵀ
    scaled: torch.Tensor  # (H, N, N)  QKᵀ / s


@dataclass(frozen=True)
class Mask:
    mask: torch.Tensor  # (N, N)  0 or −∞
    masked: torch.Tensor  # (H, N, N)  scaled + mask


@dataclass(frozen=True)
class Softmax:
    weights: torch.Tensor  # (H, N, N)  each row sums to 1 (0 for a row with every key masked)


@dataclass(frozen=True)
class WeightedSum:
    heads: torch.Tensor  # (H, N, d_k)  A V per head
    concat: torch.Tensor  # (N, d)  heads side by side
    output: torch.Tensor  # (N, d)  concat W_O + b_O


@dataclass(frozen=True)
class Checks:
    max_abs_diff_vs_sdpa: float  # over rows with at least one visible key
    rows_sum_to_one: bool  # every row with a visible key sums to 1, every fully masked row to 0


class Checker:
    """A trace's own check (`check_heads`), head by head, each head computed once, the first time it is asked for:
    an answer checks the heads it shows (`Trace.verify`: one head of gpt2-small is a twelfth of the work), and the
    trace-wide values, over every head, are computed when they are first read (`Trace.checks`: pages and JSON
    answers show them)."""

    def __init__(self, spec: Spec, p: Projection, a: Softmax, ws: WeightedSum) -> None:
        self._of = (spec, p, a, ws)
        self._done: dict[int, tuple[float, bool]] = {}  # head → (max |Δ| vs SDPA, its rows sum as they should)
        self._lock = threading.Lock()

    def has(self, heads: Iterable[int]) -> bool:
        """Whether every one of `heads` is checked already."""
        return all(h in self._done for h in heads)

    def heads(self, heads: Iterable[int]) -> Checks:
        """The check over `heads`, computing (in one SDPA call) those not checked yet."""
        wanted = list(dict.fromkeys(heads))
        with self._lock:
            missing = [h for h in wanted if h not in self._done]
            if missing:
                self._done.update(zip(missing, check_heads(*self._of, missing), strict=True))
            done = [self._done[h] for h in wanted]
        diffs = [d for d, _ in done]
        return Checks(
            max_abs_diff_vs_sdpa=math.nan if any(map(math.isnan, diffs)) else max(diffs, default=0.0),
            rows_sum_to_one=all(ok for _, ok in done),
        )


@dataclass(frozen=True)
class Trace(OfSpec):
    spec: Spec
    projection: Projection
    scores: Scores
    mask: Mask
    softmax: Softmax
    weighted_sum: WeightedSum
    checker: Checker  # the check against SDPA, head by head as it is asked for (`checks`, `verify`)
    weights: Weights  # W_Q … b_O the trace used (not a stage: the page shows them beside stages 1 and 5)
    timings: tuple[tuple[str, float], ...] = ()  # seconds spent in each stage, for the server's metrics

    @property
    def checks(self) -> Checks:
        """The check over every head (computed on first use, then kept)."""
        return self.checker.heads(range(self.n_heads))

    def verify(self, heads: Iterable[int]) -> Checks:
        """The check of the given heads only: what an answer showing those heads runs."""
        return self.checker.heads(heads)

    def stage(self, key: str) -> dict[str, torch.Tensor]:
        """The named stage's tensors, in the API's order."""
        if key not in STAGES:
            raise KeyError(key)
        s = getattr(self, key)
        return {f.name: getattr(s, f.name) for f in fields(s) if getattr(s, f.name) is not None}

    @property
    def nbytes(self) -> int:
        """Everything a cache entry holds: the stages, the weights (on CUDA or in half precision each trace has its
        own copy), and the request's tokens and explicit matrices."""
        held = tensor_bytes(self.projection, self.scores, self.mask, self.softmax, self.weighted_sum, self.weights)
        s = self.spec
        return (
            held + python_bytes(s.tokens) + python_bytes(s.kv_tokens) + python_bytes([s.x, s.w_q, s.w_k, s.w_v, s.w_o])
        )

    # What every trace (this one, a whole block) offers its renderers; heads, tokens and summary from OfSpec.
    order = STAGES

    def check_values(self) -> dict[str, object]:
        return {
            "max_abs_diff_vs_sdpa": self.checks.max_abs_diff_vs_sdpa,
            "rows_sum_to_one": self.checks.rows_sum_to_one,
        }


def linear(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None) -> torch.Tensor:
    return x @ w if b is None else torch.addmm(b, x, w)


def project(x: torch.Tensor, w: Weights, spec: Spec, source: torch.Tensor | None = None) -> Projection:
    """Stage 1: Q = X W_Q + b_Q, K = X W_K + b_K, V = X W_V + b_V (K and V read `source` in cross-attention),
    then head h takes columns h·d_k … (h+1)·d_k − 1. Absolute positions are added to x first; RoPE rotates q and k."""
    n, d = x.shape
    extra: dict[str, torch.Tensor] = {}
    if spec.positions in ("sinusoidal", "learned"):
        table = position_table(spec, max(n, 0 if source is None else source.shape[0]), d).to(x.device, x.dtype)
        extra = {"embedding": x, "positions": table[:n]}
        x = x + table[:n]
        if source is not None:
            source = source + table[: source.shape[0]]
    src = x if source is None else source
    m = src.shape[0]

    def split(t: torch.Tensor, rows: int, heads: int) -> torch.Tensor:
        return t.view(rows, heads, spec.d_k).transpose(0, 1).contiguous()  # (heads, rows, d_k)

    qkv = side_by_side(w.w_q, w.w_k, w.w_v) if source is None else None
    biases = (w.b_q, w.b_k, w.b_v)
    b_qkv = None if w.b_q is None else side_by_side(*biases)  # type: ignore[arg-type]
    if qkv is not None and (b_qkv is not None or w.b_q is None):  # one product for all three (seeded weights)
        q_x, k_x, v_x = linear(x, qkv, b_qkv).split([w.w_q.shape[1], w.w_k.shape[1], w.w_v.shape[1]], dim=1)
    else:
        q_x, k_x, v_x = linear(x, w.w_q, w.b_q), linear(src, w.w_k, w.b_k), linear(src, w.w_v, w.b_v)
    q = split(q_x, n, spec.n_heads)
    k = split(k_x, m, spec.kv_heads)
    v = split(v_x, m, spec.kv_heads)
    if spec.positions == "rope":
        pos = torch.arange(n, device=x.device)
        extra["q_rot"] = positions.rotate(q, pos, spec.rope_base, spec.rope_pairing, spec.rope_factors)
        extra["k_rot"] = positions.rotate(k, torch.arange(m, device=x.device), spec.rope_base, spec.rope_pairing,
                                          spec.rope_factors)  # fmt: skip
    if source is not None:
        extra["source"] = src
    return Projection(x=x, q=q, k=k, v=v, **extra)


def side_by_side(*parts: torch.Tensor) -> torch.Tensor | None:
    """The one tensor whose consecutive blocks along the last axis `parts` are, when they are exactly that (in one
    storage, in order, laid out as one contiguous tensor): `x @ [W_Q | W_K | W_V]` is then one product instead of
    three, the same numbers column for column. None otherwise (weights given separately)."""
    first = parts[0]
    shape = (*first.shape[:-1], sum(t.shape[-1] for t in parts))
    strides = torch.empty(shape, device="meta").stride()
    storage, offset = first.untyped_storage(), first.storage_offset()
    for t in parts:
        same = t.untyped_storage().data_ptr() == storage.data_ptr() and t.dtype == first.dtype
        if not same or t.shape[:-1] != first.shape[:-1] or t.stride() != strides or t.storage_offset() != offset:
            return None
        offset += t.shape[-1]
    return first.as_strided(shape, strides, first.storage_offset())


def position_table(spec: Spec, n: int, d: int) -> torch.Tensor:
    if spec.positions == "sinusoidal":
        return positions.sinusoidal(n, d)
    return positions.learned_rows(spec.seed, n, d)


def per_head(t: torch.Tensor, n_heads: int) -> torch.Tensor:
    """K or V heads repeated so that query head h meets K/V head h // (H / H_kv): (H, N_kv, d_k)."""
    return t if t.shape[0] == n_heads else t.repeat_interleave(n_heads // t.shape[0], dim=0)


def scores(p: Projection, scale: float) -> Scores:
    """Stage 2: the raw dot products QKᵀ and the scaled scores QKᵀ / s."""
    q, k = p.query, per_head(p.key, p.q.shape[0]).transpose(-2, -1)
    shape = (*q.shape[:-1], k.shape[-1])  # (H, N, N_kv): written into memory already mapped (engine/arena.py)
    raw = torch.matmul(q, k, out=ARENA.empty(shape, q.device, q.dtype))
    return Scores(raw=raw, scaled=torch.div(raw, scale, out=ARENA.empty(shape, q.device, q.dtype)))


def mask(s: Scores, additive: torch.Tensor) -> Mask:
    """Stage 3: add M (0 or −∞) to every head's scaled scores."""
    sc = s.scaled
    shape = broadcast(tuple(sc.shape), tuple(additive.shape))
    out = ARENA.empty(shape, sc.device, torch.promote_types(sc.dtype, additive.dtype))
    return Mask(mask=additive, masked=torch.add(sc, additive, out=out))


def broadcast(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    """The shape two shapes broadcast to (numpy's rule). Not torch.broadcast_shapes: its first call imports sympy
    (about 1 s, once per process, on a page's first trace)."""
    n = max(len(a), len(b))
    a, b = (1,) * (n - len(a)) + a, (1,) * (n - len(b)) + b
    if any(x != y and 1 not in (x, y) for x, y in zip(a, b, strict=True)):
        raise ValueError(f"shapes {a} and {b} do not broadcast")
    return tuple(y if x == 1 else x for x, y in zip(a, b, strict=True))


def softmax(m: Mask) -> Softmax:
    """Stage 4: row-wise softmax over keys (`softmax_rows`)."""
    return Softmax(weights=softmax_rows(m.masked))


def softmax_rows(masked: torch.Tensor) -> torch.Tensor:
    """Softmax over the last axis, with the row maximum subtracted so exp never overflows (`torch.softmax` does so
    in one fused pass per row); in the input's dtype, with half precision computed in float32. Whole rows: a lazy
    trace's window calls it on full rows too.

    A fully masked row (every score −∞) has no defined softmax: PyTorch gives NaN there. Its weights are zero by
    definition, so such rows are set to 0. They are found from the first column alone (a row that is NaN there
    and −∞ everywhere in the input), so the common case costs no extra pass over the scores.
    """
    s = masked if masked.dtype == torch.float32 else masked.float()
    w = torch.ops.aten._softmax.out(s, -1, False, out=ARENA.empty(tuple(s.shape), s.device))  # torch.softmax's kernel
    if w.shape[-1]:
        maybe = torch.isnan(w[..., 0])
        if bool(maybe.any()):
            empty = maybe & (s == float("-inf")).all(dim=-1)
            w.masked_fill_(empty.unsqueeze(-1), 0.0)
    return w.to(masked.dtype)


def weighted_sum(a: Softmax, p: Projection, w: Weights, mask: torch.Tensor | None = None) -> WeightedSum:
    """Stage 5: each head's A V, the heads concatenated back to (N, d), then the output projection W_O. Given the
    additive mask the weights were made with, A V leaves out the keys a block of rows has all masked (`times_v`)."""
    heads = times_v(a.weights, per_head(p.v, p.q.shape[0]), mask)  # (H, N, d_k)
    h, n, dk = heads.shape
    concat = heads.transpose(0, 1).reshape(n, h * dk)  # (N, d)
    return WeightedSum(heads=heads, concat=concat, output=linear(concat, w.w_o, w.b_o))


AV_ROWS = 256  # query rows per block of A V when a mask lets blocks skip keys


def times_v(weights: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """weights @ v, (H, N, N_kv) @ (H, N_kv, d_k), AV_ROWS query rows at a time when `mask` (N, N_kv, 0 or −∞) has
    every key past a block's last row masked for all of that block's rows (causal masks, documents, windows): those
    weights are exactly 0 (the softmax of −∞), so leaving them out drops no term of any sum, and a causal A V does
    about half the multiplications. Without a mask, or for short sequences, one batched product."""
    h, n, m = weights.shape
    if mask is None or n < 2 * AV_ROWS:
        return weights @ v
    out = weights.new_empty(h, n, v.shape[-1])
    for r0 in range(0, n, AV_ROWS):
        r1 = min(n, r0 + AV_ROWS)
        keys = r1 if r1 < m and bool(torch.isneginf(mask[r0:r1, r1:]).all()) else m
        torch.matmul(weights[:, r0:r1, :keys], v[:, :keys], out=out[:, r0:r1])
    return out


def check(spec: Spec, p: Projection, a: Softmax, ws: WeightedSum) -> Checks:
    """Compare stage 5 with PyTorch's fused attention on the same Q, K and V, but with its own mask (`is_causal`, or
    a boolean mask built from the Spec by engine/reference.py) and its own default scale for √d_k: a wrong mask
    or scale in the staged stages shows up here. Rows with no readable key must be zero in the trace. Every head
    at once; a trace runs it head by head, as it is asked for (`Checker`)."""
    return Checker(spec, p, a, ws).heads(range(p.q.shape[0]))


def check_heads(spec: Spec, p: Projection, a: Softmax, ws: WeightedSum, heads: list[int]) -> list[tuple[float, bool]]:
    """`check` for the given heads: (max |Δ| vs SDPA, rows sum to one) for each. It shares the trace's projections
    and runs the fused kernel (`sdpa_reference`): every head of gpt2-small at 1,024 tokens costs about a third of
    the stages it checks (scores, mask, softmax, weighted sum), one head a twelfth of that."""
    h = p.q.shape[0]
    q, k, v = p.query, per_head(p.key, h), per_head(p.v, h)
    out, weights = ws.heads, a.weights
    if heads != list(range(h)):  # consecutive heads (one, usually) are views, not copies
        run = heads == list(range(heads[0], heads[0] + len(heads)))
        pick = slice(heads[0], heads[0] + len(heads)) if run else heads
        q, k, v, out, weights = (t[pick] for t in (q, k, v, out, weights))
    fused, visible = reference.sdpa_reference(spec, q, k, v)
    diff = torch.where(visible[None, :, None], (fused - out).abs_(), out.abs()).flatten(1).amax(dim=1)
    sums = weights.sum(dim=-1).float()  # (heads, N)
    tol = 1e-4 if weights.dtype == torch.float32 else 2e-2
    ok = ((sums - visible.float()).abs() <= tol).all(dim=-1)  # allclose(atol=tol, rtol=0), head by head; NaN fails
    return list(zip(diff.float().tolist(), ok.tolist(), strict=True))


def finite_or_refuse(spec: Spec, p: Projection, sc: Scores) -> None:
    """Half precision holds numbers up to 65,504 (float16): a projection or score past it becomes ±∞ and every
    later number NaN. Such a trace is refused, naming why, rather than shown with NaN (which JSON would print as
    null, the same as a masked −∞)."""
    for name, t in (("q", p.q), ("k", p.k), ("v", p.v), ("QKᵀ", sc.raw), ("QKᵀ / s", sc.scaled)):
        if not bool(torch.isfinite(t).all()):
            biggest = float(t.float().nan_to_num(posinf=float("inf")).abs().max())
            raise SpecError("dtype", Message("overflow", dtype=spec.dtype, name=name, biggest=biggest))


def mask_of(spec: Spec, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return masks.additive(masks.for_spec(spec), dtype)


def run(spec: Spec, x: torch.Tensor, w: Weights, source: torch.Tensor | None = None) -> Trace:
    """All five stages for `spec` on the given input (and, for cross-attention, the source sequence that K and V
    read) and weights, already on their device and dtype."""
    s = spec.scale_value
    clock = [time.perf_counter()]

    sync = x.device.type == "cuda"

    def lap() -> float:
        if sync:  # CUDA runs asynchronously: without this the laps would time kernel launches, not the stages
            torch.cuda.synchronize(x.device)
        clock.append(time.perf_counter())
        return clock[-1] - clock[-2]

    add = mask_of(spec, x.dtype).to(x.device)
    p = project(x, w, spec, source)
    t1 = lap()
    sc = scores(p, s)
    t2 = lap()
    if x.dtype != torch.float32:
        finite_or_refuse(spec, p, sc)
    m = mask(sc, add)
    t3 = lap()
    a = softmax(m)
    t4 = lap()
    ws = weighted_sum(a, p, w, m.mask)
    t5 = lap()
    timings = tuple(zip(STAGES, (t1, t2, t3, t4, t5), strict=True))
    return Trace(spec, p, sc, m, a, ws, Checker(spec, p, a, ws), w, timings)


_FLASH_CPU = getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu", None)


def fused_causal(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor] | None:
    """softmax(q kᵀ/√d_k + causal mask) v and each query row's log-sum-exp of its scores, (H, N, d_k) and (H, N),
    from PyTorch's fused CPU kernel (FlashAttention's schedule: no N × N matrix, the 1/√d_k inside). K and V of a
    grouped-query model are repeated to the query heads. None where that kernel does not apply (not on the CPU, not
    float32, or this PyTorch lacks it): the caller computes it block by block."""
    if _FLASH_CPU is None or q.device.type != "cpu" or q.dtype != torch.float32 or not 0 < q.shape[1] == k.shape[1]:
        return None
    h, kv = q.shape[0], k.shape[0]
    if kv != h:
        k, v = k.repeat_interleave(h // kv, 0), v.repeat_interleave(h // kv, 0)
    out, lse = _FLASH_CPU(q.unsqueeze(0), k.unsqueeze(0), v.unsqueeze(0), 0.0, True)
    return out[0], lse[0]


def causal_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    block: int = 512,
    observe: Callable[[int, torch.Tensor], None] | None = None,
    window: int = 0,
) -> torch.Tensor:
    """softmax(q kᵀ / √d_k + causal mask) v for (H, N, d_k) queries over (H_kv, N, d_k) keys and values. On the CPU
    in float32 without `observe` or a window, PyTorch's fused kernel (`fused_causal`); otherwise `block` queries at a
    time: at most H × block × N scores exist at once, never H × N × N (3-D SDPA falls back to its math kernel and
    would hold all of them: 1.4 GB at 4,096 tokens and 9 heads). `observe(r0, w)`
    sees each block's weights, (H, rows, keys) for queries r0.. (the model view's statistics). `window` > 0: each
    query reads only the last `window` keys, itself included (sliding-window attention)."""
    if observe is None and not window and (fused := fused_causal(q, k, v)) is not None:
        return fused[0]
    h, n, dk = q.shape
    kv = k.shape[0]
    group = h // kv
    out = torch.empty_like(q)
    keys = k.unsqueeze(1)  # (H_kv, 1, N, d_k): query head j reads K/V head j // group, without copies
    values = v.unsqueeze(1)
    scale = 1.0 / math.sqrt(dk)
    for r0 in range(0, n, block):
        r1 = min(n, r0 + block)
        s = (q[:, r0:r1].reshape(kv, group, r1 - r0, dk) @ keys[:, :, :r1].transpose(2, 3)) * scale
        future = torch.ones(r1 - r0, r1, dtype=torch.bool, device=q.device).triu_(diagonal=r0 + 1)
        if window:
            future |= torch.ones(r1 - r0, r1, dtype=torch.bool, device=q.device).tril_(diagonal=r0 - window)
        w = torch.softmax(s.masked_fill_(future, float("-inf")), dim=-1)
        if observe is not None:
            observe(r0, w.view(h, r1 - r0, r1))
        out[:, r0:r1] = (w @ values[:, :, :r1]).reshape(h, r1 - r0, dk)
    return out
