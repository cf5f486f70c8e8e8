"""The kernel's response caches: a finished GET answer (an API route's or a page's) is kept by its URL, so a class
asking for the same few views again and again gets the same bytes without parsing, computing or rendering again.

The store (`app.state.responses`) is byte-bounded like the trace cache; `Kernel`, the kernel's ASGI layer, answers
API hits before routing, `cached_get` fills it, and the page kernel (app/web/page.py) keys pages by URL, language, face (whole page,
htmx panel, JSON) and whatever else they show. A class reaches a new view together (thirty students press the same
step, their browsers ask for the same twelve heat maps): `single_flight` computes a missing answer once and the
others wait for it, instead of each computing it again on the one worker.
"""

from __future__ import annotations

import asyncio
import functools
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from fastapi import Request, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from engine import TraceCache

from ..lab import ProgressKey
from ..lab.keys import HEADER
from ..limits import send_problem
from ..templating import LANGS, TEMPLATES, negotiate, translator

if TYPE_CHECKING:
    from ..lab import HeavyWork, Lab


def store_of(request: Request) -> TraceCache[tuple[str, str], CachedResponse]:
    return request.app.state.responses


async def single_flight(
    request: Request,
    key: tuple[str, str],
    hit: Callable[[], Response | None],
    compute: Callable[[], Awaitable[Response]],
) -> Response:
    """`hit()` if the store has the answer; else `compute()` once for all concurrent requests of `key`: a request
    arriving while another computes it waits, then reads the store. If the first one stored nothing (a refusal, an
    error, a cancelled request), the next waiter computes in its turn, so every request gets its own honest answer."""
    if (found := hit()) is not None:
        return found
    flights: dict[tuple[str, str], asyncio.Event] = request.app.state.flights
    while (running := flights.get(key)) is not None:
        await running.wait()
        if (found := hit()) is not None:
            return found
    done = flights[key] = asyncio.Event()
    try:
        return await compute()
    finally:
        del flights[key]
        done.set()


@dataclass(frozen=True)
class CachedResponse:
    """A finished GET answer: the same URL gets the same bytes, without parsing or serialising again."""

    body: bytes
    media_type: str
    headers: tuple[tuple[str, str], ...]
    key_bytes: int = 0  # the URL it is stored under counts too: a long unused parameter is not free

    @property
    def nbytes(self) -> int:
        return len(self.body) + self.key_bytes + sum(len(k) + len(v) for k, v in self.headers) + 200


def keep(
    store: TraceCache[tuple[str, str], CachedResponse],
    key: tuple[str, str],
    response: Response,
    media_type: str | None = None,
    kept: tuple[str, ...] = ("content-disposition", "cache-control"),
) -> int:
    """Store a successful answer under `key` (its body, media type, and the headers `kept` that a repeat must carry:
    by default where to save it and how long to cache it). Returns the bytes it holds in the store, 0 when nothing
    was kept."""
    if response.status_code != 200 or not store.max_bytes:
        return 0
    headers = tuple((k, v) for k, v in response.headers.items() if k in kept)
    media_type = media_type or response.media_type or ""
    stored = CachedResponse(bytes(response.body), media_type, headers, len(key[0]) + len(key[1]))
    store.put(key, stored)
    return stored.nbytes


def stored(store: TraceCache[tuple[str, str], CachedResponse], key: tuple[str, str]) -> Response | None:
    """The answer kept under `key`, marked `X-Cache: hit`, or None."""
    hit = store.get(key)
    if hit is None:
        return None
    return Response(hit.body, media_type=hit.media_type, headers=dict(hit.headers) | {"X-Cache": "hit"})


def forget_preset(store: TraceCache[tuple[str, str], CachedResponse], name: str) -> int:
    """Drop every kept answer and page whose URL names the preset `name` as a value (a model no longer served: the
    same URL must now be refused, not answered from the store). Returns how many were dropped."""
    names = re.compile(rf"(?:^|&)[^=&]*={re.escape(name)}(?:&|$)")
    return store.discard(lambda key: bool(names.search(key[1])))


