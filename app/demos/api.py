"""The demonstrations as JSON: `/api/v1/demo/*`, and the √d_k charts as SVG."""

from __future__ import annotations

from functools import lru_cache
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import Response

from engine import demos

from ..errors import problem
from ..render.figure import chart_figure
from ..render.payload import json_response
from ..schemas import ERRORS
from ..templating import translator
from .view import PermutationQuery, RopeQuery, SoftmaxQuery, logits_of, permutation_of, run_demos, scaling_specs

router = APIRouter(prefix="/api/v1/demo", tags=["demonstrations"], responses=ERRORS)


@router.get("/permutation", summary="Shuffling the tokens shuffles the outputs — unless positions or a mask")
def permutation(q: Annotated[PermutationQuery, Query()]) -> dict[str, Any]:
    return permutation_of(q)


@router.get("/rope", summary="⟨R_m q, R_n k⟩ = ⟨q, R_(n−m) k⟩")
def rope(q: Annotated[RopeQuery, Query()]) -> dict[str, Any]:
    return demos.rope_relative(q.m, q.n, q.d_k, q.base, q.pairing, q.seed)


@router.get("/scaling", summary="Var(q·k) against d_k; softmax's peak and entropy under each scale")
async def scaling() -> dict[str, Any]:
    return await run_in_threadpool(demos.scaling)


@router.get(
    "/scaling.svg",
    summary="The scaling demonstration as an SVG chart",
    response_class=Response,
    responses={200: {"content": {"image/svg+xml": {}}}},
)
async def scaling_svg(
    chart: Literal["variance", "max", "entropy"] = "variance", lang: Literal["en", "zh"] = "en"
) -> Response:
    """One of /demos' three √d_k charts, drawn by matplotlib as the page's figures are (app/render/figure.py: text
    kept as text, Chinese in a system CJK font): the same data and words as the page's inline chart."""
    return Response(await run_in_threadpool(scaling_chart, chart, lang), media_type="image/svg+xml")


@lru_cache(maxsize=6)
def scaling_chart(chart: str, lang: str) -> bytes:
    """One of the three charts in one language, drawn once: its data (`demos.scaling()`, seeded) and words are
    fixed, so the six SVGs are kept (drawing one takes matplotlib 0.3–1 s)."""
    data = demos.scaling()
    spec = scaling_specs(data, translator(lang))[chart]
    caption = f"Attention Lab · /demos · {data['samples']} samples, {data['n_keys']} keys"
    return chart_figure(spec, "svg", caption, lang)


@router.get("/softmax", summary="Softmax in float16 without and with the row maximum subtracted")
def softmax(q: Annotated[SoftmaxQuery, Query()]) -> dict[str, Any]:
    return demos.softmax_stability(logits_of(q), q.dtype)


@router.get("/all", summary="Every demonstration of the /demos page at once, from the same query parameters")
async def all_demos(request: Request) -> Response:
    """The /demos page's JSON twin: each demonstration's answer, computed from the parameters it knows."""
    sections, errors = run_demos({k: v for k, v in request.query_params.items() if v != ""})
    if errors:
        return problem(
            422, [{"loc": ["query", field], "msg": msg, "type": "value_error"} for field, msg in errors.values()]
        )
    return json_response(sections | {"scaling": await run_in_threadpool(demos.scaling)})
