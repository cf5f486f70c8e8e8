"""The JSON API, version 1: presets, attention traces as JSON and as .npz, health."""

from __future__ import annotations

import csv
import io
from collections.abc import Callable
from typing import Annotated, Any

import numpy as np
from fastapi import APIRouter, Body, Depends, Request, Response
from fastapi.concurrency import run_in_threadpool

from engine import PRESETS, STAGE_TENSORS, STAGES
from engine.spec import MAIN_TENSOR

from ..errors import field_error, where_of
from ..lab import Lab, cached_get, get_lab
from ..render.arrays import Traced, to_numpy
from ..render.cells import full
from ..render.heatmap import png
from ..render.heatmap import svg as heatmap_svg_of
from ..render.payload import TooLarge, json_response, to_json, to_npz
from ..schemas import (
    ERRORS,
    INT_OR_EMPTY,
    AttentionRequest,
    AttentionResponse,
    FieldError,
    View,
    from_query,
    query_parameters,
)
from ..web.state import parse_head, parse_stage, query_int

router = APIRouter(prefix="/api/v1", tags=["attention"], responses=ERRORS)

NULL_NOTE = (
    "JSON has no −∞: a masked entry is null. Tensors: projection x (N,d), q k v (H,N,d_k); scores raw, scaled "
    "(H,N,N); mask mask (N,N), masked (H,N,N); softmax weights (H,N,N); weighted_sum heads (H,N,d_k), concat (N,d), "
    "output (N,d). A query row whose every key is masked has all-zero weights."
)


def parse_query(request: Request, model: type[AttentionRequest] = AttentionRequest) -> AttentionRequest:
    return model.model_validate(from_query(request.query_params, request.query_params.getlist, model))


async def answer(request: Request, req: AttentionRequest, lab: Lab, fmt: str) -> Response:
    """Validate, compute (off the event loop, through the cache) and serialise one attention request."""
    spec = req.to_spec(lab.limits, lab.device, lab.models)
    return await respond(request, lab, fmt, lambda: lab.trace(spec), req.view(spec), "attention")


async def respond(
    request: Request, lab: Lab, fmt: str, get: Callable[[], tuple[Traced, bool]], view: View, name: str
) -> Response:
    """Compute through the cache, off the event loop, and serialise as JSON (size-limited) or .npz."""

    def work() -> tuple[bytes, bool]:
        trace, cached = get()
        if fmt == "npz":
            return to_npz(trace, view.stages, view.heads, prefixed=name != "attention"), cached
        return to_json(trace, view.stages, view.heads, view.decimals, lab.json_limit), cached

    try:
        body, cached = await run_in_threadpool(work)
    except TooLarge as exc:
        return field_error(
            where_of(request),
            "stages",
            f"the answer would be at least {exc.size / 2**20:.1f} MiB, over the {exc.limit / 2**20:.0f} MiB limit: "
            f"select fewer `heads` or `stages`, or fetch every stage as a NumPy archive from /api/v1/{name}.npz",
            status=413,
        )
    headers = {"X-Cache": "hit" if cached else "miss"}
    if fmt == "npz":
        headers["Content-Disposition"] = f'attachment; filename="{name}.npz"'
        return Response(body, media_type="application/x-npz", headers=headers)
    return json_response(body, headers=headers)


