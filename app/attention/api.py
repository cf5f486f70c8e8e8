"""The attention JSON API, version 1: presets, traces as JSON and .npz, and one matrix as a heat map, a window of
exact numbers, CSV, .npy or SVG."""

from __future__ import annotations

import io
from dataclasses import asdict
from typing import TYPE_CHECKING, Annotated, Any

import numpy as np
from fastapi import APIRouter, Depends, Query, Request, Response
from fastapi.concurrency import run_in_threadpool

from engine import PRESETS, STAGE_TENSORS, STAGES
from engine.long import LongTrace

from ..lab import Lab, get_lab, request_key
from ..render.arrays import Traced, to_numpy
from ..render.figure import heat_svg
from ..schemas import (
    ERRORS,
    AttentionRequest,
    AttentionResponse,
    FieldError,
    TilesRequest,
    head_within,
    query_model,
    query_parameters,
)
from ..web.answer import CitedAnswer, answer_document, cited, respond, twins
from ..web.page import cached_get
from ..web.tensors import (
    KEY_AXIS,
    NPZ,
    Heat,
    Matrix,
    MatrixQuery,
    Window,
    drawn,
    hatched,
    heatmap_route,
    key_tokens,
    long_window,
    matrix_of,
    pick,
    to_csv,
    window_response,
)
from .tiles import tiles_document

router = APIRouter(prefix="/api/v1", tags=["attention"], responses=ERRORS)


@router.get("/presets", summary="The presets, stage names and this server's limits")
def presets(lab: Annotated[Lab, Depends(get_lab)]) -> dict[str, Any]:
    limits = lab.limits

    def sizes(d_model: int, n_heads: int, n_ctx: int) -> dict[str, int]:
        return {
            "d_model": d_model,
            "n_heads": n_heads,
            "d_k": d_model // n_heads,
            "n_ctx": n_ctx,
            "max_tokens": min(n_ctx, limits.max_tokens),
        }

    return {
        "presets": {
            name: sizes(p.d_model, p.n_heads, p.n_ctx)
            | {"bias": p.bias, "init_std": p.init_std, "tokens": list(p.tokens)}
            for name, p in PRESETS.items()
        }
        | {
            name: sizes(m.info.d_model, m.info.n_heads, m.info.n_ctx)
            | {
                "n_layer": m.info.n_layer,
                "vocab": m.info.vocab,
                "pretrained": True,
                "tokenizer": m.has_tokenizer,
                "default_mask": m.info.default_mask,
            }
            for name, m in lab.models.items()
        },
        "encoder_decoder": dict(lab.encdec_presets),  # finished encoder–decoder runs, served to /cross by name
        "stages": [{"index": i, "key": k, "tensors": list(STAGE_TENSORS[k])} for i, k in enumerate(STAGES, 1)],
        "limits": asdict(limits) | {"json_limit_bytes": lab.json_limit},  # every engine Limit, by its name
        "device": lab.device,
    }


async def answer(request: Request, req: AttentionRequest, lab: Lab, fmt: str = "json") -> Response:
    """JSON has no −∞: a masked entry is null. Tensors: projection x (N,d), q k v (H,N,d_k); scores raw, scaled
    (H,N,N); mask mask (N,N), masked (H,N,N); softmax weights (H,N,N); weighted_sum heads (H,N,d_k), concat (N,d),
    output (N,d). A query row whose every key is masked has all-zero weights."""
    spec = await lab.spec(req)  # validated; computed off the event loop, through the cache
    return await respond(request, lab, fmt, spec, lab.trace_work(spec), req.view(spec), "attention")


async def answer_npz(request: Request, req: AttentionRequest, lab: Lab) -> Response:
    """Every selected stage as a NumPy archive, no size limit beyond the trace's own."""
    return await answer(request, req, lab, "npz")


twins(
    router,
    "/attention",
    AttentionRequest,
    answer,
    "attention",
    response_model=AttentionResponse,
    summary="Trace the five stages of attention (masked entries are null)",
)
twins(
    router,
    "/attention.npz",
    AttentionRequest,
    answer_npz,
    "attention_npz",
    response_class=Response,
    responses=NPZ,
    summary="The five stages as a NumPy archive (−∞ kept)",
)


# A matrix route's request: the attention fields of its query, read once (its matrix's are `Matrix`).
if TYPE_CHECKING:
    Attention = AttentionRequest
else:
    Attention = Annotated[query_model(AttentionRequest), Query(include_in_schema=False)]


