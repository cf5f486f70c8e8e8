"""Every bad input becomes a 4xx whose message names the field: never a 500, never an echo of the input.

FastAPI's default 422 body repeats the offending input, and a NaN there cannot be encoded as JSON (a 500); these
handlers keep only the location, the message and the error type.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from fastapi import FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from engine import SpecError
from engine.budget import Busy
from engine.errors import Message

from .lab import Cancelled
from .render.payload import json_response

# torch.OutOfMemoryError (CUDA's allocator failing) since torch 2.5; torch.cuda.OutOfMemoryError before.
OUT_OF_MEMORY: type[Exception] = getattr(torch, "OutOfMemoryError", None) or torch.cuda.OutOfMemoryError


# The most errors one answer lists (settings.max_errors, its default here): a request can hold thousands of bad
# entries (4096 bad pairs were 4096 errors, near 1 MB); past it `omitted` counts those left out.
MAX_ERRORS = 50


def problem(status: int, errors: list[dict[str, Any]], limit: int = MAX_ERRORS) -> Response:
    """The error answer: the first `limit` errors, in `message` and `detail`; `omitted` (only when some were) counts
    the rest."""
    shown, omitted = errors[:limit], max(0, len(errors) - limit)
    message = "; ".join(f"{_path(e['loc'])}: {e['msg']}" for e in shown)
    body: dict[str, Any] = {"message": message, "detail": shown}
    if omitted:
        body["message"] += f"; and {omitted} more {'error' if omitted == 1 else 'errors'}"
        body["omitted"] = omitted
    return json_response(body, status)


def _path(loc: list[str]) -> str:
    """["body", "x", "0", "1"] -> "x[0][1]"; ["body"] -> "body"."""
    parts = loc[1:] if len(loc) > 1 else loc or ["request"]
    return parts[0] + "".join(f"[{p}]" for p in parts[1:])


NO_BODY = "a JSON object with the request's fields is required; the body was empty"
NOT_AN_OBJECT = "the body must be a JSON object sent with Content-Type: application/json"
UNREADABLE = "the body is not JSON this API can read: not UTF-8, nested too deeply, or a number with too many digits"


def clean(errors: Any, where: str) -> list[dict[str, Any]]:
    """Pydantic errors without `input`/`ctx`, located at the top-level field they concern."""
    out = []
    for e in errors:
        kind = e.get("type", "")
        raw_loc = list(e.get("loc", ()))
        msg = str(e.get("msg", "invalid")).removeprefix("Value error, ")
        if kind == "json_invalid":  # FastAPI puts the character offset where the field would be
            offset = raw_loc[1] if len(raw_loc) > 1 else "?"
            error = (e.get("ctx") or {}).get("error", "malformed")
            loc, msg = ["body"], f"the body is not valid JSON ({error} at character {offset})"
        elif where == "body" and kind == "missing" and (len(raw_loc) == 1 or raw_loc[1:] in (["request"], ["req"])):
            loc, msg = ["body"], NO_BODY  # no body at all: the body, not a field
        elif where == "body" and raw_loc == ["body"] and kind in ("model_attributes_type", "dict_type"):
            loc, msg = ["body"], NOT_AN_OBJECT
        else:
            # The location (body, query, path) first, then the field: a field may itself be called `query` (a
            # room's view), so only the first entry is the location. Union members add their type name
            # (tokens.list[str].0): the field and its entry are kept.
            parts = [str(p) for p in (raw_loc[1:] if raw_loc[:1] in (["body"], ["query"], ["path"]) else raw_loc)]
            loc = [where, parts[0] if parts else "request", *parts[1:]]
        out.append({"loc": loc, "msg": coded(msg, kind, e.get("ctx")), "type": kind})
    return out


def coded(msg: str, kind: str, ctx: dict[str, Any] | None) -> str:
    """Pydantic's message keeping its type and the bounds it names (its ctx's numbers and words, never the input),
    for a page to say it in its reader's language (app/templating.py `error_message`)."""
    params: dict[str, Any] = {k: v for k, v in (ctx or {}).items()
                              if isinstance(v, int | float | str) and k not in ("error", "code")}  # fmt: skip
    if kind in ("literal_error", "enum") and (choices := choices_of(params.get("expected"))):
        params["choices"] = choices  # the catalogue joins them in its own words (`{choices:、}`)
    return Message.worded(msg, (ctx or {}).get("code") or f"pydantic.{kind}", **params)


