"""One follower's server-sent event stream of a room: what it missed (or the room's current view), then every
change as it happens, a comment every few seconds to keep proxies open, and the end.

The stream listens to the process's hub before it reads the snapshot, so no change falls in between; an event it
has already sent (its id at or below the last one) is skipped. A store that fails mid-stream ends it with `event:
retry`, so the client reconnects with Last-Event-ID and catches up."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import anyio
from redis.exceptions import RedisError

from .service import RoomError
from .store import RETRY, RETRY_MS, Event, Store

LOG = logging.getLogger("attention_lab.rooms")


def last_event(header: str | None) -> int | None:
    """The version a reconnecting client saw last (its Last-Event-ID header), or None on a first connection."""
    if header is None:
        return None
    if not (header.isascii() and header.isdigit()):
        raise RoomError(422, "last-event-id", "must be a version number from an earlier event")
    return int(header)


def retry_event(retry_ms: int) -> bytes:
    """`event: retry` (no id: the client's Last-Event-ID stays its last event), with the reconnect delay."""
    return f"retry: {retry_ms}\n".encode() + RETRY.sse(with_id=False)


@dataclass
class Follow:
    """A stream of room `code` (at `version` when the client connected) from `store` for one client: a counted
    `follower` (None for the teacher's own page, which listens for polls but follows no one), after version
    `after` if it reconnects."""

    store: Store
    code: str
    version: int
    follower: str | None
    after: int | None
    keepalive: float
    retry_ms: int = field(default_factory=lambda: random.randint(*RETRY_MS))
    sent: int = 0  # the last version this stream sent

    async def unfollow(self) -> None:
        """Stop counting the follower (idempotent: also run when the stream never started)."""
        if self.follower:
            with anyio.CancelScope(shield=True), contextlib.suppress(Exception):  # Redis may be the reason
                await self.store.unfollow(self.code, self.follower)

    async def stream(self) -> AsyncIterator[bytes]:
        with self.store.hub.listen(self.code) as queue:  # listening before the snapshot: nothing falls in between
            try:
                yield f"retry: {self.retry_ms}\n: following room {self.code}\n\n".encode()
                async for chunk in self.catch_up():
                    yield chunk
                if self.sent >= 0:
                    async for chunk in self.live(queue):
                        yield chunk
            except (RedisError, OSError) as exc:  # the store went away: say so and end; the client reconnects
                LOG.info("rooms: a stream of %s ends: the store failed (%s)", self.code, type(exc).__name__)
                yield retry_event(self.retry_ms)
            finally:
                await self.unfollow()

    async def catch_up(self) -> AsyncIterator[bytes]:
        """What a reconnecting client missed; else (a first connection, one that missed more than the log holds,
        or a version the room never had) the room's view and its open poll. `sent` becomes -1 when the room is
        gone: the stream then ends."""
        missed = await self.store.events_after(self.code, self.after) if self.after is not None else None
        if missed is not None:
            for old in missed:
                yield old.sse()
                self.sent = old.id
            self.sent = max(self.sent, self.after or 0)
            return
        current = await self.store.get(self.code)
        if current is None:
            yield Event(self.version + 1, "end", {}).sse()
            self.sent = -1
            return
        yield Event(current.version, "state", {"page": current.page, "query": current.query}).sse()
        self.sent = current.version
        if current.poll and (poll := await self.store.poll(self.code, current.poll)) is not None:
            yield Event(current.version, "poll", poll.public()).sse(with_id=False)

    async def live(self, queue: asyncio.Queue[Event | None]) -> AsyncIterator[bytes]:
        """Every change after `sent`, until the room ends, the hub closes or the store asks the client to retry."""
        while True:
            try:
                event = await asyncio.wait_for(queue.get(), self.keepalive)
            except TimeoutError:
                yield b": keep-alive\n\n"
                if self.follower:
                    await self.store.follow(self.code, self.follower)  # the heartbeat that keeps it counted
                continue
            if event is None:
                return
            if event is RETRY:
                yield retry_event(self.retry_ms)
                return
            if event.id <= self.sent:
                continue
            yield event.sse()
            self.sent = event.id
            if event.kind == "end":
                return