async def attention_source(request: Request, req: AttentionRequest, m: MatrixQuery, lab: Lab) -> Traced | LongTrace:
    """What a window or heat map reads: the whole trace, or for a pretrained model's context past a whole trace's
    length (up to MAX_LONG_TOKENS), a lazy trace that computes the rows asked for."""
    if req.preset in lab.models:
        spec = await lab.spec(req, lab.long_limits)
        if spec.n_tokens > lab.limits.max_tokens:
            return (await lab.compute(*lab.long_work(spec), progress=request_key(request)))[0]
    spec = await lab.spec(req)
    return (await lab.trace(spec, [head_within(m.head, spec.n_heads)]))[0]


async def attention_matrix(req: AttentionRequest, m: MatrixQuery, lab: Lab) -> tuple[Traced, str, np.ndarray]:
    """The trace a GET describes, and the (head of the) tensor its `stage`, `tensor` and `head` pick."""
    spec = await lab.spec(req)
    trace, _ = await lab.trace(spec, [head_within(m.head, spec.n_heads)])
    tensor, a = matrix_of(m, trace)
    return trace, tensor, a


@router.get("/attention/heatmap.png", summary="One head's matrix as a PNG heat map", **heatmap_route(AttentionRequest))
@cached_get
async def heatmap(request: Request, lab: Annotated[Lab, Depends(get_lab)], req: Attention, m: Heat) -> Response:
    """The attention fields as query parameters, plus `stage` (default softmax) or `tensor`, `head` and `size`
    (the longer side in pixels, 16–2048). Weights use viridis (0 → 1), other tensors RdBu around 0; −∞ is hatched
    grey, and a weight the mask set to 0 hatched light grey."""
    source = await attention_source(request, req, m, lab)
    masked = None
    if isinstance(source, LongTrace):
        _, tensor, head = pick(m, source)
        a = to_numpy(await run_in_threadpool(source.matrix, tensor, head))
    else:
        tensor, a = matrix_of(m, source)
        masked = hatched(source, tensor, a)
    return await drawn(tensor, a, m.size, m.color, masked)


@router.get(
    "/attention/window",
    summary="Exact numbers of a rectangle of one matrix",
    response_model=CitedAnswer,  # documents the provenance a real model's window carries (`cited`)
    openapi_extra={"parameters": query_parameters(AttentionRequest)},
)
@cached_get
async def window(request: Request, lab: Annotated[Lab, Depends(get_lab)], req: Attention, m: Window) -> Response:
    """Exact numbers of a rectangle of one head's matrix: `stage` or `tensor`, `head`, `row`, `col` (its top-left
    corner), `rows`, `cols` (at most 65,536 numbers). −∞ is null."""
    source = await attention_source(request, req, m, lab)
    if isinstance(source, LongTrace):  # only the window's rows are computed, each from its whole row
        answer = await run_in_threadpool(long_window, m, source)
    else:
        tensor, a = matrix_of(m, source)
        answer = window_response(m, source, tensor, a)
    return await cited(lab, req.preset, answer)  # a real model's provenance


def file_route(media_type: str, description: str) -> dict[str, Any]:
    """The route options of one matrix of the trace as a file of `media_type`: the attention fields as query
    parameters (`MatrixQuery` documents its own)."""
    return {
        "response_class": Response,
        "responses": {200: {"content": {media_type: {}}, "description": description}},
        "openapi_extra": {"parameters": query_parameters(AttentionRequest)},
    }


@router.get(
    "/attention/export.csv",
    summary="One head of one tensor as CSV",
    **file_route("text/csv", "One head of one tensor, labelled; −∞ is -inf"),
)
@cached_get
async def export_csv(request: Request, lab: Annotated[Lab, Depends(get_lab)], req: Attention, m: Matrix) -> Response:
    """One (head of a) tensor as CSV: a header row of key labels or dimensions, a token label on each row."""
    trace, tensor, a = await attention_matrix(req, m, lab)
    name = f"{tensor}-head{m.head}.csv"  # the head checked against the trace's: the filename is plain ASCII
    return Response(to_csv(trace, tensor, a), media_type="text/csv; charset=utf-8",
                    headers={"Content-Disposition": f'attachment; filename="{name}"'})  # fmt: skip


