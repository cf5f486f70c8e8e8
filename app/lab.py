"""The server's one stateful object: the resolved device, the limits and the trace cache.

It keeps no per-user state; any number of workers or machines serve the same URLs with the same answers.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import threading
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Hashable, Iterable, Iterator
from contextlib import asynccontextmanager, contextmanager, suppress
from contextvars import ContextVar
from dataclasses import dataclass, replace
from typing import Any, TypeVar
from urllib.parse import parse_qsl, quote_plus

import anyio
from anyio.lowlevel import RunVar
from fastapi import Request
from redis.exceptions import RedisError
from starlette.datastructures import QueryParams
from starlette.types import ASGIApp, Receive, Scope, Send

from engine import Limits, Spec, TraceCache, compute
from engine.attention import Checker, Trace
from engine.block import BlockSpec, BlockTrace, compute_block
from engine.budget import Busy, MemoryBudget
from engine.decode import DecodeTrace, decode
from engine.device import resolve
from engine.generate import generate
from engine.long import LongTrace, compute_long, long_cost
from engine.spec import DTYPE_BYTES, estimate_bytes

from .settings import Settings

T = TypeVar("T")
Progress = Callable[[int, int], None]  # (done, total): how a long computation reports, for /api/v1/progress


class Cancelled(Exception):
    """Nobody waits for this computation any more: every client that asked for it went away, or the server is
    stopping. Raised in the worker thread at the computation's next progress report (a token, a layer), and by a
    request still queued for a large-work slot, so abandoned work frees its slot and cores within a step."""

    def __init__(self, stopping: bool = False) -> None:
        super().__init__("the server is stopping" if stopping else "the client went away")
        self.stopping = stopping


@dataclass
class Interest:
    """Who still waits for one computation: the requests for its cache key whose clients are connected. When the
    last of them leaves, `cancelled` is set and the computation stops at its next progress report."""

    clients: int = 0
    cancelled: bool = False


class Watch:
    """One request's wait for a computation: whether its own client left, and the computation's shared Interest."""

    def __init__(self, interest: Interest) -> None:
        self.interest = interest
        self.left = False  # its client went away
        self.released = False
        interest.clients += 1

    def leave(self, cancel: bool) -> None:
        """Let go of the interest: the client went away (`cancel`), or the wait ended."""
        if self.released:
            return
        self.released = True
        self.left = cancel
        self.interest.clients -= 1
        if cancel and self.interest.clients <= 0:
            self.interest.cancelled = True


# The ASGI receive of the request being served (set by `WatchClient`), so a computation can notice its client leave.
CLIENT: ContextVar[Receive | None] = ContextVar("attention_lab_client", default=None)


class WatchClient:
    """Remembers each HTTP request's `receive` for `Lab.watching` (which reads it for `http.disconnect` while the
    request waits for a computation: its body is read by then)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        token = CLIENT.set(receive)
        try:
            await self.app(scope, receive, send)
        finally:
            CLIENT.reset(token)


class QueuePlace:
    """A heavy request's place in the queue for a large-work slot, taken (`Lab.admit`) before the request's costly
    preparation — tokenising its text — so that a full queue refuses it at once, having spent nothing. The place
    counts as waiting (`Lab.large_waiting`) until the request's heavy work takes a slot (`Lab.offload`), or the
    request ends (`HeavyWork`)."""

    def __init__(self) -> None:
        self.lab: Lab | None = None  # the lab whose queue it holds a place in, while it holds one
        self.taken = False  # a place was taken (one per request: its later heavy steps queue as any work does)

    def release(self) -> None:
        lab, self.lab = self.lab, None
        if lab is not None:
            lab.large_waiting -= 1


# The queue place of the heavy request being served (set by `HeavyWork`); None for every other request.
HEAVY: ContextVar[QueuePlace | None] = ContextVar("attention_lab_heavy", default=None)


class HeavyWork:
    """Marks the requests for heavy work by their path (`paths`: generation, the model view, the predictions: work
    that always takes a large-work slot), so that the lab takes their place in the queue before it tokenises their
    text (`Lab.off_loop`); and gives the place back when the request ends, if its work never took a slot. Inside the
    response cache's middleware: a cached answer never queues."""

    def __init__(self, app: ASGIApp, paths: frozenset[str]) -> None:
        self.app = app
        self.paths = paths

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] not in self.paths:
            await self.app(scope, receive, send)
            return
        place = QueuePlace()
        token = HEAVY.set(place)
        try:
            await self.app(scope, receive, send)
        finally:
            HEAVY.reset(token)
            place.release()


