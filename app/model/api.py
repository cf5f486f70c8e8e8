"""GET/POST /api/v1/model_view: every layer × head of a pretrained model as four statistics."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, Depends, Request, Response

from ..lab import Lab, get_lab, request_key
from ..render.payload import json_response
from ..schemas import ERRORS, query_parameters
from ..web.answer import parse_query
from ..web.cache import cached_get
from .view import ModelViewRequest, model_view_of

router = APIRouter(prefix="/api/v1", tags=["model view"], responses=ERRORS)

NOTE = (
    "stats[layer][head], over every query row: entropy (mean row entropy, nats), sink (mean weight on key 0), "
    "previous (mean weight on key i-1, rows from 1), self (mean weight on key i). Each layer's trace is computed "
    "(and cached) as /api/v1/attention?preset=…&layer=… would."
)


async def answer(req: ModelViewRequest, lab: Lab, key: str | None = None) -> Response:
    _, body = await model_view_of(req, lab, key)
    return json_response(body)


@router.post("/model_view", description=NOTE)
async def model_view_post(req: Annotated[ModelViewRequest, Body()], lab: Annotated[Lab, Depends(get_lab)]) -> Response:
    return await answer(req, lab)


@router.get("/model_view", description=NOTE, openapi_extra={"parameters": query_parameters(ModelViewRequest)})
@cached_get
async def model_view_get(request: Request, lab: Annotated[Lab, Depends(get_lab)]) -> Response:
    return await answer(parse_query(request, ModelViewRequest), lab, request_key(request))
