"""A page as a new feature would add it: its folder, a router, a View (tests/app/web/test_registry.py)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response

from app.models.view import ModelsView
from app.web.page import serve
from app.web.state import PageQuery

router = APIRouter(include_in_schema=False)


@router.get("/fake", response_class=HTMLResponse)
async def fake_page(request: Request) -> Response:
    state = PageQuery.of(request.query_params, "/fake")

    async def build(ctx: dict[str, Any]) -> ModelsView:
        return ModelsView(models=())

    return await serve(request, "models.html", state, build, page="fake", blocks=())