class _Tracked:
    """One request's progress entry while its computation is asked for: its key (a `ProgressKey`, computed only
    when work starts or a poll looks for it) and when it was asked for."""

    def __init__(self, key: str, start: float) -> None:
        self.key = key
        self.start = start
        self.named = not isinstance(key, ProgressKey)  # its key is known (computed, or given as one)
        self.begun = False  # its work has begun (in a worker thread)

    @property
    def name(self) -> str:
        """The key itself: computed here (in the calling thread) the first time."""
        key = self.key.hex if isinstance(self.key, ProgressKey) else self.key
        self.named = True
        return key


# What marks the tracked work of the request being served as begun (set by `Lab.tracking`), for `Lab.offload`.
BEGIN: ContextVar[Callable[[], None] | None] = ContextVar("attention_lab_begin", default=None)


def _begun(fn: Callable[..., T], *args: Any) -> Callable[[], T]:
    """`fn(*args)` for a worker thread, first marking the request's tracked work begun there (`Lab.tracking`)."""
    begin = BEGIN.get()
    if begin is None:
        return functools.partial(fn, *args)

    def work() -> T:
        begin()
        return fn(*args)

    return work


async def _gone(receive: Receive) -> None:
    """Returns once the client has disconnected (a server answers `receive` with http.disconnect then)."""
    while (await receive())["type"] != "http.disconnect":
        await asyncio.sleep(0.05)  # the request's own (empty or already read) body: the next receive waits


def _cache_key(kind: str, key: Hashable) -> Hashable:
    """A whole trace is cached under its Spec (the answer cache asks `spec in lab.cache`); the rest by kind."""
    return key if kind == "trace" else (kind, key)


