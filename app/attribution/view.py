"""The page /attribution's View: what attention is worth at one query position of a real decoder. Direct logit
attribution as a layer × head grid (with the MLPs, the embedding and their sum beside the real logit), one head's
weights beside the norms they move and the effect of removing each source, the model's strongest sink head, and
attention rollout step by step, and attention flow beside it when asked for a short text. An encoder (MiniLM) has
no next-token logit: its grid is each head's output norm at the position, its rows have no effect column, and the
page says why. Every number is the engine's (engine/attribution.py); the grid is the API's own answer
(`/api/v1/attribution`, the same cache entry). `AttributionView` is what the page shows; its
JSON face is the page's `.json` twin."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any
from urllib.parse import urlencode

import torch

from engine import attribution as A
from engine.errors import Message
from engine.spec import PRESETS

from ..lab import Lab
from ..render import cells
from ..schemas import FieldError, head_within, query_model, said
from ..web.page import lab_url, twin_url
from ..web.sequence import DECODER, Text, generators
from ..web.state import Choice, Digits, HeadCell, PageQuery, within
from ..web.view import HIDDEN, View
from .api import (
    BUILTIN,
    AttributionRequest,
    builtin_answer,
    builtin_trace,
    encoder,
    encoders,
    position_of,
    rollout_fits,
    score_split,
    text_answer,
    text_cost,
    text_for,
)

# The page's sentence when its URL names none, in both languages: SmolLM2 reads English, and a class in either
# language sees the same numbers (the lesson's polls are checked against them).
DEFAULT_TEXT = "The capital of France is Paris, and the capital of England is"
SORTS = ("abs", "pos", "neg")  # the top heads by |value|, the most positive first, the most negative first
TOP = 10  # heads listed beside the grid
CELLS_UP_TO = 24  # sources: past this the rollout's strips carry no numbers (each still has its title)
HiddenFields = tuple[tuple[str, str], ...]


class AttributionQuery(PageQuery):
    """/attribution's view: the head whose row is shown (layer.head; default: the largest |attribution|) and the
    order of the top heads' list; `key`, the key position of the chosen head's score split (default: the key it
    weights most)."""

    head: HeadCell | None = None
    sort: Choice(SORTS) = "abs"  # type: ignore[valid-type]
    key: Digits(0, 1_000_000) | None = None  # type: ignore[valid-type]


@dataclass(frozen=True)
class Token:
    token_id: int
    token: str


@dataclass(frozen=True)
class TopHead:
    """A head of the grid, with its links: its pattern in the lab and the text with it knocked out (/predict)."""

    layer: int
    head: int
    value: float
    lab_url: str
    knock_url: str


@dataclass(frozen=True)
class Source:
    """One source position j of the query's row for a head: its weight α_pj, the norm it moves ‖α_pj v_j W_O‖,
    and (the chosen head only) the metric's change when it is removed from that head at that query."""

    position: int
    token: str
    weight: float
    norm: float
    effect: float | None = None
    weight_cls: Annotated[str, HIDDEN] = ""
    norm_cls: Annotated[str, HIDDEN] = ""
    effect_cls: Annotated[str, HIDDEN] = ""


@dataclass(frozen=True)
class HeadRow:
    """One head at the query position: every source (`sources`), the metric (`loss` of the target, or the
    `logit_diff`), its clean value, Spearman's rank correlation of the weights and of the norms with |effect|, and
    over every head of the layer together (`layer_weight`, `layer_norm`; None when the layer's runs exceed the
    bound and only this head was run)."""

    layer: int
    head: int
    sources: tuple[Source, ...]
    metric: str | None = None
    clean: float | None = None
    spearman_weight: float | None = None
    spearman_norm: float | None = None
    layer_weight: float | None = None
    layer_norm: float | None = None
    lab_url: str = ""
    knock_url: str = ""


