"""An independent reference for the trace's own check: which keys each query may read, written again from the
definitions (a comparison of query and key indices per mask, sharing no code with masks.py), and the scale each setting means.

The trace's check runs PyTorch's fused `scaled_dot_product_attention` with *this* mask (or `is_causal=True`) and
with SDPA's own default scale for √d_k, on the trace's Q, K and V. A wrong mask or a wrong scale in the staged
path then shows up as a difference, instead of being shared by both sides.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .spec import Spec


def readable(spec: Spec, device: torch.device | str = "cpu") -> torch.Tensor:
    """(N, N_kv) booleans: may query i read key j? Each mask's definition written as one comparison of the grids
    of query indices i (a column) and key indices j (a row), as the chapter states it."""
    n = spec.n_tokens
    m = len(spec.kv_tokens) or n
    i = torch.arange(n, device=device)[:, None]
    j = torch.arange(m, device=device)[None, :]
    if spec.mask == "none":
        return torch.ones(n, m, dtype=torch.bool, device=device)
    if spec.mask == "causal":
        return j <= i
    if spec.mask == "padding":
        pads = torch.tensor(sorted(spec.pad_positions), dtype=torch.long, device=device)
        return ~(j[..., None] == pads).any(-1).expand(n, m)
    if spec.mask == "document":
        seg = torch.tensor(spec.segment_ids, device=device)
        return (j <= i) & (seg[:, None] == seg[None, :m])
    if spec.mask == "sliding_window":
        return (i - spec.window < j) & (j <= i)
    if spec.mask == "prefix_lm":
        return (j < spec.prefix) | (j <= i)
    if spec.mask == "custom":
        assert spec.mask_matrix is not None
        return torch.tensor(spec.mask_matrix, device=device).bool()
    raise ValueError(f"no reference for mask {spec.mask!r}")


def sdpa_scale(spec: Spec) -> float | None:
    """SDPA's `scale` argument: None (its own default, 1/√E with E the last dim of q) for √d_k."""
    return {"sqrt_dk": None, "none": 1.0, "dk": 1.0 / spec.d_k}[spec.scale]


def sdpa_reference(spec: Spec, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Fused attention per head, (H, N, d_k), and the rows with at least one readable key, (N,).

    SDPA is given a batch axis, (1, H, N, d_k): PyTorch's fused CPU kernel (flash attention, blocks of queries and
    keys, causal blocks skipped) takes only 4-D inputs, and 3-D ones fall back to the unfused math path, which
    builds every N × N matrix again and would cost more than the stages it checks."""
    scale = sdpa_scale(spec)
    q4, k4, v4 = q.unsqueeze(0), k.unsqueeze(0), v.unsqueeze(0)
    if spec.mask == "causal" and not spec.kv_tokens:
        visible = torch.ones(spec.n_tokens, dtype=torch.bool, device=q.device)
        return F.scaled_dot_product_attention(q4, k4, v4, is_causal=True, scale=scale)[0], visible
    if spec.mask == "none":
        visible = torch.ones(spec.n_tokens, dtype=torch.bool, device=q.device)
        return F.scaled_dot_product_attention(q4, k4, v4, scale=scale)[0], visible
    allow = readable(spec, q.device)
    visible = allow.any(dim=-1)
    # SDPA gives NaN for a row with no readable key; such rows are compared separately (the trace's are zero).
    safe = allow | ~visible[:, None]
    return F.scaled_dot_product_attention(q4, k4, v4, attn_mask=safe, scale=scale)[0], visible
