"""The compute service: the server's one stateful object (the resolved device, the limits, the models and the trace
cache) and its one path for every computation, `Lab.compute` — pages and API alike.

It keeps no per-user state; any number of workers or machines serve the same URLs with the same answers.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Generic, NamedTuple, TypeVar, overload

from fastapi import Request

from engine import Limits, Spec, TraceCache, compute
from engine.attention import Trace
from engine.block import BlockSpec, BlockTrace, compute_block
from engine.budget import MemoryBudget
from engine.decode import DecodeTrace, decode
from engine.device import resolve
from engine.long import LongTrace, compute_long, long_cost
from engine.spec import DTYPE_BYTES, estimate_bytes

from ..settings import Settings
from .admission import Admission
from .cancel import Cancelled, Cancelling, Interest, Progress
from .jobs import JobKind, RedisJobs
from .progress import Tracking

if TYPE_CHECKING:
    from engine.models import Model

    from ..metrics import Metrics
    from ..web.page import CachedResponse

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)
U = TypeVar("U")
V = TypeVar("V", Trace, BlockTrace)  # a trace that checks itself against SDPA


class Work(NamedTuple, Generic[T_co]):
    """What differs between the kinds of work the lab keeps, `compute`'s first arguments: the kind and key it is
    cached under (None: neither kept nor shared), the bytes it holds while it runs (which also choose its slot), how
    it is computed (given a progress callback, or None), and whether it is heavy on any route."""

    kind: str
    key: Hashable
    cost: int
    fn: Callable[[Progress | None], T_co]
    heavy: bool = False  # long in time whatever its bytes (a long context's layers): a large-work slot


def verified(heads: Iterable[int]) -> Callable[[V, bool], tuple[V, bool]]:
    """`compute`'s `then` for a trace: its check against SDPA done for `heads`, in the same worker thread."""
    wanted = tuple(heads)

    def then(trace: V, cached: bool) -> tuple[V, bool]:
        trace.verify(wanted)
        return trace, cached

    return then


def _cache_key(kind: str, key: Hashable) -> Hashable:
    """A whole trace is cached under its Spec (the answer cache asks `spec in lab.cache`); the rest by kind."""
    return key if kind == "trace" else (kind, key)


def _names_preset(key: Any, name: str) -> bool:
    """Whether a cache key (a Spec, a BlockSpec, or a tuple holding them or the preset's name) is about `name`."""
    if isinstance(key, tuple):
        return any(_names_preset(k, name) for k in key)
    if isinstance(key, str):
        return key == name
    return getattr(key, "preset", None) == name or getattr(getattr(key, "attn", None), "preset", None) == name


