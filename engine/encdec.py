"""A tiny encoder–decoder (the 2017 Transformer's shape, Pre-LN), written as the lab shows attention.

    encoder block:  x = x + SelfAttn(LN1(x), source padding mask)            every source token reads every other
    decoder block:  y = y + SelfAttn(LN1(y), causal mask)                     a target token reads the ones before it
                    y = y + CrossAttn(Q from LN2(y), K and V from the encoder's output, source padding mask)
                    y = y + FFN(LN3(y))

Cross-attention has no causal mask: the source is all there before the decoder starts, so every target position may
read every real source token; only the source's padding is hidden. Its score matrix is N_dec × N_enc, not square.

The attention is the lab's five stages (projection, scores, mask, softmax, weighted_sum: `attend` keeps each as a
value when asked); the norms and the FFN are `block.normalise` and `block.feed_forward` (GELU, the exact erf form).
The tensors are named as torch's own `nn.Transformer(norm_first=True, batch_first=True)` state dict names them
(`transformer.encoder.layers.0.self_attn.in_proj_weight`, …), with the embeddings, learned positions and the output
head beside it, so the same weights load into `nn.Transformer` as an independent implementation (tests)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from . import attention
from .block import BlockWeights, feed_forward, normalise
from .device import CPU
from .encdec_tasks import PAD
from .errors import Message, SpecError
from .sources import seed_of

TASKS = ("reverse", "numbers")
DIRECTIONS = ("en-zh", "zh-en")
EPS = 1e-5
STD = 0.02
T = "transformer."


@dataclass(frozen=True)
class EncDecConfig:
    task: str = "reverse"  # reverse | numbers
    n_layer: int = 1  # encoder blocks, and as many decoder blocks (1-4)
    n_heads: int = 2  # heads per attention (1-4)
    d_model: int = 32  # 16-128, a multiple of n_heads
    steps: int = 500  # optimiser steps (reverse aligns in ~5 s on one core)
    batch: int = 64  # pairs per step
    lr: float = 5e-3  # AdamW's learning rate (constant after a short warm-up)
    weight_decay: float = 0.01
    seed: int = 0  # weights, batches, held-out numbers and the probe all derive from it
    length: int = 8  # reverse: the longest sequence (3 … length symbols)
    symbols: int = 10  # reverse: kinds of symbol
    max_number: int = 999  # numbers: 1 … max_number, a tenth held out
    direction: str = "en-zh"  # numbers: en-zh | zh-en
    eval_every: int = 25  # steps between held-out losses
    n_snapshots: int = 10  # log-spaced steps at which the probe's cross-attention is kept
    device: str = "cpu"  # cpu | cuda
    arch: str = "encoder-decoder"  # the API's tag: how a run's config says which model it trains

    @property
    def d_k(self) -> int:
        return self.d_model // self.n_heads


LIMITS = {"n_layer": (1, 4), "n_heads": (1, 4), "d_model": (16, 128), "steps": (1, 20000), "batch": (1, 256),
          "length": (3, 12), "symbols": (2, 26), "max_number": (20, 999), "eval_every": (1, 10000),
          "n_snapshots": (2, 40)}  # fmt: skip


def make_config(**given: Any) -> EncDecConfig:
    """An EncDecConfig from keyword choices; a choice out of range is a SpecError naming it."""
    known = EncDecConfig.__dataclass_fields__
    for name in given:
        if name not in known:
            raise SpecError(name, Message("unknown_setting", known=", ".join(known)))
    c = EncDecConfig(**given)
    for name, choices in (("task", TASKS), ("direction", DIRECTIONS), ("device", ("cpu", "cuda")),
                          ("arch", ("encoder-decoder",))):  # fmt: skip
        if getattr(c, name) not in choices:
            raise SpecError(
                name, Message("unknown_choice", kind=name, value=getattr(c, name), choices=", ".join(choices))
            )
    for name, (low, high) in LIMITS.items():
        value = getattr(c, name)
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise SpecError(name, Message("integer_range", low=low, high=high, value=value))
    if c.d_model % c.n_heads:
        raise SpecError("d_model", Message("heads_divide", d_model=c.d_model, n_heads=c.n_heads))
    for name in ("lr", "weight_decay"):
        value = getattr(c, name)
        if not (isinstance(value, int | float) and math.isfinite(value) and 0 <= value <= 1):
            raise SpecError(name, Message("unit_number", value=value))
    if c.lr <= 0:
        raise SpecError("lr", Message("above_zero"))
    if c.device == "cuda" and not torch.cuda.is_available():
        raise SpecError("device", Message("no_cuda"))
    return c


# -- the weights --------------------------------------------------------------------------------------------------
def init_params(c: EncDecConfig, vocab: int, n_src: int, n_tgt: int) -> dict[str, torch.Tensor]:
    """Every tensor by its nn.Transformer name: matrices N(0, 0.02²), biases 0, norm gains 1."""
    g = torch.Generator().manual_seed(seed_of("encdec", c.seed))
    d, ff = c.d_model, 4 * c.d_model

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=g, device=CPU) * STD

    def attn(pre: str) -> dict[str, torch.Tensor]:
        return {pre + "in_proj_weight": randn(3 * d, d), pre + "in_proj_bias": torch.zeros(3 * d),
                pre + "out_proj.weight": randn(d, d), pre + "out_proj.bias": torch.zeros(d)}  # fmt: skip

    def norms(pre: str, count: int) -> dict[str, torch.Tensor]:
        return {f"{pre}norm{j}.{n}": (torch.ones(d) if n == "weight" else torch.zeros(d))
                for j in range(1, count + 1) for n in ("weight", "bias")}  # fmt: skip

    def mlp(pre: str) -> dict[str, torch.Tensor]:
        return {pre + "linear1.weight": randn(ff, d), pre + "linear1.bias": torch.zeros(ff),
                pre + "linear2.weight": randn(d, ff), pre + "linear2.bias": torch.zeros(d)}  # fmt: skip

    p = {"src_embed.weight": randn(vocab, d), "src_pos.weight": randn(n_src, d),
         "tgt_embed.weight": randn(vocab, d), "tgt_pos.weight": randn(n_tgt, d)}  # fmt: skip
    for i in range(c.n_layer):
        pre = f"{T}encoder.layers.{i}."
        p |= attn(pre + "self_attn.") | mlp(pre) | norms(pre, 2)
    p |= {f"{T}encoder.norm.weight": torch.ones(d), f"{T}encoder.norm.bias": torch.zeros(d)}
    for i in range(c.n_layer):
        pre = f"{T}decoder.layers.{i}."
        p |= attn(pre + "self_attn.") | attn(pre + "multihead_attn.") | mlp(pre) | norms(pre, 3)
    p |= {f"{T}decoder.norm.weight": torch.ones(d), f"{T}decoder.norm.bias": torch.zeros(d)}
    p["lm_head.weight"] = randn(vocab, d)
    return {k: v.to(c.device) for k, v in p.items()}


# -- the model ----------------------------------------------------------------------------------------------------
def attend(p: dict[str, torch.Tensor], pre: str, x: torch.Tensor, source: torch.Tensor, heads: int,
           mask: torch.Tensor, keep: dict[str, torch.Tensor] | None = None) -> torch.Tensor:  # fmt: skip
    """Multi-head attention of queries from `x` (B, N_q, d) over keys and values from `source` (B, N_kv, d), under
    an additive `mask` (0 or −∞, broadcast to (B, H, N_q, N_kv)); with `keep`, every stage's tensor kept by name."""
    b, nq, d = x.shape
    nk, dk = source.shape[1], d // heads
    w, bias = p[pre + "in_proj_weight"], p[pre + "in_proj_bias"]
    q = x @ w[:d].T + bias[:d]  # (B, N_q, d)
    k = source @ w[d : 2 * d].T + bias[d : 2 * d]  # (B, N_kv, d)
    v = source @ w[2 * d :].T + bias[2 * d :]
    q, k, v = (m.view(b, -1, heads, dk).transpose(1, 2) for m in (q, k, v))  # (B, H, N, d_k)
    raw = q @ k.transpose(-2, -1)  # (B, H, N_q, N_kv)
    scaled = raw / math.sqrt(dk)
    masked = scaled + mask
    weights = torch.softmax(masked, dim=-1)
    out = weights @ v  # (B, H, N_q, d_k)
    concat = out.transpose(1, 2).reshape(b, nq, d)
    output = concat @ p[pre + "out_proj.weight"].T + p[pre + "out_proj.bias"]
    if keep is not None:
        keep |= {"x": x, "source": source, "q": q, "k": k, "v": v, "raw": raw, "scaled": scaled,
                 "mask": mask.expand(b, heads, nq, nk), "masked": masked, "weights": weights, "heads": out,
                 "concat": concat, "output": output}  # fmt: skip
    return output


