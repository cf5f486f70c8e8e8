"""What attention is worth: direct logit attribution, value-weighted norms, rollout, a score's terms, and a head's
weights against the effect of removing each source.

Direct logit attribution (DLA). A Pre-LN decoder's last residual stream at position p is a sum of parts,

    x_L[p] = embed[p] + Σ_l ( Σ_h z_lh[p] W_O^lh  +  b_O^l  +  mlp_l[p] ),

every head's output after W_O (z_lh[p] = Σ_j α_pj v_j, its d_k slice of the heads side by side), each layer's
attention output bias, each MLP's output, and the embedding (token + learned positions). The logit of token t is
final(x_L[p]) · U_t; with the final norm's scale frozen at the real stream (the usual convention: its RMS, or for
LayerNorm its standard deviation, each with ε), the norm is linear in x and each part projects on its own:

    RMSNorm:    part · (γ ⊙ u) / rms(x_L[p])
    LayerNorm:  (part − mean(part)) · (γ ⊙ u) / std(x_L[p])      (centring is linear: each part centred alone)

u = U_target, or U_target − U_contrast for a logit difference. The parts then sum to the real logit (difference) up
to the norm's shift β · u (LayerNorm only) and float rounding: `Attribution` returns the sum, the real value and
the remainder (real − sum) explicitly, beside β · u.

Value-weighted norms (Kobayashi et al. 2020): ‖α_ij · v_j W_O^h‖ = α_ij ‖v_j W_O^h‖, what source j actually moves
into query i's stream through head h, beside α_ij; and per head, the norm of all it writes at one position
‖Σ_j α_pj v_j W_O^h‖ (`head_output_norms`: an encoder, with no unembedding, has this grid instead of the logit's).

Rollout (Abnar & Zuidema 2020): Â_l = ½ mean_h A_l + ½ I, rows renormalised; R_0 = Â_0, R_l = Â_l R_(l−1). Row i of
R_l says how much of each input token reaches position i after layer l.

Attention flow (the same paper): the maximum flow from a query after the last layer back to each input token through
the layered graph whose edges carry Â_l's weights as capacities; one max-flow per input token (networkx), so the
graph's size is bounded (`flow_edges`, max_edges) before anything runs.

The sink contrast: per head, the share of its weight on the first token beside ‖v_0 W_O^h‖ over the other tokens'
‖v_j W_O^h‖: a sink head puts nearly all its weight on a vector that moves little.

Why this score: one cell QKᵀ/√d_k[h, i, j] = Σ_d q_d k_d / √d_k (q, k as the scores read them: after RoPE), and
under RoPE per frequency pair, where pair f of the rotated vectors gives ⟨q_f, R((j − i)·θ_f) k_f⟩ / √d_k of the
unrotated ones: the cell depends on the offset through each pair's rotation.

Weight against effect: for layer l, head h and query position i, each source j ≤ i is removed from that head at
that query alone (its value zeroed: the head's output at i loses α_ij v_j; or mean-ablated: replaced by the head's
mean value over positions 0 … i) and the model run on; the effect is the
change of the metric at i (the loss of the target token, or the logit difference target − contrast). Only the
query's row changes, so the run from layer l on is one row per source over the clean run's keys and values.

Every function takes the sizes it may spend as arguments and raises ValueError naming the parameter past a bound.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from .attention import linear
from .block import feed_forward, normalise
from .memo import tensor_bytes

MAX_TOKENS = 1024  # tokens a text may have
MAX_BYTES = 256 << 20  # bytes of float32 results (norms, rollout) at most


class Held:
    """A result a cache may hold: `nbytes` is what it keeps (its tensors' storages, plus a little for the rest)."""

    @property
    def nbytes(self) -> int:
        return tensor_bytes(self) + 256


# -- shared checks ------------------------------------------------------------------------------------------------


def check_ids(model: Any, ids: Sequence[int], max_tokens: int) -> list[int]:
    ids = [int(i) for i in ids]
    if not ids:
        raise ValueError("ids: the text has no tokens")
    if max_tokens < 1:
        raise ValueError(f"max_tokens: must be at least 1, got {max_tokens}")
    if len(ids) > max_tokens:
        raise ValueError(f"ids: {len(ids)} tokens, more than max_tokens={max_tokens}")
    if len(ids) > model.arch.n_ctx:
        raise ValueError(f"ids: {len(ids)} tokens, more than {model.name}'s context of {model.arch.n_ctx}")
    bad = [i for i in ids if not 0 <= i < model.arch.vocab]
    if bad:
        raise ValueError(f"ids: {bad[0]} is not a token id of the {model.arch.vocab}-token vocabulary")
    return ids


def check_index(name: str, value: int, size: int, what: str) -> int:
    if not 0 <= value < size:
        raise ValueError(f"{name}: {value} is not a {what}: 0..{size - 1}")
    return value


def check_token(model: Any, name: str, token: int) -> int:
    return check_index(name, token, model.arch.vocab, "token id")


def check_bytes(name: str, n: int, max_bytes: int) -> None:
    if n > max_bytes:
        raise ValueError(f"{name}: the result needs {n:,} bytes, more than max_bytes={max_bytes:,}")


def check_pre_ln_decoder(model: Any) -> None:
    if not getattr(model, "decoder", False):
        raise ValueError(f"model: {model.name} is an encoder: it has no unembedding to attribute a logit to")
    if model.arch.placement != "pre":
        raise ValueError(f"model: {model.name} is Post-LN: its stream is not a sum of the layers' outputs")


# -- direct logit attribution -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Attribution(Held):
    """Each part's direct contribution to the logit of `target` (minus that of `contrast`) at `position`."""

    position: int
    target: int
    contrast: int | None
    heads: torch.Tensor  # (L, H) each head's output after W_O
    mlps: torch.Tensor  # (L,) each MLP's output (its biases included)
    attn_bias: torch.Tensor  # (L,) each layer's attention output bias b_O (0 where the model has none)
    embed: float  # the embedding (token, and learned positions where the model adds them)
    norm_bias: float  # β · u: the final LayerNorm's shift (0 for RMSNorm)
    scale: float  # the frozen norm scale: rms(x) or std(x), with ε
    total: float  # the sum of every part above except norm_bias
    logit: float  # the real logit (or logit difference) the model computes
    remainder: float  # logit − total: norm_bias, plus float rounding


def direction(model: Any, target: int, contrast: int | None) -> torch.Tensor:
    rows = model.unembedding([target] if contrast is None else [target, contrast]).float()
    return rows[0] if contrast is None else rows[0] - rows[1]


def project(parts: torch.Tensor, x: torch.Tensor, gain: torch.Tensor, u: torch.Tensor, kind: str,
            eps: float) -> tuple[torch.Tensor, float]:  # fmt: skip
    """parts (P, d) projected through the final norm frozen at the stream x (d,) onto u: (P,), and the scale."""
    x = x.double()
    if kind == "layernorm":
        scale = torch.sqrt(((x - x.mean()) ** 2).mean() + eps)
        parts = parts.double() - parts.double().mean(-1, keepdim=True)
    else:
        scale = torch.sqrt((x * x).mean() + eps)
        parts = parts.double()
    return parts @ (gain.double() * u.double()) / scale, float(scale)


@torch.inference_mode()
def direct_logit_attribution(
    model: Any, ids: Sequence[int], position: int, target: int | None, contrast: int | None = None,
    max_tokens: int = MAX_TOKENS,
) -> Attribution:  # fmt: skip
    """Direct logit attribution of token `target` (minus `contrast`) at `position` of `ids` (see the module); with
    `target` None, the model's most likely token there, read from this same run's logits (no second forward)."""
    check_pre_ln_decoder(model)
    ids = check_ids(model, ids, max_tokens)
    check_index("position", position, len(ids), "position of the text")
    if target is not None:
        check_token(model, "target", target)
    if contrast is not None:
        check_token(model, "contrast", contrast)
    ids = ids[: position + 1]  # a causal model's stream at `position` reads nothing after it
    arch = model.arch
    n_layer, n_heads, dk = arch.n_layer, arch.n_heads, arch.d_k
    x = model.embed(ids)
    embed = x[position].clone()
    rot = model.rotation(torch.arange(len(ids), device=x.device), x)
    head_parts, mlp_parts, bias_parts = [], [], []
    for i in range(n_layer):
        q, k, v = model.layer_qkv(i, x, rot)
        heads = model.attend(q, k, v)
        w, bw = model.attention_weights(i), model.block_weights(i)
        attn = linear(heads.transpose(0, 1).reshape(x.shape[0], -1), w.w_o, w.b_o)
        mid = x + attn
        mlp = feed_forward(normalise(mid, bw.ln2_w, bw.ln2_b, arch.norm, arch.eps), bw, arch.ffn, arch.gelu)[1]
        x = mid + mlp
        z = heads[:, position]  # (H, d_k)
        head_parts.append(torch.einsum("hk,hkd->hd", z, w.w_o.reshape(n_heads, dk, -1)))
        mlp_parts.append(mlp[position])
        bias_parts.append(w.b_o if w.b_o is not None else torch.zeros_like(embed))
    gain, shift = model.final_norm()
    logits = model.unembed(model.final(x[position : position + 1])).float()[0]
    if target is None:
        target = int(logits.argmax())
    u = direction(model, target, contrast)
    parts = torch.cat([embed[None], torch.cat(head_parts), torch.stack(bias_parts), torch.stack(mlp_parts)])
    got, scale = project(parts, x[position], gain.float(), u, arch.norm, arch.eps)
    real = float(logits[target] - (logits[contrast] if contrast is not None else 0.0))
    norm_bias = float(shift.double() @ u.double()) if shift is not None else 0.0
    total = float(got.sum())
    got = got.float().cpu()
    n_h = n_layer * n_heads
    return Attribution(
        position=position, target=target, contrast=contrast, heads=got[1 : 1 + n_h].view(n_layer, n_heads),
        attn_bias=got[1 + n_h : 1 + n_h + n_layer], mlps=got[1 + n_h + n_layer :], embed=float(got[0]),
        norm_bias=norm_bias, scale=scale, total=total, logit=real, remainder=real - total,
    )  # fmt: skip


# -- one layer's weights and values ----------------------------------------------------------------------------


@torch.inference_mode()
def layer_run(model: Any, ids: Sequence[int], layer: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Layer `layer`'s softmax weights (H, N, N), its values per query head (H, N, d_k) and its W_O (d, d), float32."""
    x = model.hidden(ids, layer)
    q, k, v = model.layer_qkv(layer, x, model.rotation(torch.arange(len(ids), device=x.device), x))
    n, h = len(ids), model.arch.n_heads
    weights = torch.zeros(h, n, n, device=x.device)

    def seen(r0: int, w: torch.Tensor) -> None:
        weights[:, r0 : r0 + w.shape[1], : w.shape[2]] = w.float()

    model.attend(q, k, v, seen)
    values = v.repeat_interleave(h // v.shape[0], 0).float()
    return weights, values, model.attention_weights(layer).w_o.float()


@dataclass(frozen=True)
class ValueNorms(Held):
    """One layer: α (H, N, N), ‖v_j W_O^h‖ (H, N) and ‖α_ij v_j W_O^h‖ (H, N, N)."""

    layer: int
    weights: torch.Tensor
    value_norms: torch.Tensor
    norms: torch.Tensor


def norms_of(weights: torch.Tensor, values: torch.Tensor, w_o: torch.Tensor, layer: int = 0) -> ValueNorms:
    """Value-weighted norms from weights (H, N, N_kv), values (H or H_kv, N_kv, d_k) and W_O (H·d_k, d)."""
    h, dk = weights.shape[0], values.shape[-1]
    values = values.repeat_interleave(h // values.shape[0], 0) if values.shape[0] != h else values
    moved = torch.einsum("hnk,hkd->hnd", values.float(), w_o.float().reshape(h, dk, -1))  # v_j W_O^h
    vn = torch.linalg.vector_norm(moved, dim=-1)  # (H, N_kv)
    weights = weights.float()
    return ValueNorms(layer, weights.cpu(), vn.cpu(), (weights * vn[:, None, :]).cpu())


def trace_value_norms(trace: Any) -> ValueNorms:
    """Value-weighted norms of a lab trace (engine.tracing.compute: the toy block, the GPT-2 block, a model's layer)."""
    return norms_of(trace.softmax.weights, trace.projection.v, trace.weights.w_o, trace.spec.layer)


def trace_head_norms(trace: Any, position: int) -> torch.Tensor:
    """Each head's output norm at `position` of a lab trace (1, H): ‖z_h[p] W_O^h‖, its d_k slice of the heads side
    by side times its rows of W_O (before the bias): what `head_output_norms` gives a model, for the one attention
    layer of the toy block or the GPT-2 block, which have no unembedding."""
    heads = trace.weighted_sum.heads  # (H, N, d_k)
    h, n, dk = heads.shape
    check_index("position", position, n, "position of the text")
    w_o = trace.weights.w_o.float().reshape(h, dk, -1)
    return torch.linalg.vector_norm(torch.einsum("hk,hkd->hd", heads[:, position].float(), w_o), dim=-1)[None].cpu()


def trace_rollout(trace: Any) -> Rollout:
    """Rollout of a lab trace's one layer: Â = ½ mean_h A + ½ I, rows renormalised (R_0 = Â_0)."""
    return rollout_of([trace.softmax.weights])


def trace_sink_contrast(trace: Any) -> SinkContrast:
    """`sink_contrast` of a lab trace's one layer (1, H): each head's mean weight on key 0 over the queries 1 …,
    key 0's share of the moved norms, and ‖v_0 W_O^h‖ over the other keys' mean."""
    norms = trace_value_norms(trace)
    w, moved, vn = norms.weights, norms.norms, norms.value_norms  # (H, N, N), (H, N, N), (H, N)
    if w.shape[1] < 2:
        raise ValueError("ids: a sink needs at least two tokens")
    weight_share = w[:, 1:, 0].mean(-1)
    norm_share = (moved[:, 1:, 0] / moved[:, 1:].sum(-1).clamp_min(1e-30)).mean(-1)
    ratio = vn[:, 0] / vn[:, 1:].mean(-1).clamp_min(1e-30)
    top = int(weight_share.argmax())
    return SinkContrast(weight_share[None], norm_share[None], ratio[None], 0, top)


def value_weighted_norms(
    model: Any, ids: Sequence[int], layer: int, max_tokens: int = MAX_TOKENS, max_bytes: int = MAX_BYTES
) -> ValueNorms:
    """Every head of `layer`: ‖α_ij · v_j W_O^h‖ beside α_ij (Kobayashi et al. 2020)."""
    ids = check_ids(model, ids, max_tokens)
    check_index("layer", layer, model.arch.n_layer, "layer")
    h, n = model.arch.n_heads, len(ids)
    check_bytes("ids", 4 * 3 * h * n * n, max_bytes)
    return norms_of(*layer_run(model, ids, layer), layer=layer)


@torch.inference_mode()
def head_output_norms(model: Any, ids: Sequence[int], position: int, max_tokens: int = MAX_TOKENS) -> torch.Tensor:
    """Every head's output norm at `position` (L, H): ‖Σ_j α_pj v_j W_O^h‖ = ‖z_h[p] W_O^h‖, what the head writes
    into the position's stream (Kobayashi et al. 2020's per-head norm, before the bias b_O). Needs no unembedding:
    an encoder's stand-in for the direct-logit grid. A decoder runs only up to `position`; an encoder reads every
    token."""
    ids = check_ids(model, ids, max_tokens)
    check_index("position", position, len(ids), "position of the text")
    if model.decoder:
        ids = ids[: position + 1]
    arch = model.arch
    h, dk = arch.n_heads, arch.d_k
    x = model.embed(ids)
    rot = model.rotation(torch.arange(len(ids), device=x.device), x)
    out = torch.zeros(arch.n_layer, h)
    for i in range(arch.n_layer):
        q, k, v = model.layer_qkv(i, x, rot)
        heads = model.attend(q, k, v)
        w_o = model.attention_weights(i).w_o.float().reshape(h, dk, -1)
        out[i] = torch.linalg.vector_norm(torch.einsum("hk,hkd->hd", heads[:, position].float(), w_o), dim=-1).cpu()
        x = model.layer_rest(i, x, heads)
    return out


# -- rollout ------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Rollout(Held):
    """Â_l (L, N, N) per layer and the cumulative products R_l = Â_l ⋯ Â_0 (L, N, N); `rollout` is R_(L−1)."""

    layers: torch.Tensor
    cumulative: torch.Tensor

    @property
    def rollout(self) -> torch.Tensor:
        return self.cumulative[-1]


def rollout_of(weights: Sequence[torch.Tensor]) -> Rollout:
    """Rollout of each layer's weights (H, N, N), in layer order."""
    steps, cum = [], []
    r = None
    for a in weights:
        a = a.double()
        m = 0.5 * a.mean(0) + 0.5 * torch.eye(a.shape[-1], dtype=a.dtype, device=a.device)
        m = m / m.sum(-1, keepdim=True)
        r = m if r is None else m @ r
        steps.append(m.float())
        cum.append(r.float())
    return Rollout(torch.stack(steps).cpu(), torch.stack(cum).cpu())


def rollout_bytes(n_layer: int, n_heads: int, n: int) -> int:
    """The float32 bytes a rollout of `n` tokens keeps: every layer's Â and product R (L, N, N), and one layer's
    weights (H, N, N) while it is seen."""
    return 4 * n * n * (2 * n_layer + n_heads)


def rollout_tokens(n_layer: int, n_heads: int, max_bytes: int | None = None) -> int:
    """The most tokens whose rollout fits in `max_bytes` (MAX_BYTES when None): what a caller checks before any
    forward pass runs (SmolLM2's 30 layers of 9 heads: 986 tokens)."""
    return math.isqrt((MAX_BYTES if max_bytes is None else max_bytes) // (4 * (2 * n_layer + n_heads)))


@torch.inference_mode()
def rollout(model: Any, ids: Sequence[int], max_tokens: int = MAX_TOKENS, max_bytes: int = MAX_BYTES) -> Rollout:
    """Attention rollout (Abnar & Zuidema 2020) through every layer of `model` on `ids`."""
    ids = check_ids(model, ids, max_tokens)
    n, n_layer, h = len(ids), model.arch.n_layer, model.arch.n_heads
    check_bytes("ids", rollout_bytes(n_layer, h, n), max_bytes)
    means: list[torch.Tensor] = []
    current: dict[int, torch.Tensor] = {}

    def seen(i: int, r0: int, w: torch.Tensor) -> None:
        if i not in current:
            current.clear()
            current[i] = torch.zeros(h, n, n, device=w.device)
        current[i][:, r0 : r0 + w.shape[1], : w.shape[2]] = w.float()
        if r0 + w.shape[1] == n:  # the layer's last block of rows
            means.append(current[i].mean(0, keepdim=True))

    model.hidden(ids, n_layer, observe=seen)
    return rollout_of(means)


# -- why this score -----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ScoreSplit(Held):
    """QKᵀ/√d_k[head, query, key] (or a trace's own scale) as per-dimension terms (d_k,) and, under RoPE, per
    frequency pair (d_k/2,)."""

    layer: int
    head: int
    query: int
    key: int
    score: float  # the cell: the sum of `terms`
    terms: torch.Tensor  # q_d k_d / √d_k of the vectors the scores read (after RoPE)
    pairs: torch.Tensor | None  # RoPE: each frequency pair's two terms together
    theta: torch.Tensor | None  # RoPE: each pair's frequency θ_f (scaling included)
    angle: torch.Tensor | None  # RoPE: (key − query)·θ_f, the rotation between the unrotated q_f and k_f
    unrotated: torch.Tensor | None  # RoPE: q_f · k_f / √d_k of the unrotated vectors (offset 0)
    masked: bool  # the cell is hidden by the model's own mask (causal, sliding window)


def split_cell(
    layer: int, head: int, query: int, key: int, q: torch.Tensor, k: torch.Tensor, scale: float, masked: bool,
    rope: tuple[torch.Tensor, torch.Tensor, str, torch.Tensor] | None = None,
) -> ScoreSplit:  # fmt: skip
    """The split of q · k / scale (q, k: (d_k,) as the scores read them); `rope` = (the unrotated q and k, the
    pairing, each pair's θ) adds the frequency pairs."""
    terms = q.double().cpu() * k.double().cpu() / scale
    pairs = theta = angle = unrotated = None
    if rope is not None:
        q0, k0, pairing, theta = rope

        def by_pair(t: torch.Tensor) -> torch.Tensor:
            half = t.shape[-1] // 2
            return t.view(half, 2).sum(-1) if pairing == "adjacent" else t[:half] + t[half:]

        pairs = by_pair(terms)
        unrotated = by_pair(q0.double().cpu() * k0.double().cpu() / scale)
        theta = theta.double().cpu()
        angle = (key - query) * theta
    return ScoreSplit(layer, head, query, key, float(terms.sum()), terms, pairs, theta, angle, unrotated, masked)


def thetas(d_k: int, base: float, factors: Sequence[float] = ()) -> torch.Tensor:
    """RoPE's θ_f = base^(−2f/d_k) per pair, each divided by its scaling factor where the model has them."""
    theta = base ** (-torch.arange(0, d_k, 2, dtype=torch.float64) / d_k)
    return theta / torch.tensor(list(factors), dtype=torch.float64) if factors else theta


@torch.inference_mode()
def score_split(
    model: Any, ids: Sequence[int], layer: int, head: int, query: int, key: int, max_tokens: int = MAX_TOKENS
) -> ScoreSplit:
    """One cell of `layer`'s QKᵀ/√d_k split into its per-dimension terms (and RoPE frequency pairs)."""
    ids = check_ids(model, ids, max_tokens)
    arch = model.arch
    check_index("layer", layer, arch.n_layer, "layer")
    check_index("head", head, arch.n_heads, "head")
    check_index("query", query, len(ids), "position of the text")
    check_index("key", key, len(ids), "position of the text")
    x = model.hidden(ids, layer)[[query, key]]
    kv = head // (arch.n_heads // arch.n_kv_heads)
    where = torch.tensor([query, key], device=x.device)
    q, k, _ = model.layer_qkv(layer, x, model.rotation(where, x))
    rope = None
    if arch.positions == "rope":
        q0, k0, _ = model.layer_qkv(layer, x, model.rotation(torch.zeros(2, dtype=torch.long, device=x.device), x))
        rope = (q0[head, 0], k0[kv, 1], arch.rope_pairing, thetas(arch.d_k, arch.rope_base, model.factors))
    masked = model.decoder and (key > query or bool(arch.window and key <= query - arch.window))
    return split_cell(layer, head, query, key, q[head, 0], k[kv, 1], math.sqrt(arch.d_k), masked, rope)


def trace_score_split(trace: Any, head: int, query: int, key: int) -> ScoreSplit:
    """The same split of one cell of a lab trace's scaled scores (engine.tracing.compute: the toy block, the GPT-2
    block, a model's layer), with the trace's own scale (√d_k, 1 or d_k) and positions."""
    spec, p = trace.spec, trace.projection
    h, n_q, n_k = p.query.shape[0], p.query.shape[1], p.key.shape[1]
    check_index("head", head, h, "head")
    check_index("query", query, n_q, "query position")
    check_index("key", key, n_k, "key position")
    kv = head // (h // p.key.shape[0])
    rope = None
    if p.q_rot is not None and p.k_rot is not None:
        rope = (p.q[head, query], p.k[kv, key], spec.rope_pairing, thetas(spec.d_k, spec.rope_base, spec.rope_factors))
    masked = bool(torch.isinf(trace.mask.masked[head, query, key]))
    return split_cell(spec.layer, head, query, key, p.query[head, query], p.key[kv, key], spec.scale_value, masked,
                      rope)  # fmt: skip


# -- weight against effect ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class WeightEffect(Held):
    """For one head and query: each source's weight α (S,), its value-weighted norm (S,), and the metric's change
    when it is removed from that head at that query (S,), with the clean metric and the Spearman correlations."""

    layer: int
    head: int
    position: int
    metric: str  # "loss" (−log p(target)) or "logit_diff" (target − contrast)
    mean: bool  # each source's value replaced by the head's mean value (False: zeroed)
    clean: float
    weights: torch.Tensor
    norms: torch.Tensor
    effects: torch.Tensor
    spearman_weight: float  # rank correlation of α with |effect|
    spearman_norm: float  # of the value-weighted norm with |effect|


def ranks(x: torch.Tensor) -> torch.Tensor:
    """Ranks from 1, ties given their average rank."""
    x = x.double()
    order = torch.argsort(x, stable=True)
    r = torch.empty_like(x)
    r[order] = torch.arange(1, len(x) + 1, dtype=torch.float64)
    for value in torch.unique(x):
        tie = x == value
        if int(tie.sum()) > 1:
            r[tie] = r[tie].mean()
    return r


def spearman(a: torch.Tensor, b: torch.Tensor) -> float:
    """Spearman's rank correlation (NaN when either side is constant or shorter than 2)."""
    if len(a) < 2:
        return math.nan
    ra, rb = ranks(a), ranks(b)
    ra, rb = ra - ra.mean(), rb - rb.mean()
    den = float(torch.sqrt((ra * ra).sum() * (rb * rb).sum()))
    return float((ra * rb).sum()) / den if den > 0 else math.nan


def metric_of(logits: torch.Tensor, target: int, contrast: int | None) -> torch.Tensor:
    """(R, vocab) logits → (R,): the loss of `target`, or the logit difference target − contrast."""
    logits = logits.float()
    if contrast is None:
        return torch.logsumexp(logits, -1) - logits[:, target]
    return logits[:, target] - logits[:, contrast]


def one_row_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, k_row: torch.Tensor, v_row: torch.Tensor,
                      window: int) -> torch.Tensor:  # fmt: skip
    """R rows at one position p over the clean keys and values before it (H_kv, p, d_k) and each row's own
    (H_kv, R, d_k): queries q (H, R, d_k) → (H, R, d_k)."""
    h, r, dk = q.shape
    kv, p = k.shape[0], k.shape[1]
    g = h // kv
    if window and p >= window:  # a sliding window: the last `window` keys, this one included
        k, v = k[:, p - window + 1 :], v[:, p - window + 1 :]
    qs = q.view(kv, g, r, dk) / math.sqrt(dk)
    before = qs @ k.unsqueeze(1).transpose(-1, -2)  # (kv, g, R, p')
    own = (qs * k_row.unsqueeze(1)).sum(-1, keepdim=True)  # (kv, g, R, 1)
    w = torch.softmax(torch.cat([before, own], -1), -1)
    out = w[..., :-1] @ v.unsqueeze(1) + w[..., -1:] * v_row.unsqueeze(1)
    return out.reshape(h, r, dk)


def weight_effect(
    model: Any, ids: Sequence[int], layer: int, head: int, position: int, target: int, contrast: int | None = None,
    max_tokens: int = MAX_TOKENS, max_rows: int = 256, mean: bool = False,
) -> WeightEffect:  # fmt: skip
    """Each source j ≤ `position` removed from `head` of `layer` at `position` alone (its value zeroed there, or with
    `mean` replaced by the mean of the head's values over positions 0 … position); the change of the metric at
    `position` (the loss of `target`, or target − contrast). `max_rows` sources run at once."""
    return weight_effects(model, ids, layer, [head], position, target, contrast, max_tokens, max_rows, mean=mean)[0]


@torch.inference_mode()
def weight_effects(
    model: Any, ids: Sequence[int], layer: int, heads: Sequence[int] | None, position: int, target: int,
    contrast: int | None = None, max_tokens: int = MAX_TOKENS, max_rows: int = 256, max_runs: int = 4096,
    mean: bool = False,
) -> list[WeightEffect]:  # fmt: skip
    """`weight_effect` for several heads of `layer` (None: every head) from one clean run: heads × sources rows,
    `max_rows` at a time, `max_runs` rows in all."""
    return head_effects(model, ids, [(layer, heads)], position, target, contrast, max_tokens, max_rows, max_runs,
                        mean)[0][0]  # fmt: skip


@torch.inference_mode()
def head_effects(
    model: Any, ids: Sequence[int], asks: Sequence[tuple[int, Sequence[int] | None]], position: int, target: int,
    contrast: int | None = None, max_tokens: int = MAX_TOKENS, max_rows: int = 256, max_runs: int = 4096,
    mean: bool = False, max_bytes: int = MAX_BYTES,
) -> list[tuple[list[WeightEffect], ValueNorms]]:  # fmt: skip
    """`weight_effects` for each (layer, heads) of `asks` with each asked layer's value-weighted norms
    (`value_weighted_norms` of ids[: position + 1]), sharing the run up to the asked layers: what a page asks for
    one head's layer and the model's sink head runs the layers below the deepest one once, each asked layer with
    its weights seen and the layers above it (the run on from that layer's output), not four whole forward passes.
    Each ask runs as `weight_effects` runs it alone (the stream up to the layer as `hidden` computes it, the same
    chunks of `max_rows`), so the numbers are the same, bit for bit; `max_runs` bounds each ask's rows."""
    check_pre_ln_decoder(model)
    ids = check_ids(model, ids, max_tokens)
    arch = model.arch
    asked: list[tuple[int, list[int]]] = []
    for layer, given in asks:
        check_index("layer", layer, arch.n_layer, "layer")
        chosen = list(range(arch.n_heads)) if given is None else [int(h) for h in given]
        for h in chosen:
            check_index("head", h, arch.n_heads, "head")
        asked.append((layer, chosen))
    check_index("position", position, len(ids), "position of the text")
    check_token(model, "target", target)
    if contrast is not None:
        check_token(model, "contrast", contrast)
    if max_rows < 1:
        raise ValueError(f"max_rows: must be at least 1, got {max_rows}")
    p = position
    sources = [j for j in range(p + 1) if not (arch.window and j <= p - arch.window)]
    for _, chosen in asked:
        if len(chosen) * len(sources) > max_runs:
            raise ValueError(f"heads: {len(chosen)} heads × {len(sources)} sources is more than max_runs={max_runs} "
                             "runs")  # fmt: skip
    ids = ids[: p + 1]
    n, h_all = len(ids), arch.n_heads
    layers = sorted({layer for layer, _ in asked})
    check_bytes("ids", 4 * 3 * h_all * n * n * len(layers), max_bytes)
    x = model.embed(ids)
    rot = model.rotation(torch.arange(n, device=x.device), x)
    streams = []  # the stream entering each layer up to the deepest asked one, run as `hidden` runs it
    for i in range(max(layers)):
        streams.append(x)
        q, k, v = model.layer_qkv(i, x, rot)
        x = model.layer_rest(i, x, model.attend(q, k, v))
    streams.append(x)
    d_k = arch.d_k
    runs_from: dict[int, tuple[ValueNorms, torch.Tensor, torch.Tensor, torch.Tensor, list[Any], list[Any], float]] = {}
    for layer in layers:  # each asked layer's weights seen, and the run on from it, as `weight_effects` runs alone
        x = streams[layer]
        q, k, v = model.layer_qkv(layer, x, rot)
        full = torch.zeros(h_all, n, n, device=x.device)  # the layer's weights (H, N, N), as `layer_run` keeps them

        def seen(r0: int, w: torch.Tensor, full: torch.Tensor = full) -> None:
            full[:, r0 : r0 + w.shape[1], : w.shape[2]] = w.float()

        heads_layer = model.attend(q, k, v, seen)
        v_layer = v.repeat_interleave(h_all // arch.n_kv_heads, 0)  # (H, N, d_k) per query head
        norms = norms_of(full, v, model.attention_weights(layer).w_o.float(), layer=layer)
        keys: list[Any] = [None] * arch.n_layer
        values: list[Any] = [None] * arch.n_layer
        x = model.layer_rest(layer, x, heads_layer)
        for i in range(layer + 1, arch.n_layer):
            q, k, v = model.layer_qkv(i, x, rot)
            keys[i], values[i] = k, v
            x = model.layer_rest(i, x, model.attend(q, k, v))
        clean = float(metric_of(model.unembed(model.final(x[p : p + 1])), target, contrast)[0])
        runs_from[layer] = (norms, heads_layer, v_layer, full[:, -1].clone(), keys, values, clean)
    metric = "loss" if contrast is None else "logit_diff"
    answers = []
    buffer: torch.Tensor | None = None
    for layer, heads in asked:
        norms, heads_layer, v_layer, w_layer, keys, values, clean = runs_from[layer]  # w_layer: (H, N) row p
        w_o = model.attention_weights(layer).w_o.float().reshape(h_all, d_k, -1)
        moved = torch.linalg.vector_norm(torch.einsum("hnk,hkd->hnd", v_layer.float(), w_o), dim=-1)  # (H, N)
        runs = [(h, j) for h in heads for j in sources]
        effects = torch.empty(len(runs))
        for s0 in range(0, len(runs), max_rows):
            chunk = runs[s0 : s0 + max_rows]
            r = len(chunk)
            hs = torch.tensor([h for h, _ in chunk], device=x.device)
            js = torch.tensor([j for _, j in chunk], device=x.device)
            rows = torch.arange(r, device=x.device)
            out = heads_layer[:, p : p + 1].repeat(1, r, 1)  # (H, R, d_k)
            removed = v_layer[hs, js] - (v_layer[hs].mean(1) if mean else 0)  # (R, d_k): zeroed, or the mean instead
            out[hs, rows] -= w_layer[hs, js].to(out.dtype)[:, None] * removed
            y = model.layer_rest(layer, streams[layer][p : p + 1].expand(r, -1), out)
            one = model.rotation(torch.full((r,), p, device=x.device), y)
            for i in range(layer + 1, arch.n_layer):
                q, k, v = model.layer_qkv(i, y, one)
                y = model.layer_rest(i, y, one_row_attention(q, keys[i][:, :p], values[i][:, :p], k, v, arch.window))
            if buffer is None:  # the rows' logits (R, vocab), written into one buffer: a fresh one faults its pages
                most = min(max_rows, max(len(chosen) for _, chosen in asked) * len(sources))  # every ask's chunks
                buffer = torch.empty(most, arch.vocab, dtype=y.dtype, device=y.device)
            logits = model.unembed(model.final(y), out=buffer[:r])
            effects[s0 : s0 + r] = metric_of(logits, target, contrast).cpu() - clean
        answer, m = [], len(sources)
        for a, h in enumerate(heads):
            weights, moved_h = w_layer[h, sources].cpu(), (w_layer[h] * moved[h])[sources].cpu()
            e = effects[a * m : (a + 1) * m]
            answer.append(WeightEffect(layer, h, p, metric, mean, clean, weights, moved_h, e,
                                       spearman(weights, e.abs()), spearman(moved_h, e.abs())))  # fmt: skip
        answers.append((answer, norms))
    return answers


def pooled(effects: Sequence[WeightEffect]) -> tuple[float, float]:
    """The rank correlation over every head of `effects` together (a layer's, from `weight_effects`): of the weights
    with |effect|, and of the value-weighted norms with |effect|."""
    if not effects:
        raise ValueError("effects: none given")
    weights = torch.cat([e.weights for e in effects])
    norms = torch.cat([e.norms for e in effects])
    moved = torch.cat([e.effects for e in effects]).abs()
    return spearman(weights, moved), spearman(norms, moved)


# -- the sink head: big weight, small norm --------------------------------------------------------------------------


@dataclass(frozen=True)
class SinkContrast(Held):
    """For every head (L, H): the mean over queries i ≥ 1 of its weight on key 0 (engine/sinks.py's `sink_share`),
    of key 0's share of the value-weighted norms ‖α_ij v_j W_O^h‖ of the row, and ‖v_0 W_O^h‖ over the mean of
    ‖v_j W_O^h‖ for j ≥ 1 (below 1: the first token's vector is small: a big weight moving little); the strongest
    sink head (the largest weight share)."""

    weight_share: torch.Tensor
    norm_share: torch.Tensor
    value_ratio: torch.Tensor
    layer: int
    head: int


@torch.inference_mode()
def sink_contrast(model: Any, ids: Sequence[int], max_tokens: int = MAX_TOKENS) -> SinkContrast:
    """How much of each head's weight goes to the first token, beside how much of what it moves comes from it."""
    return sinks_and_rollout(model, ids, max_tokens, rollout=False)[0]


@torch.inference_mode()
def sinks_and_rollout(
    model: Any, ids: Sequence[int], max_tokens: int = MAX_TOKENS, max_bytes: int = MAX_BYTES, rollout: bool = True
) -> tuple[SinkContrast, Rollout | None]:
    """`sink_contrast` and (with `rollout`) `rollout` of the same `ids` from ONE forward pass: each layer's weights,
    seen a block of query rows at a time, feed both (each head's mean over the heads as `rollout` takes it, the
    same numbers)."""
    ids = check_ids(model, ids, max_tokens)
    if len(ids) < 2:
        raise ValueError("ids: a sink needs at least two tokens")
    arch = model.arch
    n, h, dk = len(ids), arch.n_heads, arch.d_k
    if rollout:
        check_bytes("ids", rollout_bytes(arch.n_layer, h, n), max_bytes)
    x = model.embed(ids)
    rot = model.rotation(torch.arange(n, device=x.device), x)
    weight_share, norm_share, ratio = (torch.zeros(arch.n_layer, h) for _ in range(3))
    means: list[torch.Tensor] = []
    for i in range(arch.n_layer):
        q, k, v = model.layer_qkv(i, x, rot)
        share = torch.zeros(h, device=x.device)
        moved_share = torch.zeros(h, device=x.device)
        w_o = model.attention_weights(i).w_o.float().reshape(h, dk, -1)
        vn = torch.linalg.vector_norm(torch.einsum("hnk,hkd->hnd", v.repeat_interleave(h // v.shape[0], 0).float(),
                                                   w_o), dim=-1)  # fmt: skip
        current = torch.zeros(h, n, n, device=x.device) if rollout else None

        def seen(r0: int, w: torch.Tensor, share: torch.Tensor = share, moved: torch.Tensor = moved_share,
                 vn: torch.Tensor = vn, current: torch.Tensor | None = current) -> None:  # fmt: skip
            if current is not None:
                current[:, r0 : r0 + w.shape[1], : w.shape[2]] = w.float()
            w = w.float()[:, max(0, 1 - r0) :]  # queries 1 …
            norms = w * vn[:, None, : w.shape[-1]]
            share.add_(w[..., 0].sum(-1))
            moved.add_((norms[..., 0] / norms.sum(-1).clamp_min(1e-30)).sum(-1))

        x = model.layer_rest(i, x, model.attend(q, k, v, seen))
        if current is not None:
            means.append(current.mean(0, keepdim=True))
        weight_share[i], norm_share[i] = (share / (n - 1)).cpu(), (moved_share / (n - 1)).cpu()
        ratio[i] = (vn[:, 0] / vn[:, 1:].mean(-1).clamp_min(1e-30)).cpu()
    top = int(weight_share.argmax())
    return SinkContrast(weight_share, norm_share, ratio, top // h, top % h), rollout_of(means) if rollout else None


# -- attention flow ---------------------------------------------------------------------------------------------------


def flow_edges(n_layer: int, n: int, causal: bool) -> int:
    """The edges of the flow network of `n_layer` layers over `n` tokens: the cost, said before it starts (each input
    token is one max-flow over them)."""
    return n_layer * (n * (n + 1) // 2 if causal else n * n)


def flow_of(layers: torch.Tensor, query: int, max_edges: int = 20_000) -> torch.Tensor:
    """Attention flow (Abnar & Zuidema 2020) from `query` after the last of `layers` (L, N, N: each layer's Â, rows
    the queries) back to each input token (N,): the maximum flow through the layered graph whose edge from (l + 1, i)
    to (l, j) has capacity Â_l[i, j]. `max_edges` bounds the graph."""
    import networkx as nx

    n_layer, n, _ = layers.shape
    check_index("query", query, n, "position of the text")
    a = layers.double().cpu().numpy()
    edges = int((a > 0).sum())
    if edges > max_edges:
        raise ValueError(f"max_edges: the flow network has {edges:,} edges, more than max_edges={max_edges:,}")
    g = nx.DiGraph()
    for layer in range(n_layer):
        rows, cols = a[layer].nonzero()
        g.add_edges_from(((layer + 1, int(i)), (layer, int(j)), {"capacity": float(a[layer, i, j])})
                         for i, j in zip(rows, cols, strict=True))  # fmt: skip
    source = (n_layer, query)
    out = torch.zeros(n, dtype=torch.float64)
    for j in range(n):
        if g.has_node((0, j)) and g.has_node(source):
            out[j] = nx.maximum_flow_value(g, source, (0, j))
    return out


def attention_flow(
    model: Any, ids: Sequence[int], query: int, max_tokens: int = MAX_TOKENS, max_edges: int = 20_000
) -> torch.Tensor:
    """Attention flow from `query` back to each input token of `ids` through every layer of `model` (N,); the graph
    is bounded before any forward pass runs (`flow_edges`)."""
    ids = check_ids(model, ids, max_tokens)
    check_index("query", query, len(ids), "position of the text")
    edges = flow_edges(model.arch.n_layer, len(ids), model.decoder)
    if edges > max_edges:
        raise ValueError(f"max_edges: the flow network has {edges:,} edges, more than max_edges={max_edges:,}")
    return flow_of(rollout(model, ids, max_tokens).layers, query, max_edges)
