"""Abandoned work stops: who still waits for each computation (`Watch`, `Interest`), the request's `receive` that lets a
computation see its client leave (`CLIENT`), and the progress callback that then raises `Cancelled` in the
worker thread, at the computation's next step."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Hashable
from contextlib import asynccontextmanager
from contextvars import ContextVar
from dataclasses import dataclass

from starlette.types import Receive

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
        self.on_leave: Callable[[], None] | None = None  # what its client leaving wakes (a wait for a slot)
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
        if cancel and self.on_leave is not None:
            self.on_leave()


# The ASGI receive of the request being served (set by app/limits.py `Edge`), so a computation can notice its client leave.
CLIENT: ContextVar[Receive | None] = ContextVar("attention_lab_client", default=None)


async def _gone(receive: Receive) -> None:
    """Returns once the client has disconnected (a server answers `receive` with http.disconnect then)."""
    while (await receive())["type"] != "http.disconnect":
        await asyncio.sleep(0.05)  # the request's own (empty or already read) body: the next receive waits


class Cancelling:
    """The lab's part that cancels: the interest in each computation in flight, and whether the server stops."""

    def __init__(self) -> None:
        # Who waits for each computation in flight (`watching`), and whether the server is stopping (`stop`): both
        # make the computation's progress callback raise Cancelled, so abandoned work ends at its next step.
        self.interest: dict[Hashable, Interest] = {}
        self.stopping = False

    def stop(self) -> None:
        """The server is stopping (SIGTERM, or the app's shutdown): work in flight ends at its next progress report
        and queued work leaves the queue, so a backlog does not hold the process past its graceful-shutdown time."""
        self.stopping = True

    @asynccontextmanager
    async def watching(self, key: Hashable | None = None) -> AsyncIterator[Watch]:
        """This request's wait for the computation cached under `key` (None: one nobody shares), while its client
        is watched for leaving (`CLIENT`, set by app/limits.py `Edge`; without one, as from the CLI, only `stop` cancels).
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