@router.get("/presets", summary="The presets, stage names and this server's limits")
def presets(lab: Annotated[Lab, Depends(get_lab)]) -> dict[str, Any]:
    limits = lab.limits
    return {
        "presets": {
            name: {
                "d_model": p.d_model,
                "n_heads": p.n_heads,
                "d_k": p.d_model // p.n_heads,
                "n_ctx": p.n_ctx,
                "max_tokens": min(p.n_ctx, limits.max_tokens),
                "bias": p.bias,
                "init_std": p.init_std,
                "tokens": list(p.tokens),
            }
            for name, p in PRESETS.items()
        }
        | {
            name: {
                "d_model": m.info.d_model,
                "n_heads": m.info.n_heads,
                "d_k": m.info.d_model // m.info.n_heads,
                "n_ctx": m.info.n_ctx,
                "max_tokens": min(m.info.n_ctx, limits.max_tokens),
                "n_layer": m.info.n_layer,
                "vocab": m.info.vocab,
                "pretrained": True,
                "tokenizer": m.has_tokenizer,
                "default_mask": m.info.default_mask,
            }
            for name, m in lab.models.items()
        },
        "stages": [{"index": i, "key": k, "tensors": list(STAGE_TENSORS[k])} for i, k in enumerate(STAGES, 1)],
        "limits": {
            "max_tokens": limits.max_tokens,
            "max_d_model": limits.max_d_model,
            "max_heads": limits.max_heads,
            "max_token_chars": limits.max_token_chars,
            "max_explicit_d_model": limits.max_explicit_d_model,
            "max_explicit_tokens": limits.max_explicit_tokens,
            "memory_budget_bytes": limits.memory_budget_bytes,
            "json_limit_bytes": lab.json_limit,
        },
        "device": lab.device,
    }


RESPONSES = ERRORS


@router.post("/attention", response_model=AttentionResponse, responses=RESPONSES, description=NULL_NOTE)
async def attention_post(
    request: Request, req: Annotated[AttentionRequest, Body()], lab: Annotated[Lab, Depends(get_lab)]
) -> Response:
    return await answer(request, req, lab, "json")


GET_PARAMS = {"parameters": query_parameters(AttentionRequest)}
VIEW_PARAMS: dict[str, dict[str, Any]] = {
    "stage": {"type": "string"},
    "tensor": {"type": "string"},
    "head": INT_OR_EMPTY,
}


@router.get(
    "/attention",
    response_model=AttentionResponse,
    responses=RESPONSES,
    description=NULL_NOTE,
    openapi_extra=GET_PARAMS,
)
@cached_get
async def attention_get(request: Request, lab: Annotated[Lab, Depends(get_lab)]) -> Response:
    """The same fields as the POST body, as query parameters (`tokens` space-separated, lists comma-separated)."""
    return await answer(request, parse_query(request), lab, "json")


NPZ: dict[int | str, dict[str, Any]] = {
    200: {"content": {"application/x-npz": {}}, "description": "np.load() gives x, q, k, v, raw, …, output"}
}


@router.get("/attention.npz", response_class=Response, responses=NPZ, openapi_extra=GET_PARAMS)
@cached_get
async def attention_npz_get(request: Request, lab: Annotated[Lab, Depends(get_lab)]) -> Response:
    """Every selected stage as a NumPy archive, no size limit beyond the trace's own."""
    return await answer(request, parse_query(request), lab, "npz")


@router.post("/attention.npz", response_class=Response, responses=NPZ)
async def attention_npz_post(
    request: Request, req: Annotated[AttentionRequest, Body()], lab: Annotated[Lab, Depends(get_lab)]
) -> Response:
    return await answer(request, req, lab, "npz")


health = APIRouter(tags=["health"])


@health.get("/healthz")
def healthz(lab: Annotated[Lab, Depends(get_lab)]) -> dict[str, Any]:
    return {"status": "ok", "device": lab.device, "cached_traces": len(lab.cache)}


KEY_AXIS = ("raw", "scaled", "masked", "weights", "mask")  # tensors whose columns are keys


def key_tokens(trace: Traced) -> list[str]:
    """The labels of the key axis: the source tokens in cross-attention, else the tokens themselves."""
    spec = getattr(trace, "spec", None)
    return list(getattr(getattr(spec, "attn", spec), "kv_tokens", ()) or trace.tokens)


def matrix_of(request: Request, trace: Traced, default_stage: str = "softmax") -> tuple[str, np.ndarray]:
    """The 2-D matrix a heat map or a window shows: `stage` (key or 1-based index), `tensor` (the stage's main one
    by default) and `head` for tensors with a head axis."""
    q = request.query_params
    head = parse_head(q.get("head"), trace.n_heads)  # checked even where the tensor has no heads
    stage = parse_stage(q.get("stage"), trace.order, default_stage)
    tensors = trace.stage(stage)
    tensor = q.get("tensor") or MAIN_TENSOR.get(stage) or list(tensors)[-1]
    if tensor not in tensors:
        raise FieldError("tensor", f"stage {stage} has no tensor {tensor!r}; it has {', '.join(tensors)}")
    t = tensors[tensor]
    if t.dim() == 3:
        t = t[head]
    return tensor, to_numpy(t)


