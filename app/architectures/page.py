"""The page /architectures: encoder-only, decoder-only and encoder–decoder side by side on one input (their masks,
what a position reads, their objectives). The View is built in app/architectures/view.py."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse, Response

from ..lab import Lab, get_lab
from ..web.page import serve
from ..web.state import PageQuery
from .view import ArchitecturesQuery, ArchitecturesView, architectures_view

router = APIRouter(include_in_schema=False)
KEYS = tuple(k for k in ArchitecturesQuery.model_fields if k not in PageQuery.model_fields)  # its own
EXAMPLES = {"en": "the cat sat on the mat", "zh": "猫 坐 在 垫子 上"}


@router.get("/architectures", response_class=HTMLResponse)
async def architectures_page(request: Request, lab: Annotated[Lab, Depends(get_lab)]) -> Response:
    state = PageQuery.of(request.query_params, "/architectures", KEYS)

    async def build(ctx: dict[str, Any]) -> ArchitecturesView:
        given = {k: v for k, v in state.params.items() if k in KEYS}
        given.setdefault("text", EXAMPLES.get(ctx["lang"], EXAMPLES["en"]))  # the page's language's own words
        q = ArchitecturesQuery.model_validate(given)
        return architectures_view(q, ctx["t"])

    return await serve(request, lab, "architectures.html", state, build, blocks=())
