"""What every API route that answers with a trace shares: reading the GET twin's query, and serialising a trace
(JSON under the size limit, or .npz) off the event loop, through the cache."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from fastapi import Request, Response
from fastapi.concurrency import run_in_threadpool
from pydantic import BaseModel

from ..errors import field_error, where_of
from ..lab import Lab
from ..render.arrays import Traced
from ..render.payload import TooLarge, json_response, to_json, to_npz
from ..schemas import View, from_query

M = TypeVar("M", bound=BaseModel)


def parse_query(request: Request, model: type[M]) -> M:
    return model.model_validate(from_query(request.query_params, request.query_params.getlist, model))


async def respond(
    request: Request, lab: Lab, fmt: str, get: Callable[[], tuple[Traced, bool]], view: View, name: str
) -> Response:
    """Compute through the cache, off the event loop, and serialise as JSON (size-limited) or .npz."""

    def work() -> tuple[bytes, bool]:
        trace, cached = get()
        if fmt == "npz":
            return to_npz(trace, view.stages, view.heads, prefixed=name != "attention"), cached
        return to_json(trace, view.stages, view.heads, view.decimals, lab.json_limit), cached

    try:
        body, cached = await run_in_threadpool(work)
    except TooLarge as exc:
        return field_error(
            where_of(request),
            "stages",
            f"the answer would be at least {exc.size / 2**20:.1f} MiB, over the {exc.limit / 2**20:.0f} MiB limit: "
            f"select fewer `heads` or `stages`, or fetch every stage as a NumPy archive from /api/v1/{name}.npz",
            status=413,
        )
    headers = {"X-Cache": "hit" if cached else "miss"}
    if fmt == "npz":
        headers["Content-Disposition"] = f'attachment; filename="{name}.npz"'
        return Response(body, media_type="application/x-npz", headers=headers)
    return json_response(body, headers=headers)
