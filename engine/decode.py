"""The KV cache: prefill the prompt once, then decode one token at a time against the cached K and V.

Each step projects only the new token, appends its k and v to the cache, and attends with a single query row. The
steps are computed incrementally here, independently of the full trace, and every step's output is compared with
the same row of a full causal recomputation: the cache changes the cost, never the numbers.

The cache is exact because history does not change: under the causal mask a new token changes no earlier row's
output. Each step measures that (`earlier_change`: how much the earlier rows' outputs move when the token arrives,
0 exactly when causal). With `mask="none"` (a bidirectional encoder) every arrival moves the earlier rows, and the
full computation's row reads tokens that a step-by-step decoder has not seen yet: both differences come out large,
which is why an encoder cannot reuse a cache as it grows.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from . import attention, positions, sources
from .device import torch_dtype
from .spec import DTYPE_BYTES, Spec


@dataclass(frozen=True)
class DecodeStep:
    position: int  # the new token's index
    q: torch.Tensor  # (H, d_k) its query (after RoPE when used)
    k_new: torch.Tensor  # (H_kv, d_k) the key appended to the cache
    v_new: torch.Tensor  # (H_kv, d_k)
    k_cache: torch.Tensor  # (H_kv, position + 1, d_k) the cache after appending
    v_cache: torch.Tensor  # (H_kv, position + 1, d_k)
    scores: torch.Tensor  # (H, position + 1) the new row of QKᵀ / s
    weights: torch.Tensor  # (H, position + 1)
    heads: torch.Tensor  # (H, d_k)
    output: torch.Tensor  # (d,) after W_O
    max_abs_diff_vs_full: float  # against row `position` of the full recomputation
    earlier_change: float  # max |Δ| of rows 0 … position − 1's outputs (after W_O) when this token arrives


@dataclass(frozen=True)
class DecodeTrace:
    spec: Spec
    prefill: int  # tokens processed at once before the first step
    k_prefill: torch.Tensor  # (H_kv, prefill, d_k)
    v_prefill: torch.Tensor
    steps: tuple[DecodeStep, ...]
    full: attention.Trace  # the full causal trace the steps are checked against

    @property
    def bytes_per_token(self) -> int:
        """K and V of one token in one layer: 2 · n_kv_heads · d_k · bytes per number."""
        return 2 * self.spec.d_kv * DTYPE_BYTES[self.spec.dtype]

    @property
    def nbytes(self) -> int:
        own = sum(t.nbytes for s in self.steps for t in (s.k_cache, s.v_cache, s.scores, s.weights))
        return own + self.full.nbytes

    @property
    def max_abs_diff_vs_full(self) -> float:
        return max((s.max_abs_diff_vs_full for s in self.steps), default=0.0)


@torch.inference_mode()
def decode(spec: Spec, prefill: int) -> DecodeTrace:
    """Prefill `prefill` tokens, then decode the rest one by one (spec.mask causal, or none to show why a
    bidirectional model cannot decode through a cache)."""
    device, dtype = torch.device(spec.device), torch_dtype(spec.dtype)
    x, w = sources.load(spec, device, dtype)
    full = attention.run(spec, x, w)
    if spec.positions in ("sinusoidal", "learned"):
        x = x + attention.position_table(spec, spec.n_tokens, spec.d_model).to(device, dtype)
    h, hkv, dk, s = spec.n_heads, spec.kv_heads, spec.d_k, spec.scale_value

    def project(rows: torch.Tensor, start: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        n = rows.shape[0]
        q = attention.linear(rows, w.w_q, w.b_q).view(n, h, dk).transpose(0, 1)  # (H, n, d_k)
        k = attention.linear(rows, w.w_k, w.b_k).view(n, hkv, dk).transpose(0, 1)  # (H_kv, n, d_k)
        v = attention.linear(rows, w.w_v, w.b_v).view(n, hkv, dk).transpose(0, 1)
        if spec.positions == "rope":
            pos = torch.arange(start, start + n, device=device)
            q = positions.rotate(q, pos, spec.rope_base, spec.rope_pairing)
            k = positions.rotate(k, pos, spec.rope_base, spec.rope_pairing)
        return q, k, v

    q_rows, k_cache, v_cache = project(x[:prefill], 0)  # prefill: one pass over the prompt fills the cache
    k0, v0 = k_cache, v_cache
    causal = spec.mask != "none"
    # The earlier rows as they stand (their log-sum-exp and head outputs over the keys so far), to measure how much
    # each arrival moves them: a new key t changes row j by a_jt · (v_t − out_j), where a_jt is the weight row j now
    # gives it (0 under the causal mask: row j never reads a later key).
    s0 = q_rows @ attention.per_head(k_cache, h).transpose(-2, -1) / s  # (H, prefill, prefill)
    if causal:
        s0 = s0.masked_fill(torch.ones_like(s0[0], dtype=torch.bool).triu(1), float("-inf"))
    lse = torch.logsumexp(s0, dim=-1)  # (H, rows)
    rows_out = torch.softmax(s0, dim=-1) @ attention.per_head(v_cache, h)  # (H, rows, d_k)
    w_o = w.w_o
    steps = []
    for t in range(prefill, spec.n_tokens):
        q, k, v = project(x[t : t + 1], t)
        k_cache = torch.cat([k_cache, k], dim=1)
        v_cache = torch.cat([v_cache, v], dim=1)
        keys = attention.per_head(k_cache, h)  # (H, t+1, d_k)
        scores = (q @ keys.transpose(-2, -1))[:, 0] / s  # (H, t+1): no mask needed, the future is not there
        a = torch.softmax(scores, dim=-1)
        values = attention.per_head(v_cache, h)
        heads = (a[:, None, :] @ values)[:, 0]  # (H, d_k)
        out = attention.linear(heads.reshape(1, h * dk), w.w_o, w.b_o)[0]
        diff = float((out - full.weighted_sum.output[t]).abs().max())
        new = (q_rows @ keys[:, t : t + 1].transpose(-2, -1))[..., 0] / s  # (H, t): earlier rows on the new key
        if causal:
            new = torch.full_like(new, float("-inf"))
        lse_new = torch.logaddexp(lse, new)
        delta = torch.exp(new - lse_new)[..., None] * (values[:, t : t + 1] - rows_out)  # (H, t, d_k)
        moved = float((delta.transpose(0, 1).reshape(t, h * dk) @ w_o).abs().max()) if t else 0.0
        rows_out = torch.cat([rows_out + delta, heads[:, None]], dim=1)
        lse = torch.cat([lse_new, torch.logsumexp(scores, dim=-1)[:, None]], dim=1)
        q_rows = torch.cat([q_rows, q], dim=1)
        steps.append(DecodeStep(t, q[:, 0], k[:, 0], v[:, 0], k_cache, v_cache, scores, a, heads, out, diff, moved))
    return DecodeTrace(spec, prefill, k0, v0, tuple(steps), full)
