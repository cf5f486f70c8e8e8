"""The application factory: settings, the Lab, static files and the routers. Run with `attention-lab serve`."""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles
from starlette.types import ASGIApp

from . import __version__, errors
from .lab import Lab, ServeCached
from .limits import BodyLimit, QueryLimit, SecurityHeaders
from .metrics import Metrics, Observe
from .metrics import router as metrics_router
from .routes import api, block, block_page, decode, decode_page, demos, docs, lessons, pages, params
from .settings import Settings, get_settings

ROOT = Path(__file__).resolve().parent.parent
STATIC = ROOT / "static"
MATH_FONT = ROOT / "node_modules" / "@fontsource" / "noto-sans-math" / "files"


class LabApp(FastAPI):
    """FastAPI with the security headers outermost: Starlette always puts its ServerErrorMiddleware outside the
    user middleware, so a 500 would otherwise leave without them."""

    def build_middleware_stack(self) -> ASGIApp:
        return SecurityHeaders(super().build_middleware_stack())


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or get_settings()
    app = LabApp(
        title="Attention Lab",
        version=__version__,
        summary="Scaled dot-product attention, one stage at a time, every number computed.",
        docs_url=None,
        redoc_url=None,
    )
    app.state.settings = settings
    app.state.metrics = Metrics()
    app.state.lab = Lab(settings, app.state.metrics)
    errors.install(app)
    app.add_middleware(ServeCached, lab=app.state.lab)
    app.add_middleware(BodyLimit, max_bytes=int(settings.body_limit_mb * 2**20))
    app.add_middleware(QueryLimit, max_bytes=int(settings.max_query_kb * 1024))
    app.add_middleware(Observe, metrics=app.state.metrics)
    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    app.mount("/vendor/htmx", StaticFiles(directory=str(files("js_lib_htmx") / "static" / "htmx")), name="htmx")
    if MATH_FONT.is_dir():  # installed by `make` from npm; without it formulas use the system's math font
        app.mount("/vendor/math-font", StaticFiles(directory=MATH_FONT), name="math-font")
    app.mount("/vendor/swagger", StaticFiles(directory=str(files("swagger_ui") / "static")), name="swagger")
    app.include_router(api.router)
    app.include_router(block.router)
    app.include_router(decode.router)
    app.include_router(demos.router)
    app.include_router(demos.page_router)
    app.include_router(lessons.router)
    app.include_router(api.health)
    app.include_router(metrics_router)
    app.include_router(params.router)
    app.include_router(docs.router)
    app.include_router(pages.router)
    app.include_router(block_page.router)
    app.include_router(decode_page.router)
    app.include_router(params.page_router)
    return app