def forget_pages(store: TraceCache[tuple[str, str], CachedResponse]) -> int:
    """Drop every kept page (the API's answers stay): the presets the pages offer changed (a model now served, or
    no longer). Returns how many were dropped."""
    return store.discard(lambda key: key[0].startswith("page:"))


def cached_get(handler: Callable[..., Awaitable[Response]]) -> Callable[..., Awaitable[Response]]:
    """Serve a GET route's successful answers from the response store, keyed by path and query string: a repeated URL
    skips validation, computing and serialising. The answer is a pure function of the URL and the server's
    configuration, so this is safe for every idempotent route here."""

    @functools.wraps(handler)
    async def wrapper(request: Request, lab: Lab, **given: Any) -> Response:
        store = store_of(request)
        key = (request.url.path, request.url.query)

        async def compute() -> Response:
            response = await handler(request, lab, **given)
            keep(store, key, response)
            return response

        return await single_flight(request, key, lambda: stored(store, key), compute)

    return wrapper


class Kernel:
    """The page kernel's ASGI layer, inside the app's limits (app/limits.py `Edge`), before routing:

    - every page request (a GET, not a poll, a static file or an event stream) is known to /api/v1/progress from its
      arrival until its answer's last byte leaves (`Lab.serving`), by the URL the browser asked for: a page polls
      for whatever it waits for, and a poll for a page that computes nothing it counts (or has not begun) is
      answered, 0 of 0 with the seconds waited, never a 404 logged in the browser's console;
    - a page's `.json` twin URL (`/block.json?…`, and `/index.json` for `/`) is the page itself asked for with
      `Accept: application/json`, so every page's JSON face has an address one can link to;
    - a GET whose answer `cached_get` stored is sent straight from the store, before routing, validation and
      dependency injection;
    - a heavy request (`heavy.paths`) takes its client's fair share and its queue place (app/lab/admission.py
      `HeavyWork`), after the store: a cached answer never queues. Refused, it is a 429 with Retry-After: a page
      in its reader's language for a browser's page load, the API's JSON problem for anything else."""

    QUIET = ("/api/v1/progress", "/static/", "/vendor/", "/healthz", "/metrics")  # known to no poll
    TWINLESS = ("/api/", "/static/", "/vendor/", "/openapi.json")  # a `.json` there is itself

    def __init__(self, app: ASGIApp, store: TraceCache[tuple[str, str], CachedResponse], lab: Lab | None = None,
                 heavy: HeavyWork | None = None) -> None:  # fmt: skip
        self.app = app
        self.store = store
        self.lab = lab
        self.heavy = heavy

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path, get = scope["path"], scope["method"] == "GET"  # a HEAD is its GET here (`Edge`)
        query = scope["query_string"].decode("latin-1")  # as Starlette's `request.url.query` has it
        if not get or path.startswith(self.QUIET) or self.lab is None:
            await self.answer(scope, receive, send, query)
            return
        named = next((v.decode("latin-1") for k, v in scope["headers"] if k == HEADER_BYTES), None)
        done = self.lab.serving(ProgressKey(path, query, named=named))
        redirect = False

        async def sent(message: Message) -> None:
            nonlocal redirect
            if message["type"] == "http.response.start":
                redirect = 300 <= message["status"] < 400
                if dict(message.get("headers", [])).get(b"content-type", b"").startswith(b"text/event-stream"):
                    done(answered=False)  # a stream the page follows, not an answer it waits for
            elif message["type"] == "http.response.body" and not message.get("more_body", False) and not redirect:
                done()  # before the last byte leaves: a client that has the answer finds nothing in progress
            await send(message)

        try:
            await self.answer(scope, receive, sent, query)
        finally:
            if redirect:  # the page waits on, for the page it is sent to (a class joined by its code): a while
                asyncio.get_running_loop().call_later(REDIRECT_GRACE_S, done)
            else:
                done()

    async def answer(self, scope: Scope, receive: Receive, send: Send, query: str) -> None:
        path = scope["path"]
        if path.endswith(".json") and scope["method"] == "GET" and not path.startswith(self.TWINLESS):
            page = path.removesuffix(".json")
            page = "/" if page == "/index" else page
            headers = [(k, v) for k, v in scope["headers"] if k not in (b"accept", b"hx-request")]
            scope = dict(scope, path=page, raw_path=page.encode(), headers=[*headers, (b"accept", b"application/json")])
        if scope["method"] == "GET" and self.store.max_bytes:
            hit = self.store.get((scope["path"], query))
            if hit is not None:
                headers = [
                    (b"content-type", hit.media_type.encode()),
                    (b"content-length", str(len(hit.body)).encode()),
                    (b"x-cache", b"hit"),
                    *((k.encode(), v.encode()) for k, v in hit.headers),
                ]
                await send({"type": "http.response.start", "status": 200, "headers": headers})
                await send({"type": "http.response.body", "body": hit.body})
                return
        if self.heavy is not None and scope["path"] in self.heavy.paths:
            await self.heavy.serve(self.app, scope, receive, send, refuse_heavy)
        else:
            await self.app(scope, receive, send)


