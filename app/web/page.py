"""The page kernel: every HTML page goes through `serve`, and every request through its ASGI layer, `Kernel`.

One pipeline for all pages: the language (`?lang=`, else Accept-Language), the rendered-page cache (`page_key`), the
page's base context (`page_context`), inline errors (a bad field is shown in the page, in its language, with a 422; a
busy server with a 503), and the face of the page's View (app/web/view.py): its template (or for an htmx request
only the blocks it swaps: `blocks_answer`), or the View as JSON when the client asks for `application/json` (the
page's `.json` twin URL sets that header: `Kernel`), where a bad input is the API's own 4xx (app/errors.py).

The response store (`app.state.responses`, byte-bounded like the trace cache): a finished GET answer (an API
route's, filled by `cached_get`, or a page's) is kept by its URL, so a class asking for the same few views again
and again gets the same bytes without parsing, computing or rendering again; `Kernel` answers hits before routing.
A class reaches a new view together (thirty students press the same step, their browsers ask for the same twelve
heat maps): `single_flight` computes a missing answer once and the others wait for it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import re
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any
from urllib.parse import parse_qsl, quote, urlencode

import orjson
from fastapi import APIRouter, Depends, Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import HTMLResponse
from jinja2_fragments import render_blocks
from pydantic import ValidationError
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from engine import SpecError, TraceCache
from engine.budget import Busy

from ..errors import clean
from ..lab import Lab, ProgressKey, get_lab, request_key
from ..lab.keys import HEADER
from ..limits import send_problem
from ..render.payload import OPTIONS
from ..schemas import FieldError, said
from ..templating import LANGS, TEMPLATES, error_message, negotiate, translator
from . import lessons, provenance, remote
from .knockouts import form_ablate, heads_text
from .state import PageQuery, Q, show, within
from .view import View

if TYPE_CHECKING:
    from ..lab import HeavyWork


# --- The store of finished answers and pages, and the kernel's ASGI layer ----------------------------------------


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
        store = request.app.state.responses
        key = (request.url.path, request.url.query)

        async def compute() -> Response:
            response = await handler(request, lab, **given)
            keep(store, key, response)
            return response

        return await single_flight(request, key, lambda: stored(store, key), compute)

    return wrapper


@dataclass
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

    app: ASGIApp
    store: TraceCache[tuple[str, str], CachedResponse]
    lab: Lab | None = None
    heavy: HeavyWork | None = None

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
        if scope["method"] == "GET" and (hit := stored(self.store, (scope["path"], query))) is not None:
            await hit(scope, receive, send)
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
    lang = language(request)
    url = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    kept = [(k, v) for k, v in request.query_params.multi_items() if k != "lang"]
    lang_urls = {code: f"{request.url.path}?{urlencode([*kept, ('lang', code)])}" for code in LANGS}  # this page
    message = translator(lang)("refused.heavy", cap=cap, seconds=int(HEAVY_RETRY))
    ctx = page_context("refused", lang, lang_urls, 429, error=["429"], message=message, retry_url=url)
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
    keep(request.app.state.responses, key, response, media_type, kept=("vary",))
    return response


# --- A form refused on another route ------------------------------------------------------------------------------

# A page whose form posts to another page's route (/cross's form starts its run through /train's handler) gets the
# form back when it is refused: the page drawn again for the person who typed it, in the page's language, each error
# under its field and what was typed kept (never the API's JSON, which a script asks for with Accept).
REFUSED_FORM = "lab.refused_form"  # the scope's key of the redraw's `RefusedForm`


@dataclass(frozen=True)
class RefusedForm:
    errors: tuple[tuple[str, str], ...]  # (field, message): a catalogue message (`said`, the engine's, pydantic's)
    typed: Mapping[str, str]  # the form's values as typed


class Redraw(Response):
    """The page at `url` (a GET of this app's, routed past the page store) drawn with `refused`: a 422, never kept
    (`serve` reads the refusal from the scope)."""

    def __init__(self, url: str, refused: RefusedForm) -> None:
        super().__init__()
        self.url, self.refused = url, refused

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path, _, query = self.url.partition("?")
        headers = [(k, v) for k, v in scope["headers"] if k not in (b"content-type", b"content-length", b"hx-request")]
        page = dict(scope, method="GET", path=path, raw_path=path.encode(), query_string=query.encode("latin-1"),
                    headers=headers, **{REFUSED_FORM: self.refused})  # fmt: skip
        await scope["app"].router(page, receive, send)


def said_beside(ctx: dict[str, Any], refused: RefusedForm) -> dict[str, str]:
    """A refused form's errors in the page's language, by field (the template says each under its input, with its
    label), and the refusal's headers' words."""
    ctx |= {"field_errors": {field: error_message(message, ctx["lang"]) for field, message in refused.errors},
            "typed": dict(refused.typed), "status": 422}  # fmt: skip
    words = "; ".join(f"{field}: {message}" for field, message in ctx["field_errors"].items())
    return {"Cache-Control": "no-store", "X-Lab-Error": quote(words, safe=" :;,.()'=-_")}


# --- The page kernel ----------------------------------------------------------------------------------------------

VARY = "HX-Request, Accept-Language, Accept"


def page_context(page: str, lang: str, lang_urls: dict[str, str], status: int = 200, **given: Any) -> dict[str, Any]:
    """What every page's template reads (_base.html), as a page that shows no query has it (a 404, a refusal);
    `given` sets the rest."""
    return {"page": page, "t": translator(lang), "lang": lang, "langs": LANGS, "lang_urls": lang_urls, "status": status,
            "json_url": None, "error": None, "fragment": False, "html": True, "hints": True, "lesson_panel": None,
            "present": False, "present_url": None, "carry": {}} | given  # fmt: skip


Build = Callable[[dict[str, Any]], Awaitable["View | None"]]
PageView = Callable[[Any, Lab, str, dict[str, Any]], Awaitable[View]]  # (query, lab, progress key, ctx)
StateOf = Callable[[Request, str, tuple[str, ...], Any], PageQuery]


class Refused(SpecError):
    """A refused field and what the page offers instead, shown beside the error (`shown`: the names the template
    draws, e.g. the windows of a text too long for the view)."""

    def __init__(self, field: str, message: str, shown: dict[str, Any]) -> None:
        super().__init__(field, message)
        self.shown = shown


def twin_url(path: str, query: str) -> str:
    """The `.json` twin of a page's URL."""
    return ("/index" if path == "/" else path) + ".json" + (f"?{query}" if query else "")


def lab_url(preset: str, ids: Sequence[int], layer: int, head: int, lang: str, present: bool = False,
            text: str | None = None) -> str:  # fmt: skip
    """The lab at one layer and head of the same tokens, on the weights stage (in presenter mode when the page
    linking there is: a head opened from the projector stays on the projector's layout). The text as that page was
    given it (the lab tokenises it to the same ids, and its text box holds what the class reads and may edit), or
    the ids when it was given ids."""
    seq = {"text": text} if text else {"token_ids": ",".join(map(str, ids))}
    query = {"preset": preset, **seq, "layer": layer, "head": head, "stage": 4, "lang": lang}
    return "/?" + urlencode(query | ({"present": 1} if present else {}), safe=",")


def wants_json(request: Request) -> bool:
    """The JSON face: asked for by `Accept: application/json` (what the `.json` twin URL sets), never by htmx."""
    accept = request.headers.get("accept", "")
    return "application/json" in accept and "text/html" not in accept and not is_fragment(request)


def language(request: Request) -> str:
    return negotiate(request.query_params.get("lang"), request.headers.get("accept-language"))


@contextmanager
def inline_errors(ctx: dict[str, Any], t: Any) -> Iterator[None]:
    """Bad input is shown in the page, in its language, with a 422 (503 when the server is busy)."""

    def shown(field: str, message: str) -> str:
        return t("error.field", field=field, message=error_message(message, ctx["lang"]))

    try:
        yield
    except ValidationError as exc:
        ctx["error"] = [shown(e["loc"][1 if len(e["loc"]) > 1 else 0], e["msg"]) for e in clean(exc.errors(), "query")]
        ctx["status"] = 422
    except SpecError as exc:
        ctx["error"] = [shown(exc.field, exc.message)]
        ctx["status"] = 422
        if isinstance(exc, Refused):  # what the page offers instead (a text too long: windows of it)
            ctx.update(exc.shown)
    except Busy as exc:
        ctx["error"] = [t("error.busy", seconds=exc.retry_after)]
        ctx["status"] = 503
        ctx["retry_after"] = exc.retry_after  # sent as Retry-After too, as the API's 503 is


def lesson_panel(state: PageQuery, lang: str) -> lessons.Panel | None:
    """The lesson step the URL names (`lesson=slug&lesson_step=k`, as the lessons' step links write it), shown with
    the page — the lab places it beside the stage, any other page above itself — so a class following the teacher
    keeps the question in view and the teacher's remote finds the step. Hints off (presenter mode's switch) leave
    the answer out, of the page and of its JSON face. An unknown lesson or step is the request's error."""
    if not state.lesson:
        return None
    lesson = lessons.BY_SLUG.get(state.lesson)
    if lesson is None:  # said once, bounded, and dropped from the page's links and forms
        typed = state.spelled.get("lesson", "lesson")
        state.params.pop("lesson", None)
        state.params.pop("lesson_step", None)
        raise FieldError(typed, said("no_lesson", slug=show(state.lesson, 30)))
    k = within(state.spelled.get("lesson_step", "lesson_step"), state.lesson_step or 1, 1, len(lesson.steps))
    carry = {name: state.params[name] for name in ("present", "hints") if state.params.get(name)}
    panel = lessons.panel(lesson.slug, k, lang, carry)
    if panel is None:
        return None
    knocked = differing_knockouts(lesson.steps[k - 1].url, state)
    if knocked is not None:
        panel = dataclasses.replace(panel, knocked=knocked, own_url=lessons.step_url(lesson, k, lang, carry))
    return panel if state.hints else dataclasses.replace(panel, answer=None)


def differing_knockouts(step: str, state: PageQuery) -> tuple[str, str] | None:
    """The step's knocked-out heads and the page's ("L1 H0, L2 H3"; "" for none), when the page is the step's page
    and they differ: the step's text speaks of its own heads, the page shows others (#32). None when they agree, or
    when either cannot be read (the page says its own error)."""
    path, _, query = step.partition("#")[0].partition("?")
    if path != state.path:
        return None
    mine = dict(parse_qsl(query)).get("ablate", "")
    try:
        want = {(a, b) for a, b in form_ablate(mine)}
        have = {(a, b) for a, b in form_ablate(state.get("ablate"))}
    except FieldError:
        return None
    if want == have:
        return None
    return heads_text(sorted(want)), heads_text(sorted(have))


async def serve(
    request: Request,
    template: str,
    state: PageQuery,
    build: Build,
    *,
    page: str | None = None,
    json_url: str | None = None,
    shows: str = "",
    blocks: tuple[str, ...] = ("stage", "controls"),
    deferred: bool = False,
    pushed: bool = True,
    **extra: Any,
) -> Response:
    """Render `template` for `state`: from the cache when this exact view was rendered before.

    `shows` names anything else the page shows that its URL does not (presenter mode's public address), so the
    cache keys by it; `blocks` are what an htmx request swaps, the view at a URL htmx `pushed` (their answer brings
    the header's parts that follow the URL: `blocks_answer`), or not (blocks redrawn in place, a part another page
    asks for); `page` (the template's name by default) marks the navigation's current link. A `deferred` page (its
    View is heavy work: a real model's heads, patching) answers a browser's navigation at once with its shell when
    it is not rendered yet (`shell`), and the shell asks for the page by htmx, showing its progress meanwhile; every
    other request (htmx, a script, a room, the JSON face, a test client) gets the page itself, so a deferred page
    draws its whole page for htmx too (no `blocks`)."""
    lang = language(request)
    t = translator(lang)
    as_json = wants_json(request)
    controls = not as_json and remote.wanted(request)  # the teacher's remote asks for the page's controls
    # A deferred page renders the same whole page for htmx as for a navigation: one stored page serves both.
    face = "json:" if as_json else "remote:" if controls else ""
    key = page_key(request, lang, face, shows, fragment=False if deferred or controls else None)

    def base(fragment: bool) -> dict[str, Any]:
        lang_urls = {code: state.lang_url(code) for code in LANGS}
        return (
            page_context(
                page or template.removesuffix(".html"),
                lang,
                lang_urls,
                state=state,
                json_url=json_url,
                room_query=room_query(request, state),
                fragment=fragment,
                hints=state.hints,
                html=not as_json,  # a page a browser shows (its heat maps will be asked for), not its JSON face
                # Presenter mode is a layout of every page (_base.html), switched by a link the header holds on any
                # page that does not place its own; every link and form of the page keeps it.
                present=state.present,
                present_url=state.url(present=None if state.present else "1"),
                carry=screen_carry(state.params, lang),  # what `url()` adds to every internal link (app/templating.py)
            )
            | extra
        )

    async def compute(refused: dict[str, Any] | None = None) -> Response:  # once however many ask at the same time
        name = template
        fragment = is_fragment(request) and bool(blocks) and not controls
        ctx = refused or base(fragment)  # `refused`: a shell's context whose lesson was refused (nothing to build)
        if as_json:  # errors are the API's: the exception handlers answer with the field named
            state.check()
            ctx["lesson_panel"] = lesson_panel(state, lang)
            view = await build(ctx)
            if view is None:
                raise FieldError("format", "this page has no JSON face yet")
            # The face's provenance, from the model its View shows (app/web/provenance.py): the weights' sha256 is
            # read once per file, off the event loop.
            cited = await run_in_threadpool(provenance.page_block, request, view, state.get("preset") or None)
            body = orjson.dumps(view.to_json() | {"lang": lang, "provenance": cited}, option=OPTIONS)
            response: Response = Response(body, media_type="application/json", headers={"Vary": VARY})
            return remember_page(request, key, response, "application/json")
        view = None
        with inline_errors(ctx, t):
            if refused is None:
                state.check()
                ctx["lesson_panel"] = lesson_panel(state, lang)
                view = await build(ctx)
            if view is not None:
                ctx.update(view.context(), view=view)
                name = view.template
        headers = {"Vary": VARY}
        if form is not None and not ctx["error"]:  # a form posted elsewhere, refused: its errors beside its fields
            headers |= said_beside(ctx, form)
        if ctx["error"]:  # the links a refused page still draws leave out what it refused (an unknown lesson)
            ctx["lang_urls"] = {code: state.lang_url(code) for code in LANGS}
            ctx["present_url"] = state.url(present=None if state.present else "1")
            # The refusal in words, for callers that read no HTML (a room checking a shared view).
            headers["X-Lab-Error"] = quote("; ".join(ctx["error"]), safe=" :;,.()'=-_")
        if ctx.get("retry_after") is not None:
            headers["Retry-After"] = str(max(1, round(ctx["retry_after"])))
        if controls and ctx["status"] != 503:  # the page drawn, its `remote` macro calls recorded (app/web/remote.py)
            ctx |= {"request": request, "remote_controls": []}
            TEMPLATES.get_template(name).render(ctx)
            ctx |= {"remote": remote.controls(ctx["remote_controls"], state.path), "title": remote.title(TEMPLATES.env, name, ctx),
                    "status": 200, "view_url": request.url.path + "?" + request.url.query}  # fmt: skip
            name = "_remote.html"
        if fragment:
            names = view.blocks if view is not None else blocks
            response = blocks_answer(request, name, names, ctx, pushed, status_code=ctx["status"], headers=headers)
        else:
            response = TEMPLATES.TemplateResponse(request, name, ctx, status_code=ctx["status"], headers=headers)
        return response if form is not None else remember_page(request, key, response)

    if (form := request.scope.get(REFUSED_FORM)) is not None:  # drawn for the one who typed it: never stored
        return await compute()
    if deferred and not as_json and navigating(request) and request.query_params.get(WAIT) != "1":
        if (found := stored(request.app.state.responses, key)) is not None:
            return found
        ctx = base(False)
        with inline_errors(ctx, t):
            state.check()
            ctx["lesson_panel"] = lesson_panel(state, lang)
        if ctx["error"]:  # a refused lesson: the page says so at once (nothing is computed)
            return await compute(ctx)
        return shell(request, ctx)
    return await single_flight(request, key, lambda: stored(request.app.state.responses, key), compute)


# _base.html's blocks of what follows the page's URL outside the blocks an htmx request swaps: the language links,
# and the slot of the presenter switch and "Start a class".
HEADER_BLOCKS = ("lang_links", "view_links")


def blocks_answer(request: Request, name: str, blocks: Sequence[str], ctx: dict[str, Any], pushed: bool,
                  status_code: int, headers: Mapping[str, str]) -> Response:  # fmt: skip
    """An htmx request's answer: the page's `blocks` of template `name`, and when htmx pushes its URL (`pushed`),
    the header's parts that follow the URL (`HEADER_BLOCKS`), which htmx swaps out of band (drawn with
    `hx-swap-oob` in a fragment), so nothing outside the swapped blocks keeps the view from before the swap. A page
    without the header (/embed) gets its blocks alone."""
    ctx.setdefault("request", request)
    html = render_blocks(TEMPLATES.env, name, list(blocks), ctx)
    if pushed and not ctx.get("embedded"):
        html += render_blocks(TEMPLATES.env, "_base.html", list(HEADER_BLOCKS), ctx)
    return HTMLResponse(html, status_code=status_code, headers=headers)


def room_query(request: Request, state: PageQuery) -> str:
    """The query "Start a class" sends: this URL's, naming the toy's example the page shows when it names no
    sequence (as static/lab.js `pin` names it in the address, #42), so every screen of the class shows the same
    numbers whatever its language."""
    query, given = request.url.query, request.query_params
    if state.example is None or any(given.get(k) for k in ("tokens", "text", "token_ids")):
        return query
    if (given.get("preset") or "toy") != "toy":
        return query
    kept = [(k, v) for k, v in parse_qsl(query, keep_blank_values=True) if k != "tokens"]
    return urlencode([*kept, ("tokens", state.example)])


def screen_carry(params: Mapping[str, str], lang: str) -> dict[str, str]:
    """What a screen's links keep (`url()` in the templates): in presenter mode, `present=1`, hints off when they
    are, and the language when the URL names it (else the next page asks the browser again, as this one did)."""
    if params.get("present") != "1":
        return {}
    carry = {"present": "1"}
    if params.get("hints") == "off":
        carry["hints"] = "off"
    if params.get("lang"):
        carry["lang"] = lang
    return carry


WAIT = "wait"  # `wait=1`: a deferred page computed before it answers (the shell's link for a browser without script)


def navigating(request: Request) -> bool:
    """A browser's own navigation to a page (a link followed, an address typed, a GET form sent), as its Fetch
    Metadata says: never htmx's, a script's (a room following the teacher), a room's check of a view or a client's
    without those headers (curl, the test client, a browser too old to send them): those get the page itself."""
    headers = request.headers
    return headers.get("sec-fetch-mode") == "navigate" and headers.get("sec-fetch-dest", "document") == "document"


def not_found(request: Request) -> Response | None:
    """A browser's own navigation to an address that is no page of the lab: a page in the reader's language that
    says so and offers the lab and the lessons (a mistyped link in class), with the 404 status; None for any other
    request, which keeps the JSON 404 (app/errors.py)."""
    if not navigating(request) or request.method != "GET" or request.url.path.startswith("/api/"):
        return None
    lang = language(request)
    ctx = page_context("not_found", lang, {code: f"/?lang={code}" for code in LANGS}, 404, error=["404"])
    return TEMPLATES.TemplateResponse(request, "not_found.html", ctx, status_code=404, headers={"Vary": VARY})


def shell(request: Request, ctx: dict[str, Any]) -> Response:
    """A deferred page's shell (templates/_deferred.html): the page's header, lesson and title, a "computing"
    status, and htmx asking for the page at its own URL as soon as the shell is loaded (so its progress key is the
    page's, which the corner's box polls); the link for a browser without script adds `wait=1`. Never stored."""
    url = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    ctx |= {"deferred_url": url, "wait_url": url + ("&" if request.url.query else "?") + f"{WAIT}=1",
            "present_url": None}  # fmt: skip  # the shell's own switch stands in its <main>, as the page's does
    return TEMPLATES.TemplateResponse(request, "_deferred.html", ctx, headers={"Vary": VARY})


def query_of(model: type[Q], path: str, keys: tuple[str, ...] = ()) -> Callable[[Request], Q]:
    """A FastAPI dependency: the page's query `model` read from the URL once (its errors raised in the page)."""

    def query(request: Request) -> Q:
        return model.of(request.query_params, path, keys)

    return query


def page_route(
    router: APIRouter,
    path: str,
    template: str,
    keys: tuple[str, ...],
    model: type[PageQuery],
    view: PageView,
    form: Callable[[Lab, Any, str], dict[str, Any]],
    blocks: tuple[str, ...] = (),
    state_of: StateOf | None = None,
    deferred: bool = False,
    pushed: bool = True,
) -> None:
    """The page at `path`, named `<template>_page`: its query (`state_of` the request, the page's request `keys`
    and its query `model`: a FastAPI dependency), its View built by `view(state, lab, progress key, ctx)`, the `blocks` an htmx request swaps
    (none: the whole page; `pushed`: as `serve` says). `form(lab, state, lang)` is what the page draws whatever its
    View says, even a refusal (an unknown lesson, a field out of range): its form's choices (`models`, `presets`) and its JSON twin
    (`json_url`), given to `serve` before anything can fail. A `deferred` page (heavy work) answers a browser's
    navigation with its shell at once and its View by htmx (`serve`); it draws its own presenter-mode switch."""
    assert not (deferred and blocks), "a deferred page swaps its whole <main>, not blocks"

    def query(request: Request) -> PageQuery:  # the page's query model, validated once (errors raised in the page)
        return state_of(request, path, keys, model) if state_of else model.of(request.query_params, path, keys)

    # The query's dependency is a local: FastAPI's classic `= Depends(...)` (an annotation naming it could not be
    # resolved from this module's globals).
    async def route(
        request: Request,
        lab: Annotated[Lab, Depends(get_lab)],
        state: PageQuery = Depends(query),  # noqa: B008
    ) -> Response:
        build = functools.partial(view, state, lab, request_key(request))
        return await serve(request, template, state, build, blocks=blocks, deferred=deferred, pushed=pushed,
                           **form(lab, state, language(request)))  # fmt: skip

    router.get(path, response_class=HTMLResponse, name=f"{template.removesuffix('.html')}_page")(route)
