"""The page `/models`: every model this server loaded, and the pages to open it in."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from ..lab import Lab
from ..web.page import page_route
from ..web.state import PageQuery
from .view import ModelsView, encdec_of, models_of

router = APIRouter(include_in_schema=False)


async def view(state: PageQuery, lab: Lab, progress: str, ctx: dict[str, Any]) -> ModelsView:
    return ModelsView(models=tuple(models_of(lab)), encoder_decoder=tuple(encdec_of(lab)))


def form(lab: Lab, state: PageQuery, lang: str) -> dict[str, Any]:
    # What is loaded changes as models load on first use: the page is never served from the page cache.
    shows = ",".join(f"{m.name}:{int(m.loaded)}" for m in lab.models.values()) + "|" + ",".join(lab.encdec_presets)
    return {"json_url": "/api/v1/models", "shows": shows}


page_route(router, "/models", "models.html", (), PageQuery, view, form)
