"""A trace's stages as NumPy arrays, cut down to the stages and heads a request selected."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import torch

from engine import STAGES
from engine.attention import Trace

# Tensors whose first axis is the head; the others are (N, d) or (N, N) and are returned whole.
PER_HEAD = {"q", "k", "v", "raw", "scaled", "masked", "weights", "heads"}


def to_numpy(t: torch.Tensor) -> np.ndarray:
    if t.dtype != torch.float32:
        t = t.float()  # NumPy has no bfloat16; half values are exact in float32
    return np.ascontiguousarray(t.detach().cpu().numpy())


def stage_arrays(
    trace: Trace, stages: tuple[str, ...], heads: tuple[int, ...], decimals: int | None = None
) -> Iterator[tuple[int, str, dict[str, np.ndarray]]]:
    """(index 1..5, key, {name: array}) for each selected stage, in order."""
    all_heads = heads == tuple(range(trace.spec.n_heads))
    for index, key in enumerate(STAGES, start=1):
        if key not in stages:
            continue
        arrays = {}
        for name, t in trace.stage(key).items():
            if name in PER_HEAD and not all_heads:
                t = t[list(heads)]
            a = to_numpy(t)
            if decimals is not None:
                a = np.round(a, decimals)
            arrays[name] = a
        yield index, key, arrays


def element_count(trace: Trace, stages: tuple[str, ...], heads: tuple[int, ...]) -> int:
    total = 0
    for key in stages:
        for name, t in trace.stage(key).items():
            n = t.numel()
            total += n * len(heads) // trace.spec.n_heads if name in PER_HEAD else n
    return total
