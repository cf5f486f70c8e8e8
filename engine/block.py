"""A whole decoder block around the five attention stages: norms, residuals and the feed-forward network.

    Pre-LN (GPT-2):   r = x + Attn(LN1(x));   y = r + FFN(LN2(r))
    Post-LN (2017):   r = LN1(x + Attn(x));   y = LN2(r + FFN(r))

LayerNorm or RMSNorm; a GELU FFN (d → d_ff → d, GPT-2) or SwiGLU (SiLU(x W_gate) ⊙ (x W_up) W_down, LLaMA). The
attention inside is `attention.run`, the same five stages the lab shows, kept as a Trace.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

import torch
import torch.nn.functional as F

from . import attention, positions, sources
from .attention import Checks
from .device import CPU, torch_dtype
from .errors import Message
from .memo import bytes_bounded, python_bytes, tensor_bytes
from .sources import seed_of
from .spec import Spec, SpecError

NORMS = ("layernorm", "rmsnorm")
FFNS = ("gelu", "swiglu", "geglu")  # geglu: Gemma's gate through GELU
PLACEMENTS = ("pre", "post")
GELUS = ("tanh", "exact")
PRE_ORDER = ("ln1", "projection", "scores", "mask", "softmax", "weighted_sum", "residual1", "ln2", "ffn_hidden",
             "ffn_out", "output")  # fmt: skip
POST_ORDER = ("projection", "scores", "mask", "softmax", "weighted_sum", "residual1", "ln1", "ffn_hidden", "ffn_out",
              "ln2", "output")  # fmt: skip
BLOCK_STAGES = frozenset(PRE_ORDER)


@dataclass(frozen=True)
class BlockSpec:
    attn: Spec  # tokens, sizes, mask, scale, seed, device: everything the attention needs
    norm: str = "layernorm"
    ffn: str = "gelu"
    d_ff: int = 0  # 0 means 4·d_model
    placement: str = "pre"
    gelu: str = "tanh"  # GPT-2 uses the tanh approximation; nn.GELU() defaults to the exact erf form
    eps: float = 1e-5

    @property
    def ff(self) -> int:
        return self.d_ff or 4 * self.attn.d_model

    @property
    def order(self) -> tuple[str, ...]:
        return PRE_ORDER if self.placement == "pre" else POST_ORDER

    def summary(self) -> dict[str, object]:
        return self.attn.summary() | {
            "norm": self.norm,
            "ffn": self.ffn,
            "d_ff": self.ff,
            "placement": self.placement,
            "gelu": self.gelu,
            "eps": self.eps,
        }


BLOCK_DEFAULTS = {"norm": "layernorm", "ffn": "gelu", "placement": "pre", "gelu": "tanh"}  # GPT-2's block


def make_block_spec(
    attn: Spec,
    *,
    norm: str | None = None,
    ffn: str | None = None,
    d_ff: int | None = None,
    placement: str | None = None,
    gelu: str | None = None,
    eps: float | None = None,
    max_d_ff: int = 16384,
    memory_budget_bytes: int | None = None,
    model: Any = None,
) -> BlockSpec:
    """A decoder block around `attn`. Unset choices are GPT-2's (layernorm, gelu, pre, tanh, 4·d_model, 1e-5).
    `model` is a pretrained model's info (norm, ffn, placement, gelu, d_ff, eps): its block is what it is, so a
    different choice is the request's error, not ignored. Raises `SpecError` naming the field at fault."""
    chosen = {"norm": norm, "ffn": ffn, "placement": placement, "gelu": gelu}
    defaults = dict(BLOCK_DEFAULTS)
    if model is not None:
        own = {k: getattr(model, k) for k in chosen}
        for k, v in chosen.items():
            if v is not None and v != own[k]:
                raise SpecError(k, Message("block_uses", model=attn.preset, name=k, value=own[k]))
        if d_ff is not None:
            raise SpecError("d_ff", Message("ffn_fixed", model=attn.preset))
        defaults, d_ff = own, model.d_ff
        eps = model.eps if eps is None else eps
    norm, ffn, placement, gelu = (v if v is not None else defaults[k] for k, v in chosen.items())
    eps = 1e-5 if eps is None else eps
    for name, value, choices in (
        ("norm", norm, NORMS),
        ("ffn", ffn, FFNS),
        ("placement", placement, PLACEMENTS),
        ("gelu", gelu, GELUS),
    ):
        if value not in choices:
            raise SpecError(name, Message("unknown_choice", kind=name, value=value, choices=", ".join(choices)))
    d_ff = d_ff or 0
    if not 0 <= d_ff <= max_d_ff:
        raise SpecError("d_ff", Message("d_ff_block", limit=max_d_ff, value=d_ff))
    if not (math.isfinite(eps) and 0 < eps <= 1):
        raise SpecError("eps", Message("eps_range", value=eps))
    if attn.kv_tokens:
        raise SpecError("kv_tokens", Message("block_self"))
    spec = BlockSpec(attn, norm, ffn, d_ff, placement, gelu, eps)
    if memory_budget_bytes is not None:
        n, d = attn.n_tokens, attn.d_model
        extra = (3 * n * spec.ff + 8 * n * d + 3 * d * spec.ff) * 4
        if extra > memory_budget_bytes:
            raise SpecError("d_ff", Message("ffn_budget"))
    return spec


