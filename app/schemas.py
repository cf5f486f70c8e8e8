"""The API's request and response models, and the one path from a request to an engine Spec.

The request models here are THE field list: each field is declared once, with its type, range, description and
its place in the lab (`lab_field`: the form group, the field it depends on, its kind, the limit it is checked
against). The GET parser (`from_query`), the OpenAPI query parameters, the lab form (app/templating.py), the URL
state (app/web/state.py) and the CLI (app/cli.py) derive from it through `request_fields`.

The vocabularies are the engine's: the choices (`mask`, `positions`, `scale`, …) are Literal types made from
engine/spec.py's tuples, and which mask a parameter goes with (`depends`) comes from engine/masks.py's kinds.

Pydantic checks types and static ranges; the engine's `make_*` check every rule that depends on other fields or
on the server's configured limits, raising `SpecError` (alias `FieldError`, the one error type) naming the field
at fault, so every bad input becomes a 422 that names it. A GET request carries the same fields as query
parameters: `tokens` as one space-separated string, lists as repeated or comma-separated values, and explicit
matrices as JSON text.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeAlias

from pydantic import BaseModel, ConfigDict, Field, field_validator

from engine import masks
from engine.spec import (
    DTYPES,
    MASKS,
    PAIRINGS,
    POSITIONS,
    SCALES,
    STAGES,
    Limits,
    Spec,
    SpecError,
    make_decode_spec,
    make_spec,
)

if TYPE_CHECKING:  # engine.block imports torch: the CLI's --help builds its options from these models without it
    from engine.block import BlockSpec

# The one error type of a request: the engine's, named here as the web layer has always called it.
FieldError = SpecError

FORM_GROUPS = ("sequence", "main", "more", "hidden")
FIELD_KINDS = ("choice", "integer", "number", "list", "json", "text")


def lab_field(
    *,
    form: str | None = "more",
    depends: tuple[str, str] | None = None,
    only: Literal["builtin", "pretrained"] | None = None,
    kind: str | None = None,
    limit: str | None = None,
    output: bool = False,
) -> dict[str, Any]:
    """A request field's place in the lab, for `Field(..., json_schema_extra=lab_field(...))`; /openapi.json shows
    it as `x-lab`. Every option has a default, so a new field needs none of them:

    form: the lab form's group (sequence, main, more, hidden); None keeps the field out of a page's URL (explicit
        matrices, the output selection, dtype). A field in no group the template places by hand gets a generic
        input in "more".
    depends: (field, value): the field is only used when `field` has that value; a page drops it otherwise. A mask
        kind's parameter needs none: which mask it goes with is the engine's (engine/masks.py, `mask_depends`).
    only: the field is for built-in presets (toy, gpt2-small) or for pretrained models only.
    kind: the input's kind when the type does not say it (a list of numbers sent as JSON text: "json").
    limit: the `Limits` attribute the engine checks it against (the form's max, the CLI's help).
    output: what to return, not what to compute (not passed to the engine).
    """
    assert form is None or form in FORM_GROUPS, form
    assert kind is None or kind in FIELD_KINDS, kind
    assert limit is None or limit in Limits.__dataclass_fields__, limit
    meta: dict[str, Any] = {"form": form}
    if depends:
        meta["depends"] = list(depends)
    for key, value in (("only", only), ("kind", kind), ("limit", limit)):
        if value:
            meta[key] = value
    if output:
        meta["output"] = True
    return {"x-lab": meta}


Finite = Annotated[float, Field(allow_inf_nan=False)]
Row = Annotated[list[Finite], Field(max_length=4096)]
MatrixIn = Annotated[list[Row], Field(max_length=4096)]

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


def mask_depends(model: type[BaseModel], name: str) -> tuple[str, str] | None:
    """("mask", kind) when `name` is a parameter of one mask kind and `model` chooses a mask: from the engine's
    registry (engine/masks.py), read at the call, so a parameter new there needs nothing here."""
    kind = masks.param_kinds().get(name)
    return ("mask", kind) if kind is not None and "mask" in model.model_fields else None


def _mask_parameters(schema: dict[str, Any], model: type[BaseModel]) -> None:
    """/openapi.json's `x-lab` of each mask parameter names its mask, as `lab_field(depends=…)` would write it."""
    for name, prop in schema.get("properties", {}).items():
        depends = mask_depends(model, name)
        if depends is not None:
            lab = prop.get("x-lab", {"form": "more"})
            prop["x-lab"] = {"form": lab.get("form", "more"), "depends": list(depends), **lab}


