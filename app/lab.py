"""The server's one stateful object: the resolved device, the limits and the trace cache.

It keeps no per-user state; any number of workers or machines serve the same URLs with the same answers.
"""

from __future__ import annotations

import functools
import hashlib
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import replace
from typing import Any, TypeVar
from urllib.parse import parse_qsl, quote_plus

import anyio
from fastapi import Request
from redis.exceptions import RedisError

from engine import Limits, Spec, TraceCache, compute
from engine.attention import Trace
from engine.block import BlockSpec, BlockTrace, compute_block
from engine.budget import Busy, MemoryBudget
from engine.decode import DecodeTrace, decode
from engine.device import resolve
from engine.generate import generate
from engine.long import LongTrace, compute_long, long_cost
from engine.spec import DTYPE_BYTES, estimate_bytes

from .settings import Settings

T = TypeVar("T")


class Lab:
    responses: Any = None  # the kernel's response store (app/web/cache.py), set by create_app for the metrics

    def __init__(self, settings: Settings, metrics: Any = None) -> None:
        import torch

        if settings.threads:
            torch.set_num_threads(settings.threads)
        self.settings = settings
        self.metrics = metrics
        self.device = resolve(settings.device)
        self.limits: Limits = settings.limits()
        # Pretrained contexts past a whole trace's length: lazy traces, whose cost is counted by `long_cost`.
        self.long_limits = replace(self.limits, max_tokens=max(self.limits.max_tokens, self.limits.max_long_tokens),
                                   memory_budget_bytes=2**62)  # fmt: skip
        self.budget = MemoryBudget(self.limits.memory_budget_bytes, settings.compute_wait_s)
        self.large_bytes = int(settings.large_request_mb * 2**20)
        self.large_running = 0
        self.large_waiting = 0
        self.cache: TraceCache[Any, Any] = TraceCache(int(settings.cache_mb * 2**20))
        self.models: dict[str, Any] = {}
        # Long computations in flight, by their request (`progress_key`): (done, total, started) for /api/v1/progress.
        self.progress: dict[str, tuple[int, int, float]] = {}
        self._redis: Any = None  # --redis: progress entries shared by every worker
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
                    model.place(self.device)
                    self.models[name] = model

    @contextmanager
    def tracking(self, key: str | None) -> Iterator[Callable[[int, int], None] | None]:
        """A progress callback for the computation a request started (None when nobody asked to track it); the
        entry lives while the computation runs, so the table holds only work in flight. With --redis the entry is
        also written there (a short-lived key), so whichever worker a page's poll reaches can answer it."""
        if key is None:
            yield None
            return
        start = time.time()
        shared = self._shared_progress()

        def update(done: int, total: int) -> None:
            self.progress[key] = (done, total, start)
            if shared is not None:  # progress is a courtesy: a Redis hiccup never fails the computation
                with suppress(RedisError):
                    shared.set(_progress_name(key), f"{done},{total},{start}", ex=PROGRESS_TTL_S)

        update(0, 0)  # in flight, nothing done yet (loading a model's weights can take seconds)
        try:
            yield update
        finally:
            self.progress.pop(key, None)
            if shared is not None:
                with suppress(RedisError):
                    shared.delete(_progress_name(key))

    def progress_of(self, key: str) -> tuple[int, int, float] | None:
        """This worker's entry for `key`, else the shared one (--redis): (done, total, started)."""
        entry = self.progress.get(key)
        shared = self._shared_progress()
        if entry is not None or shared is None:
            return entry
        try:
            raw = shared.get(_progress_name(key))
        except RedisError:
            return None
        if raw is None:
            return None
        done, total, start = raw.decode().split(",")
        return int(done), int(total), float(start)

    def _shared_progress(self) -> Any:
        """A plain (blocking) Redis client for progress entries, made on first use; None without --redis."""
        if not self.settings.redis_url:
            return None
        if self._redis is None:
            import redis

            self._redis = redis.Redis.from_url(self.settings.redis_url, socket_timeout=2, socket_connect_timeout=2)
        return self._redis

    def _cost(self, spec: Spec, factor: float = 1.0) -> int:
        return int(
            factor * estimate_bytes(max(spec.n_tokens, len(spec.kv_tokens)), spec.d_model, spec.n_heads, spec.dtype)
        )

    def _block_cost(self, s: BlockSpec) -> int:
        n, d = s.attn.n_tokens, s.attn.d_model
        return self._cost(s.attn) + DTYPE_BYTES[s.attn.dtype] * (3 * n * s.ff + 8 * n * d + 3 * d * s.ff)

    def cost(self, spec: Spec | BlockSpec) -> int:
        """Estimated bytes of computing `spec` (known before computing, from its sizes)."""
        return self._block_cost(spec) if isinstance(spec, BlockSpec) else self._cost(spec)

    async def offload(self, cost: int, fn: Callable[..., T], *args: Any, heavy: bool = False) -> T:
        """Run `fn(*args)` in a worker thread. Large work (estimated over `large_request_mb`) and heavy work (long
        in time whatever its bytes: generation, a long context's layers, the model view) takes one of a few
        large-work slots, waiting for it on the event loop rather than in a thread, for at most `queue_wait_s`;
        past a bounded queue it is refused at once (503 with Retry-After). So /healthz, /metrics and small requests
        keep their threads and cores while large ones wait: 40 generations at once run two at a time, not forty."""
        if cost <= self.large_bytes and not heavy:
            return await anyio.to_thread.run_sync(functools.partial(fn, *args))
        retry = max(1, round(self.settings.queue_wait_s))
        if self.large_waiting >= self.settings.max_large_queued:
            raise Busy(cost, self.budget.limit, retry)
        self.large_waiting += 1
        deadline = time.monotonic() + self.settings.queue_wait_s
        try:  # wait for a slot on the event loop (no thread held; works under any loop the app is served by)
            while self.large_running >= self.settings.max_large_concurrent:
                if time.monotonic() >= deadline:  # a wait has a deadline: the client hears 503, not silence
                    raise Busy(cost, self.budget.limit, retry)
                await anyio.sleep(0.02)
            self.large_running += 1
        finally:
            self.large_waiting -= 1
        try:
            return await anyio.to_thread.run_sync(functools.partial(fn, *args))
        finally:
            self.large_running -= 1

    async def trace_async(self, spec: Spec) -> tuple[Trace, bool]:
        return await self.offload(0 if spec in self.cache else self.cost(spec), self.trace, spec)

    def long(self, spec: Spec, progress: Callable[[int, int], None] | None = None) -> tuple[LongTrace, bool]:
        """The lazy trace of a long pretrained context (engine/long.py), cached like a whole trace."""

        def run(key: tuple[str, Spec]) -> LongTrace:
            with self.budget.reserve(long_cost(key[1])):
                return compute_long(key[1], self.models[key[1].preset], progress)

        value, cached = self.cache.get_or_compute(("long", spec), run)
        return value, cached

    async def long_async(self, spec: Spec, key: str | None = None) -> tuple[LongTrace, bool]:
        with self.tracking(key) as progress:
            cost = 0 if ("long", spec) in self.cache else long_cost(spec)
            return await self.offload(cost, self.long, spec, progress, heavy=cost > 0)

    def generation(self, key: tuple[Any, ...], cost: int, progress: Callable[[int, int], None] | None = None) -> Any:
        """Greedy generation (engine/generate.py) for key = (preset, prompt ids, max new tokens, layer), computed
        within the memory budget and kept in the trace cache like any other computation."""

        preset, ids, max_new, layer = key

        def run(_: tuple[Any, ...]) -> Any:
            with self.budget.reserve(cost):
                return generate(self.models[preset], ids, max_new, layer, progress)

        return self.cache.get_or_compute(("generate", *key), run)[0]

    async def generation_async(self, key: tuple[Any, ...], cost: int, progress_key: str | None = None) -> Any:
        with self.tracking(progress_key) as progress:
            cached = ("generate", *key) in self.cache
            return await self.offload(0 if cached else cost, self.generation, key, cost, progress, heavy=not cached)

    async def block_async(self, spec: BlockSpec) -> tuple[BlockTrace, bool]:
        return await self.offload(0 if spec in self.cache else self.cost(spec), self.block, spec)

    async def decode_async(self, spec: Spec, prefill: int) -> tuple[DecodeTrace, bool]:
        cost = 0 if ("decode", spec, prefill) in self.cache else self._cost(spec, 2.0)
        return await self.offload(cost, self.decode, spec, prefill)

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
            with self.budget.reserve(self._block_cost(s)):
                return compute_block(s, self.models.get(s.attn.preset))

        return self.cache.get_or_compute(spec, run)

    @property
    def json_limit(self) -> int:
        return int(self.settings.json_limit_mb * 2**20)