class Lab:
    responses: Any = None  # the kernel's response store (app/web/cache.py), set by create_app for the metrics
    ahead: Any = None  # app/attention/ahead.py's DrawAhead, set by create_app: large traces' heat maps drawn ahead

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
        # Requests tracked whose work has not begun (queued, or waiting for another's): their keys are computed only
        # if a poll asks (`progress_of`), so a request refused or cancelled in the queue never hashes its URL.
        self.pending: set[_Tracked] = set()
        # Who waits for each computation in flight (`watching`), and whether the server is stopping (`stop`): both
        # make the computation's progress callback raise Cancelled, so abandoned work ends at its next step.
        self.interest: dict[Hashable, Interest] = {}
        self.stopping = False
        # A stopping server's waits for budget give up at once (Cancelled), as its queued work does.
        self.budget.cancelled = lambda: Cancelled(stopping=True) if self.stopping else None
        self._redis: Any = None  # --redis: progress entries shared by every worker
        # Models are sources: the packaged ones, --checkpoint and each --model, through one registry. A bad path
        # or file is a ModelError now, at start-up; weights load on first use, their bytes held in the budget.
        from engine.models import parse_entries, registry

        entries = [(settings.checkpoint, "checkpoint")] if settings.checkpoint else []
        self.models = registry([*entries, *parse_entries(settings.models)], settings.max_model_mb,
                               packaged=settings.pretrained)  # fmt: skip
        for model in self.models.values():
            model.place(self.device)
            self.budget.limit += model.nbytes
            model.before_load = self.budget.hold

    @contextmanager
    def tracking(self, key: str | None) -> Iterator[Callable[[int, int], None] | None]:
        """A progress callback for the computation a request started (None when nobody asked to track it); the
        entry lives while the computation runs, so the table holds only work in flight. With --redis the entry is
        also written there (a short-lived key), so whichever worker a page's poll reaches can answer it.

        Nothing is computed here, on the event loop: a request's key (a `ProgressKey`, milliseconds of pure Python
        for a long URL) is computed when its work begins, in the worker thread `offload` runs it in (the entry is
        then 0 of 0 done: loading a model's weights can take seconds), or by the callback's first call. Until then
        the request is pending (queued): a poll on this worker that asks for its key finds it, 0 of 0 done; a poll
        on another worker (--redis) once its work has begun."""
        if key is None:
            yield None
            return
        tracked = _Tracked(key, time.time())
        shared = self._shared_progress()

        def update(done: int, total: int) -> None:
            name = tracked.name
            self.progress[name] = (done, total, tracked.start)
            if shared is not None:  # progress is a courtesy: a Redis hiccup never fails the computation
                with suppress(RedisError):
                    shared.set(_progress_name(name), f"{done},{total},{tracked.start}", ex=PROGRESS_TTL_S)

        def begin() -> None:
            if not tracked.begun:
                tracked.begun = True
                update(0, 0)

        self.pending.add(tracked)
        token = BEGIN.set(begin)
        try:
            yield update
        finally:
            BEGIN.reset(token)
            self.pending.discard(tracked)
            if tracked.named:  # an entry can exist only under a key that was computed
                name = tracked.name
                self.progress.pop(name, None)
                if shared is not None:
                    with suppress(RedisError):
                        shared.delete(_progress_name(name))

    def progress_of(self, key: str) -> tuple[int, int, float] | None:
        """This worker's entry for `key` (a request whose work has not begun: 0 of 0), else the shared one (--redis):
        (done, total, started). Called off the event loop: it may compute the keys of pending requests."""
        entry = self.progress.get(key)
        if entry is None:
            for tracked in self.pending.copy():  # the event loop adds and removes them meanwhile
                if tracked.name == key:
                    entry = self.progress.get(key) or (0, 0, tracked.start)
                    break
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

    def stop(self) -> None:
        """The server is stopping (SIGTERM, or the app's shutdown): work in flight ends at its next progress report
        and queued work leaves the queue, so a backlog does not hold the process past its graceful-shutdown time."""
        self.stopping = True

    @asynccontextmanager
    async def watching(self, key: Hashable | None = None) -> AsyncIterator[Watch]:
        """This request's wait for the computation cached under `key` (None: one nobody shares), while its client
        is watched for leaving (`CLIENT`, set by WatchClient; without one, as from the CLI, only `stop` cancels).
        The computation is cancelled when its last waiting client leaves: another request for the same key keeps
        it running."""
        interest = self.interest.get(key) if key is not None else None
        if interest is None or interest.cancelled:
            interest = Interest()
            if key is not None:
                self.interest[key] = interest
        watch = Watch(interest)
        receive = CLIENT.get()
        watcher = None
        if receive is not None:
            watcher = asyncio.get_running_loop().create_task(_gone(receive))

            def gone(task: asyncio.Task[None]) -> None:
                if not task.cancelled() and task.exception() is None:
                    watch.leave(cancel=True)

            watcher.add_done_callback(gone)
        try:
            yield watch
        finally:
            if watcher is not None:
                watcher.cancel()
            watch.leave(cancel=False)
            if interest.clients <= 0 and key is not None and self.interest.get(key) is interest:
                del self.interest[key]

    def checked(self, watch: Watch, update: Progress | None) -> Progress:
        """A progress callback (for the worker thread) that first raises Cancelled when nobody waits any more."""
        interest = watch.interest

        def report(done: int, total: int) -> None:
            if self.stopping or interest.cancelled:
                raise Cancelled(self.stopping)
            if update is not None:
                update(done, total)

        return report

    async def offload(
        self, cost: int, fn: Callable[..., T], *args: Any, heavy: bool = False, watch: Watch | None = None
    ) -> T:
        """Run `fn(*args)` in a worker thread. Large work (estimated over `large_request_mb`) and heavy work (long
        in time whatever its bytes: generation, a long context's layers, the model view) takes one of a few
        large-work slots, waiting for it on the event loop rather than in a thread, for at most `queue_wait_s`;
        past a bounded queue it is refused at once (503 with Retry-After). So /healthz, /metrics and small requests
        keep their threads and cores while large ones wait: 40 generations at once run two at a time, not forty.
        A queued request whose client left (`watch`), or any while the server stops, leaves the queue (Cancelled)."""
        work = _begun(fn, *args)
        if cost <= self.large_bytes and not heavy:
            return await anyio.to_thread.run_sync(work)
        retry = self._retry_after()
        place = HEAVY.get()
        if place is not None and place.lab is self:  # its place was taken before it was prepared (`admit`)
            place.lab = None  # now this wait's, counted in large_waiting as it is
        elif self.large_waiting >= self.settings.max_large_queued:
            raise Busy(cost, self.budget.limit, retry)
        else:
            self.large_waiting += 1
        deadline = time.monotonic() + self.settings.queue_wait_s
        try:  # wait for a slot on the event loop (no thread held; works under any loop the app is served by)
            while True:  # checked before the slot is taken too: a slot freed by stopping work is not taken
                if self.stopping or (watch is not None and watch.left):
                    raise Cancelled(self.stopping)
                if self.large_running < self.settings.max_large_concurrent:
                    break
                if time.monotonic() >= deadline:  # a wait has a deadline: the client hears 503, not silence
                    raise Busy(cost, self.budget.limit, retry)
                await anyio.sleep(0.02)
            self.large_running += 1
        finally:
            self.large_waiting -= 1
        try:
            return await anyio.to_thread.run_sync(work)
        finally:
            self.large_running -= 1

    def _retry_after(self) -> int:
        return max(1, round(self.settings.queue_wait_s))

    def admit(self) -> None:
        """Take the heavy request's place in the queue for a large-work slot now, before its costly preparation (a
        heavy request: one `HeavyWork` marked, that has taken no place yet; any other request passes): past a full
        queue it is refused at once (Busy: 503 with Retry-After), tokenising nothing. Slots free now count as places
        too, as in `offload`, where the place then waits for a slot."""
        place = HEAVY.get()
        if place is None or place.taken:
            return
        free = max(0, self.settings.max_large_concurrent - self.large_running)
        if self.large_waiting >= self.settings.max_large_queued + free:
            raise Busy(0, self.budget.limit, self._retry_after())
        self.large_waiting += 1
        place.lab, place.taken = self, True

    def run(self, kind: str, key: Hashable, cost: int, fn: Callable[[], T]) -> tuple[T, bool]:
        """`fn()` computed once per (kind, key) within the memory budget, and kept in the byte-bounded cache (a
        second request for the same key waits for the first): the one path of every computation the lab keeps.
        Returns the value and whether it came from the cache."""

        def work(_: Any) -> T:
            with self.budget.reserve(cost):
                return fn()

        return self.cache.get_or_compute(_cache_key(kind, key), work)

    async def compute(
        self,
        kind: str,
        key: Hashable,
        cost: int,
        fn: Callable[[Progress | None], T],
        *,
        heavy: bool = False,
        progress: str | None = None,
    ) -> tuple[T, bool]:
        """`run` off the event loop: `fn(update)` in a worker thread, large or heavy work in one of the few
        large-work slots (`offload`), its progress reported under the request key `progress` (/api/v1/progress).
        A value already cached costs nothing and waits for no slot. The computation stops (Cancelled, at its next
        progress report) once no client waits for it (`watching`); a request that waited for another's computation
        which was so cancelled asks again, now computing itself."""
        ck = _cache_key(kind, key)
        while True:
            cached = ck in self.cache
            async with self.watching(ck) as watch:
                with self.tracking(progress) as update:
                    report = self.checked(watch, update)

                    def work(report: Progress = report, interest: Interest = watch.interest) -> T:
                        if self.stopping or interest.cancelled:  # gone by the time a thread took it: not begun
                            raise Cancelled(self.stopping)
                        return fn(report)

                    try:
                        return await self.offload(0 if cached else cost, self.run, kind, key, cost, work,
                                                  heavy=heavy and not cached, watch=watch)  # fmt: skip
                    except Cancelled:
                        if watch.left or self.stopping:
                            raise

    async def off_loop(self, preset: str | None, fn: Callable[..., T], *args: Any) -> T:
        """`fn(*args)` (making a request's Spec, which tokenizes its text) in a worker thread when `preset` is one of
        the loaded models: the first use of a model's tokenizer loads it (seconds for SmolLM2), and /healthz and
        every other request must not wait for that. The lab's own presets split their text here (microseconds).
        A heavy request takes its place in the queue first (`admit`): a full queue refuses it before it tokenises.

        At most PREPARING of them at once (`preparing`), the others waiting on the event loop: a burst of 80
        requests otherwise started a worker thread for each (a thread's start blocks the event loop until the new
        thread runs, and each then contends for the interpreter lock), which held /healthz for most of a second."""
        if preset in self.models:
            self.admit()
            return await anyio.to_thread.run_sync(functools.partial(fn, *args), limiter=preparing())
        return fn(*args)

    async def spec(self, req: Any, limits: Limits | None = None) -> Spec:
        """An AttentionRequest's Spec within `limits` (the lab's by default), made off the event loop when its
        preset is a loaded model (`off_loop`)."""
        spec: Spec = await self.off_loop(req.preset, req.to_spec, limits or self.limits, self.device, self.models)
        return spec

    def is_cached(self, spec: Spec | BlockSpec) -> bool:
        return _cache_key("block" if isinstance(spec, BlockSpec) else "trace", spec) in self.cache

    # The computations the pages and the API share, each one `compute` with its cost.

    async def trace_async(self, spec: Spec, heads: Iterable[int] | None = None) -> tuple[Trace, bool]:
        """The trace for `spec`, with its check against SDPA done for `heads` (every head by default: pages show
        the trace-wide check), off the event loop."""
        trace, cached = await self.compute("trace", spec, self._cost(spec), lambda _: self._traced(spec))
        await self.verify(trace.checker, range(spec.n_heads) if heads is None else heads)
        return trace, cached

    async def verify(self, checker: Checker, heads: Iterable[int]) -> None:
        """A trace's check for `heads` in a worker thread (one SDPA call), unless those heads are checked already."""
        wanted = tuple(heads)
        if not checker.has(wanted):
            await anyio.to_thread.run_sync(checker.heads, wanted)

    def trace(self, spec: Spec) -> tuple[Trace, bool]:
        """The trace for `spec` and whether it came from the cache (in the calling thread)."""
        return self.run("trace", spec, self._cost(spec), lambda: self._traced(spec))

    def _traced(self, spec: Spec) -> Trace:
        trace = compute(spec, self.models.get(spec.preset))
        if self.metrics is not None:
            for stage, seconds in trace.timings:
                self.metrics.stage(stage, seconds)
        return trace

    async def long_async(self, spec: Spec, key: str | None = None) -> tuple[LongTrace, bool]:
        """The lazy trace of a long pretrained context (engine/long.py), its layers below reported as they run."""
        model = self.models[spec.preset]
        return await self.compute("long", spec, long_cost(spec), lambda p: compute_long(spec, model, p), heavy=True,
                                  progress=key)  # fmt: skip

    async def generation_async(self, key: tuple[Any, ...], cost: int, progress_key: str | None = None) -> Any:
        """Greedy generation (engine/generate.py) for key = (preset, prompt ids, max new tokens, layer)."""
        preset, ids, max_new, layer = key
        run = functools.partial(generate, self.models[preset], ids, max_new, layer)
        return (await self.compute("generate", key, cost, run, heavy=True, progress=progress_key))[0]

    async def block_async(self, spec: BlockSpec) -> tuple[BlockTrace, bool]:
        """The block trace for `spec`, its attention's check done for every head (off the event loop)."""
        trace, cached = await self.compute("block", spec, self._block_cost(spec), lambda _: self._blocked(spec))
        await self.verify(trace.attention.checker, range(spec.attn.n_heads))
        return trace, cached

    def block(self, spec: BlockSpec) -> tuple[BlockTrace, bool]:
        """The block trace for `spec` and whether it came from the cache (in the calling thread)."""
        return self.run("block", spec, self._block_cost(spec), lambda: self._blocked(spec))

    def _blocked(self, spec: BlockSpec) -> BlockTrace:
        return compute_block(spec, self.models.get(spec.attn.preset))

    async def decode_async(self, spec: Spec, prefill: int) -> tuple[DecodeTrace, bool]:
        return await self.compute("decode", (spec, prefill), self._cost(spec, 2.0), lambda _: decode(spec, prefill))

    def decode(self, spec: Spec, prefill: int) -> tuple[DecodeTrace, bool]:
        """The decode trace for `spec` with `prefill` prompt tokens (in the calling thread)."""
        return self.run("decode", (spec, prefill), self._cost(spec, 2.0), lambda: decode(spec, prefill))

    @property
    def json_limit(self) -> int:
        return int(self.settings.json_limit_mb * 2**20)