def _has_bool(v: Any) -> bool:
    if isinstance(v, bool):
        return True
    return isinstance(v, list) and any(_has_bool(x) for x in v)


def _has_surrogate(v: Any) -> bool:
    """A lone UTF-16 surrogate (JSON's "\\ud800") is not text: it cannot be hashed, tokenized or sent back."""
    if isinstance(v, str):
        return any("\ud800" <= ch <= "\udfff" for ch in v)
    return isinstance(v, list) and any(_has_surrogate(x) for x in v)


EXPLICIT = lab_field(form=None, kind="json", limit="max_explicit_d_model")  # explicit weights: POST-sized, JSON text
OUTPUT = lab_field(form=None, output=True)  # what to return, not what to compute


class AttentionRequest(BaseModel):
    """One attention trace. Every field is optional; the preset fills the rest.

    Strict: a JSON body's numbers are numbers ("seed": "1" and strings inside `x` are refused, as booleans are);
    the GET twin's query text is turned into numbers by `from_query` before validation.
    """

    model_config = ConfigDict(extra="forbid", strict=True, json_schema_extra=_mask_parameters)

    tokens: list[str] | str | None = Field(
        None,
        description="The sequence: a list of tokens, or one string split on whitespace.",
        examples=["猫 坐 在 垫子 上"],
        json_schema_extra=lab_field(form="sequence", only="builtin", limit="max_tokens"),
    )
    preset: str = Field(
        "toy",
        max_length=64,
        description="toy (d_model 4, 1 head), gpt2-small (768, 12 heads), or a pretrained model this server loaded "
        "(GET /api/v1/presets lists them, e.g. checkpoint)",
        json_schema_extra=lab_field(form="main"),
    )
    text: str | None = Field(
        None,
        description="Pretrained models: text for the model's own tokenizer.",
        json_schema_extra=lab_field(form="sequence", only="pretrained"),
    )
    token_ids: list[int] | None = Field(
        None,
        max_length=4096,
        description="Pretrained models: token ids.",
        json_schema_extra=lab_field(form="sequence", only="pretrained"),
    )
    layer: int | None = Field(
        None,
        ge=0,
        description="Pretrained models: the layer (block) to trace, from 0.",
        json_schema_extra=lab_field(form="sequence", only="pretrained"),
    )
    d_model: int | None = Field(
        None,
        ge=1,
        description="Width; defaults to the preset's.",
        json_schema_extra=lab_field(form="main", only="builtin", limit="max_d_model"),
    )
    n_heads: int | None = Field(
        None,
        ge=1,
        description="Heads; d_model must be divisible by it.",
        json_schema_extra=lab_field(form="main", only="builtin", limit="max_heads"),
    )
    mask: MaskKind | None = Field(
        None,
        description="Default: causal (the chapter's GPT lab), none with kv_tokens, or a pretrained model's own.",
        json_schema_extra=lab_field(form="main"),
    )
    window: int | None = Field(
        None,
        ge=1,
        description="mask=sliding_window: tokens a query reads back, itself included.",
        json_schema_extra=lab_field(limit="max_tokens"),
    )
    prefix: int | None = Field(
        None,
        ge=0,
        description="mask=prefix_lm: the first `prefix` tokens are read both ways.",
        json_schema_extra=lab_field(),
    )
    mask_matrix: (
        Annotated[list[Annotated[list[Literal[0, 1]], Field(max_length=1024)]], Field(max_length=1024)] | None
    ) = Field(
        None,
        description="mask=custom: N × N_kv of 1 (may read) and 0 (may not).",
        json_schema_extra=lab_field(form="hidden"),
    )
    positions: PositionsKind | None = Field(
        None,
        description="none, sinusoidal or learned (added to x), or rope (rotates q and k).",
        json_schema_extra=lab_field(only="builtin"),
    )
    rope_base: float | None = Field(
        None,
        gt=1,
        le=1e9,
        allow_inf_nan=False,
        description="RoPE: θ_i = base^(−2i/d_k).",
        json_schema_extra=lab_field(depends=("positions", "rope"), only="builtin"),
    )
    rope_pairing: Pairing | None = Field(
        None,
        description="RoPE pairs (2i, 2i+1) as the paper, or (i, i + d_k/2) as Hugging Face's LLaMA.",
        json_schema_extra=lab_field(depends=("positions", "rope"), only="builtin"),
    )
    n_ctx: int | None = Field(
        None,
        ge=1,
        le=1_000_000,
        description="positions=learned: rows of the table.",
        json_schema_extra=lab_field(depends=("positions", "learned"), only="builtin"),
    )
    n_kv_heads: int | None = Field(
        None,
        ge=1,
        description="GQA/MQA: K/V heads shared by groups of query heads.",
        json_schema_extra=lab_field(only="builtin", limit="max_heads"),
    )
    kv_tokens: list[str] | str | None = Field(
        None,
        description="Cross-attention: the sequence K and V come from (Q comes from `tokens`).",
        json_schema_extra=lab_field(only="builtin", limit="max_tokens"),
    )
    pad_positions: list[int] = Field(
        default_factory=list,
        description="0-based key positions never attended to.",
        json_schema_extra=lab_field(),
    )
    segment_ids: list[int] = Field(
        default_factory=list,
        description="mask=document: one id per token; a token sees its own document, causally.",
        json_schema_extra=lab_field(),
    )
    scale: Scale = Field(
        "sqrt_dk", description="Divide QKᵀ by √d_k, 1 or d_k.", json_schema_extra=lab_field(form="main")
    )
    seed: int = Field(
        0,
        ge=0,
        le=2**63 - 1,
        description="Seeds the generated x and weights.",
        json_schema_extra=lab_field(form="main"),
    )
    dtype: DType = Field("float32", description="Half precision needs CUDA.", json_schema_extra=lab_field(form=None))
    x: MatrixIn | None = Field(
        None,
        description="Explicit input (N, d_model) instead of seeded embeddings.",
        json_schema_extra=EXPLICIT,
    )
    w_q: MatrixIn | None = Field(
        None,
        description="Explicit (d_model, d_model); Q = X W_Q + b_Q.",
        json_schema_extra=EXPLICIT,
    )
    w_k: MatrixIn | None = Field(
        None, description="Explicit (d_model, d_kv); K = X W_K + b_K.", json_schema_extra=EXPLICIT
    )
    w_v: MatrixIn | None = Field(
        None, description="Explicit (d_model, d_kv); V = X W_V + b_V.", json_schema_extra=EXPLICIT
    )
    w_o: MatrixIn | None = Field(
        None, description="Explicit (d_model, d_model); output = concat(heads) W_O + b_O.", json_schema_extra=EXPLICIT
    )
    b_q: Row | None = Field(None, description="Explicit (d_model,) bias of Q.", json_schema_extra=EXPLICIT)
    b_k: Row | None = Field(None, description="Explicit (d_kv,) bias of K.", json_schema_extra=EXPLICIT)
    b_v: Row | None = Field(None, description="Explicit (d_kv,) bias of V.", json_schema_extra=EXPLICIT)
    b_o: Row | None = Field(None, description="Explicit (d_model,) bias of the output.", json_schema_extra=EXPLICIT)
    stages: list[StageKey] | None = Field(
        None, description="Stages to return; all when omitted.", json_schema_extra=OUTPUT
    )
    heads: list[int] | None = Field(
        None, description="Heads to return (0-based); all when omitted.", json_schema_extra=OUTPUT
    )
    decimals: int | None = Field(None, ge=0, le=8, description="Round every returned number.", json_schema_extra=OUTPUT)

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
            if h >= spec.n_heads:
                raise FieldError("heads", f"head {h} does not exist: this trace has heads 0..{spec.n_heads - 1}")
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
    stages: list[BlockStageKey] | None = Field(  # type: ignore[assignment]
        None, description="Stages to return; all when omitted.", json_schema_extra=OUTPUT
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
        if self.head >= spec.n_heads:
            raise FieldError("head", f"head {self.head} does not exist: this trace has heads 0..{spec.n_heads - 1}")
        return spec


class DecodeRequest(AttentionRequest):
    """Prefill the first `prefill` tokens, then decode the rest one at a time against the KV cache."""

    prefill: int = Field(1, ge=1, description="Tokens processed at once before the first decode step.")
    stages: None = Field(None, description="Not used: a decode answer has its own shape.", json_schema_extra=OUTPUT)

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


# --- The field list, derived from a request model ------------------------------------------------------------


@dataclass(frozen=True)
class RequestField:
    """One request field as every consumer sees it: the GET parser, the form, the URL state, the CLI, /docs."""

    name: str
    kind: str  # choice | integer | number | list | json | text
    item: str | None  # a list's items, a number's type ("integer", "number"), or "boolean"; None otherwise
    choices: tuple[str, ...]  # a choice field's values, in the model's order
    form: str | None  # the lab form's group; None: not in a page's URL
    depends: tuple[str, str] | None  # (field, value) that this field is only used with
    only: str | None  # "builtin" or "pretrained" presets only
    limit: str | None  # the `Limits` attribute the engine checks it against
    output: bool  # the output selection, not passed to the engine
    description: str
    default: Any


def _kind(options: list[dict[str, Any]]) -> tuple[str, str | None, tuple[str, ...]]:
    """A field's kind from its JSON schema: (kind, numeric item type, choices)."""
    choices = tuple(v for o in options for v in [*o.get("enum", []), *([o["const"]] if "const" in o else [])])
    if choices and all(isinstance(v, str) for v in choices):
        return "choice", None, choices
    types = {o.get("type") for o in options}
    if types == {"boolean"}:  # a query writes it as text: true/false (or 1/0, on/off)
        return "text", "boolean", ()
    if "string" in types:
        return "text", None, ()
    arrays = [o for o in options if o.get("type") == "array"]
    if arrays:
        items = arrays[0].get("items", {})
        if items.get("type") == "array":
            return "json", None, ()
        item = items.get("type")
        return "list", item if item in ("integer", "number") else None, ()
    for number in ("integer", "number"):
        if number in types:
            return number, number, ()
    return "text", None, ()


@lru_cache(maxsize=64)
def request_fields(model: type[BaseModel]) -> dict[str, RequestField]:
    """Every field of a request model with its metadata (`lab_field`), in the model's order: the one field list."""
    props = model.model_json_schema()["properties"]
    out: dict[str, RequestField] = {}
    for name, info in model.model_fields.items():
        prop = props[name]
        extra = info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}
        lab = extra.get("x-lab")
        meta: dict[str, Any] = lab if isinstance(lab, dict) else {}
        kind, item, choices = _kind([o for o in prop.get("anyOf", [prop]) if o.get("type") != "null"])
        if meta.get("kind") and meta["kind"] != kind:
            kind, item = meta["kind"], None
        depends = meta.get("depends") or mask_depends(model, name)
        out[name] = RequestField(
            name=name,
            kind=kind,
            item=item,
            choices=choices,
            form=meta.get("form", "more"),
            depends=(depends[0], depends[1]) if depends else None,
            only=meta.get("only"),
            limit=meta.get("limit"),
            output=bool(meta.get("output")),
            description=info.description or "",
            default=None if info.default_factory is not None else info.default,
        )
    return out


