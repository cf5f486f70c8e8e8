"""The attention API's request models (a trace, a block, tiles, a decode) and the one path from a request to an
engine Spec: pydantic checks types and static ranges; `to_spec` hands every field by name to the engine's `make_*`,
which check every rule between fields and against the server's configured limits, raising `SpecError`
(`FieldError`) naming the field. The choices (`mask`, `positions`, `scale`, …) are Literal types made from
engine/spec.py's tuples.

The same fields as a GET query: `query_model(Model)` is `Model` reading query text (lists repeated or
comma-separated, matrices as JSON text, numbers as ASCII numerals, an empty value "not given"), the model a GET
twin takes from FastAPI (`Annotated[query_model(Model), Query()]`) and a page makes its request with;
`query_parameters` describes them as a GET route's OpenAPI query parameters, with the bounds the body enforces."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping
from functools import cache
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeAlias, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator
from pydantic_core import PydanticCustomError

from engine.spec import DTYPES, MASKS, PAIRINGS, POSITIONS, SCALES, STAGES, Limits, Spec, make_decode_spec, make_spec

from .fields import MAX_ITEMS, FieldError, LabField, head_within, mask_parameters, request_fields

if TYPE_CHECKING:  # engine.block imports torch: the CLI's --help builds its options from these models without it
    from engine.block import BlockSpec

Finite = Annotated[float, Field(allow_inf_nan=False)]
Row = Annotated[list[Finite], Field(max_length=4096)]
MatrixIn = Annotated[list[Row], Field(max_length=4096)]
Strings = Annotated[list[str], Field(max_length=MAX_ITEMS)]
Ints = Annotated[list[int], Field(max_length=MAX_ITEMS)]

# The engine's choices as Literal types (pydantic's check, /openapi.json's enum, the form's <select>); mypy, which
# cannot read a Literal made from a tuple, sees the strings they are.
if TYPE_CHECKING:
    MaskKind: TypeAlias = str
    PositionsKind: TypeAlias = str
    Pairing: TypeAlias = str
    Scale: TypeAlias = str
    DType: TypeAlias = str
    StageKey: TypeAlias = str
else:
    MaskKind, PositionsKind, Pairing, Scale, DType, StageKey = (
        Literal[values] for values in (MASKS, POSITIONS, PAIRINGS, SCALES, DTYPES, STAGES)
    )


_NUMBERS = frozenset({int, float})  # exactly: a bool is an int by isinstance, not by type


def _anywhere(v: Any, test: Callable[[Any], bool]) -> bool:
    """`test(v)`, or for a list whether any value nested in it passes. `test` is false for every int and float (both
    uses: a boolean, a surrogate): a row of only those is passed over in one C-level pass, not a call a number (a
    256 × 256 matrix was 65,536 calls, twice, for each such field of each request)."""
    stack = [v]
    while stack:
        x = stack.pop()
        if not isinstance(x, list):
            if test(x):
                return True
        elif not _NUMBERS.issuperset(map(type, x)):
            stack.extend(reversed(x))
    return False


def _numbers_row(row: list[Any]) -> bool:
    """Every entry a finite number (a boolean passes: `_no_booleans` names it), in C-level passes."""
    return {int, float, bool}.issuperset(map(type, row)) and all(map(math.isfinite, row))


def _bits_row(row: list[Any]) -> bool:
    return {int}.issuperset(map(type, row)) and {0, 1}.issuperset(row)


def _entries(v: Any, ok: Callable[[list[Any]], bool], what: str) -> Any:
    """A matrix (or one row) whose entries are not all `what`: one error naming the first, found a row at a time
    by `ok` before pydantic checks each entry, which reported every one (a 1000 × 1000 matrix of strings, a 5 MB
    body, was a 136 MB answer after 78 s). Anything else is left to pydantic."""
    if not isinstance(v, list):
        return v
    rows = v if v and all(isinstance(r, list) for r in v) else [v]
    for i, row in enumerate(rows):
        if not ok(row):
            j = next(j for j, x in enumerate(row) if not ok([x]))
            where = f"[{i}][{j}]" if rows is v else f"[{j}]"
            raise ValueError(f"entry {where} is {row[j]!r:.40}; entries are {what}")
    return v


def _surrogate(v: Any) -> bool:
    """A lone UTF-16 surrogate (JSON's "\\ud800") is not text: it cannot be hashed, tokenized or sent back."""
    return isinstance(v, str) and any("\ud800" <= ch <= "\udfff" for ch in v)


def no_surrogates(v: Any) -> Any:
    """A text field's validator (nested lists too): a lone UTF-16 surrogate anywhere in `v` is refused."""
    if _anywhere(v, _surrogate):
        raise ValueError("contains a lone UTF-16 surrogate (e.g. \\ud800), which is not text")
    return v


# `LabField` options: explicit weights (POST-sized, JSON text), and what to return, not what to compute.
EXPLICIT: dict[str, Any] = {"form": None, "kind": "json", "limit": "max_explicit_d_model"}
RETURNED: dict[str, Any] = {"form": None, "output": True}


class AttentionRequest(BaseModel):
    """One attention trace. Every field is optional; the preset fills the rest.

    Strict: a JSON body's numbers are numbers ("seed": "1" and strings inside `x` are refused, as booleans are);
    a GET query's text is read into numbers by `query_model(AttentionRequest)` (app/schemas/request_models.py).
    """

    model_config = ConfigDict(extra="forbid", strict=True, json_schema_extra=mask_parameters)

    tokens: Strings | str | None = LabField(
        None,
        "The sequence: a list of tokens, or one string split on whitespace.",
        examples=["猫 坐 在 垫子 上"],
        form="sequence",
        only="builtin",
        limit="max_tokens",
    )
    preset: str = LabField(
        "toy",
        "toy (d_model 4, 1 head), gpt2-small (768, 12 heads), or a pretrained model this server loaded "
        "(GET /api/v1/presets lists them, e.g. checkpoint)",
        max_length=64,
        form="main",
    )
    text: str | None = LabField(
        None, "Pretrained models: text for the model's own tokenizer.", form="sequence", only="pretrained"
    )
    token_ids: Ints | None = LabField(None, "Pretrained models: token ids.", form="sequence", only="pretrained")
    layer: int | None = LabField(
        None, "Pretrained models: the layer (block) to trace, from 0.", ge=0, form="sequence", only="pretrained"
    )
    d_model: int | None = LabField(
        None, "Width; defaults to the preset's.", ge=1, form="main", only="builtin", limit="max_d_model"
    )
    n_heads: int | None = LabField(
        None, "Heads; d_model must be divisible by it.", ge=1, form="main", only="builtin", limit="max_heads"
    )
    mask: MaskKind | None = LabField(
        None, "Default: causal (the chapter's GPT lab), none with kv_tokens, or a pretrained model's own.", form="main"
    )
    window: int | None = LabField(
        None, "mask=sliding_window: tokens a query reads back, itself included.", ge=1, limit="max_tokens"
    )
    prefix: int | None = LabField(None, "mask=prefix_lm: the first `prefix` tokens are read both ways.", ge=0)
    mask_matrix: (
        Annotated[list[Annotated[list[Literal[0, 1]], Field(max_length=1024)]], Field(max_length=1024)] | None
    ) = LabField(None, "mask=custom: N × N_kv of 1 (may read) and 0 (may not).", form="hidden")
    positions: PositionsKind | None = LabField(
        None, "none, sinusoidal or learned (added to x), or rope (rotates q and k).", only="builtin"
    )
    rope_base: float | None = LabField(
        None,
        "RoPE: θ_i = base^(−2i/d_k).",
        gt=1,
        le=1e9,
        allow_inf_nan=False,
        depends=("positions", "rope"),
        only="builtin",
    )
    rope_pairing: Pairing | None = LabField(
        None,
        "RoPE pairs (2i, 2i+1) as the paper, or (i, i + d_k/2) as Hugging Face's LLaMA.",
        depends=("positions", "rope"),
        only="builtin",
    )
    n_ctx: int | None = LabField(
        None,
        "positions=learned: rows of the table.",
        ge=1,
        le=1_000_000,
        depends=("positions", "learned"),
        only="builtin",
    )
    n_kv_heads: int | None = LabField(
        None, "GQA/MQA: K/V heads shared by groups of query heads.", ge=1, only="builtin", limit="max_heads"
    )
    kv_tokens: Strings | str | None = LabField(
        None,
        "Cross-attention: the sequence K and V come from (Q comes from `tokens`).",
        only="builtin",
        limit="max_tokens",
    )
    pad_positions: Ints = LabField(description="0-based key positions never attended to.", default_factory=list)
    segment_ids: Ints = LabField(
        description="mask=document: one id per token; a token sees its own document, causally.", default_factory=list
    )
    scale: Scale = LabField("sqrt_dk", "Divide QKᵀ by √d_k, 1 or d_k.", form="main")
    seed: int = LabField(0, "Seeds the generated x and weights.", ge=0, lt=2**63, form="main")
    dtype: DType = LabField("float32", "Half precision needs CUDA.", form=None)
    x: MatrixIn | None = LabField(None, "Explicit input (N, d_model) instead of seeded embeddings.", **EXPLICIT)
    w_q: MatrixIn | None = LabField(None, "Explicit (d_model, d_model); Q = X W_Q + b_Q.", **EXPLICIT)
    w_k: MatrixIn | None = LabField(None, "Explicit (d_model, d_kv); K = X W_K + b_K.", **EXPLICIT)
    w_v: MatrixIn | None = LabField(None, "Explicit (d_model, d_kv); V = X W_V + b_V.", **EXPLICIT)
    w_o: MatrixIn | None = LabField(None, "Explicit (d_model, d_model); output = concat(heads) W_O + b_O.", **EXPLICIT)
    b_q: Row | None = LabField(None, "Explicit (d_model,) bias of Q.", **EXPLICIT)
    b_k: Row | None = LabField(None, "Explicit (d_kv,) bias of K.", **EXPLICIT)
    b_v: Row | None = LabField(None, "Explicit (d_kv,) bias of V.", **EXPLICIT)
    b_o: Row | None = LabField(None, "Explicit (d_model,) bias of the output.", **EXPLICIT)
    stages: Annotated[list[StageKey], Field(max_length=MAX_ITEMS)] | None = LabField(
        None, "Stages to return; all when omitted.", **RETURNED
    )
    heads: Ints | None = LabField(None, "Heads to return (0-based); all when omitted.", **RETURNED)
    decimals: int | None = LabField(None, "Round every returned number.", ge=0, le=8, **RETURNED)

    @field_validator("*", mode="before")
    @classmethod
    def _no_booleans(cls, v: Any) -> Any:
        """JSON true is not the number 1: pydantic's lax ints and floats would take it, this API does not."""
        if _anywhere(v, lambda x: isinstance(x, bool)):
            raise ValueError("booleans are not numbers here; give a number")
        return no_surrogates(v)

    @field_validator("x", "w_q", "w_k", "w_v", "w_o", "b_q", "b_k", "b_v", "b_o", mode="before")
    @classmethod
    def _numbers(cls, v: Any) -> Any:
        return _entries(v, _numbers_row, "finite numbers")

    @field_validator("mask_matrix", mode="before")
    @classmethod
    def _bits(cls, v: Any) -> Any:
        return _entries(v, _bits_row, "1 (may read) or 0 (may not)")

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

    def engine_fields(self, base: type[BaseModel] | None = None) -> dict[str, Any]:
        """The fields the engine takes, by name: every field of `base` (default: this request's class) but the
        output selection. A new field is declared here and in the engine's `make_*`, nowhere between."""
        fields = request_fields(base or type(self))
        return {name: getattr(self, name) for name, f in fields.items() if not f.output}

    def to_spec(self, limits: Limits, device: str, models: Mapping[str, Any] | None = None) -> Spec:
        """The engine's Spec: the attention fields go to `make_spec`, which checks every rule between them."""
        return make_spec(**self.engine_fields(AttentionRequest), models=models, device=device, limits=limits)

    def view(self, spec: Spec) -> Selection:
        """Which stages and heads to return; heads out of range are the request's error."""
        heads = tuple(range(spec.n_heads)) if self.heads is None else tuple(dict.fromkeys(self.heads))
        for h in heads:
            head_within(h, spec.n_heads, "heads")
        stages = STAGES if self.stages is None else tuple(s for s in STAGES if s in self.stages)
        return Selection(stages=stages, heads=heads, decimals=self.decimals)


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
    stages: Annotated[list[BlockStageKey], Field(max_length=MAX_ITEMS)] | None = LabField(  # type: ignore[assignment]
        None, "Stages to return; all when omitted.", **RETURNED
    )

    def to_block_spec(self, limits: Limits, device: str, models: Mapping[str, Any] | None = None) -> BlockSpec:
        """The attention Spec, then the block's own fields (by name) to `make_block_spec`, which checks them
        against each other and against a pretrained model's fixed block."""
        from engine.block import make_block_spec

        attn = self.to_spec(limits, device, models)
        model = (models or {}).get(attn.preset)
        own = {k: v for k, v in self.engine_fields().items() if k not in AttentionRequest.model_fields}
        return make_block_spec(
            attn,
            **own,
            model=model.info if model is not None else None,
            max_d_ff=4 * limits.max_d_model,
            memory_budget_bytes=limits.memory_budget_bytes,
        )

    def block_view(self, spec: BlockSpec) -> Selection:
        view = self.view(spec.attn)
        stages = spec.order if self.stages is None else tuple(s for s in spec.order if s in self.stages)
        return Selection(stages=stages, heads=view.heads, decimals=view.decimals)


class TilesRequest(AttentionRequest):
    """An attention trace, then FlashAttention's schedule for one head over blocks of queries and keys."""

    block_q: int = Field(2, ge=1, le=1024, description="Queries per block (FlashAttention's B_r).")
    block_k: int = Field(2, ge=1, le=1024, description="Keys per block (FlashAttention's B_c).")
    head: int = Field(0, ge=0, description="The head whose schedule is returned (0-based).")

    def to_tiles_spec(self, limits: Limits, device: str, models: Mapping[str, Any] | None = None) -> Spec:
        spec = self.to_spec(limits, device, models)
        head_within(self.head, spec.n_heads)
        return spec


class DecodeRequest(AttentionRequest):
    """Prefill the first `prefill` tokens, then decode the rest one at a time against the KV cache: one attention
    layer of a built-in preset, causal (or mask=none, to see why a cache needs the causal mask). A loaded model
    (its preset, token_ids, layer), kv_tokens and the other masks are refused, a 422 naming the field; a loaded
    model decodes through its whole cache at /api/v1/generate."""

    preset: str = LabField(
        "toy",
        "toy (d_model 4, 1 head) or gpt2-small (768, 12 heads): the built-in presets.",
        max_length=64,
        form="main",
    )
    prefill: int = Field(1, ge=1, description="Tokens processed at once before the first decode step.")
    stages: None = LabField(None, "Not used: a decode answer has its own shape.", **RETURNED)

    def to_decode_spec(self, limits: Limits, device: str, max_tokens: int) -> tuple[Spec, int]:
        """`make_decode_spec` checks the decode's rules (causal or none, self-attention, its length, the prefill)."""
        if self.heads is not None:
            raise FieldError("heads", "a decode answer holds every head; leave heads out")
        return make_decode_spec(**self.engine_fields(), max_tokens=max_tokens, device=device, limits=limits)


class Selection(BaseModel):
    """The output selection of an answer: which stages and heads it holds, and its rounding (not a page's View)."""

    model_config = ConfigDict(frozen=True)
    stages: tuple[str, ...]
    heads: tuple[int, ...]
    decimals: int | None = None


# --- The same fields as a GET query ------------------------------------------------------------------------------

M = TypeVar("M", bound=BaseModel)


# The repeatable query parameters of every request model here (pad_positions, segment_ids, token_ids, stages, heads),
# for rules that see only a query's names.
LIST_FIELDS = tuple(dict.fromkeys(n for model in (AttentionRequest, BlockRequest, TilesRequest, DecodeRequest)
                                  for n, f in request_fields(model).items() if f.kind == "list"))  # fmt: skip


# Numbers as query text may write them: ASCII digits only (int() and float() would also take "²", "٣" or "1_1").
ASCII_INT = re.compile(r"-?[0-9]{1,30}")
ASCII_NUMBER = re.compile(r"[-+]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]{1,4})?")


BOOLEANS = {"true": True, "1": True, "on": True, "false": False, "0": False, "off": False}


def _value(text: str, kind: str | None) -> Any:
    """Query text as the JSON value a POST would carry: plain ASCII numerals become numbers; anything else stays
    text, for the strict model to refuse with a message naming the field."""
    if kind == "integer" and ASCII_INT.fullmatch(text):
        return int(text)
    if kind == "number" and ASCII_NUMBER.fullmatch(text):
        return float(text)
    if kind == "boolean" and text.lower() in BOOLEANS:
        return BOOLEANS[text.lower()]
    return text


def _texts(value: Any) -> list[str] | None:
    """A field's query values (FastAPI gives a list-typed field every repetition), or None when it is no text."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        return value
    return None


@cache
def query_model(model: type[M]) -> type[M]:
    """`model` reading a GET query: the same fields, checks and errors, its query text read once into the values a
    JSON body carries. Keys that are no field of it (a page's own `stage`, `lang`) are left out, so a lab URL works
    unchanged as its JSON twin; an empty value means "not given" (an untouched form field), but for `tokens`. Values
    already typed (a page's own reading of a field) pass as they are. Its instances are `model`'s."""
    fields = request_fields(model)

    class Query(model):  # type: ignore[valid-type, misc]
        @model_validator(mode="before")
        @classmethod
        def _given(cls, data: Any) -> Any:
            if not isinstance(data, dict):
                return data
            out = {}
            for name, field in fields.items():
                if name not in data:
                    continue
                value, texts = data[name], _texts(data[name])
                if texts is not None and field.kind != "list":
                    value = texts[-1]  # the last of a repeated key, as a query's own reading keeps
                    if value == "" and name != "tokens":
                        continue
                out[name] = value
            return out

        @field_validator("*", mode="before")
        @classmethod
        def _typed(cls, value: Any, info: ValidationInfo) -> Any:
            field = fields[str(info.field_name)]
            if field.kind == "list" and (texts := _texts(value)) is not None:
                items = [part.strip() for v in texts for part in v.replace(" ", ",").split(",")]
                return [_value(i, field.item) for i in items if i]
            if not isinstance(value, str):
                return value
            if field.kind == "json":
                try:
                    return json.loads(value)
                except (ValueError, RecursionError):  # malformed, or nested deeper than any matrix
                    raise PydanticCustomError("value_error", "must be JSON text, e.g. {example}",
                                             {"code": "json_text", "example": "[[1, 0], [0, 1]]"}) from None  # fmt: skip
            return _value(value, field.item)

    Query.__name__ = Query.__qualname__ = f"{model.__name__}Query"
    Query.__doc__ = model.__doc__
    return Query


def int_or_empty(minimum: int | None = None, maximum: int | None = None, **bounds: Any) -> dict[str, Any]:
    """A query integer's schema with the bounds its parser enforces (or empty: the default); `bounds` are any
    others of JSON Schema (exclusiveMinimum, …)."""
    given = {k: v for k, v in (("minimum", minimum), ("maximum", maximum)) if v is not None}
    return {"anyOf": [{"type": "integer", **given, **bounds}, {"type": "string", "maxLength": 0}]}


NUMBER_BOUNDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")


def _bounds(prop: dict[str, Any]) -> dict[str, Any]:
    """The constraints (minimum, maxLength, …) of a property's non-null option, from pydantic's JSON schema."""
    out: dict[str, Any] = {}
    for option in prop.get("anyOf", [prop]):
        if option.get("type") != "null":
            out |= {k: v for k, v in option.items() if k in (*NUMBER_BOUNDS, "maxLength", "minLength")}
    return out


def query_parameters(model: type[BaseModel]) -> list[dict[str, Any]]:
    """OpenAPI descriptions of a GET route's query parameters, derived from the POST body model, so /docs and
    API fuzzers know the GET twin's fields: lists are comma-separated, matrices JSON text."""
    params = []
    props = model.model_json_schema()["properties"]
    for name, field in request_fields(model).items():
        schema: dict[str, Any] = {"type": "string"}
        note = field.description
        bounds = _bounds(props[name])
        if field.kind == "list":
            note = (note + " Comma-separated.").strip()
        elif field.kind == "json":
            note = (note + " JSON text, e.g. [[1, 0], [0, 1]].").strip()
        elif field.choices:  # an empty value (a form's untouched field) means the default
            schema = {"type": "string", "enum": [*field.choices, ""]}
        elif field.kind == "integer":  # the body field's bounds: d_model=0 is as invalid here as in a POST
            schema = int_or_empty(**{k: bounds[k] for k in NUMBER_BOUNDS if k in bounds})
        elif field.item == "boolean":
            schema = {"type": "string", "enum": [*BOOLEANS, ""]}
        elif field.kind == "text" and "maxLength" in bounds:
            schema = {"type": "string", "maxLength": bounds["maxLength"]}
        params.append({"name": name, "in": "query", "required": False, "schema": schema, "description": note})
    return params