def _ffn(p: dict[str, torch.Tensor], pre: str, x: torch.Tensor, norm: str) -> torch.Tensor:
    w = BlockWeights(ln1_w=p[pre + "norm1.weight"], ln1_b=None, ln2_w=p[pre + norm + ".weight"], ln2_b=None,
                     w_up=p[pre + "linear1.weight"].T, w_down=p[pre + "linear2.weight"].T,
                     b_up=p[pre + "linear1.bias"], b_down=p[pre + "linear2.bias"])  # fmt: skip
    flat = x.reshape(-1, x.shape[-1])
    h = normalise(flat, p[pre + norm + ".weight"], p[pre + norm + ".bias"], "layernorm", EPS)
    return feed_forward(h, w, "gelu", "exact")[1].view(x.shape)


def _ln(p: dict[str, torch.Tensor], name: str, x: torch.Tensor) -> torch.Tensor:
    return normalise(x, p[name + ".weight"], p[name + ".bias"], "layernorm", EPS)


def padding_mask(src: torch.Tensor) -> torch.Tensor:
    """(B, 1, 1, N_enc): −∞ on the source's <pad> columns, 0 elsewhere (every query row alike)."""
    return torch.zeros(src.shape, device=src.device).masked_fill(src == PAD, float("-inf"))[:, None, None, :]


