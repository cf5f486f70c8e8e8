"""One follower's server-sent event stream of a room: what it missed (or the room's current view), then every
change as it happens, a comment every few seconds to keep proxies open, and the end. Framed by sse-starlette
(app/web/sse.py), as the training stream is.

The stream listens to the process's hub before it reads the snapshot, so no change falls in between; an event it
has already sent (its id at or below the last one) is skipped. A store that fails mid-stream ends it with `event:
retry`, so the client reconnects with Last-Event-ID and catches up.

A screen of the lab (its bar, static/room.js) asks for its own language (`render`): on connect, and whenever the
poll it shows changes, it also gets `poll-html`, the bar's poll box rendered for its role and language, which htmx's
SSE extension swaps in (`sse-swap`). The stream knows which poll its screen shows: the one last opened or revealed,
until it is cleared or (revealed) the class moves on to another step. The teacher's remote (`remote`) gets its
results card instead, which keeps a revealed poll whatever the step (and `now`, which loads the controls of the
page the class sees), and a cleared one (marked so) until the next,
unless the server cleared it because the class left the poll's page or stage.

The teacher's streams (no `follower`: its bar, its remote, an API client with its token) also get `followers`, how
many follow (a bare number, which the extension swaps in as it is): on connect, then whenever a follower joins or
leaves on any process (the store delivers the change, store.counted). A reconnect is sent the count as it is, so the
teacher's screens poll nothing."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

import anyio
from redis.exceptions import RedisError

from ..web.sse import ServerSentEvent, event, keepalive
from .fragments import step_of
from .store import RETRY, RETRY_MS, Event, Listener, Poll, Store

LOG = logging.getLogger("attention_lab.rooms")

# The poll box of this stream's screen (app/rooms/fragments.py), or the remote's results card: (poll, cleared)
Render = Callable[[Poll | None, bool], Awaitable[str]]


def sse(change: Event, with_id: bool = True) -> ServerSentEvent:
    """A change as its event: a state event's data gains the version (its id)."""
    data = change.data | {"version": change.id} if change.kind == "state" else change.data
    return event(change.kind, data, change.id if with_id else None)


def counted(n: int) -> ServerSentEvent:
    """How many follow, for the teacher's screens: a bare number (htmx swaps it in as it is), without an id."""
    return event("followers", str(n))


def retry_event(retry_ms: int) -> ServerSentEvent:
    """`event: retry` (no id: the client's Last-Event-ID stays its last event), with the reconnect delay."""
    out = sse(RETRY, with_id=False)
    out.retry = retry_ms
    return out


