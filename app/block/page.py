"""The block page `/block`: the same lab, one level up — x flows through norm, attention, residual, norm and FFN."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse, Response

from engine import STAGES

from ..lab import Lab, get_lab
from ..render import page as view
from ..render import stages
from ..schemas import BlockRequest, from_query
from ..web.page import serve
from ..web.state import lab_state, parse_head, parse_stage, url_fields
from .view import stage_label, strip_box

router = APIRouter(include_in_schema=False)

API_KEYS = url_fields(BlockRequest)


@router.get("/block", response_class=HTMLResponse)
async def block_page(request: Request, lab: Annotated[Lab, Depends(get_lab)]) -> Response:
    state = lab_state(request.query_params, "/block", API_KEYS, ("stage", "head"), lab.models)

    async def build(ctx: dict[str, Any]) -> None:
        t = ctx["t"]
        ctx["stage_label"] = lambda k: stage_label(k, t)
        req = BlockRequest.model_validate(from_query(state.api_params(), None, BlockRequest))
        spec = req.to_block_spec(lab.limits, lab.device, lab.models)
        order = spec.order
        stage = parse_stage(state.get("stage"), order)
        head = parse_head(state.get("head"), spec.attn.n_heads)
        trace, _ = await lab.block_async(spec)
        i = order.index(stage)
        small = spec.attn.n_tokens <= view.SMALL_TOKENS and spec.attn.d_model <= view.SMALL_DIMS
        ctx.update(
            trace=trace,
            spec=spec,
            attn_spec=spec.attn,
            key=stage,
            index=i + 1,
            head=head,
            small=small,
            in_attention=stage in STAGES,
            **stages.present(trace, stage, t),
            flow=[(k, state.url(stage=k), k in STAGES) for k in order],
            prev_url=state.url(stage=order[i - 1]) if i > 0 else None,
            next_url=state.url(stage=order[i + 1]) if i + 1 < len(order) else None,
            head_urls=[(h, state.url(head=h)) for h in range(spec.attn.n_heads)],
        )
        if small:
            ctx["matrices"] = stages.matrices(trace, stage, head)
        else:
            names = list(trace.stage(stage))
            size = 768
            ctx["heatmaps"] = [
                (n, "/api/v1/block/heatmap.png?" + state.api_query(stage=stage, tensor=n, head=head, size=size))
                for n in names
            ]
            ctx["shapes"] = {n: tuple(t.shape[-2:]) for n, t in trace.stage(stage).items()}
            ctx["per_head"] = {n for n, t in trace.stage(stage).items() if t.dim() == 3}
            ctx["boxes"] = {n: strip_box(trace.stage(stage)[n].shape[-2:]) for n in names}

    return await serve(
        request,
        lab,
        "block.html",
        state,
        build,
        json_url="/api/v1/block?" + state.api_query(),
        npz_url="/api/v1/block.npz?" + state.api_query(),
        presets=["toy", "gpt2-small", *lab.models],
        models=lab.models,
    )
