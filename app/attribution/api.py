"""GET/POST /api/v1/attribution: what each head, MLP and the embedding add to one logit (direct logit attribution,
engine/attribution.py), with attention rollout, attention flow and one layer's value-weighted norms when asked. An
encoder (MiniLM) has no next-token logit: it gets each head's output norm, the norms, rollout and flow instead; so
do the lab's built-in presets, the toy block of `/` and the random GPT-2-sized block of `/block` (one attention
layer each, no unembedding), read from the lab's own trace of them."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Annotated, Any
from urllib.parse import urlencode

import orjson
import torch
from fastapi import APIRouter, Request, Response
from pydantic import BaseModel, ConfigDict, Field, field_validator

from engine import attribution as A
from engine.block import make_block_spec
from engine.errors import Message
from engine.spec import PRESETS, SpecError, make_spec
from engine.tracing import compute as compute_trace

from ..lab import Lab, get_key
from ..schemas import ERRORS, MAX_ITEMS, FieldError, no_surrogates, said
from ..web.answer import twins
from ..web.sequence import Text, generators, text_of

router = APIRouter(prefix="/api/v1", tags=["attribution"], responses=ERRORS)


class AttributionRequest(BaseModel):
    """A text, the position to explain, and (for a causal language model) the token whose logit is split (or the
    difference of two tokens' logits); an encoder takes no target."""

    model_config = ConfigDict(extra="forbid", strict=True)

    preset: str = Field("smollm2", max_length=64, description="A Pre-LN causal language model this server "
                        "loaded, or an encoder (minilm: no logit to split; head norms, rollout and flow), or one of "
                        "the lab's built-in presets as /api/v1/attention and /api/v1/block name them: toy (d_model "
                        "4, 1 head) or gpt2-small (768, 12 heads): one attention layer, no unembedding (head norms, "
                        "value-weighted norms, rollout, flow and the score split).")  # fmt: skip
    text: str | None = Field(None, max_length=8000, description="The text, for the model's own tokenizer (toy and "
                             "gpt2-small: the tokens, split on whitespace, as `tokens`).")  # fmt: skip
    tokens: Annotated[list[str], Field(max_length=MAX_ITEMS)] | str | None = Field(None, description="toy and gpt2-small: the sequence, as "
                                           "/api/v1/attention takes it (a list, or one string split on whitespace); "
                                           "default: the preset's own.")  # fmt: skip
    seed: int = Field(0, ge=0, lt=2**63, description="toy and gpt2-small: the seed of their generated embeddings "
                      "and weights (as /api/v1/attention's).")  # fmt: skip
    block: bool | None = Field(None, description="toy and gpt2-small: read the attention inside /block's whole block "
                               "(after its first LayerNorm; true) or the lab's attention on x as `/` traces it "
                               "(false). Default: the toy as the lab of `/`, gpt2-small as /block.")  # fmt: skip
    token_ids: list[int] | None = Field(None, max_length=4096, description="The text as token ids instead.")
    bos: bool = Field(True, description="Put the model's BOS before the text (as /api/v1/predict does).")
    position: int | None = Field(None, ge=0, le=1_000_000, description="The position whose logit is split, counted "
                                 "in `tokens` (text_start says where the text begins); default: the last (an "
                                 "encoder's: the last before the [SEP] its tokenizer appends).")  # fmt: skip
    target: str | None = Field(None, max_length=200, description="The token whose logit is split, as text (one "
                               "token: a text of several is a 422 naming its pieces); default: the next token of the "
                               "text, or at the last position the model's most likely one.")  # fmt: skip
    target_id: int | None = Field(None, ge=0, description="The target as a token id instead.")
    contrast: str | None = Field(None, max_length=200, description="A second token: split target − contrast (one "
                                 "token, as `target`).")  # fmt: skip
    contrast_id: int | None = Field(None, ge=0, description="The contrast as a token id instead.")
    rollout: bool = Field(False, description="Add attention rollout through every layer (Abnar & Zuidema 2020).")
    norms_layer: int | None = Field(None, ge=0, le=4096, description="Add this layer's value-weighted norms "
                                    "‖α_ij v_j W_O‖ beside its weights α_ij (Kobayashi et al. 2020).")  # fmt: skip
    flow: bool = Field(False, description="Add attention flow (Abnar & Zuidema 2020): the max flow from the position "
                       "back to each token through every layer, one max-flow per token: at most MAX_FLOW_TOKENS "
                       "tokens (a decoder's up to the position).")  # fmt: skip
    score_layer: int | None = Field(None, ge=0, le=4096, description="With score_head and score_key: add why one "
                                    "cell of this layer's QKᵀ/√d_k scores is what it is (`score_split`).")  # fmt: skip
    score_head: int | None = Field(None, ge=0, le=4096, description="The head of the score split.")
    score_key: int | None = Field(None, ge=0, le=1_000_000, description="The key position of the score split (the "
                                  "query is `position`; a decoder's key at most the position).")  # fmt: skip
    decimals: int | None = Field(None, ge=0, le=8, description="Round the returned numbers.")

    # A lone UTF-16 surrogate (JSON's "\\ud800") is not text: the toy cannot seed a vector from it, nor a tokenizer
    # read it (as /api/v1/attention refuses it).
    _text = field_validator("text", "tokens", "target", "contrast", mode="before")(no_surrogates)


@dataclass(frozen=True)
class Answer:
    """The answer as the lab's cache keeps it, one entry for the API and the page: the document the page reads and
    its JSON the API sends, written once where it is computed (nothing reads the JSON back)."""

    doc: dict[str, Any]
    body: bytes

    @classmethod
    def of(cls, doc: dict[str, Any]) -> Answer:
        return cls(doc, orjson.dumps(doc, option=orjson.OPT_SERIALIZE_NUMPY))

    @property
    def nbytes(self) -> int:
        return 2 * len(self.body)  # the JSON and the document it was written from (about as large)


def token_of(text: Text, raw: str | None, given: int | None, field: str) -> int | None:
    if raw is not None and given is not None:
        raise FieldError(field, said("name_or_id", field=field))
    if given is not None:
        if given >= text.model.info.vocab:
            raise FieldError(f"{field}_id", said("outside_vocab", last=text.model.info.vocab - 1))
        return given
    if raw is None:
        return None
    ids = text.model.tokenize(raw)
    ids = ids[text.model.specials_first(ids) :]
    if not ids:
        raise FieldError(field, said("no_token"))
    if len(ids) > 1:  # a word of two pieces, or two words: which logit is meant is the user's to say, not ours
        pieces = " + ".join(f"“{p}”" for p in text.model.labels(ids))
        raise FieldError(field, Message("multi_token", text=raw, model=text.preset, n=len(ids), pieces=pieces,
                                        field=field))  # fmt: skip
    return ids[0]


def encoder(lab: Lab, preset: str) -> Any:
    """The loaded encoder `preset` (MiniLM), or None for any other name (a decoder's checks are `text_of`'s)."""
    m = lab.models.get(preset)
    return m if m is not None and getattr(m, "decoder", True) is False else None


def encoders(lab: Lab) -> list[str]:
    return [name for name in lab.models if encoder(lab, name) is not None]


def text_for(req: Any, lab: Lab, max_tokens: int) -> Text:
    """The request's text as a sequence of the model it names: a Pre-LN decoder's (`text_of`, BOS as asked), or an
    encoder's as its tokenizer gives it ([CLS] … [SEP]), at most `max_tokens`, at least two tokens."""
    model = encoder(lab, req.preset)
    if model is None:
        if req.preset not in lab.models:
            names = ", ".join([*generators(lab.models), *encoders(lab), *BUILTIN])
            raise FieldError("preset", said("attributions_model", names=names))
        return text_of(req, lab, max_tokens, False, "tokens", 1, "attributions", True)
    return text_of(req, lab, max_tokens, False, "tokens", model=model)  # [CLS] … [SEP], as its tokenizer gives it


class ScoreSplitPart(BaseModel):
    """One cell of a head's QKᵀ/√d_k (query `query`, key `key`) as its per-dimension terms q_d k_d / √d_k (after
    RoPE) and, under RoPE, per frequency pair (each pair's θ_f, the rotation (key − query)·θ_f between the unrotated
    q_f and k_f, and the pair's term at offset 0); `score` is their sum, `cell` the same cell of the lab's trace's
    scores matrix (engine.tracing), computed apart."""

    layer: int
    head: int
    query: int
    key: int
    score: float
    cell: float
    masked: bool
    terms: list[float]
    pairs: list[float] | None = None
    theta: list[float] | None = None
    angle: list[float] | None = None
    unrotated: list[float] | None = None


class TokenOut(BaseModel):
    token_id: int
    token: str


class AttributionAnswer(BaseModel):
    """The answer (documentation: the route returns its cached JSON bytes as they are). Direct-logit fields are
    null for an encoder (`no_dla` says why; `head_norms` instead); `rollout`, `flow`, `norms` and `score_split` are
    there only when asked for."""

    preset: str
    decoder: bool
    no_dla: str | None
    tokens: list[str]
    token_ids: list[int] | None = Field(description="null for toy and gpt2-small: their tokens are words the lab "
                                        "embeds by seed, not a vocabulary's ids")  # fmt: skip
    text_start: int
    position: int
    target: TokenOut | None
    contrast: TokenOut | None
    norm: str
    scale: float | None
    heads: list[list[float]] | None
    mlps: list[float] | None
    attn_bias: list[float] | None
    embed: float | None
    total: float | None
    norm_bias: float | None
    logit: float | None
    remainder: float | None
    head_norms: list[list[float]] | None = None
    rollout: dict[str, Any] | None = Field(None, description="`layers` (each layer's row) and `final` (the product's)")
    flow: dict[str, Any] | None = Field(None, description="`values`, `tokens`, `edges`, `max_flows`")
    norms: dict[str, Any] | None = Field(None, description="`layer`, `weights` and `value_weighted`, head by head")
    score_split: ScoreSplitPart | None = None
    causal: bool | None = Field(None, description="toy and gpt2-small: a query reads only the keys up to itself")
    trace: str | None = Field(None, description="toy and gpt2-small: `attention` (the lab of `/`) or `block` (the "
                              "attention inside /block's block, after its first LayerNorm)")  # fmt: skip
    trace_url: str | None = Field(None, description="toy and gpt2-small: the lab's own answer for the same trace "
                                  "(/api/v1/attention or /api/v1/block): its scores and weights are these")  # fmt: skip


def score_split(text: Text, ids: list[int], layer: int, head: int, query: int, key: int, max_tokens: int,
                device: str = "cpu", limits: Any = None) -> tuple[A.ScoreSplit, float]:  # fmt: skip
    """The split of one cell (engine.attribution.score_split) and the same cell of the layer's trace (its scores
    matrix), each computed on its own: the page and the API show them side by side."""
    model = text.model
    split = A.score_split(model, ids, layer, head, query, key, max_tokens=max_tokens)
    spec = make_spec(token_ids=ids, preset=text.preset, layer=layer, models={text.preset: model}, device=device,
                     limits=limits)  # fmt: skip
    return split, float(compute_trace(spec, model).scores.scaled[head, query, key])


def split_part(split: A.ScoreSplit, cell: float, decimals: int | None) -> dict[str, Any]:
    def some(t: torch.Tensor | None) -> Any:
        return None if t is None else rounded(t, decimals)

    return ScoreSplitPart(
        layer=split.layer, head=split.head, query=split.query, key=split.key, score=split.score, cell=cell,
        masked=split.masked, terms=rounded(split.terms, decimals), pairs=some(split.pairs), theta=some(split.theta),
        angle=some(split.angle), unrotated=some(split.unrotated),
    ).model_dump()  # fmt: skip


def checked(req: AttributionRequest, preset: str, layers: Message, n_layer: int, n_heads: int, span: int,
            position: int, flow_tokens: int, too_long: FieldError) -> tuple[int, int, int] | None:  # fmt: skip
    """The parts asked for, each a 422 naming its field when out of range: `norms_layer` (`layers`: the model's layers,
    said), attention flow over more than `flow_tokens` of the `span` tokens the position reads (`too_long`), and
    the score split (layer, head, key: returned)."""
    if req.norms_layer is not None and req.norms_layer >= n_layer:
        raise FieldError("norms_layer", layers)
    if req.flow and span > flow_tokens:
        raise too_long
    asked = (req.score_layer, req.score_head, req.score_key)
    if all(a is None for a in asked):
        return None
    for name, value in zip(("score_layer", "score_head", "score_key"), asked, strict=True):
        if value is None:
            raise FieldError(name, said("score_together"))
    if req.score_layer >= n_layer:  # type: ignore[operator]
        raise FieldError("score_layer", layers)
    if req.score_head >= n_heads:  # type: ignore[operator]
        raise FieldError("score_head", said("heads_range", model=preset, last=n_heads - 1))
    if req.score_key >= span:  # type: ignore[operator]
        raise FieldError("score_key", said("query_keys", position=position, last=span - 1))
    return asked  # type: ignore[return-value]


def rounded(t: torch.Tensor | float, decimals: int | None) -> Any:
    if isinstance(t, float):
        return t if decimals is None else round(t, decimals)
    t = t.detach().float().cpu()
    return (t if decimals is None else t.round(decimals=decimals)).tolist()


NO_DLA = ("{preset} is an encoder: it predicts no next token, so it has no next-token logit (no unembedding) to "
          "split; direct logit attribution does not apply. Each head's output norm, the value-weighted norms, "
          "rollout and flow need none.")  # fmt: skip


def too_long(text: Text, req: AttributionRequest, position: int, flow_tokens: int) -> FieldError:
    """The 422 naming the text (or its token ids) of a flow that would read more than `flow_tokens` tokens."""
    n = position + 1 if text.model.decoder else len(text.seq)
    said_as = (
        said("flow_long_upto", limit=flow_tokens, n=n, position=position)
        if text.model.decoder
        else said("flow_long_text", limit=flow_tokens, n=n)
    )
    return FieldError("token_ids" if req.token_ids is not None else "text", said_as)


def rollout_fits(text: Text, req: AttributionRequest, span: int) -> None:
    """A 422 naming the text (or its token ids) when the rollout of the `span` tokens the position reads would not
    fit the engine's bound (every layer's Â and product kept, N × N each: `A.rollout_tokens`), said before any
    forward pass runs: SmolLM2 at 986 tokens or more was a 422 after the whole attribution had run on the API, and a
    500 on the page, which always shows the rollout."""
    arch = text.model.arch
    most = A.rollout_tokens(arch.n_layer, arch.n_heads)
    if span > most:
        raise FieldError("token_ids" if req.token_ids is not None else "text",
                         said("rollout_long", limit=most, model=text.preset, n=span))  # fmt: skip


def position_of(model: Any, ids: list[int], req: AttributionRequest) -> int:
    """The position asked for, or the default: a decoder's last token, an encoder's last before its [SEP]."""
    return (len(ids) - 1 if model.decoder else last_word(model, ids)) if req.position is None else req.position


def model_checked(text: Text, req: AttributionRequest, position: int, flow_tokens: int) -> tuple[int, int, int] | None:
    """`checked` for a loaded model's text, and the rollout's bound when it is asked for."""
    arch, span = text.model.arch, position + 1 if text.model.decoder else len(text.seq)
    if req.rollout:
        rollout_fits(text, req, span)
    layers = said("has_layers", model=text.preset, last=arch.n_layer - 1)
    return checked(req, text.preset, layers, arch.n_layer, arch.n_heads, span, position, flow_tokens,
                   too_long(text, req, position, flow_tokens))  # fmt: skip


def last_word(model: Any, ids: list[int]) -> int:
    """An encoder's default query position: the text's last token, not the separator its tokenizer appends ([SEP]
    for BERT). Every BERT text ends with [SEP]: its row is the same separator whatever the text says, and many heads
    use it as a place to put weight that is not needed (Clark et al. 2019, "What does BERT look at?"), so it tells
    little about the text; the last word's row does. The separator is what the tokenizer puts after any text: of
    what it adds to an empty text ([CLS] [SEP]), the part past what it puts before one word ([CLS]); ids that do
    not end with it (token_ids given without it) keep their last position."""
    try:
        added, word = list(model.tokenize("")), list(model.tokenize("a"))
    except Exception:  # a model folder without a tokenizer: token ids alone, nothing appended
        return len(ids) - 1
    head = next((i for i, (a, b) in enumerate(zip(added, word, strict=False)) if a != b), len(added))
    tail = added[head:]
    if tail and len(ids) > len(tail) and ids[len(ids) - len(tail) :] == tail:
        return len(ids) - len(tail) - 1
    return len(ids) - 1


# An answer without a logit to split (an encoder's, a built-in preset's): its direct-logit fields.
NO_LOGIT = dict.fromkeys(("scale", "heads", "mlps", "attn_bias", "embed", "total", "norm_bias", "logit", "remainder"))


@contextmanager
def engine_bounds() -> Iterator[None]:
    """The engine's own bounds name their parameter: raised as the request's field of that name (else `text`)."""
    try:
        yield
    except ValueError as e:
        field, _, message = str(e).partition(": ")
        raise FieldError(field if field in AttributionRequest.model_fields else "text", message or str(e)) from None


def parts(req: AttributionRequest, position: int, span: int, causal: bool, n_layer: int,
          asked: tuple[int, int, int] | None, split: Callable[[int, int, int], tuple[A.ScoreSplit, float]],
          rollout: Callable[[], A.Rollout], norms: Callable[[int], A.ValueNorms]) -> dict[str, Any]:  # fmt: skip
    """The parts asked for beside the attribution: the score split (`split(layer, head, key)`, with the same cell of
    the layer's trace), rollout, flow and one layer's value-weighted norms, over the `span` tokens the position
    reads (a decoder's up to it, an encoder's every one, both directions)."""
    extra: dict[str, Any] = {}
    if asked is not None:
        extra["score_split"] = split_part(*split(*asked), req.decimals)
    if req.rollout or req.flow:
        r = rollout()
        if req.rollout:
            extra["rollout"] = {"layers": rounded(r.layers[:, position, :span], req.decimals),
                                "final": rounded(r.cumulative[-1, position, :span], req.decimals)}  # fmt: skip
        if req.flow:
            edges = A.flow_edges(n_layer, span, causal)
            values = A.flow_of(r.layers[:, :span, :span], position, max_edges=edges)
            extra["flow"] = {"values": rounded(values, req.decimals), "tokens": span, "edges": edges, "max_flows": span}
    if req.norms_layer is not None:
        v = norms(req.norms_layer)
        extra["norms"] = {"layer": req.norms_layer, "weights": rounded(v.weights[:, position, :span], req.decimals),
                          "value_weighted": rounded(v.norms[:, position, :span], req.decimals)}  # fmt: skip
    return extra


def model_parts(text: Text, req: AttributionRequest, position: int, asked: tuple[int, int, int] | None,
                max_tokens: int, device: str, limits: Any) -> dict[str, Any]:  # fmt: skip
    """`parts` of a loaded model's text (the engine's own runs over the tokens the position reads)."""
    model = text.model
    ids = list(text.seq[: position + 1] if model.decoder else text.seq)
    return parts(
        req, position, len(ids), model.decoder, model.arch.n_layer, asked,
        lambda layer, head, key: score_split(text, ids, layer, head, position, key, max_tokens, device, limits),
        lambda: A.rollout(model, ids, max_tokens=max_tokens),
        lambda layer: A.value_weighted_norms(model, ids, layer, max_tokens=max_tokens),
    )  # fmt: skip


def compute(text: Text, req: AttributionRequest, max_tokens: int, flow_tokens: int = 24, device: str = "cpu",
            limits: Any = None) -> dict[str, Any]:  # fmt: skip
    """The attribution (and the parts asked for) of the request's text: runs in the lab's worker thread. An encoder
    has no logit to split (the DLA fields are null, `no_dla` says why): each head's output norm at the position
    (`head_norms`) instead, and the parts over every token (both directions)."""
    model, ids = text.model, list(text.seq)
    position = position_of(model, ids, req)
    if position >= len(ids):
        raise FieldError("position", said("text_positions", last=len(ids) - 1, position=position))
    if not model.decoder:
        for name in ("target", "target_id", "contrast", "contrast_id"):
            if getattr(req, name) is not None:
                raise FieldError(name, said("encoder_no_logit", model=text.preset))
        asked = model_checked(text, req, position, flow_tokens)
        with engine_bounds():
            extra = model_parts(text, req, position, asked, max_tokens, device, limits)
            head_norms = A.head_output_norms(model, ids, position, max_tokens=max_tokens)
        return {
            "preset": text.preset, "decoder": False, "no_dla": NO_DLA.format(preset=text.preset),
            "tokens": list(text.labels), "token_ids": ids, "text_start": text.text_start, "position": position,
            "target": None, "contrast": None, "norm": model.arch.norm, **NO_LOGIT,
            "head_norms": rounded(head_norms, req.decimals), **extra,
        }  # fmt: skip
    if req.flow and position + 1 > flow_tokens:
        raise too_long(text, req, position, flow_tokens)
    target = token_of(text, req.target, req.target_id, "target")
    contrast = token_of(text, req.contrast, req.contrast_id, "contrast")
    if target is None and position + 1 < len(ids):  # the text's next token; at its end, the model's most likely
        target = ids[position + 1]  # (read by the attribution from its own run: `target` None)
    asked = model_checked(text, req, position, flow_tokens)
    with engine_bounds():
        a = A.direct_logit_attribution(model, ids, position, target, contrast, max_tokens=max_tokens)
        target = a.target
        extra = model_parts(text, req, position, asked, max_tokens, device, limits)
    labels = text.labels
    return {
        "preset": text.preset,
        "decoder": True,
        "no_dla": None,
        "tokens": list(labels),
        "token_ids": ids,
        "text_start": text.text_start,
        "position": position,
        "target": {"token_id": target, "token": model.labels([target])[0]},
        "contrast": None if contrast is None else {"token_id": contrast, "token": model.labels([contrast])[0]},
        "norm": model.arch.norm,
        "scale": a.scale,
        "heads": rounded(a.heads, req.decimals),
        "mlps": rounded(a.mlps, req.decimals),
        "attn_bias": rounded(a.attn_bias, req.decimals),
        "embed": rounded(a.embed, req.decimals),
        "total": a.total,
        "norm_bias": a.norm_bias,
        "logit": a.logit,
        "remainder": a.remainder,
        **extra,
    }


# -- the lab's built-in presets: the toy block of `/` and the random GPT-2-sized block of /block ------------------

BUILTIN = tuple(PRESETS)  # toy, gpt2-small: one attention layer of generated weights, no unembedding
NO_UNEMBEDDING = ("{preset} is one attention layer with generated weights ({where}): it has no unembedding, so no "
                  "logit to split; direct logit attribution does not apply. Each head's output norm, the "
                  "value-weighted norms, rollout (one layer: ½A + ½I), flow and the score split need none.")  # fmt: skip
WHERE = {False: "the lab of `/`, attention on x", True: "the attention inside /block's block, after its first norm"}


def builtin_spec(req: AttributionRequest, lab: Lab) -> tuple[Any, bool]:
    """The toy's or gpt2-small's trace as the lab makes it: the attention Spec of `/` (/api/v1/attention), or with
    `block` the BlockSpec of /block (/api/v1/block), from `tokens` (or `text`, split on whitespace) and `seed`.
    A target, a contrast or token ids are 422s naming them: there is no unembedding and no tokenizer."""
    for name in ("target", "target_id", "contrast", "contrast_id"):
        if getattr(req, name) is not None:
            raise FieldError(name, said("no_unembedding", model=req.preset))
    if req.token_ids is not None:
        raise FieldError("token_ids", said("no_tokenizer_tokens", model=req.preset))
    if req.text is not None and req.tokens is not None:
        raise FieldError("tokens", said("tokens_text_both"))
    field = "text" if req.text is not None else "tokens"
    block = req.preset != "toy" if req.block is None else req.block
    limits = lab.limits
    try:
        attn = make_spec(tokens=req.text if req.text is not None else req.tokens, preset=req.preset, seed=req.seed,
                         device=lab.device, limits=limits)  # fmt: skip
        if not block:
            return attn, False
        return make_block_spec(attn, max_d_ff=4 * limits.max_d_model,
                               memory_budget_bytes=limits.memory_budget_bytes), True  # fmt: skip
    except SpecError as e:  # the tokens were given as `text`: name that field
        if e.field == "tokens" and field == "text":
            raise FieldError("text", e.message) from None
        raise


async def builtin_trace(req: AttributionRequest, lab: Lab) -> tuple[Any, bool, Any]:
    """The spec, whether it is /block's, and the attention trace the lab's own pages show for it (the same cache
    entry as /api/v1/attention's or /api/v1/block's)."""
    spec, block = builtin_spec(req, lab)
    if block:
        return spec, True, (await lab.block(spec))[0].attention
    return spec, False, (await lab.trace(spec))[0]


def trace_url(spec: Any, block: bool) -> str:
    attn = spec.attn if block else spec
    query = {"preset": attn.preset, "tokens": " ".join(attn.tokens)} | ({"seed": attn.seed} if attn.seed else {})
    return ("/api/v1/block?" if block else "/api/v1/attention?") + urlencode(query)


def compute_builtin(req: AttributionRequest, spec: Any, block: bool, trace: Any, flow_tokens: int) -> dict[str, Any]:
    """The toy's or gpt2-small's answer from the lab's trace of it: no logit (the DLA fields null, `no_dla` says
    why); each head's output norm at the position, and rollout, flow, the norms and the score split as asked, over
    the keys the position reads (up to it under the causal mask)."""
    attn = spec.attn if block else spec
    n, h = attn.n_tokens, attn.n_heads
    field = "text" if req.text is not None else "tokens"
    position = n - 1 if req.position is None else req.position
    if position >= n:
        raise FieldError("position", said("text_positions", last=n - 1, position=position))
    causal = attn.mask == "causal"
    span = position + 1 if causal else n
    long_flow = FieldError(field, said("flow_long", limit=flow_tokens, n=span))
    asked = checked(
        req, attn.preset, said("has_one_layer", model=attn.preset), 1, h, span, position, flow_tokens, long_flow
    )
    extra = parts(
        req, position, span, causal, 1, asked,
        lambda _, head, key: (A.trace_score_split(trace, head, position, key),
                              float(trace.scores.scaled[head, position, key])),
        lambda: A.trace_rollout(trace), lambda _: A.trace_value_norms(trace),
    )  # fmt: skip
    return {
        "preset": attn.preset, "decoder": False, "no_dla": NO_UNEMBEDDING.format(preset=attn.preset,
                                                                                 where=WHERE[block]),
        "tokens": list(attn.tokens), "token_ids": None, "text_start": 0, "position": position, "target": None,
        "contrast": None, "norm": spec.norm if block else "none", **NO_LOGIT,
        "head_norms": rounded(A.trace_head_norms(trace, position), req.decimals), **extra, "causal": causal,
        "trace": "block" if block else "attention", "trace_url": trace_url(spec, block),
    }  # fmt: skip


async def builtin_answer(req: AttributionRequest, lab: Lab, progress: str | None) -> Answer:
    """The built-in preset's answer (one cache entry for the API and the page)."""
    spec, block, trace = await builtin_trace(req, lab)
    flow_tokens = lab.settings.max_flow_tokens

    def work(_: Any) -> Answer:
        return Answer.of(compute_builtin(req, spec, block, trace, flow_tokens))

    done, _ = await lab.compute("attribution", ("builtin", spec, req.model_dump_json()), lab.cost(spec), work,
                                progress=progress)  # fmt: skip
    return done


async def answer(request: Request, req: AttributionRequest, lab: Lab) -> Response:
    """Direct logit attribution at `position`: each head's output after W_O (`heads`, layers × heads), each MLP's
    (`mlps`), each layer's attention output bias (`attn_bias`) and the embedding (`embed`), projected through the
    final norm with its scale frozen at the real residual stream (`scale`; LayerNorm also centres each part) onto
    the target token's unembedding, or onto the difference target − contrast. `total` is their sum; `logit` the real
    logit (or difference) the model computes; `remainder` = logit − total, which is the final norm's shift
    `norm_bias` (LayerNorm) plus rounding. With `rollout`: the position's row of each layer's rollout matrix and of
    the product through every layer; with `norms_layer`: that layer's weights α and value-weighted norms ‖α v W_O‖
    for the position's row, head by head; with `flow`: attention flow from the position back to each token (one
    max-flow per token through the layered graph of rollout's matrices; at most MAX_FLOW_TOKENS tokens, else a 422
    naming `text`); with `score_layer`, `score_head` and `score_key`: `score_split`, one cell of that head's
    QKᵀ/√d_k at the query `position` split into its per-dimension terms (and, under RoPE, per frequency pair with
    its θ_f), their sum `score` beside the `cell` of the layer's scores matrix (ScoreSplitPart). An encoder (minilm) has no next-token logit: its direct-logit fields are null, `no_dla` says
    why, and `head_norms` (layers × heads) gives each head's output norm ‖Σ_j α_pj v_j W_O‖ at the position; its
    rollout, flow and norms read every token, both directions. The lab's built-in presets (toy: the lab of `/`;
    gpt2-small: the block of /block; `block` switches) take `tokens` and `seed` as /api/v1/attention does, have no
    unembedding and are answered as an encoder is (`head_norms` of their one layer, `trace_url` the lab's own answer
    whose scores and weights these are); a target, a contrast or token ids are 422s naming them."""
    if req.preset in BUILTIN:
        done = await builtin_answer(req, lab, get_key(request))
        return Response(done.body, media_type="application/json")
    if req.tokens is not None or req.block is not None or req.seed:
        name = "tokens" if req.tokens is not None else "block" if req.block is not None else "seed"
        raise FieldError(name, said("builtin_only", presets=", ".join(BUILTIN), model=req.preset))
    text = await lab.off_loop(req.preset, text_for, req, lab, lab.settings.max_predict_tokens)
    done = await text_answer(req, text, lab, get_key(request))
    return Response(done.body, media_type="application/json")


def text_cost(text: Text) -> int:
    info, n = text.model.info, len(text.seq)
    return 4 * n * (info.d_model * 8 + n * info.n_heads) * info.n_layer


async def text_answer(req: AttributionRequest, text: Text, lab: Lab, progress: str | None) -> Answer:
    """A loaded model's answer for the request's text (one cache entry for the API and the page)."""
    limit, flow_tokens = lab.settings.max_predict_tokens, lab.settings.max_flow_tokens

    def work(_: Any) -> Answer:
        return Answer.of(compute(text, req, limit, flow_tokens, lab.device, lab.long_limits))

    key = (text.preset, text.seq, req.model_dump_json())
    done, _ = await lab.compute("attribution", key, text_cost(text), work, progress=progress)
    return done


twins(router, "/attribution", AttributionRequest, answer, "attribution",
      summary="Split one logit into what each head, MLP and the embedding add",
      response_model=AttributionAnswer)  # fmt: skip
