"""Progress of the computations in flight, for /api/v1/progress: an entry per tracked request while its work runs,
on this worker and (with --redis) in Redis, so whichever worker a page's poll reaches can answer it; and, on the
worker serving it, every page request from its arrival until its answer is sent (`serving`), so a page that polls
for the request it is waiting for is answered (how long it has waited) however the page computes."""

from __future__ import annotations

import functools
import hashlib
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from contextvars import ContextVar
from typing import Any, NamedTuple, TypeVar

import orjson
from redis.exceptions import RedisError

from ..settings import Settings
from .cancel import Progress
from .keys import ProgressKey

T = TypeVar("T")
PROGRESS_TTL_S = 120  # a shared progress entry outlives a crashed worker by at most this
# A page request stays known this long after its answer was sent, as answered: the page's poll that crossed the
# answer on the wire is told "answered" (and stops), never a 404 the browser's console logs as a failure.
ANSWERED_S = 15.0
ANSWERED_MAX = 256  # the answered requests remembered at most (the oldest forgotten first)
# What a computation's (done, total) count, as /api/v1/progress names it (`unit`) and its text writes it: the
# layers of a model (a pass through them; a computation of several passes counts every pass's layers), or the
# tokens a generation has written.
UNITS = ("layers", "tokens")


class Entry(NamedTuple):
    """A request's progress: `done` of `total` `unit` (0 of 0: nothing counted yet: queued, loading, or a page whose
    computation counts nothing), since `start` (a Unix time)."""

    done: int
    total: int
    start: float
    unit: str = "layers"
    answered: bool = False  # a page request whose answer has been sent (`ANSWERED_S` ago at most)


def _progress_name(key: str) -> str:
    return "lab:progress:" + hashlib.sha256(key.encode()).hexdigest()


class _Tracked:
    """One request's progress entry while its computation is asked for: its key (a `ProgressKey`, computed only
    when work starts or a poll looks for it) and when it was asked for."""

    def __init__(self, key: str, start: float, unit: str = "layers") -> None:
        self.key = key
        self.start = start
        self.unit = unit
        self.named = not isinstance(key, ProgressKey)  # its key is known (computed, or given as one)
        self.begun = False  # its work has begun (in a worker thread)

    @property
    def name(self) -> str:
        """The key itself: computed here (in the calling thread) the first time."""
        key = self.key.hex if isinstance(self.key, ProgressKey) else self.key
        self.named = True
        return key


# Where a queue worker's job (app/lab/jobs.py) reports the progress of the computation it runs, which asks for no
# request's key there: into the job's hash in Redis, for the web worker waiting for it.
JOB_PROGRESS: ContextVar[Progress | None] = ContextVar("attention_lab_job_progress", default=None)

# What marks the tracked work of the request being served as begun (set by `Lab.tracking`), for `Lab.offload`.
BEGIN: ContextVar[Callable[[], None] | None] = ContextVar("attention_lab_begin", default=None)


def begun(fn: Callable[..., T], *args: Any) -> Callable[[], T]:
    """`fn(*args)` for a worker thread, first marking the request's tracked work begun there (`Lab.tracking`)."""
    begin = BEGIN.get()
    if begin is None:
        return functools.partial(fn, *args)

    def work() -> T:
        begin()
        return fn(*args)

    return work


