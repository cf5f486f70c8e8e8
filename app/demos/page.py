"""The demonstrations page `/demos`: each demonstration's form and its computed answer, and the √d_k charts."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import HTMLResponse, Response

from engine import demos

from ..lab import Lab, get_lab
from ..web.page import serve
from ..web.state import ViewState
from .view import PermutationQuery, RopeQuery, SoftmaxQuery, run_demos, scaling_charts

router = APIRouter(include_in_schema=False)

KEYS = tuple(dict.fromkeys((*PermutationQuery.model_fields, *RopeQuery.model_fields, *SoftmaxQuery.model_fields)))


@router.get("/demos", response_class=HTMLResponse)
async def demos_page(request: Request, lab: Annotated[Lab, Depends(get_lab)]) -> Response:
    state = ViewState.of(request.query_params, "/demos", KEYS)

    async def build(ctx: dict[str, Any]) -> None:
        t = ctx["t"]
        sections, errors = run_demos(state.api_params())
        ctx["errors"] = {
            name: t("error.field", field=field, message=message) for name, (field, message) in errors.items()
        }
        if errors:
            ctx["status"] = 422
        data = await run_in_threadpool(demos.scaling)
        ctx.update(sections, scaling=data, charts=scaling_charts(data, t))

    return await serve(
        request,
        lab,
        "demos.html",
        state,
        build,
        json_url="/api/v1/demo/all?" + state.api_query(),
        blocks=(),
        values=state.params,
    )