def heatmap_response(tensor: str, a: np.ndarray, size: int) -> Response:
    body = png(a, "sequential" if tensor == "weights" else "diverging", size)
    return Response(body, media_type="image/png", headers={"Cache-Control": "public, max-age=3600"})


def window_response(request: Request, trace: Traced, tensor: str, a: np.ndarray) -> Response:
    q = request.query_params
    r0 = query_int(q, "row", 0, 0, a.shape[0] - 1)
    c0 = query_int(q, "col", 0, 0, a.shape[1] - 1)
    rows = query_int(q, "rows", 16, 1, a.shape[0])
    cols = query_int(q, "cols", 16, 1, a.shape[1])
    if rows * cols > 65_536:
        raise FieldError("rows", f"a window holds at most 65,536 numbers; {rows} × {cols} asked for")
    tok, keys = list(trace.tokens), key_tokens(trace)
    col_labels = keys if tensor in KEY_AXIS else [str(j) for j in range(a.shape[1])]
    return json_response(
        {
            "tensor": tensor,
            "row": r0,
            "col": c0,
            "rows": tok[r0 : r0 + rows],
            "cols": col_labels[c0 : c0 + cols],
            "values": np.ascontiguousarray(a[r0 : r0 + rows, c0 : c0 + cols]),
        }
    )


async def attention_matrix(request: Request, lab: Lab) -> tuple[Traced, str, np.ndarray]:
    """The trace a GET describes, and the (head of the) tensor its `stage`, `tensor` and `head` pick."""
    spec = parse_query(request).to_spec(lab.limits, lab.device, lab.models)
    trace, _ = await run_in_threadpool(lab.trace, spec)
    tensor, a = matrix_of(request, trace)
    return trace, tensor, a


HEATMAP_DOC: dict[int | str, dict[str, Any]] = {
    200: {"content": {"image/png": {}}, "description": "One head's matrix as a PNG heat map"}
}


@router.get(
    "/attention/heatmap.png",
    response_class=Response,
    responses=HEATMAP_DOC,
    openapi_extra={"parameters": query_parameters(AttentionRequest, VIEW_PARAMS | {"size": INT_OR_EMPTY})},
)
@cached_get
async def heatmap(request: Request, lab: Annotated[Lab, Depends(get_lab)]) -> Response:
    """The attention fields as query parameters, plus `stage` (default softmax) or `tensor`, `head` and `size`
    (the longer side in pixels, 16–2048). Weights use viridis (0 → 1), other tensors RdBu around 0; −∞ is grey."""
    size = query_int(request.query_params, "size", 512, 16, 2048)
    _, tensor, a = await attention_matrix(request, lab)
    return await run_in_threadpool(heatmap_response, tensor, a, size)


WINDOW_EXTRA: dict[str, dict[str, Any]] = VIEW_PARAMS | {k: INT_OR_EMPTY for k in ("row", "col", "rows", "cols")}


@router.get("/attention/window", openapi_extra={"parameters": query_parameters(AttentionRequest, WINDOW_EXTRA)})
@cached_get
async def window(request: Request, lab: Annotated[Lab, Depends(get_lab)]) -> Response:
    """Exact numbers of a rectangle of one head's matrix: `stage` or `tensor`, `head`, `row`, `col` (its top-left
    corner), `rows`, `cols` (at most 65,536 numbers). −∞ is null."""
    trace, tensor, a = await attention_matrix(request, lab)
    return window_response(request, trace, tensor, a)


EXPORT_EXTRA: dict[str, dict[str, Any]] = VIEW_PARAMS


FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def csv_label(text: str) -> str:
    """A token as a spreadsheet-safe cell: text that a spreadsheet would run as a formula gets a leading '."""
    return "'" + text if text.startswith(FORMULA_START) else text


def _csv(trace: Traced, tensor: str, a: np.ndarray) -> str:
    tok, keys = [csv_label(t) for t in trace.tokens], [csv_label(t) for t in key_tokens(trace)]
    cols = keys if tensor in KEY_AXIS else [str(j) for j in range(a.shape[1])]
    rows = tok if a.shape[0] == len(tok) else keys if a.shape[0] == len(keys) else [str(i) for i in range(a.shape[0])]
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["", *cols])
    for label, row in zip(rows, a.tolist(), strict=True):
        w.writerow([label, *(full(v) for v in row)])  # the shortest text of each float32, as in the JSON
    return buf.getvalue()


@router.get(
    "/attention/export.csv",
    response_class=Response,
    responses={200: {"content": {"text/csv": {}}, "description": "One head of one tensor, labelled; −∞ is -inf"}},
    openapi_extra={"parameters": query_parameters(AttentionRequest, EXPORT_EXTRA)},
)
@cached_get
async def export_csv(request: Request, lab: Annotated[Lab, Depends(get_lab)]) -> Response:
    """One (head of a) tensor as CSV: a header row of key labels or dimensions, a token label on each row."""
    trace, tensor, a = await attention_matrix(request, lab)
    head = parse_head(request.query_params.get("head"), trace.n_heads)  # validated: the filename is plain ASCII
    name = f"{tensor}-head{head}.csv"
    return Response(_csv(trace, tensor, a), media_type="text/csv; charset=utf-8",
                    headers={"Content-Disposition": f'attachment; filename="{name}"'})  # fmt: skip


@router.get(
    "/attention/export.npy",
    response_class=Response,
    responses={200: {"content": {"application/octet-stream": {}}, "description": "np.load() gives the tensor"}},
    openapi_extra={"parameters": query_parameters(AttentionRequest, EXPORT_EXTRA)},
)
@cached_get
async def export_npy(request: Request, lab: Annotated[Lab, Depends(get_lab)]) -> Response:
    """One whole tensor (every head) as a .npy file; `stage` and `tensor` choose it, −∞ stays −∞."""
    spec = parse_query(request).to_spec(lab.limits, lab.device, lab.models)
    trace, _ = await run_in_threadpool(lab.trace, spec)
    tensor, _ = matrix_of(request, trace)  # validates stage, tensor and head
    stage = parse_stage(request.query_params.get("stage"), trace.order, "softmax")
    buf = io.BytesIO()
    np.save(buf, to_numpy(trace.stage(stage)[tensor]))
    return Response(buf.getvalue(), media_type="application/octet-stream",
                    headers={"Content-Disposition": f'attachment; filename="{tensor}.npy"'})  # fmt: skip


@router.get(
    "/attention/heatmap.svg",
    response_class=Response,
    responses={200: {"content": {"image/svg+xml": {}}, "description": "One head's matrix as an SVG heat map"}},
    openapi_extra={"parameters": query_parameters(AttentionRequest, VIEW_PARAMS)},
)
@cached_get
async def heatmap_svg(request: Request, lab: Annotated[Lab, Depends(get_lab)]) -> Response:
    """A vector heat map with token labels, for slides and papers (at most 64 × 64 cells; use the PNG beyond)."""
    trace, tensor, a = await attention_matrix(request, lab)
    if a.shape[0] > 64 or a.shape[1] > 64:
        raise FieldError(
            "tokens", f"an SVG heat map draws at most 64 × 64 cells, this one is {a.shape}: use heatmap.png"
        )
    tok, keys = list(trace.tokens), key_tokens(trace)
    cols = keys if tensor in KEY_AXIS else [str(j) for j in range(a.shape[1])]
    rows = tok if a.shape[0] == len(tok) else keys
    svg = heatmap_svg_of(a, rows, cols, "sequential" if tensor == "weights" else "diverging", tensor)
    return Response(svg, media_type="image/svg+xml")
