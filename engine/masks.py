"""Additive attention masks: M[i, j] is 0 where query i may read key j and −∞ where it may not.

Adding M to the scores before the softmax turns the forbidden weights into exact zeros. A query whose every key is
masked has no defined softmax; the engine gives that row all-zero weights (and so a zero head output), never NaN.

An attention mask says which keys a query may read. It is not a loss mask, which says which positions' predictions
count in training: an SFT model may attend to its prompt and still not be scored on it.
"""

from __future__ import annotations

import torch

from .device import CPU

KINDS = ("none", "causal", "padding", "document", "sliding_window", "prefix_lm", "custom")


def allowed(
    kind: str,
    n: int,
    pad_positions: tuple[int, ...] = (),
    segment_ids: tuple[int, ...] = (),
    window: int = 0,
    prefix: int = 0,
    custom: tuple[tuple[bool, ...], ...] | None = None,
    n_kv: int | None = None,
) -> torch.Tensor:
    """Boolean (N, N_kv): True where query i may attend to key j."""
    m = n if n_kv is None else n_kv
    if kind == "none":
        return torch.ones(n, m, dtype=torch.bool, device=CPU)
    if kind == "padding":
        keep = torch.ones(m, dtype=torch.bool, device=CPU)
        keep[list(pad_positions)] = False
        return keep.expand(n, m).clone()  # a pad key is never read, by any query
    if kind == "custom":
        assert custom is not None
        return torch.tensor(custom, dtype=torch.bool, device=CPU)
    i = torch.arange(n, device=CPU)[:, None]
    j = torch.arange(m, device=CPU)[None, :]
    causal = j <= i  # the diagonal is kept: a token sees itself
    if kind == "causal":
        return causal
    if kind == "document":
        seg = torch.tensor(segment_ids, device=CPU)
        return causal & (seg[:, None] == seg[None, :])  # own document only, and causally within it
    if kind == "sliding_window":
        return causal & (i - j < window)  # the last `window` tokens, itself included
    if kind == "prefix_lm":
        return causal | (j < prefix)  # the prefix is read in both directions, the rest causally
    raise ValueError(f"unknown mask kind {kind!r}")


def additive(allow: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """0 where allowed, −∞ elsewhere: (N, N_kv)."""
    m = torch.zeros(allow.shape, dtype=dtype, device=allow.device)
    return m.masked_fill_(~allow, float("-inf"))
