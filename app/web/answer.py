"""What every API route that answers with a trace shares: its GET and POST twins, and serialising a trace
(JSON under the size limit, or .npz) off the event loop, through the cache."""

import inspect
import json
from collections.abc import Awaitable, Callable, Coroutine
from typing import Annotated, Any, TypeVar

import orjson
from fastapi import APIRouter, Body, Depends, Query, Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.routing import APIRoute, iter_route_contexts
from pydantic import BaseModel, ConfigDict, create_model
from starlette.applications import Starlette

from ..errors import field_error, where_of
from ..lab import Lab, Work, get_lab
from ..render.arrays import Traced
from ..render.payload import OPTIONS, TooLarge, json_response, min_numbers, to_json, to_npz
from ..schemas import FieldError, Selection, query_model, query_parameters
from . import provenance
from .page import cached_get
from .state import PageQuery, show
from .view import OPTIONAL, Provenance, subclasses

T = TypeVar("T")
Answer = Callable[[Request, Any, Lab], Awaitable[Response]]


def twins(
    router: APIRouter, path: str, model: type[BaseModel], answer: Answer, name: str, get_name: str = "", **route: Any
) -> None:
    """The GET/POST twins of one API operation: `POST path` takes the request model as a JSON body, `GET path` the
    same fields as query parameters (its query model, `query_model(model)`, documented in OpenAPI as the query text
    it reads, its answers cached by URL); both answer with `answer(request, req, lab)`, whose docstring is the
    operation's description unless `description` is given. `name` keeps each route's name (and so its OpenAPI
    operationId): `{name}_post` and `{name}_get` (or `get_name`)."""
    route.setdefault("description", inspect.cleandoc(answer.__doc__ or "").replace("\n", " ") or None)

    # This module's annotations are evaluated where they are written (no postponed annotations): FastAPI reads
    # each route's parameters from its signature, the request model among them.
    async def post(
        request: Request,
        req: Annotated[model, Body()],  # type: ignore[valid-type]
        lab: Annotated[Lab, Depends(get_lab)],
    ) -> Response:
        if (twice := getattr(request, "twice", None)) is not None:  # a GET refuses a field given twice too
            raise FieldError(field_name(twice), "is given more than once")
        return await cited(lab, getattr(req, "preset", None), await answer(request, req, lab))

    async def known(request: Request) -> None:  # async: a check this cheap takes no worker thread
        # A key no view of the lab reads is refused, as the POST's body refuses it (a typo is named, never ignored);
        # a key another view reads rides along, so any page's or operation's query can be pasted onto this one.
        if unknown := [k for k in request.query_params if k not in view_keys(request.app)]:
            raise FieldError(field_name(unknown[0]), f"is no field of any view of the lab; this operation takes "
                             f"{', '.join(model.model_fields)}")  # fmt: skip

    async def get(
        request: Request,
        lab: Annotated[Lab, Depends(get_lab)],
        req: Annotated[query_model(model), Query(include_in_schema=False)],  # type: ignore[valid-type]
    ) -> Response:
        return await cited(lab, getattr(req, "preset", None), await answer(request, req, lab))

    if "response_class" not in route:  # a JSON answer: its schema shows the provenance it may carry
        route["response_model"] = with_provenance(route.get("response_model"))
    extra = route.pop("openapi_extra", {}) | {"parameters": query_parameters(model)}
    router.add_api_route(path, post, methods=["POST"], name=f"{name}_post", route_class_override=OnceRoute, **route)
    router.add_api_route(path, cached_get(get), methods=["GET"], name=get_name or f"{name}_get", openapi_extra=extra,
                         dependencies=[Depends(known)], **route)  # fmt: skip


class CitedAnswer(BaseModel):
    """An answer about a model: the operation's own fields (its description names them) and, about a real model
    (a preset this server loaded from files), `provenance`: the lab's version, the model, its weights files' sha256
    and the date."""

    model_config = ConfigDict(extra="allow")

    provenance: Annotated[Provenance | None, OPTIONAL] = None