@dataclass(frozen=True)
class Term:
    """One term of a score split: a dimension d's q_d k_d / √d_k, or (RoPE) a frequency pair f's two terms together,
    with its θ_f and the rotation (key − query)·θ_f between its unrotated q_f and k_f."""

    index: int
    value: float
    theta: float | None = None
    angle: float | None = None
    value_cls: Annotated[str, HIDDEN] = ""


@dataclass(frozen=True)
class WhyScore:
    """Why the chosen head's score at (query, key) is what it is: the cell of QKᵀ/√d_k split into its `count` terms
    (per dimension, or per RoPE frequency pair: `by`), the largest by size (`terms`), the others summed (`rest`),
    their sum `score` beside the `cell` of the layer's scores matrix (computed apart), and the key's weight α."""

    layer: int
    head: int
    query: int
    key: int
    key_token: str
    weight: float
    by: str  # "dim" or "pair"
    count: int
    terms: tuple[Term, ...]
    rest: float
    score: float
    cell: float
    masked: bool = False


@dataclass(frozen=True)
class Sink:
    """The model's strongest sink head on this text (the largest mean weight on the first token): that share, the
    first token's share of the norms the head moves, and ‖v_0 W_O‖ over the other tokens' mean; `row` its query
    row at the page's position."""

    layer: int
    head: int
    weight_share: float
    norm_share: float
    value_ratio: float
    row: HeadRow


@dataclass(frozen=True)
class Flow:
    """Attention flow from the query position back to each token (`values`; each token's own max flow, so they do
    not sum to 1), through a graph of `edges` edges, one max-flow per token (`tokens`)."""

    values: tuple[float, ...]
    edges: int
    tokens: int
    values_cls: Annotated[tuple[str, ...], HIDDEN] = ()


@dataclass(frozen=True)
class Rollout:
    """Attention rollout from the query position back to the tokens: `steps[l]` the row of layer l's own
    Â_l = ½ mean_h A_l + ½ I, `product[l]` the row of R_l = Â_l ⋯ Â_0; `product[-1]` is the rollout."""

    steps: tuple[tuple[float, ...], ...]
    product: tuple[tuple[float, ...], ...]
    product_cls: Annotated[tuple[tuple[str, ...], ...], HIDDEN] = ()
    steps_cls: Annotated[tuple[tuple[str, ...], ...], HIDDEN] = ()


