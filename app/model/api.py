"""GET/POST /api/v1/model_view: every layer × head of a pretrained model as four statistics."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response

from ..lab import Lab, get_key
from ..render.payload import json_response
from ..schemas import ERRORS
from ..web.answer import twins
from ..web.view import plain
from .view import ModelViewRequest, model_view_of

router = APIRouter(prefix="/api/v1", tags=["model view"], responses=ERRORS)


async def answer(request: Request, req: ModelViewRequest, lab: Lab) -> Response:
    """stats[layer][head], over the query rows: entropy (mean row entropy, nats), sink (mean weight on key 0, rows
    from 1: the sink share /sinks and /head_roles give), previous (mean weight on key i-1, rows from 1), self (mean
    weight on key i); entropy and self over every row. Each layer's trace is computed (and cached) as
    /api/v1/attention?preset=…&layer=… would."""
    _, summarised = await model_view_of(req, lab, get_key(request))
    return json_response(plain(summarised))


twins(
    router,
    "/model_view",
    ModelViewRequest,
    answer,
    "model_view",
    summary="Every layer and head of a model at a glance (entropy, sinks, distance)",
)
