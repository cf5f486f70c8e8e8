"""Attention is already nonlinear, on a real model: one head of one layer of a loaded decoder (SmolLM2: RoPE, 9 query
heads sharing 3 K/V heads) as a map A(X) of what that layer's attention reads, X = the layer's norm of the real
residual stream at that layer (the RMSNorm is itself scale-invariant, so the map starts after it, where W_Q, W_K and
W_V read). Its projection biases are left out (SmolLM2 has none), so Q, K, V are linear in X and RoPE, a rotation of
each position's q and k, is linear too; the causal mask and the head's K/V group are the model's own.

The two comparisons of engine/encdec.py's `nonlinearity`, on the last query row (the first row of a causal head reads
only itself): A(2X) against 2·A(X), and A(X+Y) against A(X) + A(Y) for Y = the same states in reverse order; and each
again with the softmax's weights held (those of X, those of X+Y), which a linear map would give: its difference is 0,
so the softmax's share of the difference is 1 − held/diff."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

from .errors import Message, SpecError
from .positions import angles, rotate

MAX_TOKENS = 48  # the text's tokens: the model runs up to the layer over them (bounded; 422 naming `text`)


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    """‖a − b‖ / ‖b‖ (Frobenius)."""
    return float((a - b).norm() / b.norm())


def head_of(model: Any, layer: int, head: int) -> dict[str, Any]:
    """Head `head` of `layer`: its W_Q columns and its K/V group's W_K, W_V columns (d, d_k), float64, no bias."""
    a = model.arch
    dk, group = a.d_k, a.n_heads // a.n_kv_heads
    kv = head // group
    w = model.attention_weights(layer)
    return {"wq": w.w_q[:, head * dk : (head + 1) * dk].double(), "wk": w.w_k[:, kv * dk : (kv + 1) * dk].double(),
            "wv": w.w_v[:, kv * dk : (kv + 1) * dk].double(), "kv": kv}  # fmt: skip


def head_map(model: Any, h: dict[str, Any], x: torch.Tensor,
             held: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """One causal head on X (N, d): the output (N, d_k) and weights (N, N); with `held`, those weights instead of the
    softmax's. RoPE as the model rotates (its pairing, base and scaling), at positions 0 … N − 1."""
    a = model.arch
    n = x.shape[0]
    q, k, v = x @ h["wq"], x @ h["wk"], x @ h["wv"]
    if a.positions == "rope":
        rot = angles(torch.arange(n, device=x.device), a.d_k, a.rope_base, model.factors, like=q)
        q, k = rotate(q, rot, a.rope_base, a.rope_pairing), rotate(k, rot, a.rope_base, a.rope_pairing)
    future = torch.ones(n, n, dtype=torch.bool, device=x.device).triu(1)
    scores = (q @ k.T / math.sqrt(a.d_k)).masked_fill(future, float("-inf"))
    weights = held if held is not None else torch.softmax(scores, -1)
    return weights @ v, weights


def check(model: Any, ids: Sequence[int], layer: int, head: int, max_tokens: int = MAX_TOKENS) -> None:
    if not getattr(model, "decoder", False):
        raise SpecError("preset", Message("not_decoder_panel", model=model.name))
    if not 2 <= len(ids) <= max_tokens:
        raise SpecError("text", Message("tokens_range", limit=max_tokens, n=len(ids)))
    if not 0 <= layer < model.arch.n_layer:
        raise SpecError("layer", Message("integer_range", low=0, high=model.arch.n_layer - 1, value=layer))
    if not 0 <= head < model.arch.n_heads:
        raise SpecError("head", Message("integer_range", low=0, high=model.arch.n_heads - 1, value=head))


@torch.inference_mode()
def nonlinearity(model: Any, ids: Sequence[int], layer: int, head: int,
                 max_tokens: int = MAX_TOKENS) -> dict[str, Any]:  # fmt: skip
    """Head `head` of `layer` on the text `ids`, the comparisons on the last row (see the module). Every number float64
    from the model's float32 weights; the keys those of engine/encdec.py's `nonlinearity`, plus `share` and `kv`."""
    check(model, ids, layer, head, max_tokens)
    x = model.attention_x(layer, model.hidden(list(ids), layer)).double()  # (N, d): what W_Q, W_K, W_V read
    h = head_of(model, layer, head)
    y = x.flip(0)  # another input of the same size: the same states in reverse order
    ax, px = head_map(model, h, x)
    a2x, p2x = head_map(model, h, 2 * x)
    held2x = head_map(model, h, 2 * x, px)[0]  # the weights of X kept: what a linear attention would give
    ay, py = head_map(model, h, y)
    axy, pxy = head_map(model, h, x + y)
    held_sum = head_map(model, h, x, pxy)[0] + head_map(model, h, y, pxy)[0]
    last = -1
    scale: dict[str, Any] = {"a2x": a2x[last].tolist(), "two_ax": (2 * ax)[last].tolist(), "diff": _rel(a2x, 2 * ax),
             "held_diff": _rel(held2x, 2 * ax), "wx": px[last].tolist(), "w2x": p2x[last].tolist()}  # fmt: skip
    add: dict[str, Any] = {"axy": axy[last].tolist(), "ax_ay": (ax + ay)[last].tolist(), "diff": _rel(axy, ax + ay),
           "held_diff": _rel(axy, held_sum), "wx": px[last].tolist(), "wy": py[last].tolist(),
           "wxy": pxy[last].tolist()}  # fmt: skip
    for part in (scale, add):
        part["share"] = share(part["diff"], part["held_diff"])
    return {"layer": layer, "head": head, "kv": h["kv"], "row": len(ids) - 1, "scale": scale, "sum": add,
            "tensors": {"ax": ax, "a2x": a2x, "ay": ay, "axy": axy}}  # fmt: skip


def share(diff: float, held: float) -> float:
    """The softmax's share of a difference: 1 − (the difference left with its weights held) / (the difference)."""
    return 1.0 - held / diff if diff > 0 else 0.0
