"""A trace's stages as NumPy arrays, cut down to the stages and heads a request selected."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Protocol

import numpy as np
import torch


class Traced(Protocol):
    """A Trace or a BlockTrace: ordered stages of named tensors."""

    @property
    def order(self) -> tuple[str, ...]: ...
    @property
    def n_heads(self) -> int: ...
    @property
    def tokens(self) -> tuple[str, ...]: ...
    def stage(self, key: str) -> dict[str, torch.Tensor]: ...
    def summary(self) -> dict[str, object]: ...
    def check_values(self) -> dict[str, object]: ...
    def verify(self, heads: Iterable[int]) -> object: ...


# Tensors whose first axis is the head; the others are (N, d) or (N, N) and are returned whole.
PER_HEAD = {"q", "k", "v", "q_rot", "k_rot", "raw", "scaled", "masked", "weights", "heads"}
# Under GQA these have n_kv_heads heads: a selection of query heads keeps the K/V heads they read.
KV_HEAD = {"k", "v", "k_rot"}


def kept_heads(trace: Traced, name: str, t: torch.Tensor, heads: tuple[int, ...]) -> list[int]:
    """The entries of the per-head tensor `t`'s first axis that a selection of query `heads` keeps: those heads, or
    under GQA (a K/V tensor with fewer heads) the K/V heads they read."""
    if name in KV_HEAD and t.shape[0] != trace.n_heads:
        group = trace.n_heads // t.shape[0]
        return sorted({h // group for h in heads})
    return list(heads)


def to_numpy(t: torch.Tensor, decimals: int | None = None) -> np.ndarray:
    """`t` as a float32 array, rounded to `decimals` when given."""
    if t.dtype != torch.float32:
        t = t.float()  # NumPy has no bfloat16; half values are exact in float32
    a = np.ascontiguousarray(t.detach().cpu().numpy())
    return a if decimals is None else a.round(decimals)


def pick(t: torch.Tensor, heads: list[int]) -> torch.Tensor:
    """The given heads (first axis) of `t`: a view when they are consecutive and in order (one head of a large
    trace is then serialised straight from the trace, not copied first), else a copy in the order asked."""
    if heads and heads == list(range(heads[0], heads[0] + len(heads))):
        return t[heads[0] : heads[0] + len(heads)]
    return t[heads]


def stage_arrays(
    trace: Traced, stages: tuple[str, ...], heads: tuple[int, ...], decimals: int | None = None
) -> Iterator[tuple[int, str, dict[str, np.ndarray]]]:
    """(index from 1, key, {name: array}) for each selected stage, in the trace's order."""
    all_heads = heads == tuple(range(trace.n_heads))
    for index, key in enumerate(trace.order, start=1):
        if key not in stages:
            continue
        arrays = {}
        for name, t in trace.stage(key).items():
            if name in PER_HEAD and not all_heads:
                t = pick(t, kept_heads(trace, name, t, heads))
            arrays[name] = to_numpy(t, decimals)
        yield index, key, arrays


def element_count(trace: Traced, stages: tuple[str, ...], heads: tuple[int, ...]) -> int:
    total = 0
    for key in stages:
        for name, t in trace.stage(key).items():
            n = t.numel()
            if name in PER_HEAD:
                n = n * len(kept_heads(trace, name, t, heads)) // t.shape[0]
            total += n
    return total
