"""The server's one stateful object: the resolved device, the limits and the trace cache.

It keeps no per-user state; any number of workers or machines serve the same URLs with the same answers.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from fastapi import Request, Response
from starlette.types import ASGIApp, Receive, Scope, Send

from engine import Limits, Spec, TraceCache, compute
from engine.attention import Trace
from engine.block import BlockSpec, BlockTrace, compute_block
from engine.budget import MemoryBudget
from engine.decode import DecodeTrace, decode
from engine.device import resolve
from engine.spec import estimate_bytes

from .settings import Settings


@dataclass(frozen=True)
class CachedResponse:
    """A finished GET answer: the same URL gets the same bytes, without parsing or serialising again."""

    body: bytes
    media_type: str
    headers: tuple[tuple[str, str], ...]

    @property
    def nbytes(self) -> int:
        return len(self.body)


class Lab:
    def __init__(self, settings: Settings, metrics: Any = None) -> None:
        import torch

        if settings.threads:
            torch.set_num_threads(settings.threads)
        self.settings = settings
        self.metrics = metrics
        self.device = resolve(settings.device)
        self.limits: Limits = settings.limits()
        self.budget = MemoryBudget(self.limits.memory_budget_bytes, settings.compute_wait_s)
        self.cache: TraceCache[Any, Any] = TraceCache(int(settings.cache_mb * 2**20))
        self.responses: TraceCache[tuple[str, str], CachedResponse] = TraceCache(
            int(settings.response_cache_mb * 2**20)
        )
        self.models: dict[str, Any] = {}
        if settings.checkpoint:
            from engine.checkpoint import GPT2Checkpoint

            self.models["checkpoint"] = GPT2Checkpoint(settings.checkpoint, "checkpoint", self.device)
        if settings.pretrained:  # the packaged models: found now, loaded on first use
            from engine.pretrained import MiniLM, SmolLM2

            for name, finder in (("minilm", MiniLM.find), ("smollm2", SmolLM2.find)):
                try:
                    model = finder()
                except ImportError:  # e.g. gguf missing
                    model = None
                if model is not None:
                    self.models[name] = model

    def _cost(self, spec: Spec, factor: float = 1.0) -> int:
        return int(
            factor * estimate_bytes(max(spec.n_tokens, len(spec.kv_tokens)), spec.d_model, spec.n_heads, spec.dtype)
        )

    def trace(self, spec: Spec) -> tuple[Trace, bool]:
        """The trace for `spec` and whether it came from the cache (computed within the memory budget)."""

        def run(s: Spec) -> Trace:
            with self.budget.reserve(self._cost(s)):
                trace = compute(s, self.models.get(s.preset))
            if self.metrics is not None:
                for stage, seconds in trace.timings:
                    self.metrics.stage(stage, seconds)
            return trace

        return self.cache.get_or_compute(spec, run)

    def decode(self, spec: Spec, prefill: int) -> tuple[DecodeTrace, bool]:
        """The decode trace for `spec` with `prefill` prompt tokens, and whether it came from the cache."""

        def run(key: tuple[str, Spec, int]) -> DecodeTrace:
            with self.budget.reserve(self._cost(key[1], 2.0)):
                return decode(key[1], key[2])

        value, cached = self.cache.get_or_compute(("decode", spec, prefill), run)
        return value, cached

    def block(self, spec: BlockSpec) -> tuple[BlockTrace, bool]:
        """The block trace for `spec` and whether it came from the cache."""

        def run(s: BlockSpec) -> BlockTrace:
            n, d = s.attn.n_tokens, s.attn.d_model
            with self.budget.reserve(self._cost(s.attn) + 4 * (3 * n * s.ff + 8 * n * d + 3 * d * s.ff)):
                return compute_block(s, self.models.get(s.attn.preset))

        return self.cache.get_or_compute(spec, run)

    @property
    def json_limit(self) -> int:
        return int(self.settings.json_limit_mb * 2**20)


def cached_get(handler: Callable[..., Awaitable[Response]]) -> Callable[..., Awaitable[Response]]:
    """Serve a GET route's successful answers from `Lab.responses`, keyed by path and query string: a repeated URL
    skips validation, computing and serialising. The answer is a pure function of the URL and the server's
    configuration, so this is safe for every idempotent route here."""

    @functools.wraps(handler)
    async def wrapper(request: Request, lab: Lab) -> Response:
        key = (request.url.path, request.url.query)
        hit = lab.responses.get(key)
        if hit is not None:
            return Response(hit.body, media_type=hit.media_type, headers=dict(hit.headers) | {"X-Cache": "hit"})
        response = await handler(request, lab)
        if response.status_code == 200 and lab.responses.max_bytes:
            keep = tuple((k, v) for k, v in response.headers.items() if k in ("content-disposition", "cache-control"))
            lab.responses.put(key, CachedResponse(bytes(response.body), response.media_type or "", keep))
        return response

    return wrapper


class ServeCached:
    """ASGI middleware: a GET whose answer `cached_get` already stored is sent straight from `Lab.responses`,
    before routing, validation and dependency injection. Everything else passes through untouched."""

    def __init__(self, app: ASGIApp, lab: Lab) -> None:
        self.app = app
        self.lab = lab

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "GET" and self.lab.responses.max_bytes:
            key = (scope["path"], scope["query_string"].decode("latin-1"))
            hit = self.lab.responses.get(key)
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
        await self.app(scope, receive, send)


def get_lab(request: Request) -> Lab:
    lab: Lab = request.app.state.lab
    return lab


def is_fragment(request: Request) -> bool:
    """htmx asked for the panel alone (a history restore needs the whole page)."""
    headers = request.headers
    return headers.get("hx-request") == "true" and headers.get("hx-history-restore-request") != "true"


def page_key(request: Request, lang: str) -> tuple[str, str]:
    """A rendered page depends on its URL, the language chosen and whether htmx asked for the panel alone."""
    return (f"page:{lang}:{int(is_fragment(request))}:{request.url.path}", request.url.query)


def cached_page(lab: Lab, key: tuple[str, str]) -> Response | None:
    hit = lab.responses.get(key)
    if hit is None:
        return None
    return Response(hit.body, media_type=hit.media_type, headers=dict(hit.headers) | {"X-Cache": "hit"})


def remember_page(lab: Lab, key: tuple[str, str], response: Response) -> Response:
    """Keep a successful page: the class asks for the same few views again and again."""
    if response.status_code == 200 and lab.responses.max_bytes:
        lab.responses.put(
            key,
            CachedResponse(
                bytes(response.body), "text/html; charset=utf-8", (("vary", "HX-Request, Accept-Language"),)
            ),
        )
    return response