class AttributionView(View):
    """Direct logit attribution at `position`: each head's (`heads`, layers × heads), each MLP's, each attention
    output bias's and the embedding's contribution to the target's logit (or target − contrast), `total` their sum
    beside the real `logit` (`remainder` = logit − total: the final norm's shift `norm_bias`, plus rounding), the
    final norm's scale frozen at the real stream (`scale`); the chosen head's row (`chosen`), the strongest sink
    head's (`sink`), the rollout (`rollout`) and, when asked for, attention flow (`flow`; its cost `flow_edges`
    said before). An encoder (`decoder` false) has no logit: those fields are empty or null, `no_dla` says why,
    and `head_norms` (each head's output norm at the position) is its grid."""

    template = "attribution.html"
    blocks = ("body",)
    kind = "attribution"

    preset: str = ""
    tokens: tuple[str, ...] = ()
    token_ids: tuple[int, ...] = ()
    text_start: int = 0
    position: int = 0
    target: Token | None = None
    contrast: Token | None = None
    norm: str = ""
    scale: float | None = None  # None (and the direct-logit fields below): an encoder, no logit
    layers: int = 0
    n_heads: int = 0
    heads: tuple[tuple[float, ...], ...] = ()
    mlps: tuple[float, ...] = ()
    attn_bias: tuple[float, ...] = ()
    embed: float | None = None
    total: float | None = None
    logit: float | None = None
    remainder: float | None = None
    norm_bias: float | None = None
    frozen: str = ""  # the convention, in words
    sum_said: str = ""  # the sum of the parts beside the real value, in words
    sort: str = "abs"
    top: tuple[TopHead, ...] = ()
    chosen: HeadRow | None = None
    why: WhyScore | None = None  # the chosen head's score at the position and one key, split
    sink: Sink | None = None
    rollout: Rollout | None = None
    # An encoder (MiniLM): no next-token logit, so no direct logit attribution (`no_dla` says why, and the DLA
    # fields above stay empty); `head_norms` (layers × heads) is each head's output norm at the position.
    decoder: bool = True
    no_dla: str = ""
    head_norms: tuple[tuple[float, ...], ...] = ()
    # The lab's built-in presets (the toy of `/`, the GPT-2-sized block of /block): one attention layer, no
    # unembedding; `trace` says which of the lab's traces (`attention` or `block`), empty for a model.
    trace: str = ""
    head_explain: Annotated[str, HIDDEN] = ""  # the chosen head's explanation (its catalogue key) when no logit
    span: int = 0  # the sources a query row reads: up to the position (a decoder), every token (an encoder)
    flow: Flow | None = None
    flow_edges: int = 0  # what flow would cost here: its graph's edges, one max-flow per token
    flow_tokens: int = 0  # the tokens it would read
    flow_limit: int = 0  # MAX_FLOW_TOKENS
    # What the template draws the numbers with (left out of the JSON face).
    grid_cls: Annotated[tuple[tuple[str, ...], ...], HIDDEN] = ()
    mlp_cls: Annotated[tuple[str, ...], HIDDEN] = ()
    embed_cls: Annotated[str, HIDDEN] = ""
    bound: Annotated[float, HIDDEN] = 0.0
    head_form: Annotated[HiddenFields, HIDDEN] = ()  # the state around `head`
    position_form: Annotated[HiddenFields, HIDDEN] = ()  # the state around `position`
    key_form: Annotated[HiddenFields, HIDDEN] = ()  # the state around `key`
    sort_urls: Annotated[tuple[tuple[str, str], ...], HIDDEN] = ()
    cells: Annotated[bool, HIDDEN] = True  # the rollout's strips carry their numbers
    # Links.
    json_url: str = ""
    twin_url: str = ""
    present_url: str = ""
    flow_url: str = ""


def fields_around(state: PageQuery, name: str) -> HiddenFields:
    """The page's state as the hidden fields of a GET form whose buttons set `name`: the text is written once, not
    once per button (a position per token, a head per cell of the grid)."""
    return tuple((k, state.params[k]) for k in state.page_keys if k in state.params and k != name)


def api_params(state: PageQuery) -> dict[str, str]:
    """The page's state as the API's query (the default sentence when the URL names no text)."""
    raw = dict(state.api_params())
    if not raw.get("text") and not raw.get("token_ids"):
        preset = raw.get("preset", "")
        raw = {"text": " ".join(PRESETS[preset].tokens) if preset in BUILTIN else DEFAULT_TEXT, **raw}
    return raw


def page_request(state: PageQuery) -> AttributionRequest:
    return query_model(AttributionRequest).model_validate(api_params(state))


def shade(value: float, scale: str, bound: float) -> str:
    return cells.colour(value, scale, bound) if math.isfinite(value) else "nonfinite"


def floats(t: torch.Tensor) -> tuple[float, ...]:
    return tuple(float(x) for x in t.detach().float().cpu().tolist())


@dataclass(frozen=True)
class Computed(A.Held):
    """What the page computes past the API's answer for one position: rollout and the sink head (the head's own
    work is `Detail`)."""

    rollout: A.Rollout
    sink: A.SinkContrast


@dataclass(frozen=True)
class Detail(A.Held):
    """One head's layer at one position: the layer's value-weighted norms, the sink head's layer's, and the
    weight against effect of the head (every head of the layer when the runs fit the bound)."""

    norms: A.ValueNorms
    sink_norms: A.ValueNorms
    sink_effect: A.WeightEffect | None  # None: an encoder (no logit, no effect)
    effects: tuple[A.WeightEffect, ...]  # the chosen head's among them (none for an encoder)


TERMS = 8  # the score split's largest terms shown; the others summed

MAX_RUNS = 4096  # the engine's own bound on a layer's weight-against-effect runs (heads × sources)


