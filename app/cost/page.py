"""The page /cost: where a block's work goes as N grows, counted from the shapes and timed on this machine. The View
is built in app/cost/view.py, the counts and timings in app/cost/flops.py."""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse, Response

from ..lab import Lab, get_lab
from ..web.page import serve
from ..web.state import PageQuery
from .view import CostQuery, CostView, cost_view

router = APIRouter(include_in_schema=False)
KEYS = tuple(k for k in CostQuery.model_fields if k not in PageQuery.model_fields)  # its own


@router.get("/cost", response_class=HTMLResponse)
async def cost_page(request: Request, lab: Annotated[Lab, Depends(get_lab)]) -> Response:
    state = PageQuery.of(request.query_params, "/cost", KEYS)

    async def build(ctx: dict[str, Any]) -> CostView:
        q = CostQuery.model_validate({k: v for k, v in state.params.items() if k in KEYS})
        return await asyncio.to_thread(cost_view, q, ctx["t"], ctx["lang"])  # the timing: off the event loop

    return await serve(request, lab, "cost.html", state, build, blocks=(), deferred=True)  # timing takes seconds