REDIRECT_GRACE_S = 10  # a redirected page request stays known this long: the page waits for where it was sent
HEADER_BYTES = HEADER.encode()


async def refuse_heavy(scope: Scope, receive: Receive, send: Send, cap: int) -> None:
    """A 429 naming the cap (MAX_HEAVY_PER_CLIENT) and when to retry: for a browser's page load (a GET of a page,
    `Accept: text/html`, not htmx's) a page in the reader's language that offers to try again; else a JSON problem
    (the API's shape)."""
    request = Request(scope, receive)
    accept = request.headers.get("accept", "")
    if scope["path"].startswith("/api/") or "text/html" not in accept or "hx-request" in request.headers:
        message = (f"this address already runs {cap} heavy computation{'s' if cap != 1 else ''} at once "
                   "(MAX_HEAVY_PER_CLIENT); retry when it is done")  # fmt: skip
        await send_problem(send, 429, "request", message, "too_many_heavy", extra=((b"retry-after", HEAVY_RETRY),))
        return
    lang = negotiate(request.query_params.get("lang"), request.headers.get("accept-language"))
    t = translator(lang)
    url = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    kept = [(k, v) for k, v in request.query_params.multi_items() if k != "lang"]
    lang_urls = {code: f"{request.url.path}?{urlencode([*kept, ('lang', code)])}" for code in LANGS}  # this page
    ctx = {"page": "refused", "t": t, "lang": lang, "langs": LANGS, "json_url": None, "error": ["429"],
           "lang_urls": lang_urls, "status": 429, "fragment": False, "html": True,
           "hints": True, "lesson_panel": None, "present": False, "present_url": None, "carry": {},
           "message": t("refused.heavy", cap=cap, seconds=int(HEAVY_RETRY)), "retry_url": url}  # fmt: skip
    headers = {"Retry-After": HEAVY_RETRY.decode(), "Vary": "Accept, Accept-Language"}
    page = TEMPLATES.TemplateResponse(request, "refused.html", ctx, status_code=429, headers=headers)
    await page(scope, receive, send)


HEAVY_RETRY = b"5"  # seconds: a heavy computation's share comes back within a few


def is_fragment(request: Request) -> bool:
    """htmx asked for the panel alone (a history restore needs the whole page)."""
    headers = request.headers
    return headers.get("hx-request") == "true" and headers.get("hx-history-restore-request") != "true"


def page_key(
    request: Request, lang: str, face: str = "", shows: str = "", fragment: bool | None = None
) -> tuple[str, str]:
    """A rendered page depends on its URL, the language chosen, whether htmx asked for the panel alone (`fragment`
    says so for a page that draws the same either way), its face (`json:` for the JSON one) and whatever else it
    `shows` that its URL does not."""
    at = f"@{shows}" if shows else ""
    panel = is_fragment(request) if fragment is None else fragment
    return (f"{face}page:{lang}:{int(panel)}:{request.url.path}{at}", request.url.query)


def remember_page(
    request: Request, key: tuple[str, str], response: Response, media_type: str = "text/html; charset=utf-8"
) -> Response:
    """Keep a successful page: the class asks for the same few views again and again."""
    keep(store_of(request), key, response, media_type, kept=("vary",))
    return response