def head_of(chosen: tuple[int, int], n_layer: int, n_heads: int, model: str) -> tuple[int, int]:
    """The page's `head` (layer.head) inside the model's grid, or a 422 naming `head` that says which of the two is
    out of range: its layer (the model's layers) or its head (the layer's heads)."""
    layer, head = chosen
    if not 0 <= layer < n_layer:
        raise FieldError("head", Message("model_layers", model=model, last=n_layer - 1, layer=layer))
    return layer, head_within(head, n_heads)


async def attribution_view(state: AttributionQuery, lab: Lab, progress: str, ctx: dict[str, Any]) -> AttributionView:
    """What /attribution shows for `state` (its JSON face is the page's `.json` twin)."""
    chosen_head, key = state.head, state.key
    decoders = [*generators(lab.models), *encoders(lab)]
    if "preset" not in state.params and DECODER not in decoders and decoders:  # a server without SmolLM2
        state.params["preset"] = decoders[0]
    preset = state.params.get("preset", "")
    if encoder(lab, preset) is not None or preset in BUILTIN:  # a form switched to MiniLM or the toy: no target
        for name in ("target", "contrast"):
            state.params.pop(name, None)
    if preset in BUILTIN:
        return await builtin_view(state, lab, progress, ctx)
    req = page_request(state)
    limit = lab.settings.max_predict_tokens
    text: Text = await lab.off_loop(req.preset, text_for, req, lab, limit)
    model, seq = text.model, list(text.seq)
    flow_tokens = lab.settings.max_flow_tokens
    if len(seq) < 2:  # the sink contrast compares the first token with the others
        raise FieldError("token_ids" if req.token_ids is not None else "text", said("two_tokens"))
    first = position_of(model, seq, req)
    if first < len(seq):  # the page always shows the rollout: past its bound, a 422 before anything runs
        rollout_fits(text, req, first + 1 if model.decoder else len(seq))
    cost = text_cost(text)
    doc = (await text_answer(req, text, lab, progress)).doc  # the API's own answer: one cache entry for both
    p = int(doc["position"])
    dec = bool(doc["decoder"])  # an encoder (no logit): each head's output norm is the grid, every token a source
    grid = tuple(tuple(float(x) for x in row) for row in doc["heads" if dec else "head_norms"])
    n_layer, n_heads = len(grid), len(grid[0])
    reads = seq[: p + 1] if dec else seq  # the sources of the query's row (a sliding window's hidden ones not run)

    def more(_: Any) -> Computed:
        if not dec or p + 1 == len(seq):  # the last position (a decoder's default) or an encoder: one pass for both
            sink, both = A.sinks_and_rollout(model, seq, max_tokens=limit)
            assert both is not None
            return Computed(both, sink)
        return Computed(A.rollout(model, reads, max_tokens=limit), A.sink_contrast(model, seq, max_tokens=limit))

    extra, _ = await lab.compute("attribution_rollout", (text.preset, text.seq, p), cost, more, progress=progress)
    sinks = extra.sink
    if chosen_head is None:  # the head that adds (or takes; an encoder's: writes) the most
        flat = max(((abs(v), li, h) for li, row in enumerate(grid) for h, v in enumerate(row)))
        chosen_head = (flat[1], flat[2])
    layer, head = head_of(chosen_head, n_layer, n_heads, ctx["t"]("preset." + text.preset))
    if dec:
        target, contrast = int(doc["target"]["token_id"]), doc["contrast"] and int(doc["contrast"]["token_id"])
        all_heads = n_heads * len(reads) <= MAX_RUNS

        def detail(_: Any) -> Detail:  # one clean run: the head's layer (every head) and the sink head, with norms
            (effects, norms), (sink, sink_norms) = A.head_effects(
                model, seq, [(layer, None if all_heads else [head]), (sinks.layer, [sinks.head])], p, target,
                contrast, max_tokens=limit, max_runs=MAX_RUNS,
            )  # fmt: skip
            return Detail(norms, sink_norms, sink[0], tuple(effects))

        key_of: tuple[Any, ...] = (text.preset, text.seq, p, target, contrast, layer, None if all_heads else head)
        cost_of = cost * (n_heads if all_heads else 1)
    else:

        def detail(_: Any) -> Detail:
            norms = A.value_weighted_norms(model, seq, layer, max_tokens=limit)
            sink_norms = norms if sinks.layer == layer else A.value_weighted_norms(model, seq, sinks.layer,
                                                                                   max_tokens=limit)  # fmt: skip
            return Detail(norms, sink_norms, None, ())

        key_of, cost_of = (text.preset, text.seq, p, layer), cost
    got, _ = await lab.compute("attribution_head", key_of, cost_of, detail, progress=progress)
    why = await why_score(lab, text, reads, layer, head, p, key, got.norms, progress, cost)
    return build(state, ctx, text, doc, extra, got, (layer, head), state.sort if dec else "abs", flow_tokens, why)


