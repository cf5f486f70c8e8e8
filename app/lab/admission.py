"""Admission: which work waits for one of the few large-work slots, how long, and which is refused (503 with
Retry-After) — heavy routes take their place in the queue before they tokenise their text (`HeavyWork`, `admit`)."""

from __future__ import annotations

import asyncio
import functools
import hashlib
import secrets
import time
from collections.abc import Awaitable, Callable
from contextlib import suppress
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, TypeVar

import anyio
from anyio.lowlevel import RunVar
from redis.exceptions import RedisError
from starlette.types import ASGIApp, Receive, Scope, Send

from engine.budget import Busy, MemoryBudget

from ..settings import Settings
from .cancel import Cancelled, Watch
from .jobs import LoopRedis
from .progress import begun

if TYPE_CHECKING:
    from engine.models import Model

T = TypeVar("T")
# A refused heavy request's answer: (scope, receive, send, the cap).
Refuse = Callable[[Scope, Receive, Send, int], Awaitable[None]]


class QueuePlace:
    """A heavy request's place in the queue for a large-work slot, taken (`Lab.admit`) before the request's costly
    preparation — tokenising its text — so that a full queue refuses it at once, having spent nothing. The place
    counts as waiting (`Lab.large_waiting`) until the request's heavy work takes a slot (`Lab.offload`), or the
    request ends (`HeavyWork`)."""

    def __init__(self) -> None:
        self.lab: Admission | None = None  # the lab whose queue it holds a place in, while it holds one
        self.taken = False  # a place was taken (one per request: its later heavy steps queue as any work does)

    def release(self) -> None:
        lab, self.lab = self.lab, None
        if lab is not None:
            lab.large_waiting -= 1


# The queue place of the heavy request being served (set by `HeavyWork`); None for every other request.
HEAVY: ContextVar[QueuePlace | None] = ContextVar("attention_lab_heavy", default=None)


# ARGV: the client's key, the URL's ('': not a GET), the cap (0: none), this request's token, TTL seconds. 1: counted
# against the client, 0: free (no cap, or the URL is in flight already), -1: refused (the client holds the cap).
SHARE = """
local t = now()
local ck, uk, cap, token, ttl = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4], tonumber(ARGV[5])
local free = false
if uk ~= '' then
  redis.call('ZREMRANGEBYSCORE', uk, '-inf', t)
  free = redis.call('ZCARD', uk) > 0
end
local counted = cap > 0 and not free
if counted then
  redis.call('ZREMRANGEBYSCORE', ck, '-inf', t)
  if redis.call('ZCARD', ck) >= cap then return -1 end
  redis.call('ZADD', ck, t + ttl, token)
  redis.call('EXPIRE', ck, math.ceil(ttl))
end
if uk ~= '' then
  redis.call('ZADD', uk, t + ttl, token)
  redis.call('EXPIRE', uk, math.ceil(ttl))
end
if counted then return 1 end
return 0
"""


class SharedShares:
    """MAX_HEAVY_PER_CLIENT counted in Redis (--redis), so that it holds across every web worker and machine: each
    heavy request in flight is a member of its client's sorted set (and, a GET, of its URL's), scored by when it
    lapses (TTL_S: a web worker that dies mid-request holds its share no longer than that), taken and checked by one
    Lua script."""

    PREFIX = "lab:heavy:"
    TTL_S = 900  # longer than any heavy request is served (QUEUE_WAIT_S queued, then its computation)

    def __init__(self, client: LoopRedis) -> None:
        self.client = client
        client.add("share", SHARE)

    def keys(self, address: str, url: bytes | None) -> tuple[str, str]:
        u = "" if url is None else self.PREFIX + "url:" + hashlib.sha256(url).hexdigest()[:32]
        return self.PREFIX + "client:" + address, u

    async def take(self, address: str, url: bytes | None, cap: int) -> tuple[int, str]:
        """(1 counted, 0 free, -1 refused; the request's token)."""
        token = secrets.token_hex(8)
        ck, uk = self.keys(address, url)
        got = int(await self.client.script("share")(args=[ck, uk, cap, token, self.TTL_S]))
        return got, token

    async def give_back(self, address: str, url: bytes | None, token: str) -> None:
        ck, uk = self.keys(address, url)
        async with self.client().pipeline(transaction=False) as p:
            p.zrem(ck, token)
            if uk:
                p.zrem(uk, token)
            await p.execute()


