"""A model's architecture read once, at start-up, from its `config.json` (or a GGUF file's metadata), into one
normalised description that the families compute from.

Everything a config says that the lab cannot compute exactly is refused here, with one line naming the file, the
field and what is supported: a server never starts with a model that would fail (or be silently wrong) later.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ARCHITECTURES = ("gpt2", "llama", "mistral", "qwen2", "gemma", "bert")
SUPPORTED = ", ".join(ARCHITECTURES)
FAMILY = {"gpt2": "gpt2", "llama": "llama", "mistral": "llama", "qwen2": "llama", "gemma": "llama", "bert": "bert"}

# The largest dimensions a model may declare, checked as each field is read (before a tensor name is listed or a
# byte allocated): far above any model the lab can serve on a CPU, far below what would exhaust memory on its own.
MAX_LAYERS = 1024
MAX_WIDTH = 65536  # d_model, and the feed-forward width's cap is 4x it
MAX_FF = 4 * MAX_WIDTH
MAX_HEADS = 1024
MAX_VOCAB = 2**21
MAX_CONTEXT = 2**21
MAX_TYPE_VOCAB = 1024  # BERT's token types


class ModelError(ValueError):
    """A model that cannot be served: the message is one line naming the file and the field at fault."""


@dataclass(frozen=True)
class Arch:
    """What a model is, whatever file it came from (the families read nothing else)."""

    architecture: str  # one of ARCHITECTURES
    n_layer: int
    d_model: int
    n_heads: int
    n_kv_heads: int
    d_ff: int
    vocab: int
    n_ctx: int
    eps: float
    norm: str  # layernorm | rmsnorm
    ffn: str  # gelu | swiglu | geglu
    gelu: str  # tanh | exact (the GELU of a gelu or geglu FFN)
    placement: str  # pre | post
    positions: str  # learned (added before layer 0) | rope
    rope_base: float = 10000.0
    rope_pairing: str = "half"  # Hugging Face's rotate_half; a llama GGUF's permuted W_Q, W_K pair adjacent dims
    rope_scaling: tuple[float, ...] = ()  # llama3: (factor, low_freq_factor, high_freq_factor, original context)
    window: int = 0  # sliding-window attention: how many tokens back a query reads, itself included (0: none)
    tied: bool = True  # the output projection is the token embedding
    norm_offset: float = 0.0  # Gemma's RMSNorm multiplies by (1 + weight)
    embed_scale: float = 1.0  # Gemma scales its token embeddings by √d_model
    scale_attn: bool = True  # GPT-2's scale_attn_weights
    eos: tuple[int, ...] = ()
    bos: int | None = None  # the token a training sequence begins with, when the model defines one
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    @property
    def family(self) -> str:
        return FAMILY[self.architecture]

    @property
    def d_k(self) -> int:
        return self.d_model // self.n_heads

    @property
    def decoder(self) -> bool:
        return self.architecture != "bert"


@dataclass(frozen=True)
class ModelInfo:
    """What validation needs to know about a model, without loading its weights."""

    name: str
    d_model: int
    n_heads: int
    n_layer: int
    n_ctx: int
    vocab: int
    eps: float
    default_text: str = "The cat sat on the mat."
    default_mask: str = "causal"
    norm: str = "layernorm"
    ffn: str = "gelu"
    placement: str = "pre"
    gelu: str = "tanh"
    d_ff: int = 0  # 0 means 4·d_model
    positions: str = "none"  # rope for LLaMA-style models (GPT-2 and BERT add positions before layer 0)
    rope_base: float = 10000.0
    rope_pairing: str = "adjacent"
    n_kv_heads: int = 0  # GQA; 0 means n_heads
    rope_factors: tuple[float, ...] = ()  # per-pair divisors of RoPE's frequencies (llama3 scaling); () for none
    window: int = 0  # sliding-window attention (Mistral); 0 for none
    architecture: str = ""  # config.json model_type (GGUF: general.architecture)


class Fields:
    """Typed reads of a config mapping; a missing or ill-typed field is a ModelError naming the file and field."""

    def __init__(self, data: dict[str, Any], where: Path, prefix: str = "", label: str | None = None) -> None:
        self.data, self.where, self.prefix = data, where, prefix
        self.label = prefix if label is None else label  # how a field is named in messages

    def fail(self, name: str, problem: str) -> ModelError:
        return ModelError(f"{self.where}: {self.label}{name}: {problem}")

    def has(self, name: str) -> bool:
        return self.data.get(self.prefix + name) is not None

    def raw(self, name: str, default: Any = None) -> Any:
        value = self.data.get(self.prefix + name)
        return default if value is None else value

    def int(self, name: str, default: int | None = None, low: int = 1, high: int | None = None) -> int:
        """An integer from `low` to `high`; a float is accepted when it is a whole number (NaN and infinities,
        which JSON readers and GGUF's float fields can hold, are not)."""
        value = self.raw(name, default)
        if value is None:
            raise self.fail(name, "is missing")
        whole = isinstance(value, int) or (isinstance(value, float) and math.isfinite(value) and value.is_integer())
        if isinstance(value, bool) or not whole or value < low:
            raise self.fail(name, f"must be an integer ≥ {low}, got {_short(value)}")
        if high is not None and value > high:
            raise self.fail(name, f"{int(value):,} is over the lab's limit of {high:,}")
        return int(value)

    def float(self, name: str, default: float | None = None) -> float:
        value = self.raw(name, default)
        if value is None:
            raise self.fail(name, "is missing")
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
            raise self.fail(name, f"must be a positive number, got {value!r}")
        return float(value)

    def choice(self, name: str, default: Any, allowed: tuple[Any, ...]) -> Any:
        value = self.raw(name, default)
        if value not in allowed:
            raise self.fail(name, f"{value!r} is not supported; supported: {', '.join(map(str, allowed))}")
        return value


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _bos(value: Any) -> int | None:
    ids = _eos(value)
    return ids[0] if ids else None


def _eos(value: Any) -> tuple[int, ...]:
    if isinstance(value, int) and not isinstance(value, bool):
        return (value,)
    if isinstance(value, list):
        return tuple(v for v in value if isinstance(v, int) and not isinstance(v, bool))
    return ()


def _rope(f: Fields) -> tuple[float, tuple[float, ...]]:
    """The RoPE base and llama3 scaling, from `rope_parameters` (transformers 5) or `rope_theta` + `rope_scaling`."""
    params = f.raw("rope_parameters") or {}
    scaling = f.raw("rope_scaling") or {}
    if not isinstance(params, dict) or not isinstance(scaling, dict):
        raise f.fail("rope_scaling", "must be an object")
    merged = {**params, **scaling}  # an explicit rope_scaling (the older field) wins
    base = merged.get("rope_theta", f.raw("rope_theta", 10000.0))
    if isinstance(base, bool) or not isinstance(base, int | float) or not 1 < base <= 1e9:
        raise f.fail("rope_theta", f"must be a number above 1 and at most 1e9, got {base!r}")
    kind = merged.get("rope_type", merged.get("type", "default"))
    if kind == "default":
        return float(base), ()
    if kind != "llama3":
        raise f.fail("rope_scaling", f"type {kind!r} is not supported; supported: default, llama3")
    sub = Fields(merged, f.where, "", "rope_scaling.")
    values = (sub.float("factor"), sub.float("low_freq_factor"), sub.float("high_freq_factor"),
              float(sub.int("original_max_position_embeddings", high=MAX_CONTEXT)))  # fmt: skip
    if values[1] >= values[2]:
        raise f.fail("rope_scaling", "high_freq_factor must be above low_freq_factor")
    return float(base), values


def read_config(directory: Path) -> Arch:
    """The architecture of a Hugging Face model directory, from its config.json."""
    from .files import inside, read_json  # (files imports ModelError from here)

    path = inside(directory, "config.json")
    if not path.exists() and not path.is_symlink():
        raise ModelError(f"{path}: file not found (a model directory needs config.json)")
    data = read_json(path)
    if not isinstance(data, dict):
        raise ModelError(f"{path}: not a JSON object")
    f = Fields(data, path)
    kind = data.get("model_type")
    if kind not in ARCHITECTURES:
        raise f.fail("model_type", f"{kind!r} is not supported; supported: {SUPPORTED}")
    if kind == "gpt2":
        return _gpt2(f)
    if kind == "bert":
        return _bert(f)
    return _llama(f, kind)


def _gpt2(f: Fields) -> Arch:
    act = f.choice("activation_function", "gelu_new", ("gelu_new", "gelu", "gelu_pytorch_tanh"))
    if f.raw("scale_attn_by_inverse_layer_idx", False):
        raise f.fail("scale_attn_by_inverse_layer_idx", "true is not supported; supported: false")
    d = f.int("n_embd", 768, high=MAX_WIDTH)
    heads = f.int("n_head", 12, high=MAX_HEADS)
    _divides(f, "n_head", d, heads)
    return Arch(
        "gpt2", f.int("n_layer", 12, high=MAX_LAYERS), d, heads, heads, f.int("n_inner", 4 * d, high=MAX_FF),
        f.int("vocab_size", 50257, high=MAX_VOCAB), f.int("n_positions", f.raw("n_ctx", 1024), high=MAX_CONTEXT), f.float("layer_norm_epsilon", 1e-5), "layernorm", "gelu",
        "exact" if act == "gelu" else "tanh", "pre", "learned", tied=bool(f.raw("tie_word_embeddings", True)),
        scale_attn=bool(f.raw("scale_attn_weights", True)), eos=_eos(f.raw("eos_token_id")),
        bos=_bos(f.raw("bos_token_id")),
    )  # fmt: skip


def _bert(f: Fields) -> Arch:
    f.choice("hidden_act", "gelu", ("gelu",))
    f.choice("position_embedding_type", "absolute", ("absolute",))
    d, heads = f.int("hidden_size", high=MAX_WIDTH), f.int("num_attention_heads", high=MAX_HEADS)
    _divides(f, "num_attention_heads", d, heads)
    return Arch(
        "bert", f.int("num_hidden_layers", high=MAX_LAYERS), d, heads, heads, f.int("intermediate_size", high=MAX_FF),
        f.int("vocab_size", high=MAX_VOCAB), f.int("max_position_embeddings", high=MAX_CONTEXT), f.float("layer_norm_eps", 1e-12), "layernorm", "gelu", "exact", "post",
        "learned", extra={"type_vocab_size": f.int("type_vocab_size", 2, high=MAX_TYPE_VOCAB)},
    )  # fmt: skip


def _llama(f: Fields, kind: str) -> Arch:
    d, heads = f.int("hidden_size", high=MAX_WIDTH), f.int("num_attention_heads", high=MAX_HEADS)
    _divides(f, "num_attention_heads", d, heads)
    kv = f.int("num_key_value_heads", heads, high=MAX_HEADS)
    if heads % kv:
        raise f.fail("num_key_value_heads", f"{kv} does not divide num_attention_heads {heads}")
    if f.has("head_dim") and f.int("head_dim", high=MAX_WIDTH) != d // heads:
        raise f.fail("head_dim", f"{f.raw('head_dim')} ≠ hidden_size / num_attention_heads = {d // heads}; "
                                 "supported: head_dim = hidden_size / num_attention_heads")  # fmt: skip
    base, scaling = _rope(f)
    if kind == "gemma":
        act = f.raw("hidden_activation") or f.raw("hidden_act") or "gelu_pytorch_tanh"
        if act not in ("gelu_pytorch_tanh", "gelu", "gelu_new"):
            raise f.fail("hidden_activation", f"{act!r} is not supported; supported: gelu_pytorch_tanh, gelu")
        ffn, gelu = "geglu", "exact" if act == "gelu" else "tanh"
        if f.raw("use_bidirectional_attention", False):
            raise f.fail("use_bidirectional_attention", "true is not supported; supported: false")
    else:
        f.choice("hidden_act", "silu", ("silu",))
        ffn, gelu = "swiglu", "tanh"
    for name in ("attention_bias", "mlp_bias"):
        if kind != "qwen2" and f.raw(name, False):
            raise f.fail(name, "true is not supported; supported: false")
    window = 0
    if kind == "mistral" and f.raw("sliding_window") is not None:
        window = f.int("sliding_window", high=MAX_CONTEXT)
    if kind == "qwen2" and f.raw("use_sliding_window", False):
        raise f.fail("use_sliding_window", "true is not supported; supported: false")
    if f.raw("partial_rotary_factor", 1.0) != 1.0:
        raise f.fail("partial_rotary_factor", "only 1.0 is supported")
    n_ctx = f.int("max_position_embeddings", 2048, high=MAX_CONTEXT)
    return Arch(
        kind, f.int("num_hidden_layers", high=MAX_LAYERS), d, heads, kv, f.int("intermediate_size", high=MAX_FF),
        f.int("vocab_size", high=MAX_VOCAB), n_ctx,
        f.float("rms_norm_eps", 1e-6), "rmsnorm", ffn, gelu, "pre", "rope", rope_base=base, rope_scaling=scaling,
        window=window if window < n_ctx else 0, tied=bool(f.raw("tie_word_embeddings", kind == "gemma")),
        norm_offset=1.0 if kind == "gemma" else 0.0, embed_scale=math.sqrt(d) if kind == "gemma" else 1.0,
        eos=_eos(f.raw("eos_token_id")), bos=_bos(f.raw("bos_token_id")),
    )  # fmt: skip


def _divides(f: Fields, name: str, d: int, heads: int) -> None:
    if d % heads:
        raise f.fail(name, f"{heads} does not divide the model width {d}")