def choices_of(expected: object) -> tuple[str, ...] | None:
    """A choice field's values from pydantic's ctx["expected"] (its own rendering of the field's values, never the
    input: "'a', 'b' or 'c'"), for a catalogue to join in its language; None when they do not read back as written."""
    if not isinstance(expected, str):
        return None
    head, _, last = expected.rpartition(" or ")
    choices = (*head.split(", "), last) if head else (last,)
    return choices if " or ".join((", ".join(choices[:-1]), choices[-1])).removeprefix(" or ") == expected else None


def field_error(where: str, field: str, message: str, status: int = 422) -> Response:
    return problem(status, [{"loc": [where, field], "msg": message, "type": "value_error"}])


def where_of(request: Request) -> str:
    return "query" if request.method == "GET" else "body"


METHODS = ("GET", "HEAD", "POST", "PUT", "DELETE", "PATCH")


def allowed_methods(app: FastAPI, path: str) -> list[str]:
    """The methods some route serves `path` with (asked of each route by method: included routers keep theirs
    inside); HEAD wherever GET is (app/limits.py `Edge` runs it as its GET)."""
    allowed = {m for m in METHODS if any(r.matches({"type": "http", "path": path, "method": m})[0] == Match.FULL
                                        for r in app.router.routes)}  # fmt: skip
    return sorted(allowed | ({"HEAD"} if "GET" in allowed else set()))


def refusal(status: int, message: str, *, msg: str, kind: str, headers: dict[str, str] | None = None) -> Response:
    """A refusal of the request as a whole (no field at fault): `message` in words, `msg` and `kind` its detail."""
    body = {"message": message, "detail": [{"loc": ["request"], "msg": msg, "type": kind}]}
    return json_response(body, status, headers)


def install(app: FastAPI, html_404: Callable[[Request], Response | None] | None = None) -> None:
    """The handlers; `html_404(request)` may answer a 404 as a page (a browser's navigation), else the JSON one."""

    @app.exception_handler(RequestValidationError)
    @app.exception_handler(ValidationError)
    async def _invalid(request: Request, exc: RequestValidationError | ValidationError) -> Response:
        limit = getattr(getattr(request.app.state, "settings", None), "max_errors", MAX_ERRORS)
        return problem(422, clean(exc.errors(), where_of(request)), limit)

    @app.exception_handler(SpecError)  # the one error type of a request (app.schemas.FieldError is its name there)
    async def _spec_invalid(request: Request, exc: SpecError) -> Response:
        return field_error(where_of(request), exc.field, exc.message)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> Response:
        headers = dict(exc.headers or {})
        if exc.status_code == 400 and request.method in ("POST", "PUT", "PATCH"):
            # FastAPI's answer to a body that is not UTF-8 JSON at all: an invalid input like any other.
            return problem(422, [{"loc": ["body"], "msg": UNREADABLE, "type": "json_invalid"}])
        if exc.status_code == 404 and html_404 is not None and (page := html_404(request)) is not None:
            return page
        if exc.status_code == 405:
            # A path served by several routes (GET and POST twins): Allow lists them all, not the first one's.
            headers["Allow"] = ", ".join(allowed_methods(app, request.url.path))
        return refusal(exc.status_code, str(exc.detail), msg=str(exc.detail), kind="http", headers=headers)

    @app.exception_handler(Busy)
    async def _busy(request: Request, exc: Busy) -> Response:
        message = f"the server is busy with other large computations; retry in {exc.retry_after} s"
        return refusal(
            503, message, msg="memory budget in use", kind="busy", headers={"Retry-After": str(exc.retry_after)}
        )

    @app.exception_handler(Cancelled)
    async def _cancelled(request: Request, exc: Cancelled) -> Response:
        # Its client went away (499, as nginx logs it: nobody reads this) or the server is stopping (503).
        if exc.stopping:
            msg = "the server is stopping; retry shortly"
            return refusal(503, msg, msg=msg, kind="cancelled", headers={"Retry-After": "2"})
        return refusal(499, "the client went away", msg="the client went away", kind="cancelled")

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> Response:
        # A bug, not the client's fault: a JSON 500 that names nothing internal (the log has the traceback).
        # Starlette's ServerErrorMiddleware sends this, then re-raises for the server's log.
        message = "internal error: the server failed on this request; it has been logged"
        return refusal(500, message, msg="internal error", kind="internal")

    @app.exception_handler(OUT_OF_MEMORY)
    async def _out_of_memory(request: Request, exc: Exception) -> Response:
        message = "the device ran out of memory for this request; retry later, or ask for fewer tokens"
        return refusal(503, message, msg="out of device memory", kind="busy", headers={"Retry-After": "5"})
