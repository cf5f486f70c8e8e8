"""The parameter-count page `/params`: a model's parameters, broken down, beside the 12·L·d² estimate."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse, Response

from engine.params import MODELS

from ..lab import Lab, get_lab
from ..web.page import serve
from ..web.state import ViewState
from .view import ParamsQuery, misses, params_of

router = APIRouter(include_in_schema=False)
KEYS = tuple(ParamsQuery.model_fields)


@router.get("/params", response_class=HTMLResponse)
async def params_page(request: Request, lab: Annotated[Lab, Depends(get_lab)]) -> Response:
    state = ViewState.of(request.query_params, "/params", KEYS)
    raw = dict(state.params)
    if not any(k in raw for k in KEYS):
        raw["preset"] = "gpt2-small"
    if raw.get("preset") == "custom":
        raw.pop("preset")

    async def build(ctx: dict[str, Any]) -> None:
        c = params_of(ParamsQuery.model_validate(raw))
        ctx.update(c=c, misses=misses(c, ctx["t"]))

    return await serve(
        request,
        lab,
        "params.html",
        state,
        build,
        json_url="/api/v1/params?" + ViewState("/api/v1/params", raw, KEYS, KEYS).api_query(),
        blocks=(),
        models=list(MODELS),
        values=raw,
    )
