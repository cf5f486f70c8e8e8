"""The API's request and response models, and the one path from a request to an engine Spec.

Pydantic checks types and static ranges; `make_spec` checks every rule that depends on other fields or on the
server's configured limits. Both report the field at fault, so every bad input becomes a 422 that names it.
A GET request carries the same fields as query parameters: `tokens` as one space-separated string, lists as
repeated or comma-separated values, and explicit matrices as JSON text.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import replace
from functools import lru_cache
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from engine.block import BlockSpec, make_block_spec
from engine.spec import BIASES, MATRICES, STAGES, Limits, Spec, make_spec

Finite = Annotated[float, Field(allow_inf_nan=False)]
Row = Annotated[list[Finite], Field(max_length=4096)]
MatrixIn = Annotated[list[Row], Field(max_length=4096)]
StageKey = Literal["projection", "scores", "mask", "softmax", "weighted_sum"]


def _has_bool(v: Any) -> bool:
    if isinstance(v, bool):
        return True
    return isinstance(v, list) and any(_has_bool(x) for x in v)


def _has_surrogate(v: Any) -> bool:
    """A lone UTF-16 surrogate (JSON's "\\ud800") is not text: it cannot be hashed, tokenized or sent back."""
    if isinstance(v, str):
        return any("\ud800" <= ch <= "\udfff" for ch in v)
    return isinstance(v, list) and any(_has_surrogate(x) for x in v)


OUTPUT_FIELDS = ("stages", "heads", "decimals")  # what to return, not what to compute


class AttentionRequest(BaseModel):
    """One attention trace. Every field is optional; the preset fills the rest.

    Strict: a JSON body's numbers are numbers ("seed": "1" and strings inside `x` are refused, as booleans are);
    the GET twin's query text is turned into numbers by `from_query` before validation.
    """

    model_config = ConfigDict(extra="forbid", strict=True)

    tokens: list[str] | str | None = Field(
        None,
        description="The sequence: a list of tokens, or one string split on whitespace.",
        examples=["猫 坐 在 垫子 上"],
    )
    preset: str = Field(
        "toy",
        max_length=64,
        description="toy (d_model 4, 1 head), gpt2-small (768, 12 heads), or a pretrained model this server loaded "
        "(GET /api/v1/presets lists them, e.g. checkpoint)",
    )
    text: str | None = Field(None, description="Pretrained models: text for the model's own tokenizer.")
    token_ids: list[int] | None = Field(None, max_length=4096, description="Pretrained models: token ids.")
    layer: int | None = Field(None, ge=0, description="Pretrained models: the layer (block) to trace, from 0.")
    d_model: int | None = Field(None, ge=1, description="Width; defaults to the preset's.")
    n_heads: int | None = Field(None, ge=1, description="Heads; d_model must be divisible by it.")
    mask: Literal["none", "causal", "padding", "document", "sliding_window", "prefix_lm", "custom"] | None = Field(
        None, description="Default: causal (the chapter's GPT lab), none with kv_tokens, or a pretrained model's own."
    )
    window: int | None = Field(
        None, ge=1, description="mask=sliding_window: tokens a query reads back, itself included."
    )
    prefix: int | None = Field(None, ge=0, description="mask=prefix_lm: the first `prefix` tokens are read both ways.")
    mask_matrix: (
        Annotated[list[Annotated[list[Literal[0, 1]], Field(max_length=1024)]], Field(max_length=1024)] | None
    ) = Field(None, description="mask=custom: N × N_kv of 1 (may read) and 0 (may not).")
    positions: Literal["none", "sinusoidal", "learned", "rope"] | None = Field(
        None, description="none, sinusoidal or learned (added to x), or rope (rotates q and k)."
    )
    rope_base: float | None = Field(None, gt=1, le=1e9, allow_inf_nan=False, description="RoPE: θ_i = base^(−2i/d_k).")
    rope_pairing: Literal["adjacent", "half"] | None = Field(
        None, description="RoPE pairs (2i, 2i+1) as the paper, or (i, i + d_k/2) as Hugging Face's LLaMA."
    )
    n_ctx: int | None = Field(None, ge=1, le=1_000_000, description="positions=learned: rows of the table.")
    n_kv_heads: int | None = Field(None, ge=1, description="GQA/MQA: K/V heads shared by groups of query heads.")
    kv_tokens: list[str] | str | None = Field(
        None, description="Cross-attention: the sequence K and V come from (Q comes from `tokens`)."
    )
    pad_positions: list[int] = Field(default_factory=list, description="0-based key positions never attended to.")
    segment_ids: list[int] = Field(
        default_factory=list,
        description="mask=document: one id per token; a token sees its own document, causally.",
    )
    scale: Literal["sqrt_dk", "none", "dk"] = Field("sqrt_dk", description="Divide QKᵀ by √d_k, 1 or d_k.")
    seed: int = Field(0, ge=0, le=2**63 - 1)
    dtype: Literal["float32", "bfloat16", "float16"] = Field("float32", description="Half precision needs CUDA.")
    x: MatrixIn | None = Field(None, description="Explicit input (N, d_model) instead of seeded embeddings.")
    w_q: MatrixIn | None = Field(None, description="Explicit (d_model, d_model); Q = X W_Q + b_Q.")
    w_k: MatrixIn | None = None
    w_v: MatrixIn | None = None
    w_o: MatrixIn | None = None
    b_q: Row | None = None
    b_k: Row | None = None
    b_v: Row | None = None
    b_o: Row | None = None
    stages: list[StageKey] | None = Field(None, description="Stages to return; all when omitted.")
    heads: list[int] | None = Field(None, description="Heads to return (0-based); all when omitted.")
    decimals: int | None = Field(None, ge=0, le=8, description="Round every returned number.")

    @field_validator("*", mode="before")
    @classmethod
    def _no_booleans(cls, v: Any) -> Any:
        """JSON true is not the number 1: pydantic's lax ints and floats would take it, this API does not."""
        if _has_bool(v):
            raise ValueError("booleans are not numbers here; give a number")
        if _has_surrogate(v):
            raise ValueError("contains a lone UTF-16 surrogate (e.g. \\ud800), which is not text")
        return v

    @field_validator("tokens", mode="before")
    @classmethod
    def _tokens_shape(cls, v: Any) -> Any:
        if v is None or isinstance(v, str):
            return v
        if isinstance(v, list) and all(isinstance(t, str) for t in v):
            return v
        raise ValueError("must be a list of strings or one space-separated string")

    @field_validator("heads")
    @classmethod
    def _heads_non_negative(cls, v: list[int] | None) -> list[int] | None:
        if v is not None and any(h < 0 for h in v):
            raise ValueError("head indices are 0-based and non-negative")
        return v

    def to_spec(self, limits: Limits, device: str, models: Mapping[str, Any] | None = None) -> Spec:
        """The engine's Spec: every request field but the output selection goes to `make_spec` by name, so a new
        field is declared here and in the engine, nowhere between."""
        fields = {name: getattr(self, name) for name in AttentionRequest.model_fields if name not in OUTPUT_FIELDS}
        return make_spec(**fields, models=models, device=device, limits=limits)

    def view(self, spec: Spec) -> View:
        """Which stages and heads to return; heads out of range are the request's error."""
        heads = tuple(range(spec.n_heads)) if self.heads is None else tuple(dict.fromkeys(self.heads))
        for h in heads:
            if h >= spec.n_heads:
                raise FieldError("heads", f"head {h} does not exist: this trace has heads 0..{spec.n_heads - 1}")
        stages = STAGES if self.stages is None else tuple(s for s in STAGES if s in self.stages)
        return View(stages=stages, heads=heads, decimals=self.decimals)


BlockStageKey = Literal[
    "ln1", "projection", "scores", "mask", "softmax", "weighted_sum", "residual1", "ln2", "ffn_hidden", "ffn_out",
    "output",
]  # fmt: skip


class BlockRequest(AttentionRequest):
    """A whole decoder block: the attention fields, plus the norm, the FFN and where the norms sit."""

    norm: Literal["layernorm", "rmsnorm"] | None = Field(None, description="Default layernorm, or the model's.")
    ffn: Literal["gelu", "swiglu"] | None = Field(
        None, description="gelu: d → d_ff → d (GPT-2, the default); swiglu: gate, up, down"
    )
    d_ff: int | None = Field(None, ge=1, description="FFN width; 4·d_model when omitted")
    placement: Literal["pre", "post"] | None = Field(
        None, description="pre: GPT-2's Pre-LN (the default); post: the 2017 Post-LN"
    )
    gelu: Literal["tanh", "exact"] | None = Field(
        None, description="GPT-2's tanh approximation (the default), or the erf form"
    )
    stages: list[BlockStageKey] | None = Field(None, description="Stages to return; all when omitted.")  # type: ignore[assignment]

    def to_block_spec(self, limits: Limits, device: str, models: Mapping[str, Any] | None = None) -> BlockSpec:
        attn = self.to_spec(limits, device, models)
        model = (models or {}).get(attn.preset)
        chosen = {"norm": self.norm, "ffn": self.ffn, "placement": self.placement, "gelu": self.gelu}
        defaults = {"norm": "layernorm", "ffn": "gelu", "placement": "pre", "gelu": "tanh"}
        if model is not None:  # a pretrained block is what it is: a different choice is an error, not ignored
            own = {k: getattr(model.info, k) for k in chosen}
            for k, v in chosen.items():
                if v is not None and v != own[k]:
                    raise FieldError(k, f"{attn.preset}'s blocks use {k}={own[k]}")
            if self.d_ff is not None:
                raise FieldError("d_ff", f"{attn.preset}'s FFN width is fixed")
            defaults = own
        options = {k: v if v is not None else defaults[k] for k, v in chosen.items()}
        return make_block_spec(
            attn,
            d_ff=self.d_ff or (model.info.d_ff if model is not None else None),
            eps=model.info.eps if model is not None else 1e-5,
            max_d_ff=4 * limits.max_d_model,
            memory_budget_bytes=limits.memory_budget_bytes,
            **options,
        )

    def block_view(self, spec: BlockSpec) -> View:
        view = self.view(spec.attn)
        stages = spec.order if self.stages is None else tuple(s for s in spec.order if s in self.stages)
        return View(stages=stages, heads=view.heads, decimals=view.decimals)


class TilesRequest(AttentionRequest):
    """An attention trace, then FlashAttention's schedule for one head over blocks of queries and keys."""

    block_q: int = Field(2, ge=1, le=1024, description="Queries per block (FlashAttention's B_r).")
    block_k: int = Field(2, ge=1, le=1024, description="Keys per block (FlashAttention's B_c).")
    head: int = Field(0, ge=0, description="The head whose schedule is returned (0-based).")

    def to_tiles_spec(self, limits: Limits, device: str, models: Mapping[str, Any] | None = None) -> Spec:
        spec = self.to_spec(limits, device, models)
        if self.head >= spec.n_heads:
            raise FieldError("head", f"head {self.head} does not exist: this trace has heads 0..{spec.n_heads - 1}")
        return spec


class DecodeRequest(AttentionRequest):
    """Prefill the first `prefill` tokens, then decode the rest one at a time against the KV cache."""

    prefill: int = Field(1, ge=1, description="Tokens processed at once before the first decode step.")
    stages: None = Field(None, description="Not used: a decode answer has its own shape.")

    def to_decode_spec(self, limits: Limits, device: str, max_tokens: int) -> tuple[Spec, int]:
        if self.mask not in (None, "causal"):
            raise FieldError("mask", "decoding with a KV cache is causal: leave mask out or set it to causal")
        if self.heads is not None:
            raise FieldError("heads", "a decode answer holds every head; leave heads out")
        spec = self.to_spec(limits, device)
        if spec.kv_tokens:
            raise FieldError("kv_tokens", "the KV cache here is a decoder's self-attention cache")
        if spec.n_tokens > max_tokens:
            raise FieldError("tokens", f"decoding step by step is offered up to {max_tokens} tokens")
        if not 1 <= self.prefill <= spec.n_tokens:
            raise FieldError("prefill", f"must be between 1 and the {spec.n_tokens} tokens")
        return replace(spec, mask="causal"), self.prefill


class View(BaseModel):
    model_config = ConfigDict(frozen=True)
    stages: tuple[str, ...]
    heads: tuple[int, ...]
    decimals: int | None = None


class FieldError(ValueError):
    """A request error found outside pydantic, naming its field."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message


LIST_FIELDS = ("pad_positions", "segment_ids", "stages", "heads", "token_ids")
JSON_FIELDS = ("x", *MATRICES, *BIASES, "mask_matrix")


# Numbers as query text may write them: ASCII digits only (int() and float() would also take "²", "٣" or "1_1").
ASCII_INT = re.compile(r"-?[0-9]{1,30}")
ASCII_NUMBER = re.compile(r"[-+]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]{1,4})?")


@lru_cache(maxsize=16)
def _number_kinds(model: type[BaseModel]) -> dict[str, str]:
    """Field -> "integer" or "number" for the fields (or list items) that are numbers, from the JSON schema."""
    kinds: dict[str, str] = {}
    for name, prop in model.model_json_schema()["properties"].items():
        for option in prop.get("anyOf", [prop]):
            kind = option.get("type")
            if kind == "array":
                kind = option.get("items", {}).get("type")
            if kind in ("integer", "number"):
                kinds[name] = kind
    return kinds


def _query_value(text: str, kind: str | None) -> Any:
    """Query text as the JSON value a POST would carry: plain ASCII numerals become numbers; anything else stays
    text, for the strict model to refuse with a message naming the field."""
    if kind == "integer" and ASCII_INT.fullmatch(text):
        return int(text)
    if kind == "number" and ASCII_NUMBER.fullmatch(text):
        return float(text)
    return text


def from_query(
    params: Mapping[str, Any], getlist: Any = None, model: type[BaseModel] = AttentionRequest
) -> dict[str, Any]:
    """Turn query parameters into the body a POST would carry. Unknown parameters (the page's own `stage`,
    `head`, `lang`) are left out, so a lab URL works unchanged as its JSON twin."""
    out: dict[str, Any] = {}
    kinds = _number_kinds(model)
    for name in model.model_fields:
        if name not in params:
            continue
        if name in LIST_FIELDS:
            values = getlist(name) if getlist else [params[name]]
            items = [part.strip() for v in values for part in str(v).replace(" ", ",").split(",")]
            out[name] = [_query_value(i, kinds.get(name)) for i in items if i]
        elif name in JSON_FIELDS:
            text = params[name]
            if text == "":
                continue  # an empty field means "not given", as for every other field
            try:
                out[name] = json.loads(text)
            except (ValueError, RecursionError):  # malformed, or nested deeper than any matrix
                raise FieldError(name, "must be JSON text, e.g. [[1, 0], [0, 1]]") from None
        else:
            value = params[name]
            if value != "" or name == "tokens":  # an empty form field means "the default"
                out[name] = _query_value(value, kinds.get(name))
    return out


class ProblemItem(BaseModel):
    loc: list[str | int]
    msg: str
    type: str


class Problem(BaseModel):
    """Every 4xx answer: a one-line message and the field-level details."""

    message: str
    detail: list[ProblemItem]


ERRORS: dict[int | str, dict[str, Any]] = {
    413: {"model": Problem, "description": "Too large: the body, or the answer (select heads/stages, or use .npz)"},
    422: {"model": Problem, "description": "A field is invalid; `message` and `detail[].loc` name it"},
}


# Response models: they describe the JSON for /docs; the routes serialise with orjson directly.
Nested = list[Any]


class StageOut(BaseModel):
    index: int = Field(description="1..5, the stage's place in the computation")
    key: StageKey
    tensors: dict[str, Nested] = Field(
        description="Tensors by name. (H, …) tensors hold the selected heads in order. A masked entry (−∞) is null."
    )


class ChecksOut(BaseModel):
    max_abs_diff_vs_sdpa: float = Field(
        description="Largest |stage 5 heads − torch scaled_dot_product_attention| on the same Q, K, V, with SDPA's "
        "own is_causal or a boolean mask rebuilt from the request by separate code, and SDPA's default scale for "
        "sqrt_dk; rows with no readable key must be zero"
    )
    rows_sum_to_one: bool


class AttentionResponse(BaseModel):
    spec: dict[str, Any] = Field(description="The normalised request, with d_k, n_tokens, device and dtype")
    tokens: list[str]
    stages: list[StageOut]
    checks: ChecksOut


INT_OR_EMPTY: dict[str, Any] = {"anyOf": [{"type": "integer"}, {"type": "string", "maxLength": 0}]}


def query_parameters(model: type[BaseModel], extra: dict[str, dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """OpenAPI descriptions of a GET route's query parameters, derived from the POST body model, so /docs and
    API fuzzers know the GET twin's fields: lists are comma-separated, matrices JSON text."""
    params = []
    for name, field in model.model_fields.items():
        schema: dict[str, Any] = {"type": "string"}
        note = field.description or ""
        if name in LIST_FIELDS:
            note = (note + " Comma-separated.").strip()
        elif name in JSON_FIELDS:
            note = (note + " JSON text, e.g. [[1, 0], [0, 1]].").strip()
        else:
            body = model.model_json_schema()["properties"][name]
            options = body.get("anyOf", [body])
            enums = [v for o in options for v in o.get("enum", [])] + [o["const"] for o in options if "const" in o]
            if enums:  # an empty value (a form's untouched field) means the default
                schema = {"type": "string", "enum": [*enums, ""]}
            elif any(o.get("type") == "integer" for o in options):
                schema = INT_OR_EMPTY
        params.append({"name": name, "in": "query", "required": False, "schema": schema, "description": note})
    for name, schema in (extra or {}).items():
        params.append({"name": name, "in": "query", "required": False, "schema": schema})
    return params
