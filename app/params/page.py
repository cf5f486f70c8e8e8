"""The parameter-count page `/params`: a model's parameters, broken down, beside the 12·L·d² estimate."""

from __future__ import annotations

from typing import Annotated, Any
from urllib.parse import urlencode

from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse, Response

from engine.params import MODELS

from ..web.page import query_of, serve
from ..web.state import PageQuery
from .view import ParamsQuery, ParamsView, params_view

router = APIRouter(include_in_schema=False)
KEYS = tuple(ParamsQuery.model_fields)


@router.get("/params", response_class=HTMLResponse)
async def params_page(
    request: Request,
    state: Annotated[PageQuery, Depends(query_of(PageQuery, "/params", KEYS))],
) -> Response:
    raw = form_values(state)
    json_url = "/api/v1/params?" + urlencode([(k, raw[k]) for k in KEYS if k in raw])

    async def build(ctx: dict[str, Any]) -> ParamsView:
        return params_view(ParamsQuery.model_validate(raw), ctx["t"], json_url)

    return await serve(request, "params.html", state, build, json_url=json_url, blocks=(), models=list(MODELS),
                       values=raw)  # fmt: skip


def form_values(state: PageQuery) -> dict[str, str]:
    """The form's fields: GPT-2 small when nothing is given; "custom" means no preset (every field given)."""
    raw = dict(state.params)
    if not any(k in raw for k in KEYS):
        raw["preset"] = "gpt2-small"
    if raw.get("preset") == "custom":
        raw.pop("preset")
    return raw
