"""FlashAttention's schedule for one head of a trace, as the API's JSON and the /tiles page show it."""

from __future__ import annotations

from typing import Annotated, Any

import torch
from fastapi import APIRouter, Depends, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import HTMLResponse, Response

from engine.spec import DTYPE_BYTES

from ..lab import Lab, get_lab
from ..render.arrays import Traced, to_numpy
from ..schemas import FieldError, TilesRequest, from_query
from ..web.page import serve
from ..web.state import lab_state, parse_int, url_fields

router = APIRouter(include_in_schema=False)
TILE_KEYS = url_fields(TilesRequest)


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


def first_step(steps: list[dict[str, Any]]) -> int:
    """The key block a query block opens on: the first that changes something (a fully masked block is skipped,
    nothing happens there), so a first visit shows m, l and acc being set."""
    return next((j for j, s in enumerate(steps) if not s["skipped"]), 0)


@router.get("/tiles", response_class=HTMLResponse)
async def tiles_page(request: Request, lab: Annotated[Lab, Depends(get_lab)]) -> Response:
    """FlashAttention, walked through: one query block at a time, each key block updating m, l and the accumulator;
    it opens on the first query block's first key block that does something."""
    state = lab_state(request.query_params, "/tiles", TILE_KEYS, ("qb", "kb"), lab.models)

    async def build(ctx: dict[str, Any]) -> None:
        req = TilesRequest.model_validate(from_query(state.api_params(), None, TilesRequest))
        spec = req.to_tiles_spec(lab.limits, lab.device, lab.models)
        if spec.n_tokens > 64:
            raise FieldError("tokens", "the walk-through prints every running value: at most 64 tokens here")
        trace, _ = await lab.trace_async(spec)
        doc = await run_in_threadpool(tiles_document, trace, req)
        blocks = doc["blocks"]
        qb = parse_int("qb", state.get("qb"), 0, 0, len(blocks) - 1)
        steps = blocks[qb]["steps"]
        kb = parse_int("kb", state.get("kb"), first_step(steps), 0, len(steps) - 1)
        ctx.update(doc=doc, spec=spec, block=blocks[qb], qb=qb, kb=kb, step=steps[kb], n_steps=len(steps),
                   qb_urls=[(i, state.url(qb=i, kb=None)) for i in range(len(blocks))],
                   kb_urls=[(j, state.url(qb=qb, kb=j), s["skipped"]) for j, s in enumerate(steps)],
                   prev_url=state.url(qb=qb, kb=kb - 1) if kb > 0 else None,
                   next_url=state.url(qb=qb, kb=kb + 1) if kb + 1 < len(steps) else None,
                   tokens=list(spec.tokens), keys=list(spec.kv_tokens) or list(spec.tokens))  # fmt: skip

    return await serve(
        request, lab, "tiles.html", state, build, json_url="/api/v1/attention/tiles?" + state.api_query(), blocks=()
    )