@dataclass(frozen=True)
class Named:
    """What `build` reads of a text besides the answer: its preset and where the text begins."""

    preset: str
    text_start: int = 0


def builtin_link(preset: str, tokens: tuple[str, ...], block: bool, lang: str, present: bool) -> Callable[..., str]:
    """A head's pattern where the lab shows this trace: `/` (the toy's attention) or /block, the softmax stage."""

    def link(layer: int, head: int) -> str:
        query = {"preset": preset, "tokens": " ".join(tokens), "head": head, "lang": lang,
                 "stage": "softmax" if block else 4} | ({"present": 1} if present else {})  # fmt: skip
        return ("/block?" if block else "/?") + urlencode(query)

    return link


async def builtin_view(state: AttributionQuery, lab: Lab, progress: str, ctx: dict[str, Any]) -> AttributionView:
    """The toy's or gpt2-small's page: no unembedding (the answer says why); each head's output norm of the one
    layer as the grid, the chosen head's and the sink head's rows, the one layer's rollout (½A + ½I) and its score
    split, all from the lab's own trace (the same cache entry as `/`'s or /block's)."""
    req = page_request(state)
    doc = (await builtin_answer(req, lab, progress)).doc
    spec, block, trace = await builtin_trace(req, lab)
    if len(doc["tokens"]) < 2:  # the sink contrast compares the first token with the others
        raise FieldError("text", said("two_tokens"))
    p, causal = int(doc["position"]), bool(doc["causal"])
    span = p + 1 if causal else len(doc["tokens"])
    grid = tuple(tuple(float(x) for x in row) for row in doc["head_norms"])
    key, chosen_head = state.key, state.head
    if chosen_head is None:  # the head that writes the most at the position
        chosen_head = (0, max(range(len(grid[0])), key=lambda h: grid[0][h]))
    _, head = head_of(chosen_head, 1, len(grid[0]), ctx["t"]("preset." + req.preset))
    if key is not None:
        within("key", key, 0, span - 1)

    def work(_: Any) -> Held3:
        norms = A.trace_value_norms(trace)
        weights = norms.weights[head, p, :span]
        k = key
        if k is None:  # the key it weights most besides the query itself, as a model's page opens
            others = weights.clone()
            others[p] = -1.0
            k = int(others.argmax()) if float(others.max()) > 0 else p
        split = A.trace_score_split(trace, head, p, k)
        why = Why(split, float(trace.scores.scaled[head, p, k]))
        return Held3((Computed(A.trace_rollout(trace), A.trace_sink_contrast(trace)), Detail(norms, norms, None, ()),
                      (why, float(weights[k]))))  # fmt: skip

    got, _ = await lab.compute("attribution_builtin", (spec, p, head, key), lab.cost(spec), work,
                               progress=progress)  # fmt: skip
    extra, detail, why = got.parts
    t = ctx["t"]
    link = builtin_link(str(doc["preset"]), tuple(doc["tokens"]), block, ctx["lang"], state.present)
    view = build(state, ctx, Named(str(doc["preset"])), doc, extra, detail, (0, head), "abs",
                 lab.settings.max_flow_tokens, why, link=link)  # fmt: skip
    no_dla = t(f"attribution.no_dla.{doc['trace']}", model=t("preset." + doc["preset"]))
    return view.model_copy(update={"no_dla": no_dla, "trace": str(doc["trace"]),
                                   "head_explain": "attribution.head.explain.trace"})  # fmt: skip