@dataclass(frozen=True)
class BlockWeights:
    ln1_w: torch.Tensor  # (d,) gain
    ln1_b: torch.Tensor | None  # (d,) LayerNorm only
    ln2_w: torch.Tensor
    ln2_b: torch.Tensor | None
    w_up: torch.Tensor  # (d, d_ff): GELU's first layer, SwiGLU's up
    w_down: torch.Tensor  # (d_ff, d)
    w_gate: torch.Tensor | None = None  # (d, d_ff) SwiGLU only
    b_up: torch.Tensor | None = None  # (d_ff,) GELU with biases
    b_down: torch.Tensor | None = None  # (d,)


@bytes_bounded(128 * 2**20)
def random_block_weights(seed: int, d: int, d_ff: int, norm: str, ffn: str, bias: bool, std: float) -> BlockWeights:
    """Norm gains 1 and shifts 0 (as initialised); FFN matrices N(0, std²), FFN biases 0."""
    g = torch.Generator().manual_seed(seed_of("block", seed))
    w_up = torch.randn(d, d_ff, generator=g, device=CPU) * std
    w_down = torch.randn(d_ff, d, generator=g, device=CPU) * std
    w_gate = torch.randn(d, d_ff, generator=g, device=CPU) * std if ffn != "gelu" else None
    shift = torch.zeros(d, device=CPU) if norm == "layernorm" else None
    with_bias = bias and ffn == "gelu"
    return BlockWeights(
        ln1_w=torch.ones(d, device=CPU),
        ln1_b=shift,
        ln2_w=torch.ones(d, device=CPU),
        ln2_b=None if shift is None else shift.clone(),
        w_up=w_up,
        w_down=w_down,
        w_gate=w_gate,
        b_up=torch.zeros(d_ff, device=CPU) if with_bias else None,
        b_down=torch.zeros(d, device=CPU) if with_bias else None,
    )


@dataclass(frozen=True)
class BlockTrace:
    spec: BlockSpec
    stages: dict[str, dict[str, torch.Tensor]]  # block-level stages (ln1, residual1, …); attention ones via `attention`
    attention: attention.Trace
    weights: BlockWeights
    max_abs_diff_vs_reference: float  # against torch's own modules (F.layer_norm, SDPA, F.gelu)

    def stage(self, key: str) -> dict[str, torch.Tensor]:
        return self.attention.stage(key) if key in attention.STAGES else self.stages[key]

    @property
    def nbytes(self) -> int:
        """Everything the entry holds: every stage, the attention trace, the block's weights, the request."""
        a = self.attention
        held = tensor_bytes(self.stages, a.projection, a.scores, a.mask, a.softmax, a.weighted_sum, a.weights,
                            self.weights)  # fmt: skip
        return held + python_bytes(a.spec.tokens) + python_bytes([a.spec.x, a.spec.w_q, a.spec.w_k, a.spec.w_v])

    @property
    def order(self) -> tuple[str, ...]:
        return self.spec.order

    @property
    def n_heads(self) -> int:
        return self.spec.attn.n_heads

    @property
    def tokens(self) -> tuple[str, ...]:
        return self.spec.attn.tokens

    def summary(self) -> dict[str, object]:
        return self.spec.summary()

    def check_values(self) -> dict[str, object]:
        return self.attention.check_values() | {"max_abs_diff_vs_reference": self.max_abs_diff_vs_reference}

    def verify(self, heads: Iterable[int]) -> Checks:
        """The attention's own check, for the heads an answer shows."""
        return self.attention.verify(heads)


