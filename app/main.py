"""The application factory: settings, the Lab, static files and the routers. Run with `attention-lab serve`."""

from __future__ import annotations

import asyncio
import functools
import signal
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from importlib.resources import files
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Response
from fastapi.responses import FileResponse
from fastapi.staticfiles import StaticFiles
from starlette.types import ASGIApp

from engine import TraceCache, arena

from . import __version__, docs, errors, health
from .attention import api as attention_api
from .attention.ahead import DrawAhead
from .attribution import api as attribution_api
from .block import api as block_api
from .decode import api as decode_api
from .demos import api as demos_api
from .export import api as export_api
from .generate import api as generate_api
from .heads import api as heads_api
from .lab import HeavyWork, Lab
from .lessons import page as lessons_page
from .limits import Edge
from .metrics import Metrics
from .metrics import router as metrics_router
from .model import api as model_api
from .models import api as models_api
from .params import api as params_api
from .predict import api as predict_api
from .rooms import api as rooms_api
from .rooms.service import Rooms
from .schemas import LIST_FIELDS
from .settings import Settings, get_settings
from .train import api as train_api
from .web import page, registry
from .web.page import not_found
from .web.view import view_schemas

ROOT = Path(__file__).resolve().parent.parent
STATIC = ROOT / "static"
NODE = ROOT / "node_modules"
MATH_FONT = NODE / "@fontsource" / "noto-sans-math" / "files"
MATH_FONT_FILE = "noto-sans-math-latin-400-normal.woff2"
MATH_FONT_FACE = (
    '@font-face { font-family: "Lab Math"; src: url("/vendor/math-font/' + MATH_FONT_FILE + '") format("woff2"); '
    "font-display: swap; }\n"
)


class LabApp(FastAPI):
    """FastAPI with the lab's `Edge` (app/limits.py) outermost: Starlette always puts its ServerErrorMiddleware
    outside the user middleware, so a 500 would otherwise leave without the security headers, uncounted."""

    def build_middleware_stack(self) -> ASGIApp:
        s = self.state.settings
        return Edge(super().build_middleware_stack(), send_timeout_s=s.send_timeout_s,
                    max_query_bytes=int(s.max_query_kb * 1024), repeatable=frozenset(LIST_FIELDS),
                    max_body_bytes=int(s.body_limit_mb * 2**20), metrics=self.state.metrics, lab=self.state.lab)  # fmt: skip


