"""A memory budget shared by concurrent computations: each reserves its estimated bytes before it starts.

Several large requests at once never hold more than the budget together: a request that does not fit waits for
others to finish, and after `wait_s` gives up with `Busy`, which the server answers with 503 and Retry-After.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager


class Busy(Exception):
    def __init__(self, needed: int, limit: int, retry_after: int) -> None:
        super().__init__(f"needs {needed} bytes; {limit} are shared and in use")
        self.needed = needed
        self.limit = limit
        self.retry_after = retry_after


class MemoryBudget:
    def __init__(self, limit_bytes: int, wait_s: float = 10.0) -> None:
        self.limit = limit_bytes
        self.wait_s = wait_s
        self.in_use = 0
        self._cond = threading.Condition()

    def hold(self, nbytes: int) -> None:
        """Take `nbytes` for good (a model's weights once loaded): waits for room like `reserve`, never given back.
        The server adds each registered model's bytes to the limit, so the computations keep their own share."""
        deadline = time.monotonic() + self.wait_s
        with self._cond:
            while self.in_use + nbytes > self.limit:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise Busy(nbytes, self.limit, max(1, round(self.wait_s)))
                self._cond.wait(left)
            self.in_use += nbytes

    @contextmanager
    def reserve(self, nbytes: int) -> Iterator[None]:
        """Hold `nbytes` of the budget for the duration of the block (a request larger than the whole budget
        was already refused when it was validated, so it is clamped here rather than waiting forever)."""
        need = min(nbytes, self.limit)
        deadline = time.monotonic() + self.wait_s
        with self._cond:
            while self.in_use + need > self.limit:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise Busy(need, self.limit, max(1, round(self.wait_s)))
                self._cond.wait(left)
            self.in_use += need
        try:
            yield
        finally:
            with self._cond:
                self.in_use -= need
                self._cond.notify_all()