def _union(kind: str) -> tuple[str, ...]:
    """The names of one kind across every request model here (for rules that see only a query's names)."""
    names: dict[str, None] = {}
    for model in (AttentionRequest, BlockRequest, TilesRequest, DecodeRequest):
        names |= {n: None for n, f in request_fields(model).items() if f.kind == kind}
    return tuple(names)


LIST_FIELDS = _union("list")  # repeatable query parameters: pad_positions, segment_ids, token_ids, stages, heads


# Numbers as query text may write them: ASCII digits only (int() and float() would also take "²", "٣" or "1_1").
ASCII_INT = re.compile(r"-?[0-9]{1,30}")
ASCII_NUMBER = re.compile(r"[-+]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]{1,4})?")


BOOLEANS = {"true": True, "1": True, "on": True, "false": False, "0": False, "off": False}


def _query_value(text: str, kind: str | None) -> Any:
    """Query text as the JSON value a POST would carry: plain ASCII numerals become numbers; anything else stays
    text, for the strict model to refuse with a message naming the field."""
    if kind == "integer" and ASCII_INT.fullmatch(text):
        return int(text)
    if kind == "number" and ASCII_NUMBER.fullmatch(text):
        return float(text)
    if kind == "boolean" and text.lower() in BOOLEANS:
        return BOOLEANS[text.lower()]
    return text


