"""A server-sent-events client for the room tests and the rooms benchmark: real HTTP streams over loopback."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Coroutine
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

import httpx
import orjson

T = TypeVar("T")


@dataclass
class Message:
    event: str
    data: Any
    id: str | None
    at: float = field(default_factory=time.perf_counter)


class Stream:
    """One open event stream; `next()` returns the next event (comments and `retry:` lines are skipped)."""

    def __init__(self, response: httpx.Response) -> None:
        self.response = response
        self.lines = response.aiter_lines()
        self.last_id: str | None = None

    async def next(self) -> Message:
        event, data, ident = "message", [], None
        async for line in self.lines:
            if line == "":
                if data:
                    message = Message(event, orjson.loads("\n".join(data)), ident)
                    if ident is not None:
                        self.last_id = ident
                    return message
                event, data, ident = "message", [], None
                continue
            if line.startswith(":"):
                continue
            name, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if name == "event":
                event = value
            elif name == "data":
                data.append(value)
            elif name == "id":
                ident = value
        raise EOFError("the stream ended")


@asynccontextmanager
async def stream(client: httpx.AsyncClient, base: str, code: str, last_id: str | None = None) -> AsyncIterator[Stream]:
    headers = {"Accept": "text/event-stream"} | ({"Last-Event-ID": last_id} if last_id is not None else {})
    async with client.stream("GET", f"{base}/api/v1/rooms/{code}/events", headers=headers) as response:
        if response.status_code != 200:
            await response.aread()
            raise AssertionError(f"events: {response.status_code} {response.text[:300]}")
        assert response.headers["content-type"].startswith("text/event-stream")
        yield Stream(response)


def run(coro: Coroutine[Any, Any, T]) -> T:
    """asyncio.run in a thread of its own: Playwright's sync API (the browser tests, in the same session) keeps an
    event loop running in the main thread, where asyncio.run refuses to start."""
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coro).result()
