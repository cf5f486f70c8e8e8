"""Waiting for a state, not for a time: a test that sleeps "long enough" for a server to start, a task to queue or
an event to arrive is slow on a fast machine and red on a loaded one. These poll for the state itself and, past
their bound, fail saying which state never came (`what`)."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")
# The default bound: a state that comes in a moment on a quiet machine can take tens of seconds on CI's loaded 2-core
# one (a server's keep-alive, a room's event, a worker's step all wait for a core). A state that holds returns at
# once whatever the bound; one that never comes still fails, later.
BOUND_S = 60.0


class NeverHappened(AssertionError):
    """The state waited for did not come within the bound."""


def wait_until(predicate: Callable[[], T], timeout: float = BOUND_S, what: str = "", interval: float = 0.02) -> T:
    """Polls `predicate()` until it returns something true, and returns that; fails past `timeout` seconds naming
    `what` was waited for (and the last value seen)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise NeverHappened(f"not so within {timeout} s: {what or predicate!r} (last seen: {value!r})")
        time.sleep(interval)  # polling: the state is checked again, not assumed


async def until(
    predicate: Callable[[], T | Awaitable[T]], timeout: float = BOUND_S, what: str = "", interval: float = 0.005
) -> T:
    """`wait_until` inside an event loop: yields to the loop's other tasks between polls; `predicate` may be a
    coroutine function (a state read over HTTP or from a store)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if time.monotonic() >= deadline:
            raise NeverHappened(f"not so within {timeout} s: {what or predicate!r} (last seen: {value!r})")
        await asyncio.sleep(interval)  # polling: the other tasks run meanwhile
