"""The page `/models`: every model this server loaded, and the pages to open it in."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse, Response

from ..lab import Lab, get_lab
from ..web.page import query_of, serve
from ..web.state import PageQuery
from .view import ModelsView, encdec_of, models_of

router = APIRouter(include_in_schema=False)


@router.get("/models", response_class=HTMLResponse)
async def models_page(
    request: Request,
    lab: Annotated[Lab, Depends(get_lab)],
    state: Annotated[PageQuery, Depends(query_of(PageQuery, "/models"))],
) -> Response:
    # What is loaded changes as models load on first use: the page is never served from the page cache.
    shows = ",".join(f"{m.name}:{int(m.loaded)}" for m in lab.models.values()) + "|" + ",".join(lab.encdec_presets)

    async def build(ctx: dict[str, Any]) -> ModelsView:
        return ModelsView(models=tuple(models_of(lab)), encoder_decoder=tuple(encdec_of(lab)))

    return await serve(request, lab, "models.html", state, build, json_url="/api/v1/models", blocks=(), shows=shows)