def with_provenance(answer: type[BaseModel] | None) -> type[BaseModel]:
    """The documented answer of a twin: its own model with `provenance` added (same name, so its schema keeps its
    place in /openapi.json), or `CitedAnswer` for an operation that documents no model."""
    if answer is None:
        return CitedAnswer
    if "provenance" in answer.model_fields:
        return answer
    return create_model(answer.__name__, __base__=answer, __module__=answer.__module__, __doc__=answer.__doc__,
                        provenance=(Annotated[Provenance | None, OPTIONAL], None))  # fmt: skip


async def cited(lab: Lab, preset: str | None, response: Response) -> Response:
    """`response`, a JSON object an operation just wrote about `preset`, with the provenance block as its last key
    when `preset` is a real model (the request model's field, with its default: no answer is read for its model).
    An operation writes its answer as bytes (orjson, under the JSON size limit), so the block's bytes go before the
    object's closing brace; anything else (a refusal, an archive, an answer about a random preset) is as it was."""
    written = getattr(response, "body", None)  # a streamed answer has none (no twin streams JSON)
    if response.status_code != 200 or response.media_type != "application/json" or preset not in lab.models:
        return response
    if not isinstance(written, bytes | memoryview):
        return response
    block = await run_in_threadpool(provenance.answer_block, lab, preset)
    body = bytes(written).rstrip()
    if block is None or not body.endswith(b"}"):
        return response
    stamp = b'"provenance":' + orjson.dumps(block)
    body = body[:-1] + (stamp if body[1:-1].strip() == b"" else b"," + stamp) + b"}"
    headers = {k: v for k, v in response.headers.items() if k not in ("content-length", "content-type")}
    return Response(body, media_type="application/json", headers=headers)


class OnceRequest(Request):
    """A request whose JSON body is parsed once, noting the first key an object gives twice (`twice`: JSON parsers
    keep the last silently, and this API names it)."""

    twice: str | None = None

    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            self._json = json.loads(await self.body(), object_pairs_hook=self._pairs)
        return self._json

    def _pairs(self, pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        out = dict(pairs)
        if self.twice is None and len(out) < len(pairs):
            seen: set[str] = set()
            self.twice = next(k for k, _ in pairs if k in seen or seen.add(k))  # type: ignore[func-returns-value]
        return out


class OnceRoute(APIRoute):
    """A route that reads its body as `OnceRequest` (FastAPI's custom request class)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def once(request: Request) -> Response:
            return await handler(OnceRequest(request.scope, request.receive))

        return once


def view_keys(app: Starlette) -> frozenset[str]:
    """Every query key some page or API operation of `app` reads, from what they declare (computed once per app):
    each route's query parameters (FastAPI's, a query model's fields, the twins' query documented from their
    request models), each page's own parameters, their older spellings and form words (every `PageQuery`: the
    common one and each page's; a page's request fields are an operation's) and `lang`."""
    known: frozenset[str] | None = getattr(app.state, "view_keys", None)
    if known is None:
        keys = {"lang"}
        for context in iter_route_contexts(app.routes):
            route = context.original_route
            if not isinstance(route, APIRoute):
                continue
            extra = (route.openapi_extra or {}).get("parameters", [])
            keys.update(p["name"] for p in extra if p.get("in") == "query")
            dependants = [route.dependant]
            while dependants:
                dependant = dependants.pop()
                dependants.extend(dependant.dependencies)
                for param in dependant.query_params:
                    shape = param.field_info.annotation
                    if isinstance(shape, type) and issubclass(shape, BaseModel):  # a query model: its fields
                        keys.update(f.alias or n for n, f in shape.model_fields.items())
                    else:
                        keys.add(param.alias)
        queries: list[type[PageQuery]] = [PageQuery, *subclasses(PageQuery)]
        for query in queries:
            keys |= query.keys()
        known = app.state.view_keys = frozenset(keys)
    return known