class Lab(Cancelling, Admission, Tracking):
    responses: TraceCache[tuple[str, str], CachedResponse] | None = None  # the kernel's response store, for metrics
    # app/attention/ahead.py's DrawAhead, set by create_app: large traces' heat maps drawn ahead (not typed here:
    # the lab, under every feature, names none of them).
    ahead: Any = None

    def __init__(self, settings: Settings, metrics: Metrics | None = None) -> None:
        import torch

        if settings.threads:
            torch.set_num_threads(settings.threads)
        Cancelling.__init__(self)
        Admission.__init__(self, settings)
        Tracking.__init__(self, settings)
        self.metrics = metrics
        self.device = resolve(settings.device)
        self.limits: Limits = settings.limits()
        # Pretrained contexts past a whole trace's length: lazy traces, whose cost is counted by `long_cost`.
        self.long_limits = replace(self.limits, max_tokens=max(self.limits.max_tokens, self.limits.max_long_tokens),
                                   memory_budget_bytes=2**62)  # fmt: skip
        self.budget = MemoryBudget(self.limits.memory_budget_bytes, settings.compute_wait_s)
        self.cache: TraceCache[Any, Any] = TraceCache(int(settings.cache_mb * 2**20))
        # A stopping server's waits for budget give up at once (Cancelled), as its queued work does.
        self.budget.cancelled = lambda: Cancelled(stopping=True) if self.stopping else None
        # Models are sources: the packaged ones, --checkpoint and each --model, through one registry. A bad path
        # or file is a ModelError now, at start-up; weights load on first use, their bytes held in the budget.
        from engine.models import parse_entries, registry
        from engine.pretrained import installed

        entries = [(settings.checkpoint, "checkpoint")] if settings.checkpoint else []
        self.models: dict[str, Model] = {}
        self.encdec_presets: dict[str, dict[str, Any]] = {}  # finished encoder–decoder runs (app/train/presets.py)
        packaged = installed() if settings.pretrained else None
        named = registry([*entries, *parse_entries(settings.models)], settings.max_model_mb, packaged=packaged)
        for model in named.values():
            self.add_model(model)
        # --redis: heavy computations are jobs of the queue (`job`); a queue worker's own lab sets this to None.
        self.jobs: RedisJobs | None = RedisJobs(settings.redis_url, settings) if settings.redis_url else None

    async def job(self, kind: JobKind[T], req: Any, key: str | None = None) -> T:
        """The one place that decides where a heavy computation (a `JobKind`: the pruning curve, a patching grid, the
        head ranking) runs: here, `kind.here(req, self, key)`, as every computation without Redis; with --redis, a job
        of the queue that any queue worker computes, every web worker seeing its progress (under `key`) and result
        (app/lab/jobs.py)."""
        if self.jobs is None:
            return await kind.here(req, self, key)
        return await self.jobs.run(self, kind, req, key)

    def stop(self) -> None:
        """The server is stopping (`Cancelling.stop`); the requests waiting for a slot hear it at once."""
        Cancelling.stop(self)
        self.wake()

    def add_model(self, model: Model) -> None:
        """Serve `model` as a preset from now on (a finished training run), as a model named at start-up is: on the
        lab's device, its bytes kept in the budget. The registry is replaced, never changed in place: a request
        that took `self.models` keeps a consistent mapping."""
        if model.name in self.models:
            raise ValueError(f"a model named {model.name!r} is already served")
        model.place(self.device)
        self.budget.keep_for_model(model.nbytes)
        model.before_load = self.budget.hold
        self.models = {**self.models, model.name: model}

    def remove_model(self, name: str) -> None:
        """Stop serving the preset `name` (a training run dropped): a request naming it is then refused like any
        unknown preset; its budget share is given back and its computed traces leave the cache."""
        model = self.models.get(name)
        if model is None:
            return
        self.models = {k: v for k, v in self.models.items() if k != name}
        self.budget.release_model(model.nbytes, model.loaded)
        self.cache.discard(lambda key: _names_preset(key, name))

    def cost(self, spec: Spec | BlockSpec, factor: float = 1.0) -> int:
        """Estimated bytes of computing `spec` (known before computing, from its sizes)."""
        if isinstance(spec, BlockSpec):
            n, d, ff = spec.attn.n_tokens, spec.attn.d_model, spec.ff
            return self.cost(spec.attn) + DTYPE_BYTES[spec.attn.dtype] * (3 * n * ff + 8 * n * d + 3 * d * ff)
        n = max(spec.n_tokens, len(spec.kv_tokens))
        return int(factor * estimate_bytes(n, spec.d_model, spec.n_heads, spec.dtype))

    def run(self, work: Work[T], report: Progress | None = None) -> tuple[T, bool]:
        """`work.fn(report)` computed once per (kind, key) within the memory budget, and kept in the byte-bounded
        cache (a second request for the same key waits for the first), in the calling thread: `compute`'s inside,
        and a worker thread's way to a trace (the model view's layers). Returns the value and whether it came from
        the cache."""

        def computed(_: Any = None) -> T:
            with self.budget.reserve(work.cost):
                return work.fn(report)

        if work.key is None:
            return computed(), False
        return self.cache.get_or_compute(_cache_key(work.kind, work.key), computed)

    def kept(self, kind: str, key: Hashable) -> Any:
        """The value `compute` keeps for (kind, key), or None when none is kept (nothing is computed)."""
        return self.cache.get(_cache_key(kind, key))

    def keep(self, kind: str, key: Hashable, value: Any) -> None:
        """Keep `value` as what `compute` would compute for (kind, key) (a part of a larger computation that is a
        computation of its own), unless it is kept or being computed already."""
        self.cache.put(_cache_key(kind, key), value)

    @overload
    async def compute(self, kind: str, key: Hashable, cost: int, fn: Callable[[Progress | None], T],
                      heavy: bool = False, *, progress: str | None = None,
                      unit: str = "layers") -> tuple[T, bool]: ...  # fmt: skip
    @overload
    async def compute(self, kind: str, key: Hashable, cost: int, fn: Callable[[Progress | None], T],
                      heavy: bool = False, *, progress: str | None = None, unit: str = "layers",
                      then: Callable[[T, bool], U], then_cost: int = 0) -> U: ...  # fmt: skip
    async def compute(self, kind: str, key: Hashable, cost: int, fn: Callable[[Progress | None], Any],
                      heavy: bool = False, *, progress: str | None = None, unit: str = "layers",
                      then: Callable[[Any, bool], Any] | None = None, then_cost: int = 0) -> Any:  # fmt: skip
        """The one path of every computation: `run` off the event loop, `fn(update)` in a worker thread, large work
        in one of the few large-work slots (`offload`: chosen by the real cost, `cost` unless the value is cached,
        plus `then_cost`; heavy on a heavy route, or when `heavy`), its progress reported under the request key
        `progress` (/api/v1/progress), counting `unit` (the layers of a model, or the tokens generated:
        `progress.UNITS`). `then(value, cached)` follows in the same thread and slot (checking a trace,
        serialising an answer: `then_cost` its bytes), and is what `compute` returns; without it, (value, cached).
        The computation stops (Cancelled, at its next progress report) once no client waits for it (`watching`); a
        request that waited for another's computation which was so cancelled asks again, now computing itself."""
        ck = _cache_key(kind, key) if key is not None else None
        while True:
            cached = ck is not None and ck in self.cache
            async with self.watching(ck) as watch:
                with self.tracking(progress, unit) as update:
                    report = self.checked(watch, update)

                    def computing(report: Progress | None, interest: Interest = watch.interest) -> Any:
                        if self.stopping or interest.cancelled:  # gone by the time a thread took it: not begun
                            raise Cancelled(self.stopping)
                        return fn(report)

                    def work(report: Progress = report) -> Any:
                        value, hit = self.run(Work(kind, key, cost, computing), report)
                        return (value, hit) if then is None else then(value, hit)

                    try:
                        return await self.offload((0 if cached else cost) + then_cost, work,
                                                  heavy=False if cached else (heavy or None), watch=watch)  # fmt: skip
                    except Cancelled:
                        if watch.left or self.stopping:
                            raise

    async def spec(self, req: Any, limits: Limits | None = None) -> Spec:
        """An AttentionRequest's Spec within `limits` (the lab's by default), made off the event loop when its
        preset is a loaded model (`off_loop`)."""
        return await self.off_loop(req.preset, req.to_spec, limits or self.limits, self.device, self.models)

    # The kinds of work the pages and the API share: each its key and its cost; `compute` does the rest.

    def trace_work(self, spec: Spec) -> Work[Trace]:
        return Work("trace", spec, self.cost(spec), lambda _: self._traced(spec))

    def block_work(self, spec: BlockSpec) -> Work[BlockTrace]:
        return Work("block", spec, self.cost(spec), lambda _: compute_block(spec, self.models.get(spec.attn.preset)))

    def decode_work(self, spec: Spec, prefill: int) -> Work[DecodeTrace]:
        """The decode trace for `spec` with `prefill` prompt tokens: the prompt's trace and the cache's, twice."""
        return Work("decode", (spec, prefill), self.cost(spec, 2.0), lambda _: decode(spec, prefill))

    def long_work(self, spec: Spec) -> Work[LongTrace]:
        """The lazy trace of a long pretrained context (engine/long.py), its layers below reported as they run."""
        model = self.models[spec.preset]
        return Work("long", spec, long_cost(spec), lambda p: compute_long(spec, model, p), heavy=True)

    def _traced(self, spec: Spec) -> Trace:
        """The trace for `spec`, computed now in the calling thread (through no cache), its stages timed."""
        trace = compute(spec, self.models.get(spec.preset))
        if self.metrics is not None:
            for stage, seconds in trace.timings:
                self.metrics.stage(stage, seconds)
        return trace

    async def trace(self, spec: Spec, heads: Iterable[int] | None = None) -> tuple[Trace, bool]:
        """The trace for `spec`, its check against SDPA done for `heads` (every head by default: pages show the
        trace-wide check)."""
        return await self.compute(
            *self.trace_work(spec), then=verified(range(spec.n_heads) if heads is None else heads)
        )

    async def block(self, spec: BlockSpec) -> tuple[BlockTrace, bool]:
        """The block trace for `spec`, its attention's check done for every head."""
        return await self.compute(*self.block_work(spec), then=verified(range(spec.attn.n_heads)))

    @property
    def json_limit(self) -> int:
        return int(self.settings.json_limit_mb * 2**20)


async def get_lab(request: Request) -> Lab:
    """The app's Lab, for `Depends`. A coroutine, so FastAPI calls it on the event loop: a plain function would cost
    every request a trip through the worker threads (FastAPI runs sync dependencies there), and under a burst
    /healthz and a toy request would queue for a thread behind the burst's own trips."""
    return request.app.state.lab