def normalise(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, kind: str, eps: float) -> torch.Tensor:
    """LayerNorm or RMSNorm. The statistics are taken in float32 whatever the working dtype (in float16, (x − μ)²
    and x·x overflow above 256, and SmolLM2's residual stream reaches 22,517), then the result is cast back."""
    h = x.float()
    if kind == "layernorm":
        mu = h.mean(-1, keepdim=True)
        var = ((h - mu) ** 2).mean(-1, keepdim=True)  # biased, as LayerNorm
        y = (h - mu) / torch.sqrt(var + eps) * w.float()
        y = y if b is None else y + b.float()
    else:
        y = h / torch.sqrt((h * h).mean(-1, keepdim=True) + eps) * w.float()  # RMSNorm: no centring, no shift
    return y.to(x.dtype)


def _gelu(pre: torch.Tensor, gelu: str) -> torch.Tensor:
    if gelu == "tanh":
        return 0.5 * pre * (1 + torch.tanh(math.sqrt(2 / math.pi) * (pre + 0.044715 * pre**3)))
    return 0.5 * pre * (1 + torch.erf(pre / math.sqrt(2)))


def feed_forward(h: torch.Tensor, w: BlockWeights, ffn: str, gelu: str) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    if ffn == "gelu":
        pre = h @ w.w_up if w.b_up is None else torch.addmm(w.b_up, h, w.w_up)  # (N, d_ff)
        act = _gelu(pre, gelu)
        hidden = {"pre_activation": pre, "ffn_hidden": act}
    else:
        assert w.w_gate is not None
        gate, up = h @ w.w_gate, h @ w.w_up  # (N, d_ff) each
        # GELU(gate) ⊙ up (GeGLU), or SiLU(gate) ⊙ up (SwiGLU)
        act = _gelu(gate, gelu) * up if ffn == "geglu" else gate * torch.sigmoid(gate) * up
        hidden = {"gate": gate, "up": up, "ffn_hidden": act}
    out = act @ w.w_down if w.b_down is None else torch.addmm(w.b_down, act, w.w_down)  # (N, d)
    return hidden, out


def reference(x: torch.Tensor, aw: sources.Weights, w: BlockWeights, spec: BlockSpec, add_mask: torch.Tensor):
    """The same block from torch's fused functions, written independently of the staged path."""
    s = spec.attn
    n, d = x.shape

    def norm(t: torch.Tensor, g: torch.Tensor, b: torch.Tensor | None) -> torch.Tensor:
        if spec.norm == "layernorm":
            return F.layer_norm(t, (d,), g, b, spec.eps)
        return F.rms_norm(t, (d,), g, spec.eps)

    def attn(t: torch.Tensor) -> torch.Tensor:
        q = F.linear(t, aw.w_q.T, aw.b_q).view(n, s.n_heads, s.d_k).transpose(0, 1)
        k, v = (F.linear(t, m.T, b).view(n, s.kv_heads, s.d_k).transpose(0, 1) for m, b in
                ((aw.w_k, aw.b_k), (aw.w_v, aw.b_v)))  # fmt: skip
        if s.positions == "rope":
            pos = torch.arange(n, device=t.device)
            q = positions.rotate(q, pos, s.rope_base, s.rope_pairing, s.rope_factors)
            k = positions.rotate(k, pos, s.rope_base, s.rope_pairing, s.rope_factors)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=add_mask, scale=1 / s.scale_value,
                                           enable_gqa=s.kv_heads != s.n_heads)  # fmt: skip
        y = torch.nan_to_num(y, nan=0.0)  # rows with every key masked: zeros, as the engine defines them
        return F.linear(y.transpose(0, 1).reshape(n, d), aw.w_o.T, aw.b_o)

    def ffn(t: torch.Tensor) -> torch.Tensor:
        if spec.ffn == "gelu":
            hidden = F.gelu(F.linear(t, w.w_up.T, w.b_up), approximate="tanh" if spec.gelu == "tanh" else "none")
        else:
            assert w.w_gate is not None
            gate = t @ w.w_gate
            approximate = "none" if spec.gelu == "exact" else "tanh"
            hidden = (F.silu(gate) if spec.ffn == "swiglu" else F.gelu(gate, approximate=approximate)) * (t @ w.w_up)
        return F.linear(hidden, w.w_down.T, w.b_down)

    if spec.placement == "pre":
        r = x + attn(norm(x, w.ln1_w, w.ln1_b))
        return r + ffn(norm(r, w.ln2_w, w.ln2_b))
    r = norm(x + attn(x), w.ln1_w, w.ln1_b)
    return norm(r + ffn(r), w.ln2_w, w.ln2_b)


