"""`/healthz`: cheap, never computes, answers while large requests wait for the memory budget."""

from __future__ import annotations

import time
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Response
from fastapi.concurrency import run_in_threadpool

from .lab import Lab, get_lab, progress_key
from .render.payload import json_response

router = APIRouter(tags=["health"])


@router.get("/healthz", summary="Liveness: the device and what the caches hold")
async def healthz(lab: Annotated[Lab, Depends(get_lab)]) -> dict[str, Any]:
    drawing = lab.ahead.pending if lab.ahead is not None else 0
    return {"status": "ok", "device": lab.device, "cached_traces": len(lab.cache), "drawing_ahead": drawing}


@router.get(
    "/api/v1/progress",
    summary="How far a long computation has come",
    responses={
        404: {"description": "Nothing in progress for this request (done, or never asked)"},
        414: {"description": "The query is over MAX_QUERY_KB (a long text's URL, percent-encoded)"},
    },
)
async def progress(
    lab: Annotated[Lab, Depends(get_lab)],
    key: Annotated[
        str | None,
        Query(
            pattern="^[0-9a-f]{16}$",
            description="the request's progress key: 16 hex digits, FNV-1a 64 of its "
            "path and sorted, percent-encoded parameters (what static/lab.js `progressKey` computes)",
        ),
    ] = None,
    url: Annotated[
        str | None, Query(alias="for", max_length=16384, description="or the path and query of a short request")
    ] = None,
) -> Response:
    """How far a long computation that a request started has come (the model view, a long context, generation):
    `done` of `total` steps (layers or tokens) and the seconds since it began. Pages poll it while they wait, by
    `key`, which stays short however long the request's URL; a server with several workers and --redis answers
    from any of them (without --redis, only the computing worker knows)."""
    if key is None and url is None:
        body = {"message": "key: give the request's progress key (or for=, its URL)", "detail": [
            {"loc": ["query", "key"], "msg": "Field required", "type": "missing"}]}  # fmt: skip
        return json_response(body, 422)
    name = "key" if key is not None else "for"
    entry = await run_in_threadpool(lambda: lab.progress_of(key if key is not None else url_key(url or "")))
    if entry is None:
        body = {"message": f"{name}: nothing is being computed for this request here", "detail": [
            {"loc": ["query", name], "msg": "nothing in progress", "type": "not_found"}]}  # fmt: skip
        return json_response(body, 404)
    done, total, start = entry
    return json_response({"done": done, "total": total, "seconds": round(time.time() - start, 1)})


def url_key(url: str) -> str:
    """The progress key of `for=`'s URL (in a worker thread: hashing a long URL takes milliseconds)."""
    path, _, query = url.partition("?")
    return progress_key(path, query)