def field_name(key: str) -> str:
    """A key the user sent, as an error names it: itself, or a bounded printable echo of a long or odd one."""
    return key if 0 < len(key) <= 30 and key.isprintable() else show(key, 30)


def mib(n: int) -> str:
    """Bytes as MiB, with the digits a small limit needs (0.05) and no more than one decimal for large ones."""
    x = n / 2**20
    return f"{x:.1f}" if x >= 1 else f"{x:.2g}"


def too_large(request: Request, field: str, size: int, limit: int, hint: str) -> Response:
    """The 413 every JSON answer gives when it cannot fit the configured limit, naming the field to change."""
    message = f"the answer would be at least {mib(size)} MiB, over the {mib(limit)} MiB JSON limit: {hint}"
    return field_error(where_of(request), field, message, status=413)


async def answer_document(
    request: Request,
    lab: Lab,
    work: Work[T],
    document: Callable[[T], Any],  # a dict or a dataclass: orjson writes either as an object
    numbers: int,
    field: str,
    hint: str,
) -> Response:
    """A JSON document made from one computed trace (tiles, sinks, decode): refused before computing when `numbers`,
    a lower bound on what it holds, cannot fit the JSON limit; else computed and serialised off the event loop, in
    one worker thread (`Lab.compute`: large work queued like every trace), and checked against the limit once more."""
    limit = lab.json_limit
    if 2 * numbers > limit:  # no number is shorter than "0,"
        return too_large(request, field, 2 * numbers, limit, hint)
    body: bytes = await lab.compute(*work, then=lambda value, _: orjson.dumps(document(value), option=OPTIONS))
    if len(body) > limit:
        return too_large(request, field, len(body), limit, hint)
    return json_response(body)


# Bytes serialising one number takes at its peak: the float32 copy, orjson's text (~10-20 characters), the body.
JSON_BYTES_PER_NUMBER = 24
NPZ_BYTES_PER_NUMBER = 16  # the float32 copy, the archive buffer and its final bytes


async def respond(
    request: Request,
    lab: Lab,
    fmt: str,
    spec: Any,
    work: Work[Traced],
    view: Selection,
    name: str,
) -> Response:
    """Compute through the cache and serialise as JSON (size-limited) or .npz, off the event loop (`Lab.compute`,
    serialising in the computation's thread and slot).

    An answer whose lower bound is already over the JSON limit is refused before computing; serialising reserves
    its bytes from the memory budget like the computation does, so many large answers at once wait (or get 503)
    instead of growing the process."""
    numbers = min_numbers(spec, view.stages, len(view.heads))
    try:
        if fmt == "json" and 2 * numbers > lab.json_limit:  # no number is shorter than "0,"
            raise TooLarge(2 * numbers, lab.json_limit)
        serialise = numbers * (NPZ_BYTES_PER_NUMBER if fmt == "npz" else JSON_BYTES_PER_NUMBER)

        def serialised(trace: Traced, cached: bool) -> tuple[bytes, bool]:
            trace.verify(view.heads)  # the trace's check against SDPA, for the heads this answer shows
            with lab.budget.reserve(serialise):
                if fmt == "npz":
                    return to_npz(trace, view.stages, view.heads, prefixed=name != "attention"), cached
                return to_json(trace, view.stages, view.heads, view.decimals, lab.json_limit), cached

        body, cached = await lab.compute(*work, then=serialised, then_cost=serialise)
    except TooLarge as exc:
        hint = f"select fewer `heads` or `stages`, or fetch every stage as a NumPy archive from /api/v1/{name}.npz"
        return too_large(request, "stages", exc.size, exc.limit, hint)
    headers = {"X-Cache": "hit" if cached else "miss"}
    if fmt == "npz":
        headers["Content-Disposition"] = f'attachment; filename="{name}.npz"'
        return Response(body, media_type="application/x-npz", headers=headers)
    return json_response(body, headers=headers)