class LoopLimiter:
    """At most `total` worker threads of one kind at once: a CapacityLimiter per event loop (as anyio's own
    default limiter), made on first use in that loop."""

    def __init__(self, name: str, total: int) -> None:
        self.total = total
        self._var: RunVar[anyio.CapacityLimiter] = RunVar(name)

    def __call__(self) -> anyio.CapacityLimiter:
        try:
            return self._var.get()
        except LookupError:
            limiter = anyio.CapacityLimiter(self.total)
            self._var.set(limiter)
            return limiter


PREPARING = 4  # requests made into Specs (tokenised) at once, in worker threads (`Lab.off_loop`)
preparing = LoopLimiter("attention_lab_preparing", PREPARING)


async def get_lab(request: Request) -> Lab:
    """The app's Lab, for `Depends`. A coroutine, so FastAPI calls it on the event loop: a plain function would cost
    every request a trip through the worker threads (FastAPI runs sync dependencies there), and under a burst
    /healthz and a toy request would queue for a thread behind the burst's own trips."""
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


# A class asks for the same URLs: the pure-Python hash runs once per URL (the last KEYS_KEPT of them).
KEYS_KEPT = 2048
_keys: OrderedDict[tuple[str, str], str] = OrderedDict()
_keys_lock = threading.Lock()


