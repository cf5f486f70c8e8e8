"""`/healthz`: cheap, never computes, answers while large requests wait for the memory budget. `/api/v1/progress`:
how far the request a page waits for has come (every page request is known to it while served: app/web/page.py
`Kernel`)."""

from __future__ import annotations

import time
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Response
from fastapi.concurrency import run_in_threadpool

from .lab import Lab, get_lab, progress_key
from .render.payload import json_response
from .templating import translator

router = APIRouter(tags=["health"])


@router.get("/healthz", summary="Liveness: the device and what the caches hold")
async def healthz(lab: Annotated[Lab, Depends(get_lab)]) -> dict[str, Any]:
    drawing = lab.ahead.pending if lab.ahead is not None else 0
    return {"status": "ok", "device": lab.device, "cached_traces": len(lab.cache), "drawing_ahead": drawing}


@router.get(
    "/api/v1/progress",
    summary="How far a long computation has come",
    responses={
        404: {"description": "Nothing known of this request here (never asked, or answered a while ago)"},
        414: {"description": "The query is over MAX_QUERY_KB (a long text's URL, percent-encoded)"},
    },
)
async def progress(
    lab: Annotated[Lab, Depends(get_lab)],
    key: Annotated[
        str | None,
        Query(
            pattern="^[0-9a-f]{16}$",
            description="the request's progress key: 16 hex digits, the X-Progress-Key its "
            "page sent with it (static/lab.js), else a hash of its URL (see `for`)",
        ),
    ] = None,
    url: Annotated[
        str | None, Query(alias="for", max_length=16384, description="or the path and query of a short request")
    ] = None,
    lang: Annotated[str, Query(pattern="^(en|zh)$", description="the language of `text`")] = "en",
) -> Response:
    """How far a long computation that a request started has come (the model view, a long context, generation):
    `done` of `total` `unit` (`layers`: the layers of a model run so far, every pass's counted when the
    computation makes several; `tokens`: the tokens generated) and the seconds since it began, with `text`, the
    line a page shows (`21 / 31 layers · 6.2 s`) in `lang`. A page request whose computation counts nothing, or has
    not begun, is 0 of 0 while the worker serving it works on it: its seconds are how long it has waited. A page
    request answered in the last few seconds is `answered: true` (a poll that crossed its answer stops there). Pages
    poll it while they wait, by `key`, which stays short however long the request's URL; a server with several
    workers and --redis answers a computation's progress from any of them (without --redis, only the computing
    worker knows)."""
    if key is None and url is None:
        body = {"message": "key: give the request's progress key (or for=, its URL)", "detail": [
            {"loc": ["query", "key"], "msg": "Field required", "type": "missing"}]}  # fmt: skip
        return json_response(body, 422)
    name = "key" if key is not None else "for"
    # The progress key of `for=`'s URL, in a worker thread: hashing a long URL takes milliseconds.
    path, _, query = (url or "").partition("?")
    entry = await run_in_threadpool(lambda: lab.progress_of(key if key is not None else progress_key(path, query)))
    if entry is None:
        body = {"message": f"{name}: nothing is being computed for this request here", "detail": [
            {"loc": ["query", name], "msg": "nothing in progress", "type": "not_found"}]}  # fmt: skip
        return json_response(body, 404)
    seconds, t = round(time.time() - entry.start, 1), translator(lang)
    # The line a page shows while it waits, its count with its unit: "21 / 31 layers · 6.2 s" ("working · 6.2 s"
    # while nothing is counted).
    if entry.answered:
        text = t("progress.answered")
    elif entry.total > 0:
        text = t("progress.count." + entry.unit, done=entry.done, total=entry.total, s=seconds)
    else:
        text = t("progress.waiting", s=seconds)
    return json_response({"done": entry.done, "total": entry.total, "unit": entry.unit, "seconds": seconds,
                          "answered": entry.answered, "text": text})  # fmt: skip
