"""`/healthz`: cheap, never computes, answers while large requests wait for the memory budget."""

from __future__ import annotations

import time
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Response
from fastapi.concurrency import run_in_threadpool

from .lab import Lab, get_lab, progress_key
from .render.payload import json_response

router = APIRouter(tags=["health"])


@router.get("/healthz")
async def healthz(lab: Annotated[Lab, Depends(get_lab)]) -> dict[str, Any]:
    return {"status": "ok", "device": lab.device, "cached_traces": len(lab.cache)}


@router.get(
    "/api/v1/progress",
    responses={
        404: {"description": "Nothing in progress for this URL (done, or never asked)"},
        414: {"description": "The query is over MAX_QUERY_KB (a long text's URL, percent-encoded)"},
    },
)
async def progress(
    lab: Annotated[Lab, Depends(get_lab)],
    url: Annotated[str, Query(alias="for", max_length=16384, description="the path and query of the request")],
) -> Response:
    """How far a long computation that a request started has come (the model view, a long context, generation):
    `done` of `total` steps (layers or tokens) and the seconds since it began. Pages poll it while they wait; a
    server with several workers and --redis answers from any of them (without --redis, only the computing worker
    knows)."""
    path, _, query = url.partition("?")
    entry = await run_in_threadpool(lab.progress_of, progress_key(path, query))
    if entry is None:
        body = {"message": "for: nothing is being computed for this URL here", "detail": [
            {"loc": ["query", "for"], "msg": "nothing in progress", "type": "not_found"}]}  # fmt: skip
        return json_response(body, 404)
    done, total, start = entry
    return json_response({"done": done, "total": total, "seconds": round(time.time() - start, 1)})