def _stop_on_signals(lab: Lab) -> None:
    """SIGTERM/SIGINT tell the lab to stop its computations at once (Lab.stop), then reach the server's own handler
    (uvicorn's graceful shutdown): a backlog of heavy work ends at its next step instead of holding the process.
    Only from the main thread (a served app; a TestClient's lifespan runs elsewhere and has no signals)."""
    if threading.current_thread() is not threading.main_thread():
        return
    for sig in (signal.SIGTERM, signal.SIGINT):
        previous = signal.getsignal(sig)

        def handler(signum: int, frame: Any, previous: Any = previous) -> None:
            lab.stop()
            if callable(previous):
                previous(signum, frame)
            elif previous == signal.SIG_DFL:  # nobody else handles it: its default (end the process)
                signal.signal(signum, signal.SIG_DFL)
                signal.raise_signal(signum)

        signal.signal(sig, handler)


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    app.state.lab.stopping = False  # an app served again (a TestClient per test) computes again
    _stop_on_signals(app.state.lab)
    if threading.current_thread() is threading.main_thread() and app.state.lab.device == "cpu":  # served
        arena.warm_up(app.state.settings.max_tokens)  # before it listens: mapped stage memory, warm kernels
    yield
    # In-process training runs end at their next step; their processes are joined (off the event loop) and the
    # semaphores of their cross-process Events released before the server's process ends. Queued ones (--redis) go on
    # in their queue workers.
    await asyncio.to_thread(app.state.train.close)
    app.state.lab.stop()  # whatever still runs (past uvicorn's graceful-shutdown timeout) stops at its next step
    await app.state.lab.ahead.close()
    await app.state.rooms.store.close()  # the Redis connections and the pub/sub listener, when there are any
    await app.state.train.aclose()  # the Redis connections, with --redis


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or get_settings()
    app = LabApp(
        lifespan=lifespan,
        title="Attention Lab",
        version=__version__,
        summary="Scaled dot-product attention, one stage at a time, every number computed.",
        description=docs.DESCRIPTION,
        openapi_tags=docs.TAGS,
        docs_url=None,
        redoc_url=None,
    )
    app.state.settings = settings
    app.state.metrics = Metrics()
    app.state.lab = Lab(settings, app.state.metrics)
    # The kernel's response store (app/web/page.py); the lab keeps a reference for its metrics only.
    app.state.responses = app.state.lab.responses = TraceCache(int(settings.response_cache_mb * 2**20))
    arena.configure(int(settings.arena_mb * 2**20))
    app.state.flights = {}  # the keys of answers being computed now (page.single_flight)
    app.state.lab.ahead = DrawAhead(app.state.responses, app.state.flights, settings.draw_ahead_traces)
    app.state.rooms = Rooms(settings)
    errors.install(app, html_404=not_found)  # a browser that navigates to no page gets a page saying so
    rooms_api.install(app)
    train_api.install(app)
    export_api.install(app)  # figures, code, notebooks and citations of any page (app/export)
    # The page kernel's layer: page requests known to /api/v1/progress, `.json` twins, stored answers, and the heavy
    # pages and API routes (app/web/registry.py) queued for a slot after the store (a cached answer takes no place).
    heavy = HeavyWork(registry.heavy_paths(), per_client=settings.max_heavy_per_client)
    app.add_middleware(page.Kernel, store=app.state.responses, lab=app.state.lab, heavy=heavy)
    train_api.catch_up(app)  # with Redis: the runs finished on any worker are presets here before a cached answer
    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    # htmx and its SSE extension, installed by `make` from npm (package.json) beside the math font.
    app.mount("/vendor/htmx", StaticFiles(directory=NODE / "htmx.org" / "dist", check_dir=False), name="htmx")
    app.mount("/vendor/htmx-sse", StaticFiles(directory=NODE / "htmx-ext-sse" / "dist", check_dir=False), name="sse")

    # The math font (installed by `make` from npm; without it formulas use the system's math font). The stylesheet
    # and the font ask the same question, per request, of the same file: the CSS never names a font that answers
    # 404, whether npm ran before the server started or after.
    @app.get("/vendor/math-font.css", include_in_schema=False)
    def math_font_css() -> Response:
        """The math font's @font-face when `make` installed it, else an empty stylesheet: never a 404."""
        rule = MATH_FONT_FACE if (MATH_FONT / MATH_FONT_FILE).is_file() else "/* no math font installed */\n"
        return Response(rule, media_type="text/css", headers={"Cache-Control": "public, max-age=3600"})

    @app.get("/vendor/math-font/" + MATH_FONT_FILE, include_in_schema=False)
    def math_font() -> Response:
        path = MATH_FONT / MATH_FONT_FILE
        if not path.is_file():
            return Response("no math font installed\n", status_code=404, media_type="text/plain")
        return FileResponse(path, media_type="font/woff2", headers={"Cache-Control": "public, max-age=86400"})

    app.mount("/vendor/swagger", StaticFiles(directory=str(files("swagger_ui") / "static")), name="swagger")
    # Each feature (app/<name>/) brings its JSON API and its page, and imports the kernel (app/web/, app/render/) and
    # the shared modules (app/lab/), never another feature: tests/app/web/test_kernel.py checks every module.
    for router in (
        attention_api.router,
        attribution_api.router,
        block_api.router,
        decode_api.router,
        demos_api.router,
        params_api.router,
        lessons_page.api,
        model_api.router,
        models_api.router,
        generate_api.router,
        predict_api.router,
        heads_api.router,
        train_api.router,
        rooms_api.router,
        health.router,
        metrics_router,
        docs.router,
        *registry.routers(),  # the pages (app/web/registry.py)
    ):
        app.include_router(router)
    app.openapi = functools.partial(openapi_with_views, app)  # type: ignore[method-assign]
    return app


def body_limit(schema: dict[str, Any], mib: float) -> None:
    """Every operation that takes a body documents the body limit's 413 (app/limits.py `Edge`), which answers before
    any route (its `Problem` is the schema every route's 4xx names: app.schemas.ERRORS)."""
    too_large = {
        "description": f"The body is over the server's {mib:g} MiB limit (BODY_LIMIT_MB)",
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Problem"}}},
    }
    for operations in schema.get("paths", {}).values():
        for method, operation in operations.items():
            if method in ("post", "put", "patch"):
                operation.setdefault("responses", {}).setdefault("413", too_large)


def openapi_with_views(app: FastAPI) -> dict[str, Any]:
    """The API's schema, plus each page's JSON face (`GET /<page>.json`, or `Accept: application/json`) as a
    JSON Schema under components/schemas, named `<Kind>View`."""
    if app.openapi_schema is None:
        schema = FastAPI.openapi(app)  # stores it in app.openapi_schema
        views = schema.setdefault("components", {}).setdefault("schemas", {})
        for name, view in view_schemas().items():
            views.setdefault(name, view)
        body_limit(schema, app.state.settings.body_limit_mb)
        rooms_api.view_limits(schema, app.state.settings)
        return schema
    return app.openapi_schema
