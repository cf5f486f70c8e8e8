"""A memory budget shared by concurrent computations: each reserves its estimated bytes before it starts.

Several large requests at once never hold more than the budget together: a request that does not fit waits for
others to finish, and after `wait_s` gives up with `Busy`, which the server answers with 503 and Retry-After.

A wait can also give up early: `cancelled` (given to the budget, for every wait, or to one `reserve`/`hold`) is
asked each time the wait wakes, at least every `WAKE_S`, and answers None to keep waiting or the caller's own
exception (a stopping server's, a departed client's), which is raised instead of taking the bytes. So a server
that stops, or a request nobody waits for any more, does not sit in the queue until `wait_s` is spent.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

# Asked by a waiting `reserve`/`hold` each time it wakes: None to keep waiting, else the exception to raise. It is
# called with the budget's lock held: it must be quick, and must not use the budget itself.
GiveUp = Callable[[], BaseException | None]

WAKE_S = 0.1  # a wait with a `cancelled` check wakes at least this often to ask it


class Busy(Exception):
    def __init__(self, needed: int, limit: int, retry_after: int) -> None:
        super().__init__(f"needs {needed} bytes; {limit} are shared and in use")
        self.needed = needed
        self.limit = limit
        self.retry_after = retry_after


class MemoryBudget:
    def __init__(self, limit_bytes: int, wait_s: float = 10.0, cancelled: GiveUp | None = None) -> None:
        self.limit = limit_bytes
        self.wait_s = wait_s
        self.cancelled = cancelled  # every wait's check, unless a call gives its own
        self.in_use = 0  # computations' bytes and the models' weights held
        self.share = 0  # of the limit, kept for the models' weights (whether loaded yet or not)
        self.held = 0  # of in_use, the weights loaded: taken for good
        self.waiting = 0  # calls waiting for room now
        self._cond = threading.Condition()

    def keep_for_model(self, nbytes: int) -> None:
        """Add a registered model's bytes to the limit and keep them for its weights: the computations keep their
        own share, and a model that loads while a computation holds all of it (its first use) never waits."""
        with self._cond:
            self.limit += nbytes
            self.share += nbytes

    def release_model(self, nbytes: int, loaded: bool) -> None:
        """A model no longer served: its kept share (and its weights' bytes, when they were loaded) given back."""
        with self._cond:
            self.limit -= nbytes
            self.share -= nbytes
            if loaded:
                self.held -= nbytes
                self.in_use -= nbytes
            self._cond.notify_all()

    def hold(self, nbytes: int, cancelled: GiveUp | None = None) -> None:
        """Take `nbytes` for good (a model's weights once loaded), never given back: from the share kept for the
        models at once; past it (a model the server did not keep room for), waiting for room like `reserve`."""
        with self._cond:
            if self.held + nbytes <= self.share:
                self.held += nbytes
                self.in_use += nbytes
                return
        self._take(nbytes, cancelled, self.limit - self.held)  # every byte in use counts
        with self._cond:
            self.held += nbytes

    def _fits(self, nbytes: int, room: int) -> bool:
        """The computations' bytes (what is not weights held) plus `nbytes` within `room`."""
        return self.in_use - self.held + nbytes <= room

    @contextmanager
    def reserve(self, nbytes: int, cancelled: GiveUp | None = None) -> Iterator[None]:
        """Hold `nbytes` of the budget for the duration of the block (a request larger than the whole budget
        was already refused when it was validated, so it is clamped here rather than waiting forever: to what the
        weights held for good leave free, which it can have once nothing else runs)."""
        need = min(nbytes, self.room())
        self._take(need, cancelled, self.room())
        try:
            yield
        finally:
            with self._cond:
                self.in_use -= need
                self._cond.notify_all()

    def room(self) -> int:
        """What the computations together may hold: the limit less what is kept for the models' weights."""
        return max(0, self.limit - max(self.share, self.held))

    def _take(self, nbytes: int, cancelled: GiveUp | None, room: int) -> None:
        """Add `nbytes` to `in_use` once they fit; past `wait_s` raise Busy, and raise `cancelled`'s exception as
        soon as it gives one (checked before the freed room is taken too: a stopping server starts nothing)."""
        check = cancelled or self.cancelled
        deadline = time.monotonic() + self.wait_s
        with self._cond:
            if self._fits(nbytes, room):  # room at once: no wait, nothing to give up
                self.in_use += nbytes
                return
            self.waiting += 1
            try:
                while True:
                    if check is not None and (error := check()) is not None:
                        raise error
                    if self._fits(nbytes, room):
                        break
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise Busy(nbytes, self.limit, max(1, round(self.wait_s)))
                    self._cond.wait(left if check is None else min(left, WAKE_S))
            finally:
                self.waiting -= 1
            self.in_use += nbytes