def from_query(
    params: Mapping[str, Any], getlist: Any = None, model: type[BaseModel] = AttentionRequest
) -> dict[str, Any]:
    """Turn query parameters into the body a POST would carry. Unknown parameters (the page's own `stage`,
    `head`, `lang`) are left out, so a lab URL works unchanged as its JSON twin."""
    out: dict[str, Any] = {}
    for name, field in request_fields(model).items():
        if name not in params:
            continue
        if field.kind == "list":
            values = getlist(name) if getlist else [params[name]]
            items = [part.strip() for v in values for part in str(v).replace(" ", ",").split(",")]
            out[name] = [_query_value(i, field.item) for i in items if i]
        elif field.kind == "json":
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
                out[name] = _query_value(value, field.item)
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
    414: {"model": Problem, "description": "The query is over the URL limit: send large inputs as a POST body"},
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


def int_or_empty(minimum: int | None = None, maximum: int | None = None) -> dict[str, Any]:
    """A query integer's schema with the bounds its parser enforces (or empty: the default)."""
    bounds = {k: v for k, v in (("minimum", minimum), ("maximum", maximum)) if v is not None}
    return {"anyOf": [{"type": "integer", **bounds}, INT_OR_EMPTY["anyOf"][1]]}


NUMBER_BOUNDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")