@dataclass(frozen=True)
class Held3(A.Held):
    """A built-in preset's page work, as the lab's cache keeps it."""

    parts: tuple[Any, Any, Any]


@dataclass(frozen=True)
class Why(A.Held):
    split: A.ScoreSplit
    cell: float  # the same cell of the layer's trace


async def why_score(lab: Lab, text: Text, ids: list[int], layer: int, head: int, p: int, key: int | None,
                    norms: A.ValueNorms, progress: str, cost: int) -> tuple[Why, float]:  # fmt: skip
    """The chosen head's score at (p, key) split (default key: the one it weights most besides the query itself,
    whose offset 0 would leave every RoPE pair unrotated), a 422 naming `key` past the keys the query reads; with
    the key's weight α."""
    weights = norms.weights[head, p, : len(ids)]
    if key is None:
        others = weights.clone()
        others[p] = -1.0
        key = int(others.argmax()) if float(others.max()) > 0 else p  # (a decoder's first position reads only itself)
    within("key", key, 0, len(ids) - 1)
    limit = lab.settings.max_predict_tokens

    def work(_: Any) -> Why:
        return Why(*score_split(text, ids, layer, head, p, key, limit, lab.device, lab.long_limits))

    got, _ = await lab.compute("attribution_score", (text.preset, tuple(ids), layer, head, p, key), cost, work,
                               progress=progress)  # fmt: skip
    return got, float(weights[key])


