"""The block page `/block`: the same lab, one level up — x flows through norm, attention, residual, norm and FFN."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from engine import STAGES
from engine.block import BlockTrace

from ..lab import Lab
from ..render import stages
from ..schemas import BlockRequest, head_within
from ..web.page import language, page_route
from ..web.state import Digits, PageQuery, lab_like, parse_stage, url_fields
from .view import BlockView, stage_label, strip_box

router = APIRouter(include_in_schema=False)

API_KEYS = url_fields(BlockRequest)


class BlockQuery(PageQuery):
    """/block's view: the stage on screen (a key of the block's order, or its 1-based place: read once the order is
    known) and the head."""

    stage: str = ""
    head: Digits(None) = 0  # type: ignore[valid-type]


def api_url(state: BlockQuery, npz: bool = False) -> str:
    """The API's answer for the page's request (its numbers as JSON, or as NumPy arrays)."""
    return "/api/v1/block" + (".npz" if npz else "") + "?" + state.api_query()


async def block_view(state: BlockQuery, lab: Lab, progress: str, ctx: dict[str, Any]) -> BlockView:
    """What /block shows for `state`: the page's View (its JSON face is the page's `.json` twin)."""
    t = ctx["t"]
    req = state.request(BlockRequest)
    spec = req.to_block_spec(lab.limits, lab.device, lab.models)
    order = spec.order
    stage = parse_stage(state.stage, order)  # the block's own order of stages, known from the request
    head = head_within(state.head, spec.attn.n_heads)
    trace, _ = await lab.block(spec)
    i = order.index(stage)
    small = spec.attn.n_tokens <= stages.SMALL_TOKENS and spec.attn.d_model <= stages.SMALL_DIMS
    shown: dict[str, Any] = stages.present(trace, stage, t)  # formula, explain, notice
    if not small:
        shown |= strips(trace, stage, head, state)
    return BlockView(
        spec=spec,
        attn_spec=spec.attn,
        summary=spec.summary(),
        tokens=spec.attn.tokens,
        key=stage,
        index=i + 1,
        head=head,
        small=small,
        in_attention=stage in STAGES,
        stage_labels={k: stage_label(k, t) for k in order},
        **shown,
        checks=trace.check_values(),
        matrices=stages.matrices(trace, stage, head) if small else None,
        json_url=api_url(state),
        npz_url=api_url(state, npz=True),
        flow=[(k, state.url(stage=k), k in STAGES) for k in order],
        prev_url=state.url(stage=order[i - 1]) if i > 0 else None,
        next_url=state.url(stage=order[i + 1]) if i + 1 < len(order) else None,
        head_urls=[(h, state.url(head=h)) for h in range(spec.attn.n_heads)],
    )


def strips(trace: BlockTrace, stage: str, head: int, state: BlockQuery) -> dict[str, Any]:
    """A large block's stage: one heat-map strip per tensor, its shape and its size on the page."""
    tensors = trace.stage(stage)
    query = {n: state.api_query(stage=stage, tensor=n, head=head, size=768) for n in tensors}
    return {
        "heatmaps": [(n, "/api/v1/block/heatmap.png?" + query[n]) for n in tensors],
        "shapes": {n: tuple(a.shape[-2:]) for n, a in tensors.items()},
        "per_head": tuple(n for n, a in tensors.items() if a.dim() == 3),
        "boxes": {n: strip_box(a.shape[-2:]) for n, a in tensors.items()},
    }


def form(lab: Lab, state: BlockQuery, lang: str) -> dict[str, Any]:
    return {"json_url": api_url(state), "presets": ["toy", "gpt2-small", *lab.models], "models": lab.models}


def block_query(request: Request, path: str, keys: tuple[str, ...], query: type[BlockQuery]) -> BlockQuery:
    return lab_like(query.of(request.query_params, path, keys), request.app.state.lab.models, language(request))


page_route(router, "/block", "block.html", API_KEYS, BlockQuery, block_view, form, BlockView.blocks, block_query)