def get_lab(request: Request) -> Lab:
    lab: Lab = request.app.state.lab
    return lab


PROGRESS_TTL_S = 120  # a shared progress entry outlives a crashed worker by at most this


def _progress_name(key: str) -> str:
    return "lab:progress:" + hashlib.sha256(key.encode()).hexdigest()


FNV_OFFSET, FNV_PRIME, MASK_64 = 0xCBF29CE484222325, 0x100000001B3, 2**64 - 1


def fnv1a64(data: bytes) -> str:
    """FNV-1a, 64 bits, as 16 hex digits."""
    h = FNV_OFFSET
    for byte in data:
        h = ((h ^ byte) * FNV_PRIME) & MASK_64
    return f"{h:016x}"


def progress_key(path: str, query: str) -> str:
    """A request's identity for /api/v1/progress, 16 hex digits however long its URL (a long text's is 17 KB, past
    what a poll may send): FNV-1a 64 of its path, "?", and its parameters each written `quote_plus(name) + "=" +
    quote_plus(value)` (UTF-8; space as +; only A-Z a-z 0-9 _ . - ~ left bare), sorted as plain ASCII strings and
    joined by "&". So a page and the script polling for it agree however each encoded or ordered the query.

    static/lab.js (`progressKey`) computes the same key in the browser before it sends the request, so a page can
    poll while it waits. Why not SHA-256: the browser's SubtleCrypto exists only on secure contexts (https or
    loopback), and a class reaches the lab over plain http on a LAN address; FNV-1a is a few lines in both
    languages. The key only tells apart the computations in flight; a collision would show another request's
    progress bar, nothing more."""
    pairs = sorted(
        f"{quote_plus(k, safe='')}={quote_plus(v, safe='')}" for k, v in parse_qsl(query, keep_blank_values=True)
    )
    return fnv1a64(f"{path}?{'&'.join(pairs)}".encode())


def request_key(request: Request) -> str:
    return progress_key(request.url.path, request.url.query)