def build(state: PageQuery, ctx: dict[str, Any], text: Text | Named, doc: dict[str, Any], extra: Computed,
          got: Detail, chosen: tuple[int, int], sort: str, flow_limit: int = 24, why: tuple[Why, float] | None = None,
          link: Callable[[int, int], str] | None = None) -> AttributionView:  # fmt: skip
    """The View from the computed numbers (no computing here); `link(layer, head)` a head's pattern in the lab
    (default: the lab on the model's layer)."""
    t: Callable[..., str] = ctx["t"]
    lang, present = ctx["lang"], state.present
    p, labels, ids = int(doc["position"]), tuple(doc["tokens"]), tuple(doc["token_ids"] or ())
    dec = bool(doc["decoder"])
    causal = dec or bool(doc.get("causal"))  # a decoder, or a built-in preset under its causal mask
    span = p + 1 if causal else len(labels)  # the sources a query row reads
    heads = tuple(tuple(float(x) for x in row) for row in (doc["heads"] if dec else doc["head_norms"]))
    mlps = tuple(float(x) for x in doc["mlps"]) if dec else ()
    n_layer, n_heads = len(heads), len(heads[0])
    bound = max((abs(v) for row in heads for v in row if math.isfinite(v)), default=0.0) or 1.0
    part_bound = bound = max([bound, *(abs(v) for v in (*mlps, float(doc["embed"] or 0.0)) if math.isfinite(v))])
    typed_text = state.get("text") if state.get("text") or state.get("token_ids") else DEFAULT_TEXT

    def lab_link(layer: int, head: int) -> str:  # the page's ids (its BOS too): the lab shows the same weights
        return link(layer, head) if link is not None else lab_url(text.preset, ids, layer, head, lang, present)

    def knock_link(layer: int, head: int) -> str:
        """The text on /predict with the head knocked out, looking at the same position (numbered as /predict
        numbers it: the text's tokens from 0, the BOS before them)."""
        seq = {"text": typed_text} if typed_text else {"token_ids": state.get("token_ids")}
        pos = "bos" if p < text.text_start else str(p - text.text_start)
        query = {"preset": text.preset, **seq, "ablate": f"L{layer} H{head}", "pos": pos, "lang": lang}
        return "/predict?" + urlencode(query | ({"present": "1"} if present else {})) if dec else ""

    ranked = [(v, li, h) for li, row in enumerate(heads) for h, v in enumerate(row)]
    order = {"abs": lambda x: -abs(x[0]), "pos": lambda x: -x[0], "neg": lambda x: x[0]}[sort]
    top = tuple(TopHead(li, h, v, lab_link(li, h), knock_link(li, h)) for v, li, h in sorted(ranked, key=order)[:TOP])

    layer, head = chosen
    effect = next((e for e in got.effects if e.head == head), None)  # the layer's runs are cached for every head
    corr = A.pooled(got.effects) if len(got.effects) > 1 else None
    sinks = extra.sink
    sl, sh = sinks.layer, sinks.head
    # The chosen head's row and the sink head's share their colour scales (a weight's is 0 … 1 already): the sink's
    # big weight shows bright, the small norm and effect it makes dark, beside the chosen head's.
    rows = ((got.norms, layer, head, effect), (got.sink_norms, sl, sh, got.sink_effect))
    nbound = max(float(n.norms[h, p, :span].max()) for n, _, h, _ in rows) or 1.0
    ebound = max((float(e.effects.abs().max()) for *_, e in rows if e is not None), default=0.0) or 1.0

    def row_of(norms: A.ValueNorms, layer: int, head: int, effect: A.WeightEffect | None,
               layer_corr: tuple[float, float] | None) -> HeadRow:  # fmt: skip
        w, m = norms.weights[head, p, :span], norms.norms[head, p, :span]
        eff: list[float | None] = [None] * span if effect is None else [float(x) for x in effect.effects]

        def effect_cls(e: float | None) -> str:
            return "" if e is None else shade(e, "diverging", ebound)

        shown = tuple(
            Source(j, labels[j], float(w[j]), float(m[j]), eff[j], shade(float(w[j]), "sequential", 1.0),
                   shade(float(m[j]) / nbound, "sequential", 1.0), effect_cls(eff[j]))
            for j in range(span)
        )  # fmt: skip
        if effect is None:  # an encoder: weights and norms only
            return HeadRow(layer, head, shown, lab_url=lab_link(layer, head))
        return HeadRow(
            layer, head, shown, metric=effect.metric, clean=effect.clean, spearman_weight=effect.spearman_weight,
            spearman_norm=effect.spearman_norm, layer_weight=layer_corr[0] if layer_corr else None,
            layer_norm=layer_corr[1] if layer_corr else None, lab_url=lab_link(layer, head),
            knock_url=knock_link(layer, head),
        )  # fmt: skip

    sink = Sink(sl, sh, float(sinks.weight_share[sl, sh]), float(sinks.norm_share[sl, sh]),
                float(sinks.value_ratio[sl, sh]), row_of(got.sink_norms, sl, sh, got.sink_effect, None))  # fmt: skip
    r = extra.rollout
    steps = tuple(floats(r.layers[li, p, :span]) for li in range(n_layer))
    product = tuple(floats(r.cumulative[li, p, :span]) for li in range(n_layer))

    def strip(rows: tuple[tuple[float, ...], ...]) -> tuple[tuple[str, ...], ...]:
        return tuple(tuple(shade(v / (max(row) or 1.0), "sequential", 1.0) for v in row) for row in rows)

    flow = None
    if doc.get("flow"):
        fv = tuple(float(x) for x in doc["flow"]["values"])
        flow = Flow(fv, int(doc["flow"]["edges"]), int(doc["flow"]["tokens"]),
                    tuple(shade(v / (max(fv) or 1.0), "sequential", 1.0) for v in fv))  # fmt: skip
    common = dict(
        preset=text.preset, tokens=labels, token_ids=ids, text_start=int(doc["text_start"]), position=p,
        norm=str(doc["norm"]), layers=n_layer, n_heads=n_heads, sort=sort, top=top,
        chosen=row_of(got.norms, layer, head, effect, corr), sink=sink,
        rollout=Rollout(steps, product, strip(product), strip(steps)), why=why_of(why, labels),
        key_form=fields_around(state, "key"),
        bound=bound, head_form=fields_around(state, "head"), position_form=fields_around(state, "position"),
        cells=span <= CELLS_UP_TO, json_url="/api/v1/attribution?" + urlencode(api_params(state)),
        twin_url=twin_url("/attribution", state.url().partition("?")[2]),
        present_url=state.url(present=None if present else "1"),
        decoder=dec, span=span, flow=flow, flow_edges=A.flow_edges(n_layer, span, causal), flow_tokens=span,
        flow_limit=flow_limit, flow_url="" if flow is not None or span > flow_limit else state.url(flow="true"),
    )  # fmt: skip
    if not dec:
        return AttributionView(
            **common, no_dla=t("attribution.no_dla", model=t("preset." + text.preset)), head_norms=heads,
            grid_cls=tuple(tuple(shade(v / bound, "sequential", 1.0) for v in row) for row in heads),
        )  # fmt: skip
    contrast = doc["contrast"]
    target = Token(int(doc["target"]["token_id"]), str(doc["target"]["token"]))
    what = (t("attribution.diff", target=target.token, contrast=contrast["token"]) if contrast
            else t("attribution.logit_of", target=target.token))  # fmt: skip
    total, logit, remainder = float(doc["total"]), float(doc["logit"]), float(doc["remainder"])
    return AttributionView(
        **common, target=target,
        contrast=Token(int(contrast["token_id"]), str(contrast["token"])) if contrast else None,
        scale=float(doc["scale"]), heads=heads, mlps=mlps,
        attn_bias=tuple(float(x) for x in doc["attn_bias"]), embed=float(doc["embed"]), total=total, logit=logit,
        remainder=remainder, norm_bias=float(doc["norm_bias"]),
        frozen=t("attribution.frozen." + ("rms" if doc["norm"] == "rmsnorm" else "ln"), scale=f"{float(doc['scale']):.4g}"),
        sum_said=t("attribution.sum", what=what, total=f"{total:.3f}", logit=f"{logit:.3f}",
                   remainder=f"{remainder:.1e}", bias=f"{float(doc['norm_bias']):.3f}"),
        grid_cls=tuple(tuple(shade(v, "diverging", bound) for v in row) for row in heads),
        mlp_cls=tuple(shade(v, "diverging", part_bound) for v in mlps),
        embed_cls=shade(float(doc["embed"]), "diverging", part_bound),
        sort_urls=tuple((s, state.url(sort=None if s == "abs" else s)) for s in SORTS),
    )  # fmt: skip


def why_of(why: tuple[Why, float] | None, labels: tuple[str, ...]) -> WhyScore | None:
    """The score split as the page shows it: the TERMS largest terms by size, the others summed."""
    if why is None:
        return None
    got, weight = why
    s = got.split
    parts = s.pairs if s.pairs is not None else s.terms
    values = [float(x) for x in parts.tolist()]
    order = sorted(range(len(values)), key=lambda i: -abs(values[i]))
    bound = max((abs(v) for v in values), default=0.0) or 1.0
    rope = (s.theta, s.angle) if s.theta is not None and s.angle is not None else None  # each pair's θ_f, rotation

    def term(i: int) -> Term:
        theta, angle = (float(rope[0][i]), float(rope[1][i])) if rope else (None, None)
        return Term(i, values[i], theta, angle, shade(values[i], "diverging", bound))

    shown = order[:TERMS]
    return WhyScore(
        s.layer, s.head, s.query, s.key, labels[s.key], weight, "pair" if s.pairs is not None else "dim",
        len(values), tuple(term(i) for i in shown), sum(values[i] for i in order[TERMS:]), s.score, got.cell,
        s.masked,
    )  # fmt: skip
