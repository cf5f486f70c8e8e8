"""The whole decoder block as JSON, .npz and heat maps: x → norm → the five attention stages → residual → norm →
FFN → residual, every intermediate under a stable key."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

from fastapi import APIRouter, Depends, Query, Request, Response

from engine.block import BlockTrace

from ..lab import Lab, get_lab
from ..schemas import ERRORS, BlockRequest, query_model, query_parameters
from ..web.answer import CitedAnswer, cited, respond, twins
from ..web.page import cached_get
from ..web.tensors import (
    NPZ,
    Heat,
    Window,
    drawn,
    heatmap_route,
    matrix_of,
    window_response,
)

router = APIRouter(prefix="/api/v1", tags=["block"], responses=ERRORS)


async def answer_json(request: Request, req: BlockRequest, lab: Lab, fmt: str = "json") -> Response:
    """Stages in computation order. Pre-LN: ln1 (input, ln1), projection … weighted_sum (the attention of
    /api/v1/attention on ln1), residual1, ln2, ffn_hidden (pre_activation, ffn_hidden | gate, up, ffn_hidden),
    ffn_out, output. Post-LN: the attention on the input, residual1 (input, residual1), ln1, ffn_hidden, ffn_out,
    ln2 (residual2, ln2), output. checks adds max_abs_diff_vs_reference: the block recomputed with torch's own
    layer_norm / rms_norm, scaled_dot_product_attention and gelu / silu."""
    spec = req.to_block_spec(lab.limits, lab.device, lab.models)
    return await respond(request, lab, fmt, spec, lab.block_work(spec), req.block_view(spec), "block")


async def answer_npz(request: Request, req: BlockRequest, lab: Lab) -> Response:
    return await answer_json(request, req, lab, "npz")


twins(
    router,
    "/block",
    BlockRequest,
    answer_json,
    "block",
    summary="A whole transformer block, stage by stage (LayerNorm, attention, FFN, residuals)",
)
twins(router, "/block.npz", BlockRequest, answer_npz, "block_npz", "block_npz", summary="A block's stages as a NumPy archive", response_class=Response, responses=NPZ,
      description="Every selected stage as a NumPy archive, names `stage.tensor` (e.g. `ln1.ln1`, `softmax.weights`).")  # fmt: skip


# A matrix route's request: the block fields of its query, read once (its matrix's are `Matrix`).
if TYPE_CHECKING:
    Block = BlockRequest
else:
    Block = Annotated[query_model(BlockRequest), Query(include_in_schema=False)]


async def _block_trace(req: BlockRequest, lab: Lab) -> BlockTrace:
    trace, _ = await lab.block(req.to_block_spec(lab.limits, lab.device, lab.models))
    return trace


@router.get("/block/heatmap.png", summary="One block tensor as a PNG heat map", **heatmap_route(BlockRequest))
@cached_get
async def block_heatmap(request: Request, lab: Annotated[Lab, Depends(get_lab)], req: Block, m: Heat) -> Response:
    """One tensor of one block stage as a PNG: the block fields plus `stage`, `tensor`, `head`, `size`."""
    tensor, a = matrix_of(m, await _block_trace(req, lab), default_stage="output")
    return await drawn(tensor, a, m.size, m.color)


@router.get(
    "/block/window",
    summary="Exact numbers of a rectangle of one block tensor",
    response_model=CitedAnswer,  # documents the provenance a real model's window carries (`cited`)
    openapi_extra={"parameters": query_parameters(BlockRequest)},
)
@cached_get
async def block_window(request: Request, lab: Annotated[Lab, Depends(get_lab)], req: Block, m: Window) -> Response:
    """Exact numbers of a rectangle of one block tensor (see /api/v1/attention/window)."""
    trace = await _block_trace(req, lab)
    tensor, a = matrix_of(m, trace, default_stage="output")
    return await cited(lab, req.preset, window_response(m, trace, tensor, a))  # a real model's provenance
