"""FlashAttention's schedule for one head of a trace, as the API's JSON and the /tiles page show it."""

from __future__ import annotations

from typing import Any

import torch

from engine.spec import DTYPE_BYTES

from ..render.arrays import Traced, to_numpy
from ..schemas import TilesRequest


def tiles_document(trace: Traced, req: TilesRequest) -> dict[str, Any]:
    from engine.attention import per_head
    from engine.flash import memory_bytes, tiled_attention

    spec = trace.spec  # type: ignore[attr-defined]
    p = trace.projection  # type: ignore[attr-defined]
    h = req.head
    k, v = per_head(p.key, spec.n_heads)[h], per_head(p.v, spec.n_heads)[h]
    allow = torch.isfinite(trace.mask.mask)  # type: ignore[attr-defined]
    tiled = tiled_attention(p.query[h], k, v, allow, spec.scale_value, req.block_q, req.block_k)
    staged = trace.weighted_sum.heads[h].double()  # type: ignore[attr-defined]
    diff = float((tiled.output - staged).abs().max()) if staged.numel() else 0.0
    arr = to_numpy
    return {
        "spec": trace.summary(),
        "tokens": list(trace.tokens),
        "head": h,
        "block_q": req.block_q,
        "block_k": req.block_k,
        "blocks": [
            {
                "q_block": b.q_block,
                "rows": list(b.rows),
                "steps": [
                    {
                        "k_block": s.k_block,
                        "cols": list(s.cols),
                        "skipped": s.skipped,
                        "m": arr(s.m),
                        "l": arr(s.l),
                        "rescale": arr(s.rescale),
                        "acc": arr(s.acc),
                    }
                    for s in b.steps
                ],
                "output": arr(b.output),
            }
            for b in tiled.blocks
        ],
        "output": arr(tiled.output),
        "max_abs_diff_vs_staged": diff,
        "memory_bytes": memory_bytes(
            spec.n_tokens,
            len(spec.kv_tokens) or spec.n_tokens,
            spec.d_k,
            req.block_q,
            req.block_k,
            DTYPE_BYTES[spec.dtype],
        ),
    }
