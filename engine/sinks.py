"""Attention sinks, dropped: how much of each head's attention lands on the first token, and what the layer's
output becomes without it.

Every query but the first loses key 0; its remaining weights are renormalised to sum to 1 (a row whose every weight
was on key 0 becomes all zero), the heads are recomputed as A′V and the output as Concat(heads′)W_O + b_O. The
difference from the real output, token by token, is what the sink was doing.

The sink share is defined once, here (`sink_share`), and read the same way on every page and in every API answer
(/model, /sinks, /heads): the mean over queries i ≥ 1 of A[i, 0]. Query 0 is left out because under a causal mask
it can only read itself, so it would count 1 for every head, trained or not.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .attention import Trace, linear, per_head


@dataclass(frozen=True)
class SinkDrop:
    share: torch.Tensor  # (H,) `sink_share`: mean weight on key 0 over queries 1…N−1
    weights: torch.Tensor  # (H, N, N_kv) the renormalised weights without key 0
    output: torch.Tensor  # (N, d) the layer's output without the sink
    change: torch.Tensor  # (N,) ‖output′ − output‖₂ per token
    relative: torch.Tensor  # (N,) the same over ‖output‖₂


SINK_FROM = 1  # the first query the sink share counts (query 0 can only read itself under a causal mask)


def sink_share(weights: torch.Tensor) -> torch.Tensor:
    """(H, N, N) softmax weights -> (H,) the sink share, in float64: the mean over queries i ≥ 1 of A[i, 0] (0 for a
    one-token text, which has no such query). Every view that shows a sink share computes it here, or sums the same
    rows block by block (engine/model_view.py, engine/heads.py) and is tested against it."""
    a = weights.double()
    if a.shape[1] <= SINK_FROM:
        return torch.zeros(a.shape[0], dtype=a.dtype, device=a.device)
    return a[:, SINK_FROM:, 0].mean(dim=1)


def drop_sink(trace: Trace) -> SinkDrop:
    a = trace.softmax.weights.double()
    h, n, _ = a.shape
    share = sink_share(a)
    dropped = a.clone()
    dropped[:, 1:, 0] = 0.0
    total = dropped.sum(dim=-1, keepdim=True)
    dropped = dropped / torch.where(total > 0, total, torch.ones_like(total))
    v = per_head(trace.projection.v, h).double()
    w = trace.weights
    w_o, b_o = w.w_o.double(), None if w.b_o is None else w.b_o.double()

    def out(weights: torch.Tensor) -> torch.Tensor:  # both outputs in float64, so only the sink differs
        return linear((weights @ v).transpose(0, 1).reshape(n, -1), w_o, b_o)

    output, real = out(dropped), out(a)
    change = (output - real).norm(dim=-1)
    norm = real.norm(dim=-1)
    return SinkDrop(share, dropped, output, change, change / torch.where(norm > 0, norm, torch.ones_like(norm)))