def progress_key(path: str, query: str, pairs: Iterable[tuple[str, str]] | None = None) -> str:
    """A request's identity for /api/v1/progress, 16 hex digits however long its URL (a long text's is 17 KB, past
    what a poll may send): FNV-1a 64 of its path, "?", and its parameters each written `quote_plus(name) + "=" +
    quote_plus(value)` (UTF-8; space as +; only A-Z a-z 0-9 _ . - ~ left bare), sorted as plain ASCII strings and
    joined by "&". So a page and the script polling for it agree however each encoded or ordered the query.

    static/lab.js (`progressKey`) computes the same key in the browser before it sends the request, so a page can
    poll while it waits. Why not SHA-256: the browser's SubtleCrypto exists only on secure contexts (https or
    loopback), and a class reaches the lab over plain http on a LAN address; FNV-1a is a few lines in both
    languages. The key only tells apart the computations in flight; a collision would show another request's
    progress bar, nothing more.

    `pairs`: the query already parsed (exactly as `parse_qsl(query, keep_blank_values=True)`), not parsed again."""
    with _keys_lock:
        known = _keys.get((path, query))
        if known is not None:
            _keys.move_to_end((path, query))
            return known
    if pairs is None:
        pairs = parse_qsl(query, keep_blank_values=True)
    written = sorted(f"{quote_plus(k, safe='')}={quote_plus(v, safe='')}" for k, v in pairs)
    key = fnv1a64(f"{path}?{'&'.join(written)}".encode())
    with _keys_lock:
        _keys[(path, query)] = key
        if len(_keys) > KEYS_KEPT:
            _keys.popitem(last=False)
    return key


