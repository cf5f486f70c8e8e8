"""A whole pretrained model at a glance: for every layer and head, what its attention does, in four numbers.

Over every query row i of a head's weights A (N × N):
  entropy   the mean row entropy, in nats (0: one key takes everything; ln N: uniform)
  sink      the mean weight on key 0 over rows from 1 (engine/sinks.py `sink_share`, as /sinks and /heads count it:
            row 0 can only read key 0 in a decoder): real models park much of their attention on the first token
  previous  the mean weight on key i − 1 (rows from 1): a previous-token head
  self      the mean weight on key i: a head that reads its own token
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import torch

from .attention import Trace, fused_causal
from .predict import NONE, Intervention, ablated
from .sinks import SINK_FROM, sink_share
from .spec import Spec

STATS = ("entropy", "sink", "previous", "self")


def head_stats(weights: torch.Tensor) -> list[dict[str, float]]:
    """(H, N, N) weights -> one dict of the four statistics per head."""
    a = weights.double()
    h, n, _ = a.shape
    logs = torch.where(a > 0, a.log(), torch.zeros_like(a))
    entropy = -(a * logs).sum(-1).mean(-1)  # (H,)
    sink = sink_share(a)
    diag = torch.diagonal(a, dim1=-2, dim2=-1).mean(-1)
    previous = torch.diagonal(a, offset=-1, dim1=-2, dim2=-1).mean(-1) if n > 1 else torch.zeros(h, dtype=a.dtype)
    return [
        {"entropy": float(entropy[i]), "sink": float(sink[i]), "previous": float(previous[i]), "self": float(diag[i])}
        for i in range(h)
    ]


def traced_stats(spec: Spec, n_layer: int, trace_of: Callable[[Spec], Trace]) -> list[list[dict[str, float]]]:
    """The four statistics of every layer and head from each layer's trace through `trace_of` (the server's cache,
    so a head opened from the view is already computed): [layer][head], as `one_pass_stats` gives them."""
    return [head_stats(trace_of(replace(spec, layer=layer)).softmax.weights) for layer in range(n_layer)]


@torch.inference_mode()
def one_pass_stats(
    model: Any,
    ids: tuple[int, ...],
    progress: Callable[[int, int], None] | None = None,
    iv: Intervention = NONE,
) -> list[list[dict[str, float]]]:
    """The four statistics of every layer and head in one pass through a causal decoder, no (H, N, N) tensor ever
    kept: the model view of a 4,096-token context costs about one forward pass. On the CPU in float32 (no sliding
    window) each layer's statistics come from the fused kernel's per-row log-sum-exp (`lse_stats`); elsewhere its
    weights are seen a block of query rows at a time and summed. `iv.ablate` knocks heads out of the forward pass
    (their output zeroed, or its running mean, before W_O), so the layers above show what that head's absence
    changes; the knocked-out heads' own statistics are those of the weights they computed."""
    n, h, n_layer = len(ids), model.info.n_heads, model.info.n_layer
    x = model.embed(ids)
    pos = model.rotation(torch.arange(n, device=x.device), x)  # RoPE's angles once for every layer
    means = torch.zeros(n_layer, 4, h, dtype=torch.float64)
    counts = torch.tensor([n, max(n - SINK_FROM, 1), max(n - 1, 1), n], dtype=torch.float64)[:, None]
    fuse = not getattr(model.arch, "window", 0)
    for i in range(n_layer):
        q, k, v = model.layer_qkv(i, x, pos)
        fused = fused_causal(q, k, v) if fuse else None
        if fused is not None:
            out, lse = fused
            means[i] = lse_stats(q, k, lse)
        else:
            sums = torch.zeros(4, h, dtype=torch.float64)
            out = model.attend(q, k, v, functools.partial(block_sums, sums))
            means[i] = sums / counts
        x = model.layer_rest(i, x, ablated(out, iv.heads_at(i), iv.mean))
        if progress is not None:
            progress(i + 1, n_layer)
    return as_stats(means)