class HeavyWork:
    """The requests for heavy work, by their path (`paths`: generation, the model view, the predictions: work that
    always takes a large-work slot): `serve` marks each, so that the lab takes its place in the queue before it
    tokenises its text (`Lab.off_loop`), and its work takes a slot whatever its size (`Lab.offload`); and gives the
    place back when the request ends, if its work never took a slot. No layer of its own: the page kernel's
    (app/web/page.py `Kernel`) calls it, after the response cache, so a cached answer never queues.

    One client address holds at most `per_client` heavy requests at once (0: no cap), so that one address cannot
    hold every large-work slot; a GET of a URL already being computed (for anyone) is free, since it waits for that
    computation rather than starting one: a class on one NAT address following its teacher (each screen in its own
    language, the projector in presenter mode: `shared_key`). With --redis counted in Redis (`shared`: given, or the
    app's lab's when it has jobs), across every web worker; in this process otherwise, or while Redis does not
    answer."""

    def __init__(self, paths: frozenset[str], per_client: int = 0, shared: SharedShares | None = None) -> None:
        self.paths = paths
        self.per_client = per_client
        self.shared = shared
        self._looked = shared is not None
        self.running: dict[str, int] = {}  # address -> heavy requests in flight that count against it
        self.urls: dict[bytes, int] = {}  # the GET URLs (path?query) of heavy requests in flight

    def _shares(self, scope: Scope) -> SharedShares | None:
        if not self._looked:
            self._looked = True
            app = scope.get("app")
            jobs = getattr(getattr(getattr(app, "state", None), "lab", None), "jobs", None)
            if jobs is not None:
                self.shared = SharedShares(jobs.client)
        return self.shared

    async def serve(self, app: ASGIApp, scope: Scope, receive: Receive, send: Send, refuse: Refuse) -> None:
        """`app` serves the heavy request within its client's share, or `refuse(scope, receive, send, per_client)` answers."""
        address = (scope.get("client") or ("?",))[0]
        url = shared_key(scope["path"], scope.get("query_string", b"")) if scope["method"] == "GET" else None
        shares = self._shares(scope)
        if shares is not None:
            try:
                got, token = await shares.take(address, url, self.per_client)
            except RedisError:
                pass  # counted here meanwhile
            else:
                if got < 0:
                    await refuse(scope, receive, send, self.per_client)
                    return
                try:
                    await _placed(app, scope, receive, send)
                finally:
                    with suppress(RedisError):  # else its share lapses after TTL_S
                        await shares.give_back(address, url, token)
                return
        counted = self.per_client > 0 and not (url is not None and self.urls.get(url))
        if counted and self.running.get(address, 0) >= self.per_client:
            await refuse(scope, receive, send, self.per_client)
            return
        if counted:
            self.running[address] = self.running.get(address, 0) + 1
        if url is not None:
            self.urls[url] = self.urls.get(url, 0) + 1
        try:
            await _placed(app, scope, receive, send)
        finally:
            if url is not None:
                _forget(self.urls, url)
            if counted:
                _forget(self.running, address)


async def _placed(app: ASGIApp, scope: Scope, receive: Receive, send: Send) -> None:
    """The heavy request served with its queue place (`HEAVY`), given back at its end if its work took none."""
    place = QueuePlace()
    token = HEAVY.set(place)
    try:
        await app(scope, receive, send)
    finally:
        HEAVY.reset(token)
        place.release()


# What belongs to one screen, not to the computation: the language it is shown in, presenter mode (as a room's
# view leaves them out). A class's screens open their teacher's view each in its own language, the projector in
# presenter mode: the same computation, so one in flight makes the others free.
SCREEN_PARAMS = frozenset({b"lang", b"present"})


def shared_key(path: str, query: bytes) -> bytes:
    """The GET's key among the heavy URLs in flight: its path and its query without the per-screen parameters, in
    one order."""
    kept = sorted(part for part in query.split(b"&") if part and part.split(b"=", 1)[0] not in SCREEN_PARAMS)
    return path.encode() + b"?" + b"&".join(kept)