class ProgressKey(str):
    """A request's progress key, not computed yet: the string is the request's path and query (what the key names),
    `hex` the key itself (`progress_key`), computed on first use and kept. Hashing a long URL takes milliseconds of
    pure Python, so it is not done on the event loop, nor for a request whose work never begins (refused, or
    cancelled in the queue): `Lab.tracking` asks for it in the worker thread that starts the work, or a poll does.
    `params`: the request's query as Starlette parsed it, reused (None: parse `query` then)."""

    path: str
    query: str
    params: QueryParams | None
    _hex: str | None

    def __new__(cls, path: str, query: str, params: QueryParams | None = None) -> ProgressKey:
        self = super().__new__(cls, f"{path}?{query}")
        self.path, self.query, self.params, self._hex = path, query, params, None
        return self

    @property
    def hex(self) -> str:
        if self._hex is None:
            pairs = self.params.multi_items() if self.params is not None else None
            self._hex = progress_key(self.path, self.query, pairs)
        return self._hex


def request_key(request: Request) -> ProgressKey:
    """The request's progress key, computed when its work begins (`ProgressKey`). Its query as the route already
    parsed it (Starlette's `query_params`, the one parse of it) when that is the same text: an ASCII query string
    (Starlette reads the bytes as Latin-1, the URL as UTF-8)."""
    url = request.url
    raw: bytes = request.scope.get("query_string", b"")
    return ProgressKey(url.path, url.query, request.query_params if raw.isascii() else None)
