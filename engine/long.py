"""Long contexts without the N × N stages: a lazy trace of a pretrained model's attention at one layer.

A full trace keeps six (H, N, N) tensors; at 4,096 tokens and 9 heads that is 3.6 GB. A `LongTrace` keeps only
what every stage is computed from — the layer's normalised input x (N, d), q and k after RoPE, v, the mask as
booleans and W_O — and computes a stage's tensor for the rows (and head) asked for, when asked. Softmax rows are
exact: each row's maximum and sum come from the whole row, every key, never from the window's columns.

The numbers are those of the full trace (engine/attention.py) for the same Spec: the same projections, the same
scale, the same mask, the same stable softmax; tests compare them where both fit.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from . import masks
from .attention import Projection, linear, project, softmax_rows
from .device import torch_dtype
from .memo import tensor_bytes
from .sources import Weights, cast
from .spec import OfSpec, Spec

ROW_BLOCK = 256  # rows computed together when a whole matrix is asked for (a heat map)

# Each stage's tensors, in the full trace's order; (H, N, ·) tensors are indexed by head.
STAGE_TENSORS = {
    "projection": ("x", "q", "k", "v", "q_rot", "k_rot"),
    "scores": ("raw", "scaled"),
    "mask": ("mask", "masked"),
    "softmax": ("weights",),
    "weighted_sum": ("heads", "concat", "output"),
}
PER_HEAD = {"q", "k", "v", "q_rot", "k_rot", "raw", "scaled", "masked", "weights", "heads"}


@dataclass(frozen=True)
class LongTrace(OfSpec):
    spec: Spec
    projection: Projection
    allow: torch.Tensor  # (N, N_kv) bool: True where a query may read a key
    weights: Weights
    seconds: float  # time to build it (the lower layers, the projections)
    timings: list[tuple[str, float]] = field(default_factory=list)

    order = tuple(STAGE_TENSORS)

    @property
    def n(self) -> int:
        return self.spec.n_tokens

    @property
    def nbytes(self) -> int:
        return tensor_bytes(self.projection, self.allow) + tensor_bytes(self.weights)

    def stage(self, key: str) -> tuple[str, ...]:
        """The stage's tensor names (KeyError for an unknown stage), as the full trace's `stage(key)` keys."""
        names = STAGE_TENSORS[key]
        return tuple(n for n in names if not n.endswith("_rot") or self.spec.positions == "rope")

    def row_count(self, tensor: str) -> int:
        return int(self.projection.k.shape[1]) if tensor in ("k", "v", "k_rot") else self.n

    def columns(self, tensor: str) -> int:
        p = self.projection
        if tensor in ("raw", "scaled", "mask", "masked", "weights"):
            return int(self.allow.shape[1])
        if tensor in ("x", "concat", "output"):
            return int(p.x.shape[1])
        return int(p.q.shape[2])

    def rows(self, tensor: str, head: int, r0: int, r1: int) -> torch.Tensor:
        """Rows r0..r1 (exclusive) of the tensor, of `head` where it has heads: what the full trace holds there."""
        p, spec = self.projection, self.spec
        if tensor == "x":
            return p.x[r0:r1]
        if tensor in ("q", "k", "v", "q_rot", "k_rot"):
            t = getattr(p, tensor)
            g = head if tensor == "q" or tensor == "q_rot" else head * t.shape[0] // spec.n_heads
            return t[g, r0:r1]
        if tensor == "mask":
            return masks.additive(self.allow[r0:r1])
        if tensor in ("concat", "output"):
            concat = torch.cat([self._heads(h, r0, r1) for h in range(spec.n_heads)], dim=1)
            return concat if tensor == "concat" else linear(concat, self.weights.w_o, self.weights.b_o)
        if tensor == "heads":
            return self._heads(head, r0, r1)
        raw = self._raw(head, r0, r1)
        if tensor == "raw":
            return raw
        scaled = raw / spec.scale_value
        if tensor == "scaled":
            return scaled
        masked = scaled + masks.additive(self.allow[r0:r1], scaled.dtype)
        if tensor == "masked":
            return masked
        if tensor == "weights":
            return softmax_rows(masked)
        raise KeyError(tensor)

    def matrix(self, tensor: str, head: int) -> torch.Tensor:
        """The whole (N, ·) matrix of one head, computed ROW_BLOCK rows at a time (a heat map's input)."""
        n = self.row_count(tensor)
        return torch.cat([self.rows(tensor, head, r, min(n, r + ROW_BLOCK)) for r in range(0, n, ROW_BLOCK)])

    def _raw(self, head: int, r0: int, r1: int) -> torch.Tensor:
        p = self.projection
        key = p.key[head * p.key.shape[0] // self.spec.n_heads]  # query head h reads K/V head h // (H / H_kv)
        return p.query[head, r0:r1] @ key.transpose(0, 1)

    def _heads(self, head: int, r0: int, r1: int) -> torch.Tensor:
        w = self.rows("weights", head, r0, r1)
        v = self.projection.v
        return w @ v[head * v.shape[0] // self.spec.n_heads]


def long_cost(spec: Spec) -> int:
    """Estimated bytes of building a LongTrace: the kept projections and mask, and the largest temporaries of the
    lower layers (a block of scores per head, the feed-forward's three (N, d_ff) activations)."""
    n, d, h = spec.n_tokens, spec.d_model, spec.n_heads
    return 4 * (12 * n * d + 3 * h * 512 * n + 3 * n * 4 * d) + n * n


@torch.inference_mode()
def compute_long(spec: Spec, model: Any, progress: Callable[[int, int], None] | None = None) -> LongTrace:
    """The layer's input through the lower layers (fused attention there: nothing N × N is kept), then its
    projections; the stages are computed later, for the rows asked for."""
    start = time.perf_counter()
    device, dtype = torch.device(spec.device), torch_dtype(spec.dtype)
    x, w = model.attention_input(spec.token_ids, spec.layer, progress)
    x, w = x.to(device, dtype), cast(w, device, dtype)
    hidden = time.perf_counter()
    p = project(x, w, spec)
    allow = masks.for_spec(spec)
    done = time.perf_counter()
    timings = [("lower_layers", hidden - start), ("projection", done - hidden)]
    return LongTrace(spec, p, allow.to(device), w, done - start, timings)