def causal_mask(n: int, device: torch.device | str = CPU) -> torch.Tensor:
    """(N, N): −∞ above the diagonal (a later position), 0 on and below it."""
    return torch.zeros(n, n, device=device).masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1).to(device),
                                                         float("-inf"))  # fmt: skip


@dataclass
class Kept:
    """What a forward pass keeps when asked: per layer, each attention's stages (tensors with the batch first)."""

    encoder: list[dict[str, torch.Tensor]]  # the encoder's self-attention
    decoder: list[dict[str, torch.Tensor]]  # the decoder's causal self-attention
    cross: list[dict[str, torch.Tensor]]  # the decoder's cross-attention


def encode(c: EncDecConfig, p: dict[str, torch.Tensor], src: torch.Tensor, kept: Kept | None = None) -> torch.Tensor:
    """The encoder's output (B, N_enc, d): bidirectional, the source's padding masked."""
    x = p["src_embed.weight"][src] + p["src_pos.weight"][: src.shape[1]]
    pad = padding_mask(src)
    for i in range(c.n_layer):
        pre = f"{T}encoder.layers.{i}."
        keep: dict[str, torch.Tensor] | None = {} if kept is not None else None
        a = _ln(p, pre + "norm1", x)
        x = x + attend(p, pre + "self_attn.", a, a, c.n_heads, pad, keep)
        x = x + _ffn(p, pre, x, "norm2")
        if kept is not None and keep is not None:
            kept.encoder.append(keep)
    return _ln(p, f"{T}encoder.norm", x)


def decode(c: EncDecConfig, p: dict[str, torch.Tensor], memory: torch.Tensor, src: torch.Tensor,
           tgt_in: torch.Tensor, kept: Kept | None = None) -> torch.Tensor:  # fmt: skip
    """Logits (B, N_dec, V) for the decoder's input ids (B, N_dec) (<bos> and the target so far) over `memory`."""
    n = tgt_in.shape[1]
    y = p["tgt_embed.weight"][tgt_in] + p["tgt_pos.weight"][:n]
    pad, future = padding_mask(src), causal_mask(n, tgt_in.device)
    for i in range(c.n_layer):
        pre = f"{T}decoder.layers.{i}."
        ks: dict[str, torch.Tensor] | None = {} if kept is not None else None
        kc: dict[str, torch.Tensor] | None = {} if kept is not None else None
        a = _ln(p, pre + "norm1", y)
        y = y + attend(p, pre + "self_attn.", a, a, c.n_heads, future, ks)
        y = y + attend(p, pre + "multihead_attn.", _ln(p, pre + "norm2", y), memory, c.n_heads, pad, kc)
        y = y + _ffn(p, pre, y, "norm3")
        if kept is not None and ks is not None and kc is not None:
            kept.decoder.append(ks)
            kept.cross.append(kc)
    return _ln(p, f"{T}decoder.norm", y) @ p["lm_head.weight"].T


def forward(c: EncDecConfig, p: dict[str, torch.Tensor], src: torch.Tensor, tgt_in: torch.Tensor,
            kept: Kept | None = None) -> torch.Tensor:  # fmt: skip
    return decode(c, p, encode(c, p, src, kept), src, tgt_in, kept)


def loss_of(c: EncDecConfig, p: dict[str, torch.Tensor], src: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy over the target's real tokens (its <eos> included, its padding not)."""
    logits = forward(c, p, src, tgt[:, :-1])
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tgt[:, 1:].reshape(-1), ignore_index=PAD)


@torch.no_grad()
def greedy(c: EncDecConfig, p: dict[str, torch.Tensor], src: torch.Tensor, n: int) -> torch.Tensor:
    """(B, ≤ n) ids decoded greedily after <bos>, the encoder run once (rows past their <eos> keep going)."""
    from .encdec_tasks import BOS

    memory = encode(c, p, src)
    out = torch.full((src.shape[0], 1), BOS, dtype=torch.long, device=src.device)
    for _ in range(n):
        logits = decode(c, p, memory, src, out)[:, -1]
        out = torch.cat([out, logits.argmax(-1, keepdim=True)], dim=1)
    return out[:, 1:]