def _bounds(prop: dict[str, Any]) -> dict[str, Any]:
    """The constraints (minimum, maxLength, …) of a property's non-null option, from pydantic's JSON schema."""
    out: dict[str, Any] = {}
    for option in prop.get("anyOf", [prop]):
        if option.get("type") != "null":
            out |= {k: v for k, v in option.items() if k in (*NUMBER_BOUNDS, "maxLength", "minLength")}
    return out


def _pick(d: dict[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    return {k: d[k] for k in keys if k in d}


def query_parameters(model: type[BaseModel], extra: dict[str, dict[str, Any]] | None = None) -> list[dict[str, Any]]:
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
            b = _pick(bounds, NUMBER_BOUNDS)
            schema = {"anyOf": [{"type": "integer", **b}, INT_OR_EMPTY["anyOf"][1]]} if b else INT_OR_EMPTY
        elif field.item == "boolean":
            schema = {"type": "string", "enum": [*BOOLEANS, ""]}
        elif field.kind == "text" and "maxLength" in bounds:
            schema = {"type": "string", "maxLength": bounds["maxLength"]}
        params.append({"name": name, "in": "query", "required": False, "schema": schema, "description": note})
    for name, schema in (extra or {}).items():
        params.append({"name": name, "in": "query", "required": False, "schema": schema})
    return params
