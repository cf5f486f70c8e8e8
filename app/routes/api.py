"""The JSON API, version 1: presets, attention traces as JSON and as .npz, health."""

from __future__ import annotations

from typing import Annotated, Any

import numpy as np
from fastapi import APIRouter, Body, Depends, Request, Response
from fastapi.concurrency import run_in_threadpool

from engine import PRESETS, STAGE_TENSORS, STAGES
from engine.attention import Trace

from ..errors import field_error, where_of
from ..lab import Lab, get_lab
from ..render.arrays import to_numpy
from ..render.heatmap import png
from ..render.payload import TooLarge, json_response, to_json, to_npz
from ..schemas import AttentionRequest, AttentionResponse, FieldError, from_query

router = APIRouter(prefix="/api/v1", tags=["attention"])

NULL_NOTE = (
    "JSON has no −∞: a masked entry is null. Tensors: projection x (N,d), q k v (H,N,d_k); scores raw, scaled "
    "(H,N,N); mask mask (N,N), masked (H,N,N); softmax weights (H,N,N); weighted_sum heads (H,N,d_k), concat (N,d), "
    "output (N,d). A query row whose every key is masked has all-zero weights."
)


def parse_query(request: Request) -> AttentionRequest:
    return AttentionRequest.model_validate(from_query(request.query_params, request.query_params.getlist))


async def answer(request: Request, req: AttentionRequest, lab: Lab, fmt: str) -> Response:
    """Validate, compute (off the event loop, through the cache) and serialise one request."""
    spec = req.to_spec(lab.limits, lab.device)
    view = req.view(spec)

    def work() -> tuple[bytes, bool]:
        trace, cached = lab.trace(spec)
        if fmt == "npz":
            return to_npz(trace, view.stages, view.heads), cached
        return to_json(trace, view.stages, view.heads, view.decimals, lab.json_limit), cached

    try:
        body, cached = await run_in_threadpool(work)
    except TooLarge as exc:
        return field_error(
            where_of(request),
            "stages",
            f"the answer would be at least {exc.size / 2**20:.1f} MiB, over the {exc.limit / 2**20:.0f} MiB limit: "
            "select fewer `heads` or `stages`, or fetch every stage as a NumPy archive from /api/v1/attention.npz",
            status=413,
        )
    headers = {"X-Cache": "hit" if cached else "miss"}
    if fmt == "npz":
        headers["Content-Disposition"] = 'attachment; filename="attention.npz"'
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


RESPONSES: dict[int | str, dict[str, Any]] = {
    413: {"description": "The JSON would exceed the size limit: select heads/stages or use the .npz"},
    422: {"description": "A field is invalid; `message` and `detail[].loc` name it"},
}


@router.post("/attention", response_model=AttentionResponse, responses=RESPONSES, description=NULL_NOTE)
async def attention_post(
    request: Request, req: Annotated[AttentionRequest, Body()], lab: Annotated[Lab, Depends(get_lab)]
) -> Response:
    return await answer(request, req, lab, "json")


@router.get("/attention", response_model=AttentionResponse, responses=RESPONSES, description=NULL_NOTE)
async def attention_get(request: Request, lab: Annotated[Lab, Depends(get_lab)]) -> Response:
    """The same fields as the POST body, as query parameters (`tokens` space-separated, lists comma-separated)."""
    return await answer(request, parse_query(request), lab, "json")


NPZ: dict[int | str, dict[str, Any]] = {
    200: {"content": {"application/x-npz": {}}, "description": "np.load() gives x, q, k, v, raw, …, output"}
}


@router.get("/attention.npz", response_class=Response, responses=NPZ)
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


TENSOR_STAGE = {name: key for key, names in STAGE_TENSORS.items() for name in names}
DEFAULT_TENSOR = {
    "projection": "q",
    "scores": "scaled",
    "mask": "masked",
    "softmax": "weights",
    "weighted_sum": "heads",
}


def _int_param(request: Request, name: str, default: int, lo: int, hi: int) -> int:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise FieldError(name, f"must be an integer, got {raw!r}") from None
    if not lo <= value <= hi:
        raise FieldError(name, f"must be between {lo} and {hi}, got {value}")
    return value


async def _matrix_of(request: Request, lab: Lab) -> tuple[Trace, str, np.ndarray]:
    """The 2-D matrix a heat map or a window shows: one head of one tensor (or a head-less tensor)."""
    req = parse_query(request)
    spec = req.to_spec(lab.limits, lab.device)
    q = request.query_params
    stage = q.get("stage", "softmax")
    if stage.isdigit() and 1 <= int(stage) <= len(STAGES):
        stage = STAGES[int(stage) - 1]
    if stage not in STAGES:
        raise FieldError("stage", f"unknown stage {stage!r}; use 1-5 or one of {', '.join(STAGES)}")
    tensor = q.get("tensor") or DEFAULT_TENSOR[stage]
    if tensor not in TENSOR_STAGE:
        raise FieldError("tensor", f"unknown tensor {tensor!r}; choose one of {', '.join(TENSOR_STAGE)}")
    head = _int_param(request, "head", 0, 0, spec.n_heads - 1)
    trace, _ = await run_in_threadpool(lab.trace, spec)
    t = trace.stage(TENSOR_STAGE[tensor])[tensor]
    return trace, tensor, to_numpy(t[head] if t.dim() == 3 else t)


@router.get(
    "/attention/heatmap.png",
    response_class=Response,
    responses={200: {"content": {"image/png": {}}, "description": "One head's matrix as a PNG heat map"}},
)
async def heatmap(request: Request, lab: Annotated[Lab, Depends(get_lab)]) -> Response:
    """The attention fields as query parameters, plus `stage` (default softmax) or `tensor`, `head` and `size`
    (the longer side in pixels, 16–2048). Weights use viridis (0 → 1), other tensors RdBu around 0; −∞ is grey."""
    size = _int_param(request, "size", 512, 16, 2048)
    _, tensor, a = await _matrix_of(request, lab)
    body = await run_in_threadpool(png, a, "sequential" if tensor == "weights" else "diverging", size)
    return Response(body, media_type="image/png", headers={"Cache-Control": "public, max-age=3600"})


@router.get("/attention/window")
async def window(request: Request, lab: Annotated[Lab, Depends(get_lab)]) -> Response:
    """Exact numbers of a rectangle of one head's matrix: `row`, `col` (its top-left corner), `rows`, `cols`
    (at most 65,536 numbers). −∞ is null."""
    trace, tensor, a = await _matrix_of(request, lab)
    r0 = _int_param(request, "row", 0, 0, a.shape[0] - 1)
    c0 = _int_param(request, "col", 0, 0, a.shape[1] - 1)
    rows = _int_param(request, "rows", 16, 1, a.shape[0])
    cols = _int_param(request, "cols", 16, 1, a.shape[1])
    if rows * cols > 65_536:
        raise FieldError("rows", f"a window holds at most 65,536 numbers; {rows} × {cols} asked for")
    tok = list(trace.spec.tokens)
    col_labels = tok if a.shape[1] == len(tok) else [str(j) for j in range(a.shape[1])]
    return json_response(
        {
            "tensor": tensor,
            "row": r0,
            "col": c0,
            "rows": tok[r0 : r0 + rows],
            "cols": col_labels[c0 : c0 + cols],
            "values": a[r0 : r0 + rows, c0 : c0 + cols],
        }
    )
