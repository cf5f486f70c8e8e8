"""The JSON API, version 1: presets, attention traces as JSON and as .npz, health."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, Request, Response
from fastapi.concurrency import run_in_threadpool

from engine import PRESETS, STAGE_TENSORS, STAGES

from ..errors import field_error, where_of
from ..lab import Lab, get_lab
from ..render.payload import TooLarge, json_response, to_json, to_npz
from ..schemas import AttentionRequest, AttentionResponse, from_query

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