class Tracking:
    """The lab's part that reports progress: the entries of the work in flight, and those not begun yet."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        # Long computations in flight, by their request (`progress_key`): (done, total, started, unit) for
        # /api/v1/progress.
        self.progress: dict[str, Entry] = {}
        # Requests tracked whose work has not begun (queued, or waiting for another's): their keys are computed only
        # if a poll asks (`progress_of`), so a request refused or cancelled in the queue never hashes its URL.
        self.pending: set[_Tracked] = set()
        # Page requests answered lately, oldest first (`serving`): a poll that crossed its answer finds it answered.
        self.answered: deque[tuple[float, _Tracked]] = deque(maxlen=ANSWERED_MAX)

    def serving(self, key: str) -> Callable[..., None]:
        """A page request known to a poll while it is served: from now (its arrival, on the event loop: nothing is
        computed, its key is a `ProgressKey`) until the returned `done()` (its answer complete). A page polls for
        every page it waits for (static/lab.js), and most compute nothing that counts: a poll for one of them
        answers how long it has waited (0 of 0), never a 404 the browser logs as an error. This worker's only (a
        poll on another worker, without the computation's shared entry, is a 404). Once answered, the request stays
        known `ANSWERED_S` as answered: a poll sent as the answer arrived is told so, not a 404."""
        tracked = _Tracked(key, time.time())
        self.pending.add(tracked)

        def done(answered: bool = True) -> None:  # answered=False: no answer a page waits for (an event stream)
            if tracked in self.pending:
                self.pending.discard(tracked)
                if not answered:
                    return
                now = time.monotonic()
                while self.answered and now - self.answered[0][0] > ANSWERED_S:
                    self.answered.popleft()
                self.answered.append((now, tracked))

        return done

    @contextmanager
    def tracking(self, key: str | None, unit: str = "layers") -> Iterator[Progress | None]:
        """A progress callback for the computation a request started (None when nobody asked to track it); the
        entry lives while the computation runs, so the table holds only work in flight. With --redis the entry is
        also written there (a short-lived key), so whichever worker a page's poll reaches can answer it.

        Nothing is computed here, on the event loop: a request's key (a `ProgressKey`, milliseconds of pure Python
        for a long URL) is computed when its work begins, in the worker thread `offload` runs it in (the entry is
        then 0 of 0 done: loading a model's weights can take seconds), or by the callback's first call. Until then
        the request is pending (queued): a poll on this worker that asks for its key finds it, 0 of 0 done; a poll
        on another worker (--redis) once its work has begun. `unit`: what the computation's (done, total) count
        (`UNITS`)."""
        if unit not in UNITS:
            raise ValueError(f"unit: one of {UNITS}, not {unit!r}")
        if key is None:
            yield JOB_PROGRESS.get()
            return
        tracked = _Tracked(key, time.time(), unit)
        shared = self._shared_progress

        def update(done: int, total: int) -> None:
            name = tracked.name
            entry = self.progress[name] = Entry(done, total, tracked.start, unit)
            if shared is not None:  # progress is a courtesy: a Redis hiccup never fails the computation
                with suppress(RedisError):
                    shared.set(_progress_name(name), orjson.dumps([*entry]), ex=PROGRESS_TTL_S)

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
                if shared is not None:  # every worker says "answered" a while, as this one does (`serving`): a
                    with suppress(RedisError):  # poll reaching another worker as the answer leaves is no 404
                        entry = Entry(0, 0, tracked.start, unit, answered=True)
                        shared.set(_progress_name(name), orjson.dumps([*entry]), ex=int(ANSWERED_S))

    def progress_of(self, key: str) -> Entry | None:
        """This worker's entry for `key` (a request whose work has not begun, or a page served that counts nothing:
        0 of 0), else the shared one (--redis). Called off the event loop: it may compute the keys of pending
        requests."""
        entry = self.progress.get(key)
        if entry is None:
            for tracked in self.pending.copy():  # the event loop adds and removes them meanwhile
                if tracked.name == key:
                    entry = self.progress.get(key) or Entry(0, 0, tracked.start, tracked.unit)
                    break
        if entry is None:
            now = time.monotonic()
            for when, tracked in list(self.answered):  # newest last; the event loop appends meanwhile
                if now - when <= ANSWERED_S and tracked.name == key:
                    entry = Entry(0, 0, tracked.start, tracked.unit, answered=True)
        shared = self._shared_progress
        if entry is not None or shared is None:
            return entry
        try:
            raw = shared.get(_progress_name(key))
        except RedisError:
            return None
        return None if raw is None else Entry(*orjson.loads(raw))  # as `tracking` wrote it: the Entry, a JSON list

    @functools.cached_property
    def _shared_progress(self) -> Any:
        """A plain (blocking) Redis client for the progress entries every worker shares (--redis), made on first use;
        None without --redis."""
        if not self.settings.redis_url:
            return None
        import redis

        return redis.Redis.from_url(self.settings.redis_url, socket_timeout=2, socket_connect_timeout=2)