@router.get(
    "/attention/export.npy",
    summary="One whole tensor as a .npy file",
    **file_route("application/octet-stream", "np.load() gives the tensor"),
)
@cached_get
async def export_npy(request: Request, lab: Annotated[Lab, Depends(get_lab)], req: Attention, m: Matrix) -> Response:
    """One whole tensor (every head) as a .npy file; `stage` and `tensor` choose it, −∞ stays −∞."""
    trace, _ = await lab.trace(await lab.spec(req))
    stage, tensor, _ = pick(m, trace)  # validates stage, tensor and head
    buf = io.BytesIO()
    np.save(buf, to_numpy(trace.stage(stage)[tensor]))
    return Response(buf.getvalue(), media_type="application/octet-stream",
                    headers={"Content-Disposition": f'attachment; filename="{tensor}.npy"'})  # fmt: skip


@router.get(
    "/attention/heatmap.svg",
    summary="One head's matrix as an SVG heat map",
    **file_route("image/svg+xml", "One head's matrix as an SVG heat map"),
)
@cached_get
async def heatmap_svg(request: Request, lab: Annotated[Lab, Depends(get_lab)], req: Attention, m: Matrix) -> Response:
    """A vector heat map with token labels, for slides and papers (at most 64 × 64 cells; use the PNG beyond); −∞
    and a weight the mask set to 0 are hatched, as in the PNG."""
    trace, tensor, a = await attention_matrix(req, m, lab)
    if a.shape[0] > 64 or a.shape[1] > 64:
        raise FieldError(
            "tokens", f"an SVG heat map draws at most 64 × 64 cells, this one is {a.shape}: use heatmap.png"
        )
    tok, keys = list(trace.tokens), key_tokens(trace)
    cols = keys if tensor in KEY_AXIS else [str(j) for j in range(a.shape[1])]
    rows = tok if a.shape[0] == len(tok) else keys
    scale = "sequential" if tensor == "weights" else "diverging"
    svg = heat_svg(a, rows, cols, scale, tensor, hatched(trace, tensor, a))
    return Response(svg, media_type="image/svg+xml")


async def answer_tiles(request: Request, req: TilesRequest, lab: Lab) -> Response:
    """FlashAttention's online softmax for one head: for each block of block_q queries, each block of block_k keys
    updates the running row maximum m, the running sum l (after multiplying the earlier one by rescale =
    exp(m_before - m_after)) and the unnormalised accumulator acc; a block whose every entry is masked is skipped.
    output = acc / l equals stage 5's heads (max_abs_diff_vs_staged). m is null (−∞) until a row has read a key."""
    spec = await lab.off_loop(req.preset, req.to_tiles_spec, lab.limits, lab.device, lab.models)
    n_kv = len(spec.kv_tokens) or spec.n_tokens
    numbers = spec.n_tokens * (-(-n_kv // req.block_k)) * (spec.d_k + 3) + 2 * spec.n_tokens * spec.d_k
    return await answer_document(
        request, lab, lab.trace_work(spec), lambda trace: tiles_document(trace, req), numbers,
        "block_k", "use larger key blocks or fewer tokens",
    )  # fmt: skip


twins(
    router,
    "/attention/tiles",
    TilesRequest,
    answer_tiles,
    "tiles",
    summary="FlashAttention's tiled online softmax, block by block",
)


def sink_document(trace: Traced, heads: tuple[int, ...]) -> dict[str, Any]:
    from engine.sinks import drop_sink

    d = drop_sink(trace)  # type: ignore[arg-type]
    return {
        "spec": trace.summary(),
        "tokens": list(trace.tokens),
        "heads": list(heads),
        "sink_share": to_numpy(d.share),
        "output_change": to_numpy(d.change),
        "relative_change": to_numpy(d.relative),
        "weights": to_numpy(d.weights[list(heads)]),
    }


async def answer_sink(request: Request, req: AttentionRequest, lab: Lab) -> Response:
    """Attention sinks: sink_share[h] is head h's mean weight on key 0 over queries 1…N−1. Dropping the sink gives
    every query but the first zero weight on key 0 and renormalises the rest (a row that was all sink becomes zero);
    output_change[i] = ‖O′ᵢ − Oᵢ‖₂ for the layer's output O = Concat(AV)W_O + b_O, relative_change divides by ‖Oᵢ‖₂.
    weights holds the renormalised weights of the selected heads."""
    spec = await lab.spec(req)
    heads = req.view(spec).heads
    numbers = len(heads) * spec.n_tokens * (len(spec.kv_tokens) or spec.n_tokens) + 3 * spec.n_tokens
    return await answer_document(
        request, lab, lab.trace_work(spec), lambda trace: sink_document(trace, heads), numbers,
        "heads", "select fewer `heads`",
    )  # fmt: skip


twins(
    router,
    "/attention/sink",
    AttentionRequest,
    answer_sink,
    "sink",
    summary="Attention sinks: each head's weight on the first token",
)