@dataclass
class Follow:
    """A stream of room `code` (at `version` when the client connected) from `store` for one client: a counted
    `follower` (None for the teacher's own page, which listens for polls but follows no one), after version
    `after` if it reconnects; `render` when the client is a screen of the lab that swaps its poll box in (`remote`:
    the teacher's remote's results card)."""

    store: Store
    code: str
    version: int
    follower: str | None
    after: int | None
    keepalive: float
    render: Render | None = None
    remote: bool = False
    now: Callable[[str, str], str] | None = None  # the remote's: a view as the element that loads its controls
    retry_ms: int = field(default_factory=lambda: random.randint(*RETRY_MS))
    sent: int = 0  # the last version this stream sent
    step: str = ""  # the class's step (app/rooms/fragments.py step_of)
    shown: str | None = None  # the poll the screen shows, the step it was asked on, whether it is still open
    shown_step: str = ""
    shown_open: bool = False
    shown_cleared: bool = False  # the remote's: cleared off the class's screens, kept on the remote
    dirty: bool = True  # the screen's poll box is not the one shown: render it
    clock: Callable[[], float] = field(default_factory=lambda: time.monotonic)  # when the heartbeats are due
    beaten: float = 0.0  # the follower's last heartbeat (the events route counted it just before the stream)

    async def unfollow(self) -> None:
        """Stop counting the follower (idempotent: also run when the stream never started)."""
        if self.follower:
            with anyio.CancelScope(shield=True), contextlib.suppress(Exception):  # Redis may be the reason
                await self.store.unfollow(self.code, self.follower)

    async def heartbeat(self, due: bool = False) -> None:
        """Keep the follower counted (FOLLOWER_TTL_S): once every `keepalive` seconds, whether the room is quiet
        (`due`) or busy. Only on quiet ones, a teacher stepping faster than that left every phone uncounted. The
        teacher's quiet stream counts instead: followers a gone process left behind are dropped, and announced."""
        if self.follower is None and due:
            await self.store.followers(self.code)
        elif self.follower and (due or self.clock() - self.beaten >= self.keepalive):
            self.beaten = self.clock()
            await self.store.follow(self.code, self.follower)

    async def stream(self) -> AsyncIterator[ServerSentEvent]:
        self.beaten = self.clock()
        # Listening before the snapshot: nothing falls in between.
        with self.store.hub.listen(self.code, counts=self.follower is None) as listener:
            try:
                yield ServerSentEvent(comment=f"following room {self.code}", retry=self.retry_ms, sep="\n")
                async for out in self.catch_up():
                    yield out
                if self.sent >= 0:
                    async for out in self.live(listener):
                        yield out
            except (RedisError, OSError) as exc:  # the store went away: say so and end; the client reconnects
                LOG.info("rooms: a stream of %s ends: the store failed (%s)", self.code, type(exc).__name__)
                yield retry_event(self.retry_ms)
            finally:
                await self.unfollow()

    def track(self, change: Event) -> None:
        """Which poll the screen shows after `change`."""
        if change.kind == "state":
            self.step = step_of(change.data["page"], change.data["query"])
            if self.shown and not self.shown_open and self.step != self.shown_step and not self.remote:
                self.shown, self.dirty = None, True  # a revealed poll stays with its step
        elif change.kind == "poll":
            if change.data["status"] != "cleared":
                self.shown, self.shown_step = change.data["id"], self.step
                self.shown_open, self.shown_cleared, self.dirty = change.data["status"] == "open", False, True
            elif self.shown == change.data["id"]:
                if self.remote and change.data.get("reason") not in ("page", "stage"):
                    self.shown_cleared, self.dirty = True, True
                else:
                    self.shown, self.dirty = None, True

    def loads(self, change: Event) -> list[ServerSentEvent]:
        """`now` after a state event, for the teacher's remote: what loads the page's controls (its `sse-swap`)."""
        if self.now is None or change.kind != "state":
            return []
        return [event("now", self.now(change.data["page"], change.data["query"]), None)]

    async def rendered(self) -> AsyncIterator[ServerSentEvent]:
        if self.render is not None and self.dirty:
            self.dirty = False
            poll = await self.store.poll(self.code, self.shown) if self.shown else None
            yield event("poll-html", await self.render(poll, self.shown_cleared))

    async def catch_up(self) -> AsyncIterator[ServerSentEvent]:
        """What a reconnecting client missed; else (a first connection, one that missed more than the log holds,
        or a version the room never had) the room's view and its open poll. `sent` becomes -1 when the room is
        gone: the stream then ends."""
        missed = await self.store.events_after(self.code, self.after) if self.after is not None else None
        if missed is not None:
            for old in missed:
                yield sse(old)
                self.track(old)
                self.sent = old.id
            self.sent = max(self.sent, self.after or 0)
        else:
            current = await self.store.get(self.code)
            if current is None:
                yield sse(Event(self.version + 1, "end", {}))
                self.sent = -1
                return
            view = Event(current.version, "state", {"page": current.page, "query": current.query})
            yield sse(view)
            for out in self.loads(view):
                yield out
            self.track(view)
            self.sent = current.version
            if current.poll and (poll := await self.store.poll(self.code, current.poll)) is not None:
                opened = Event(current.version, "poll", poll.public())
                yield sse(opened, with_id=False)
                self.track(opened)
        async for out in self.rendered():
            yield out
        if self.follower is None:
            yield counted(await self.store.followers(self.code))

    async def live(self, listener: Listener) -> AsyncIterator[ServerSentEvent]:
        """Every change after `sent`, until the room ends, the hub closes or the store asks the client to retry."""
        while True:
            try:
                change = await asyncio.wait_for(listener.queue.get(), self.keepalive)
            except TimeoutError:
                yield keepalive()
                await self.heartbeat(due=True)
                continue
            await self.heartbeat()  # a busy room's followers stay counted too
            if change is None:
                return
            if change is RETRY:
                yield retry_event(self.retry_ms)
                return
            if change.kind == "followers":  # the teacher's alone (the newest, if several came), never versioned
                yield counted((listener.latest() or change).data["n"])
                continue
            if change.id <= self.sent:
                continue
            yield sse(change)
            for out in self.loads(change):
                yield out
            self.track(change)
            self.sent = change.id
            if change.kind == "end":
                return
            async for out in self.rendered():
                yield out
