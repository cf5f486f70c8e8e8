"""A whole pretrained model at a glance: for every layer and head, what its attention does, in four numbers.

Over every query row i of a head's weights A (N × N):
  entropy   the mean row entropy, in nats (0: one key takes everything; ln N: uniform)
  sink      the mean weight on key 0 (real models park much of their attention on the first token)
  previous  the mean weight on key i − 1 (rows from 1): a previous-token head
  self      the mean weight on key i: a head that reads its own token
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import torch

from .attention import Trace
from .spec import Spec

STATS = ("entropy", "sink", "previous", "self")


def head_stats(weights: torch.Tensor) -> list[dict[str, float]]:
    """(H, N, N) weights -> one dict of the four statistics per head."""
    a = weights.double()
    h, n, _ = a.shape
    logs = torch.where(a > 0, a.log(), torch.zeros_like(a))
    entropy = -(a * logs).sum(-1).mean(-1)  # (H,)
    sink = a[:, :, 0].mean(-1)
    diag = torch.diagonal(a, dim1=-2, dim2=-1).mean(-1)
    previous = torch.diagonal(a, offset=-1, dim1=-2, dim2=-1).mean(-1) if n > 1 else torch.zeros(h, dtype=a.dtype)
    return [
        {"entropy": float(entropy[i]), "sink": float(sink[i]), "previous": float(previous[i]), "self": float(diag[i])}
        for i in range(h)
    ]


def model_view(spec: Spec, n_layer: int, trace_of: Callable[[Spec], Trace]) -> dict[str, Any]:
    """Every layer's trace through `trace_of` (the server's cache, so a head opened from the view is already
    computed), summarised per head."""
    stats = []
    for layer in range(n_layer):
        trace = trace_of(replace(spec, layer=layer))
        stats.append(head_stats(trace.softmax.weights))
    return {"tokens": list(spec.tokens), "layers": n_layer, "heads": spec.n_heads, "stats": stats}


def one_pass_stats(
    model: Any, ids: tuple[int, ...], progress: Callable[[int, int], None] | None = None
) -> list[list[dict[str, float]]]:
    """The four statistics of every layer and head in one pass through the model (a causal decoder with
    `hidden(ids, layer, observe)`): each layer's weights are seen a block of query rows at a time and summed, so
    no (H, N, N) tensor is ever kept — the model view of a 4,096-token context costs one forward pass."""
    n, h, n_layer = len(ids), model.info.n_heads, model.info.n_layer
    sums = torch.zeros(n_layer, 4, h, dtype=torch.float64)

    def observe(layer: int, r0: int, w: torch.Tensor) -> None:
        rows = w.shape[1]
        logs = torch.where(w > 0, w.log(), torch.zeros_like(w))
        sums[layer, 0] += -(w * logs).sum(dim=(1, 2), dtype=torch.float64).cpu()
        sums[layer, 1] += w[:, :, 0].sum(dim=1, dtype=torch.float64).cpu()
        i = torch.arange(rows, device=w.device)
        sums[layer, 3] += w[:, i, r0 + i].sum(dim=1, dtype=torch.float64).cpu()
        later = i[r0 + i >= 1]  # rows with a previous token
        if later.numel():
            sums[layer, 2] += w[:, later, r0 + later - 1].sum(dim=1, dtype=torch.float64).cpu()

    with torch.inference_mode():
        model.hidden(ids, n_layer, observe, progress)
    means = sums / torch.tensor([n, n, max(n - 1, 1), n], dtype=torch.float64)[None, :, None]
    return [
        [{name: float(means[layer, k, head]) for k, name in enumerate(STATS)} for head in range(h)]
        for layer in range(n_layer)
    ]


def similar_heads(
    stats: list[list[dict[str, float]]], layer: int, head: int, most: int = 5
) -> list[tuple[int, int, float]]:
    """The heads whose four statistics lie closest to (layer, head)'s (Euclidean distance, entropy divided by its
    largest value so the four weigh alike), nearest first, the head itself left out."""
    top_entropy = max((s["entropy"] for row in stats for s in row), default=1.0) or 1.0

    def vec(s: dict[str, float]) -> list[float]:
        return [s["entropy"] / top_entropy, s["sink"], s["previous"], s["self"]]

    me = vec(stats[layer][head])
    out = [
        (li, hi, sum((a - b) ** 2 for a, b in zip(vec(s), me, strict=True)) ** 0.5)
        for li, row in enumerate(stats)
        for hi, s in enumerate(row)
        if (li, hi) != (layer, head)
    ]
    return sorted(out, key=lambda x: x[2])[:most]
