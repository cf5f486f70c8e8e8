"""Parameter counts of a decoder-only transformer, exactly, next to the chapter's 12·L·d² estimate.

Per block, attention holds W_Q, W_K, W_V, W_O (K and V shrink to n_kv_heads·d_k columns under GQA/MQA) and the FFN
two d × d_ff matrices (GELU, as GPT-2) or three (SwiGLU: gate, up, down, as LLaMA). 12·L·d² assumes d_ff = 4d, no
GQA, and ignores biases, norms and embeddings; `ratio` shows how far that goes.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

from .errors import Message
from .spec import SpecError


@dataclass(frozen=True)
class ModelShape:
    n_layer: int  # blocks
    d_model: int
    n_heads: int
    vocab: int
    n_ctx: int  # learned position table rows (0 for RoPE models)
    ffn: str = "gelu"  # gelu: up + down; swiglu: gate + up + down
    d_ff: int = 0  # 0 means 4·d_model
    tied_embeddings: bool = True  # lm_head shares the token embedding
    bias: bool = True  # linear layers carry biases (GPT-2) or not (LLaMA)
    n_kv_heads: int = 0  # 0 means n_heads (plain multi-head attention)
    norm: str = "layernorm"  # layernorm: weight + bias; rmsnorm: weight only
    learned_positions: bool = True  # GPT-2's wpe; False for RoPE

    @property
    def ff(self) -> int:
        return self.d_ff or 4 * self.d_model

    @property
    def kv_heads(self) -> int:
        return self.n_kv_heads or self.n_heads


MODELS: dict[str, ModelShape] = {
    "gpt2-small": ModelShape(12, 768, 12, 50257, 1024),
    "gpt2-medium": ModelShape(24, 1024, 16, 50257, 1024),
    "gpt2-large": ModelShape(36, 1280, 20, 50257, 1024),
    "gpt2-xl": ModelShape(48, 1600, 25, 50257, 1024),
    "llama-2-7b": ModelShape(
        32, 4096, 32, 32000, 0, "swiglu", 11008, tied_embeddings=False, bias=False, norm="rmsnorm",
        learned_positions=False,
    ),
}  # fmt: skip


def validate(shape: ModelShape) -> ModelShape:
    limits = {"n_layer": 10_000, "d_model": 1_000_000, "n_heads": 100_000, "vocab": 100_000_000, "n_ctx": 100_000_000}
    for name, hi in limits.items():
        value = getattr(shape, name)
        lo = 0 if name == "n_ctx" else 1
        if not lo <= value <= hi:
            raise SpecError(name, Message("between", low=lo, high=f"{hi:,}", value=value))
    if shape.ffn not in ("gelu", "swiglu"):
        raise SpecError("ffn", Message("unknown_either", kind="ffn", value=shape.ffn, a="gelu", b="swiglu"))
    if shape.norm not in ("layernorm", "rmsnorm"):
        raise SpecError("norm", Message("unknown_either", kind="norm", value=shape.norm, a="layernorm", b="rmsnorm"))
    if shape.d_model % shape.n_heads:
        raise SpecError("n_heads", Message("not_divisible", d_model=shape.d_model, n_heads=shape.n_heads))
    if not 0 <= shape.d_ff <= 10_000_000:
        raise SpecError("d_ff", Message("d_ff_range", value=shape.d_ff))
    if not 0 <= shape.n_kv_heads <= shape.n_heads or (shape.n_kv_heads and shape.n_heads % shape.n_kv_heads):
        raise SpecError("n_kv_heads", Message("kv_heads_divide", n_heads=shape.n_heads, value=shape.n_kv_heads))
    return shape


def shape_from(preset: str | None = None, **overrides: object) -> ModelShape:
    """A preset with some fields replaced, or a shape built from explicit fields alone."""
    given = {k: v for k, v in overrides.items() if v is not None}
    if preset is not None:
        if preset not in MODELS:
            raise SpecError("preset", Message("unknown_choice", kind="model", value=preset, choices=", ".join(MODELS)))
        return validate(replace(MODELS[preset], **given))  # type: ignore[arg-type]
    missing = [f for f in ("n_layer", "d_model", "n_heads", "vocab") if f not in given]
    if missing:
        raise SpecError(missing[0], Message("required_without_preset"))
    given.setdefault("n_ctx", 0)
    return validate(ModelShape(**given))  # type: ignore[arg-type]


def count(shape: ModelShape) -> dict[str, object]:
    d, ff, L = shape.d_model, shape.ff, shape.n_layer
    d_kv = shape.kv_heads * (d // shape.n_heads)
    b = shape.bias
    attention = {
        "w_q": d * d + (d if b else 0),
        "w_k": d * d_kv + (d_kv if b else 0),
        "w_v": d * d_kv + (d_kv if b else 0),
        "w_o": d * d + (d if b else 0),
    }
    if shape.ffn == "gelu":
        ffn = {"w_up": d * ff + (ff if b else 0), "w_down": ff * d + (d if b else 0)}
    else:
        ffn = {
            "w_gate": d * ff + (ff if b else 0),
            "w_up": d * ff + (ff if b else 0),
            "w_down": ff * d + (d if b else 0),
        }
    norm_size = 2 * d if shape.norm == "layernorm" else d
    block = {"attention": sum(attention.values()), "ffn": sum(ffn.values()), "norms": 2 * norm_size}
    per_block = sum(block.values())
    embeddings = {"token": shape.vocab * d, "position": shape.n_ctx * d if shape.learned_positions else 0}
    lm_head = 0 if shape.tied_embeddings else shape.vocab * d
    total = sum(embeddings.values()) + L * per_block + norm_size + lm_head
    estimate = 12 * L * d * d
    non_embedding = L * per_block + norm_size
    return {
        "shape": asdict(shape) | {"d_ff": ff, "n_kv_heads": shape.kv_heads, "d_k": d // shape.n_heads},
        "embeddings": embeddings,
        "block": {"attention": attention, "ffn": ffn, "norms": 2 * norm_size, "total": per_block},
        "blocks": L * per_block,
        "final_norm": norm_size,
        "lm_head": lm_head,
        "total": total,
        "non_embedding": non_embedding,
        "estimate_12ld2": estimate,
        "ratio_total_to_estimate": total / estimate,
        "ratio_non_embedding_to_estimate": non_embedding / estimate,
        "kv_cache_bytes_per_token_fp16": 2 * L * d_kv * 2,
    }
