"""Additive attention masks: M[i, j] is 0 where query i may read key j and −∞ where it may not.

Adding M to the scores before the softmax turns the forbidden weights into exact zeros. A query whose every key is
masked has no defined softmax; the engine gives that row all-zero weights (and so a zero head output), never NaN.
"""

from __future__ import annotations

import torch


def allowed(kind: str, n: int, pad_positions: tuple[int, ...] = (), segment_ids: tuple[int, ...] = ()) -> torch.Tensor:
    """Boolean (N, N): True where query i may attend to key j."""
    if kind == "none":
        return torch.ones(n, n, dtype=torch.bool)
    causal = torch.ones(n, n, dtype=torch.bool).tril()  # the diagonal is kept: a token sees itself
    if kind == "causal":
        return causal
    if kind == "padding":
        keep = torch.ones(n, dtype=torch.bool)
        keep[list(pad_positions)] = False
        return keep.expand(n, n).clone()  # a pad key is never read, by any query
    if kind == "document":
        seg = torch.tensor(segment_ids)
        return causal & (seg[:, None] == seg[None, :])  # own document only, and causally within it
    raise ValueError(f"unknown mask kind {kind!r}")


def additive(allow: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """0 where allowed, −∞ elsewhere: (N, N)."""
    m = torch.zeros(allow.shape, dtype=dtype)
    return m.masked_fill_(~allow, float("-inf"))