def cross_stages(kept: Kept, layer: int, row: int = 0) -> dict[str, Any]:
    """One pair's cross-attention in `layer` as the lab's five stage values (engine/attention.py's dataclasses)."""
    k = {name: t[row].detach() for name, t in kept.cross[layer].items()}
    return {
        "projection": attention.Projection(x=k["x"], q=k["q"], k=k["k"], v=k["v"], source=k["source"]),
        "scores": attention.Scores(raw=k["raw"], scaled=k["scaled"]),
        "mask": attention.Mask(mask=k["mask"][0], masked=k["masked"]),
        "softmax": attention.Softmax(weights=k["weights"]),
        "weighted_sum": attention.WeightedSum(heads=k["heads"], concat=k["concat"], output=k["output"]),
    }


# -- attention is nonlinear ---------------------------------------------------------------------------------------
def head_map(p: dict[str, torch.Tensor], pre: str, heads: int, head: int, x: torch.Tensor, source: torch.Tensor,
             mask: torch.Tensor, held: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """One head as a map of its inputs, its biases left out (so every projection is linear): queries from `x`
    (N_q, d), keys and values from `source` (N_kv, d), an additive `mask` (N_kv,) or (N_q, N_kv). The output
    (N_q, d_k) and the weights (N_q, N_kv); with `held`, those weights are used instead of the softmax's."""
    d = x.shape[-1]
    dk = d // heads
    w = p[pre + "in_proj_weight"].double()
    wq, wk, wv = (w[j * d + head * dk : j * d + (head + 1) * dk] for j in range(3))  # (d_k, d) each
    x, source = x.double(), source.double()
    weights = held if held is not None else torch.softmax((x @ wq.T) @ (source @ wk.T).T / math.sqrt(dk) + mask, -1)
    return weights @ (source @ wv.T), weights


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    """‖a − b‖ / ‖b‖ (Frobenius)."""
    return float((a - b).norm() / b.norm())


def nonlinearity(c: EncDecConfig, p: dict[str, torch.Tensor], src: torch.Tensor, tgt_in: torch.Tensor,
                 head: int) -> dict[str, Any]:  # fmt: skip
    """The last decoder layer's cross-attention head `head` on one pair (src (1, N_enc), tgt_in (1, N_dec)), as a
    function A(X, M) of its query input X (the normed decoder states) and its key/value input M (the encoder's
    output), biases left out: A(2X, 2M) against 2·A(X, M) (homogeneity), and A(X+Y, M+N) against A(X, M) + A(Y, N)
    for Y, N the same states in reverse order (additivity; the source's padding stays where it is). A linear map would meet both exactly; the same comparisons
    with the weights held (not recomputed by the softmax) do, so the whole difference is the softmax's."""
    kept = Kept([], [], [])
    with torch.no_grad():
        forward(c, p, src, tgt_in, kept)
    k = kept.cross[-1]
    x, m = k["x"][0].double(), k["source"][0].double()
    mask = padding_mask(src)[0, 0, 0].double()
    pre = f"{T}decoder.layers.{c.n_layer - 1}.multihead_attn."
    real = [j for j in range(m.shape[0]) if src[0, j] != PAD]
    y = x.flip(0)  # another input of the same size: the same states in reverse order
    n = m.clone()
    n[real] = m[real].flip(0)  # the real source positions reversed, the padding where it was

    def a(q: torch.Tensor, s: torch.Tensor, held: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        return head_map(p, pre, c.n_heads, head, q, s, mask, held)

    ax, px = a(x, m)
    a2x, p2x = a(2 * x, 2 * m)
    held2x, _ = a(2 * x, 2 * m, px)  # the weights of X kept: what a linear attention would give
    ay, py = a(y, n)
    axy, pxy = a(x + y, m + n)
    held_sum = a(x, m, pxy)[0] + a(y, n, pxy)[0]  # the sum's weights kept for both parts
    out: dict[str, Any] = {
        "layer": c.n_layer - 1, "head": head,
        "scale": {"a2x": a2x[0].tolist(), "two_ax": (2 * ax)[0].tolist(), "diff": _rel(a2x, 2 * ax),
                  "held_diff": _rel(held2x, 2 * ax), "wx": px[0, real].tolist(), "w2x": p2x[0, real].tolist()},
        "sum": {"axy": axy[0].tolist(), "ax_ay": (ax + ay)[0].tolist(), "diff": _rel(axy, ax + ay),
                "held_diff": _rel(axy, held_sum), "wx": px[0, real].tolist(), "wy": py[0, real].tolist(),
                "wxy": pxy[0, real].tolist()},
    }  # fmt: skip
    for part in (out["scale"], out["sum"]):  # the softmax's share of the difference (engine/nonlinear.py `share`)
        part["share"] = 1.0 - part["held_diff"] / part["diff"] if part["diff"] > 0 else 0.0
    return out
