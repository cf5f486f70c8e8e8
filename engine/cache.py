"""A byte-bounded LRU of traces keyed by their Spec.

Stepping through the five stages of one large trace asks for the same Spec five times; the first request computes,
the rest are served from here. Concurrent requests for a Spec that is still being computed wait for that one
computation instead of starting their own.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future
from typing import Generic, Protocol, TypeVar


class Sized(Protocol):
    @property
    def nbytes(self) -> int: ...


K = TypeVar("K")
V = TypeVar("V", bound=Sized)


class TraceCache(Generic[K, V]):
    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._items: OrderedDict[K, V] = OrderedDict()
        self._pending: dict[K, Future[V]] = {}
        self._bytes = 0
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    @property
    def nbytes(self) -> int:
        return self._bytes

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, key: K) -> bool:
        return key in self._items

    def get_or_compute(self, key: K, compute: Callable[[K], V]) -> tuple[V, bool]:
        """The value for `key` and whether it came from the cache."""
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                self.hits += 1
                return self._items[key], True
            waiting = self._pending.get(key)
            if waiting is None:
                mine: Future[V] = Future()
                self._pending[key] = mine
                self.misses += 1
        if waiting is not None:
            return waiting.result(), True
        try:
            value = compute(key)
        except BaseException as exc:
            with self._lock:
                del self._pending[key]
            mine.set_exception(exc)
            raise
        with self._lock:
            del self._pending[key]
            self._store(key, value)
        mine.set_result(value)
        return value, False

    def get(self, key: K) -> V | None:
        with self._lock:
            value = self._items.get(key)
            if value is not None:
                self._items.move_to_end(key)
                self.hits += 1
            return value

    def put(self, key: K, value: V) -> None:
        """Keep `value` under `key`, unless a value is kept there already or is being computed (`get_or_compute`
        stores its own)."""
        with self._lock:
            if key not in self._items and key not in self._pending:
                self._store(key, value)

    def discard(self, doomed: Callable[[K], bool]) -> int:
        """Drop every kept entry whose key `doomed` accepts (a model no longer served); returns how many."""
        with self._lock:
            gone = [k for k in self._items if doomed(k)]
            for k in gone:
                self._bytes -= self._items.pop(k).nbytes
        return len(gone)

    def _store(self, key: K, value: V) -> None:
        size = value.nbytes
        if size > self.max_bytes:
            return  # larger than the whole cache: serve it, keep nothing
        self._items[key] = value
        self._bytes += size
        while self._bytes > self.max_bytes:
            _, old = self._items.popitem(last=False)
            self._bytes -= old.nbytes