def block_sums(sums: torch.Tensor, r0: int, w: torch.Tensor) -> None:
    """Add one block of a layer's weights (H, rows, keys), query rows r0.., into the four statistics' sums (4, H)."""
    rows = w.shape[1]
    logs = torch.where(w > 0, w.log(), torch.zeros_like(w))
    sums[0] += -(w * logs).sum(dim=(1, 2), dtype=torch.float64).cpu()
    i = torch.arange(rows, device=w.device)
    counted = i[r0 + i >= SINK_FROM]  # the sink share's rows (sinks.sink_share)
    if counted.numel():
        sums[1] += w[:, counted, 0].sum(dim=1, dtype=torch.float64).cpu()
    sums[3] += w[:, i, r0 + i].sum(dim=1, dtype=torch.float64).cpu()
    later = i[r0 + i >= 1]  # rows with a previous token
    if later.numel():
        sums[2] += w[:, later, r0 + later - 1].sum(dim=1, dtype=torch.float64).cpu()


def as_stats(means: torch.Tensor) -> list[list[dict[str, float]]]:
    """(layers, 4, heads) means -> [layer][head] dicts of the four statistics."""
    return [[{name: float(means[li, k, hi]) for k, name in enumerate(STATS)} for hi in range(means.shape[2])]
            for li in range(means.shape[0])]  # fmt: skip


def lse_stats(q: torch.Tensor, k: torch.Tensor, lse: torch.Tensor) -> torch.Tensor:
    """One causal layer's four statistics (4, H) without any weight matrix, from the fused kernel's per-row
    log-sum-exp ℓᵢ (FlashAttention's schedule, as a plain forward pass computes it). With sᵢⱼ = qᵢ·kⱼ/√d_k and
    wᵢⱼ = exp(sᵢⱼ − ℓᵢ):
      entropy   −Σⱼ wᵢⱼ log wᵢⱼ = ℓᵢ − Σⱼ wᵢⱼ sᵢⱼ = ℓᵢ − qᵢ·(Σⱼ wᵢⱼ kⱼ)/√d_k: attention with K as its values;
      sink, self, previous   wᵢ₀, wᵢᵢ, wᵢ,ᵢ₋₁ = exp(sᵢⱼ − ℓᵢ) for that one key (sink and previous from row 1).
    So a layer costs one more fused attention (K as values) and O(N d): no N × N tensor, not even a block of rows."""
    h, n = q.shape[0], q.shape[1]
    keys_read = fused_causal(q, k, k)
    assert keys_read is not None  # the same shapes as the call that gave lse
    scale = 1.0 / math.sqrt(q.shape[-1])
    kk = k.repeat_interleave(h // k.shape[0], 0) if k.shape[0] != h else k
    entropy = (lse - scale * (q * keys_read[0]).sum(-1)).clamp_min_(0)
    sink = (scale * (q[:, SINK_FROM:] @ kk[:, 0].unsqueeze(-1)).squeeze(-1) - lse[:, SINK_FROM:]).exp()
    own = (scale * (q * kk).sum(-1) - lse).exp()
    previous = (scale * (q[:, 1:] * kk[:, :-1]).sum(-1) - lse[:, 1:]).exp()
    return torch.stack([
        entropy.sum(-1, dtype=torch.float64) / n,
        sink.sum(-1, dtype=torch.float64) / max(n - SINK_FROM, 1),
        previous.sum(-1, dtype=torch.float64) / max(n - 1, 1),
        own.sum(-1, dtype=torch.float64) / n,
    ])  # fmt: skip


def similar_heads(
    stats: Sequence[Sequence[Mapping[str, float]]], layer: int, head: int, most: int = 5
) -> list[tuple[int, int, float]]:
    """The heads whose four statistics lie closest to (layer, head)'s (Euclidean distance, entropy divided by its
    largest value so the four weigh alike), nearest first, the head itself left out."""
    top_entropy = max((s["entropy"] for row in stats for s in row), default=1.0) or 1.0

    def vec(s: Mapping[str, float]) -> list[float]:
        return [s["entropy"] / top_entropy, s["sink"], s["previous"], s["self"]]

    me = vec(stats[layer][head])
    out = [
        (li, hi, sum((a - b) ** 2 for a, b in zip(vec(s), me, strict=True)) ** 0.5)
        for li, row in enumerate(stats)
        for hi, s in enumerate(row)
        if (li, hi) != (layer, head)
    ]
    return sorted(out, key=lambda x: x[2])[:most]