def _forget(counts: dict[Any, int], key: Any) -> None:
    counts[key] -= 1
    if not counts[key]:
        del counts[key]


class LoopLimiter:
    """At most `total` worker threads of one kind at once: a CapacityLimiter per event loop (as anyio's own
    default limiter), made on first use in that loop."""

    def __init__(self, name: str, total: int) -> None:
        self.total = total
        self._var: RunVar[anyio.CapacityLimiter] = RunVar(name)

    def __call__(self) -> anyio.CapacityLimiter:
        if (limiter := self._var.get(None)) is None:
            limiter = anyio.CapacityLimiter(self.total)
            self._var.set(limiter)
        return limiter


PREPARING = 4  # requests made into Specs (tokenised) at once, in worker threads (`Lab.off_loop`)
preparing = LoopLimiter("attention_lab_preparing", PREPARING)


class Admission:
    """The lab's part that admits work: the large-work slots in use and the places queued for them."""

    settings: Settings
    budget: MemoryBudget
    models: dict[str, Model]
    stopping: bool

    def __init__(self, settings: Settings) -> None:
        self.large_bytes = int(settings.large_request_mb * 2**20)
        self.large_running = 0
        self.large_waiting = 0
        self._waiters: set[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = set()  # requests waiting for a slot

    async def offload(
        self, cost: int, fn: Callable[..., T], *args: Any, heavy: bool | None = None, watch: Watch | None = None
    ) -> T:
        """Run `fn(*args)` in a worker thread. Large work (estimated over `large_request_mb`) and heavy work (long
        in time whatever its bytes) takes one of a few large-work slots, waiting for it on the event loop rather
        than in a thread, for at most `queue_wait_s`; past a bounded queue it is refused at once (503 with
        Retry-After). So /healthz, /metrics and small requests keep their threads and cores while large ones wait:
        40 generations at once run two at a time, not forty. Heavy is the work of a heavy route (`HeavyWork`:
        generation, the model view, the predictions) unless `heavy` says otherwise (False: a value already cached,
        True: heavy on any route, as a long context's layers). A queued request whose client left (`watch`), or any
        while the server stops, leaves the queue (Cancelled)."""
        work = begun(fn, *args)
        place = HEAVY.get()
        if heavy is None:
            heavy = place is not None
        if cost <= self.large_bytes and not heavy:
            return await anyio.to_thread.run_sync(work)
        retry = self._retry_after()
        if place is not None and place.lab is self:  # its place was taken before it was prepared (`admit`)
            place.lab = None  # now this wait's, counted in large_waiting as it is
        elif self.large_waiting >= self.settings.max_large_queued:
            raise Busy(cost, self.budget.limit, retry)
        else:
            self.large_waiting += 1
        deadline = time.monotonic() + self.settings.queue_wait_s
        woken = asyncio.Event()  # set when a slot is given back, the server stops, or this request's client leaves
        waiter = (asyncio.get_running_loop(), woken)
        self._waiters.add(waiter)
        if watch is not None:
            watch.on_leave = woken.set
        try:  # wait for a slot on the event loop (no thread held), woken rather than polling
            while True:  # checked before the slot is taken too: a slot freed by stopping work is not taken
                woken.clear()
                if self.stopping or (watch is not None and watch.left):
                    raise Cancelled(self.stopping)
                if self.large_running < self.settings.max_large_concurrent:
                    break
                remaining = deadline - time.monotonic()
                if remaining <= 0:  # a wait has a deadline: the client hears 503, not silence
                    raise Busy(cost, self.budget.limit, retry)
                with anyio.move_on_after(remaining):
                    await woken.wait()
            self.large_running += 1
        finally:
            self._waiters.discard(waiter)
            if watch is not None:
                watch.on_leave = None
            self.large_waiting -= 1
        try:
            return await anyio.to_thread.run_sync(work)
        finally:
            self.large_running -= 1
            self.wake()

    def wake(self) -> None:
        """Wake every request waiting for a slot (a slot was given back, or the server stops): each looks again. Safe
        from any thread and from a signal handler (`call_soon_threadsafe`); a lab may serve several event loops."""
        for loop, woken in list(self._waiters):
            with suppress(RuntimeError):  # its loop has closed
                loop.call_soon_threadsafe(woken.set)

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