@torch.inference_mode()
def compute_block(spec: BlockSpec, model: Any = None) -> BlockTrace:
    """Every stage of one block; `model` is the pretrained model behind a model preset."""
    s = spec.attn
    device, dtype = torch.device(s.device), torch_dtype(s.dtype)
    w: BlockWeights | None = None
    if model is not None:
        x = model.hidden(s.token_ids, s.layer).to(device, dtype)
        aw = sources.cast(model.attention_weights(s.layer), device, dtype)
        w = model.block_weights(s.layer)
    else:
        x, aw = sources.load(s, device, dtype)
    if w is None:
        w = random_block_weights(s.seed, s.d_model, spec.ff, spec.norm, spec.ffn, s.bias, s.init_std)
    w = BlockWeights(**{k: None if v is None else v.to(device=device, dtype=dtype) for k, v in vars(w).items()})  # type: ignore[arg-type]
    stages: dict[str, dict[str, torch.Tensor]] = {}
    table = None
    if s.positions in ("sinusoidal", "learned"):  # added to the residual stream, as GPT-2 adds wpe, not inside
        table = attention.position_table(s, s.n_tokens, s.d_model).to(device, dtype)
        x = x + table
        s = replace(s, positions="none")
    if spec.placement == "pre":
        h = normalise(x, w.ln1_w, w.ln1_b, spec.norm, spec.eps)
        stages["ln1"] = {"input": x, "ln1": h} | ({} if table is None else {"positions": table})
        att = attention.run(s, h, aw)
        r = x + att.weighted_sum.output
        stages["residual1"] = {"residual1": r}
        h2 = normalise(r, w.ln2_w, w.ln2_b, spec.norm, spec.eps)
        stages["ln2"] = {"ln2": h2}
        hidden, out = feed_forward(h2, w, spec.ffn, spec.gelu)
        stages["ffn_hidden"], stages["ffn_out"] = hidden, {"ffn_out": out}
        stages["output"] = {"output": r + out}
    else:
        att = attention.run(s, x, aw)
        r = x + att.weighted_sum.output
        stages["residual1"] = {"input": x, "residual1": r} | ({} if table is None else {"positions": table})
        h = normalise(r, w.ln1_w, w.ln1_b, spec.norm, spec.eps)
        stages["ln1"] = {"ln1": h}
        hidden, out = feed_forward(h, w, spec.ffn, spec.gelu)
        stages["ffn_hidden"], stages["ffn_out"] = hidden, {"ffn_out": out}
        y = normalise(h + out, w.ln2_w, w.ln2_b, spec.norm, spec.eps)
        stages["ln2"] = {"residual2": h + out, "ln2": y}
        stages["output"] = {"output": y}
    ref = reference(x, aw, w, replace(spec, attn=s), att.mask.mask)
    diff = float((ref - stages["output"]["output"]).abs().max())
    return BlockTrace(spec, stages, att, w, diff)
