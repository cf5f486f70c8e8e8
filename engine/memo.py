"""Memory that is counted: the bytes a value holds, and a memo bounded by bytes instead of by entries.

`functools.lru_cache(maxsize=8)` over seeded weights holds 8 × 256 MB at d_model 4096, unseen by any budget; these
memos hold at most `max_bytes` whatever the sizes asked for, and a value larger than that is computed every time.
"""

from __future__ import annotations

import functools
import sys
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import fields, is_dataclass
from typing import Any, ParamSpec, TypeVar

import torch

P = ParamSpec("P")
R = TypeVar("R")


def tensors_in(value: Any) -> Iterable[torch.Tensor]:
    """Every tensor a value holds: itself, the fields of a dataclass, the items of a dict, list or tuple."""
    if isinstance(value, torch.Tensor):
        yield value
    elif is_dataclass(value) and not isinstance(value, type):
        for f in fields(value):
            yield from tensors_in(getattr(value, f.name))
    elif isinstance(value, dict):
        for v in value.values():
            yield from tensors_in(v)
    elif isinstance(value, list | tuple):
        for v in value:
            if isinstance(v, torch.Tensor | dict | list | tuple) or is_dataclass(v):
                yield from tensors_in(v)


def tensor_bytes(*values: Any) -> int:
    """Bytes of the distinct storages behind every tensor in `values` (views of one storage count once)."""
    seen: dict[tuple[str, int], int] = {}
    for value in values:
        for t in tensors_in(value):
            storage = t.untyped_storage()
            seen[(str(t.device), storage.data_ptr())] = storage.nbytes()
    return sum(seen.values())


def python_bytes(value: Any, depth: int = 0) -> int:
    """A cheap upper estimate of what nested tuples/lists of numbers and strings hold (request keys)."""
    if isinstance(value, str):
        return sys.getsizeof(value)
    if isinstance(value, list | tuple) and depth < 4:
        return sys.getsizeof(value) + sum(python_bytes(v, depth + 1) for v in value)
    return 32


def bytes_bounded(max_bytes: int) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """An LRU memo holding at most `max_bytes` of tensors (by `tensor_bytes`)."""

    def wrap(fn: Callable[P, R]) -> Callable[P, R]:
        items: OrderedDict[Any, tuple[R, int]] = OrderedDict()
        total = [0]
        lock = threading.Lock()

        @functools.wraps(fn)
        def memo(*args: P.args, **kwargs: P.kwargs) -> R:
            key = (args, tuple(sorted(kwargs.items())))
            with lock:
                hit = items.get(key)
                if hit is not None:
                    items.move_to_end(key)
                    return hit[0]
            value = fn(*args, **kwargs)
            size = tensor_bytes(value)
            if size <= max_bytes:
                with lock:
                    if key not in items:
                        items[key] = (value, size)
                        total[0] += size
                    while total[0] > max_bytes:
                        _, (_, old) = items.popitem(last=False)
                        total[0] -= old
            return value

        def cache_clear() -> None:
            with lock:
                items.clear()
                total[0] = 0

        memo.cache_clear = cache_clear  # type: ignore[attr-defined]
        memo.held_bytes = lambda: total[0]  # type: ignore[attr-defined]
        return memo

    return wrap
