"""`/predict`, the training view (teacher forcing: inputs over targets shifted by one, each position's
probability, loss and rank, the mean loss; switches and a replaced token compared before → after, the leakage
proof in words; a ranking of the heads for one prediction).

It computes through the JSON API's own functions (`predict_of`, `ranking_of` and their documents), so the page and
/api/v1/predict show the same numbers."""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Annotated, Any
from urllib.parse import urlencode

from fastapi import APIRouter
from markupsafe import Markup, escape
from pydantic import Field, InstanceOf
from typing_extensions import TypedDict

from ..lab import Lab
from ..schemas import FieldError
from ..web.knockouts import head_name
from ..web.page import page_route
from ..web.view import HIDDEN, View
from .compute import (
    HeadLoss,
    Predicted,
    RankCost,
    Switched,
    pair_of,
    predict_document,
    predict_of,
    rank_cost,
    ranking_of,
)
from .request import (
    LENS_KEYS,
    PREDICT_KEYS,
    PredictQuery,
    PredictRequest,
    RankRequest,
    api_url,
    form,
    read_page,
    state_of,
)
from .shown import (
    SAME,
    Candidate,
    bos_first,
    candidates,
    delta_class,
    index_of,
    kl_class,
    label,
    named,
    number,
    position_spans,
    switched_words,
    twin,
    with_tokens,
)

router = APIRouter(include_in_schema=False)

RANKED = 12  # heads listed in the ranking


@dataclass(frozen=True)
class Column:
    """One position of the training table: its input, its target, and how well the run predicted it. `position` is
    the page's number (the text's tokens from 0, as on every page): None for the BOS, which opens the inputs."""

    position: int | None
    input: str
    target: str
    input_id: int
    target_id: int
    scored: bool  # counts in the mean loss (the loss mask)
    p_target: float
    loss: float
    rank: int
    url: str  # this page with the position chosen
    replaced_from: str | None = None  # the input token this position had before it was replaced
    target_was: str | None = None  # the target before: the next input was replaced (the shift by one)
    before_p: float | None = None
    before_loss: float | None = None
    before_rank: int | None = None
    kl: float | None = None
    max_abs_diff: float | None = None
    changed: bool | None = None  # max |Δ| > 1e-5
    delta_cls: Annotated[str, HIDDEN] = ""
    kl_cls: Annotated[str, HIDDEN] = ""


@dataclass(frozen=True)
class SecondPrompt:
    """A second text under the same switches, beside the first: its own training table, and per position (where
    both texts have one) how far its next-token distribution is from the first's (KL(A ‖ B), max |Δ log p|)."""

    text: str
    columns: tuple[Column, ...]
    mean_loss: float
    perplexity: float
    mean_loss_a: float
    same: tuple[int | None, ...]  # positions predicting exactly alike (max |Δ| ≤ 1e-5)
    differ: tuple[int | None, ...]
    verdict: str = ""


@dataclass(frozen=True)
class Chosen:
    """The chosen position's most likely next tokens, in this run and in the one compared."""

    position: int | None
    title: str
    top: tuple[Candidate, ...]
    before: tuple[Candidate, ...] | None = None
    title_html: Annotated[InstanceOf[Markup] | None, HIDDEN] = None


@dataclass(frozen=True)
class HeadEffect(HeadLoss):
    url: str  # the training view with this head knocked out
    knocked: bool = False  # this head is knocked out on the page now (the ranking is of the text as written)


@dataclass(frozen=True)
class Ranking:
    """The heads ranked by how much knocking each out raises one prediction's loss."""

    position: int | None
    target: str
    loss: float
    mode: str
    n_heads: int
    title: str
    heads: tuple[HeadEffect, ...]
    title_html: Annotated[InstanceOf[Markup] | None, HIDDEN] = None


class ReplacedAt(TypedDict):
    """The token replaced: its position (as the page numbers it: None for the BOS), its id and its text."""

    position: int | None
    token_id: int
    token: str


class PredictView(View):
    """The training view: the text as inputs over targets (shifted by one), each position's target probability,
    loss and rank, the mean loss over the scored positions and the perplexity; with switches or a replaced token,
    the run compared with `compared` (before → after, per position KL and max |Δ|, and in words which positions
    changed); the chosen position's top tokens; a ranking of the heads when asked for."""

    template = "predict.html"
    blocks = ()
    kind = "predict"
    own_present_toggle = True

    preset: str = ""
    text: str = ""
    tokens: tuple[str, ...] = ()  # the inputs
    targets: tuple[str, ...] = ()
    columns: tuple[Column, ...] = ()
    loss_from: int = 0  # the first scored position's number (0: every position, the BOS's included)
    first: int = 0  # where position 0 is among the columns: 1 after the BOS (shown, not numbered), else 0
    n_scored: int = 0
    mean_loss: float = 0.0
    perplexity: float = 0.0
    switches: Switched | None = None  # the API's switches (ablate, ablate_mode, mask_off_layers, …)
    switched: tuple[str, ...] = ()  # the switches in words
    replace: ReplacedAt | None = None
    compared: str | None = None  # what the "before" run is, in words
    before_mean_loss: float | None = None
    before_perplexity: float | None = None
    changed: tuple[int | None, ...] = ()  # positions whose prediction changed (max |Δ| > 1e-5); None: the BOS
    unchanged: tuple[int | None, ...] = ()
    verdict: str | None = None  # which positions changed and why, in words
    verdict_html: InstanceOf[Markup] | None = Field(None, exclude=True)
    notices: tuple[str, ...] = ()
    pos: int | None = 0  # the chosen position's number (None: the BOS)
    index: int = Field(0, exclude=True)  # its column
    chosen: Chosen | None = None
    ranking: Ranking | None = None
    ranking_error: str | None = None
    # The ranking's expected cost at `pos`, stated before it is asked for (the API's `cost`: tokens, heads,
    # per_token, total, limit), and in words; over the limit the page offers no ranking.
    rank_cost: RankCost | None = None
    rank_cost_text: str = ""
    second: SecondPrompt | None = None  # two prompts side by side (`compare_text`)
    # Links.
    json_url: str = ""  # the API's answer for this view
    twin_url: str = ""  # this page as JSON
    rank_url: str = ""
    lens_url: str = ""
    present_url: str = ""
    compare_close_url: str = ""
    present: bool = False


def verdict(doc: Predicted, changed: list[int], unchanged: list[int], t: Any, first: int = 0) -> tuple[str, Markup]:
    """Which positions changed and which did not (columns; `first`: the column of position 0), and why, in words
    (as text, and as HTML)."""
    n = len(doc.positions)
    same = t("predict.same", positions=position_spans(unchanged, first), tol="1e-5") if unchanged else ""
    moved = t("predict.moved", positions=position_spans(changed, first)) if changed else ""
    replaced = doc.replace
    off = bool(doc.switches.mask_off_layers)
    why: tuple[str, Markup] = ("", Markup(""))
    if replaced is not None:
        r = replaced.position
        if not off and unchanged == list(range(r)) and r > 0:
            why = with_tokens(t, "predict.why.causal", {"token": replaced.token}, r=label(r, first))
        elif off and any(c < r for c in changed):
            why = with_tokens(t, "predict.why.leak", {}, r=label(r, first))
        elif not changed:
            why = with_tokens(t, "predict.why.nothing", {})
    elif not changed:
        why = with_tokens(t, "predict.why.nothing", {})
    elif len(changed) == n:
        why = with_tokens(t, "predict.why.all", {})

    def joined(parts: list[str]) -> str:
        return " ".join(p for p in parts if p).replace("。 ", "。")

    return joined([same, moved, why[0]]), Markup(joined([str(escape(same)), str(escape(moved)), str(why[1])]))


def predict_view(doc: Predicted, t: Any, state: PredictQuery, labels: tuple[str, ...], said: dict[str, Any],
                 n_layer: int, first: int = 0) -> PredictView:  # fmt: skip
    """The View of an /api/v1/predict answer (`labels`: the training sequence's own labels, for the targets;
    `first`: the column of the text's position 0, 1 after a BOS). `pos` (-1: the BOS) and the numbers shown count
    the text's tokens; the answer's positions, the sequence's."""
    rows = doc.positions
    n = len(rows)
    chosen_pos = state.pos
    pos = -1 if chosen_pos is None else index_of("pos", chosen_pos, first, n)
    compare = doc.before is not None
    replaced = doc.replace
    if pos < 0:  # the position to look at first: where a replaced token enters, the largest change, or the last
        if replaced is not None:
            pos = replaced.position
        elif compare:
            pos = max(range(n), key=lambda i: rows[i].kl or 0.0)
        else:
            pos = n - 1
    columns = []
    for i, r in enumerate(rows):
        b, d = r.before, r.max_abs_diff
        columns.append(Column(
            position=number(i, first), input=r.input, target=r.target, input_id=r.input_id,
            target_id=r.target_id, scored=r.scored, p_target=r.p_target, loss=r.loss, rank=r.rank,
            url=state.url(pos=named(i, first)),
            replaced_from=labels[i] if replaced is not None and replaced.position == i else None,
            target_was=b.target if b else None,
            before_p=b.p_target if b else None, before_loss=b.loss if b else None,
            before_rank=b.rank if b else None, kl=r.kl, max_abs_diff=d,
            changed=None if d is None else d > SAME,
            delta_cls=delta_class(d) if d is not None else "", kl_cls=kl_class(r.kl or 0.0) if d is not None else "",
        ))  # fmt: skip
    changed = [i for i, c in enumerate(columns) if c.changed]
    unchanged = [i for i, c in enumerate(columns) if c.changed is False]
    r = rows[pos]
    title, title_html = with_tokens(t, "predict.chosen", {"input": r.input, "target": r.target},
                                    i=label(pos, first))  # fmt: skip
    before_top = None
    if r.before is not None:  # the run compared with keeps its own target
        before_top = candidates(r.before.top, r.target_id if r.before.target_id is None else r.before.target_id)
    chosen = Chosen(number(pos, first), title, candidates(r.top, r.target_id), before_top, title_html)
    said_verdict = verdict(doc, changed, unchanged, t, first) if compare else (None, None)
    notices = []
    for k, c in enumerate(columns):  # the prediction before the replaced token is the same, its target is not
        if c.target_was is not None:
            notices.append(t("predict.retargeted", i=label(k, first), token=c.target.replace(" ", "␣"),
                             was=c.target_was.replace(" ", "␣"), r=label(k + 1, first)))  # fmt: skip
    if said and said["n"] > 1 and replaced is not None:
        notices.append(t("predict.replace_text", text=said["text"], n=said["n"], token=replaced.token))
    if any(re.search(r"[₁₂₃₄]", label) for label in labels):
        notices.append(t("predict.pieces"))
    if any("⟨" in c.token for c in (*chosen.top, *(chosen.before or ()))):
        notices.append(t("predict.bytes"))
    before = doc.before
    return PredictView(
        preset=doc.preset,
        text=state.get("text"),
        tokens=doc.tokens,
        targets=doc.targets,
        columns=tuple(columns),
        loss_from=max(0, doc.loss_from - first),
        first=first,
        n_scored=sum(c.scored for c in columns),
        mean_loss=doc.mean_loss,
        perplexity=doc.perplexity,
        switches=doc.switches,
        switched=switched_words(doc.switches, n_layer, t),
        replace=None
        if replaced is None
        else dataclasses.asdict(replaced) | {"position": number(replaced.position, first)},
        compared=(t("predict.compared.replace") if replaced is not None else t("predict.compared.switches"))
        if compare else None,
        before_mean_loss=before.mean_loss if before else None,
        before_perplexity=before.perplexity if before else None,
        changed=tuple(number(i, first) for i in changed),
        unchanged=tuple(number(i, first) for i in unchanged),
        verdict=said_verdict[0],
        verdict_html=said_verdict[1],
        notices=tuple(notices),
        pos=number(pos, first),
        index=pos,
        chosen=chosen,
    )  # fmt: skip


async def build_predict(state: PredictQuery, lab: Lab, key: str, ctx: dict[str, Any]) -> PredictView:
    """What /predict shows for `state` (its JSON face is the page's `.json` twin)."""
    t = ctx["t"]
    req, (text, iv, pred), prompt, said = await read_page(state, lab, key, ctx, PredictRequest, predict_of)
    first = bos_first(text.model.bos_id, text.seq)
    view = predict_view(predict_document(text, iv, pred), t, state, text.labels, said, text.model.arch.n_layer, first)
    cost = rank_cost(text.model, view.index + 1, lab.settings.max_rank_cost)
    p = state
    second = await second_prompt(req, state, lab, key, t) if p.compare_text else None
    ranking, ranking_error = None, None
    if p.rank and not cost.allowed:
        # Refused before it starts, in the page's words and numbering (the API's message counts the BOS as 0).
        ranking_error = t("error.field", field="pos", message=cost_words(cost, view.index, first, t))
    elif p.rank:
        try:
            ranking = await rank(req, text, view.index, lab, key, state, t)
        except FieldError as e:
            ranking_error = t("error.field", field=e.field, message=e.message)
    return view.model_copy(
        update=dict(
            text=state.get("text") or prompt.get("text", ""),
            ranking=ranking,
            ranking_error=ranking_error,
            rank_cost=cost,
            rank_cost_text=cost_words(cost, view.index, first, t, done=ranking is not None),
            second=second,
            compare_close_url=state.url(compare_text=None) if second else "",
            json_url=api_url("/api/v1/predict", req),
            twin_url=twin(state),
            rank_url=state.url(pos=named(view.index, first), rank=1),
            lens_url=lens_link(state),
            present_url=state.url(present=None if state.present else "1"),
            present=state.present,
        )
    )


async def second_prompt(req: PredictRequest, state: PredictQuery, lab: Lab, key: str, t: Any) -> SecondPrompt:
    """The second prompt's table under the same switches, each position compared with the first text's."""
    second = state.compare_text
    text_a, text_b, pair = await pair_of(req, second, lab, key)
    run, ids, labels = pair.b, list(text_b.seq), list(text_b.labels)
    first = bos_first(text_b.model.bos_id, text_b.seq)
    columns = []
    for i, sc in enumerate(run.positions):
        d = pair.max_abs_diff[i] if i < len(pair.max_abs_diff) else None
        columns.append(Column(
            position=number(i, first), input=labels[i], target=labels[i + 1], input_id=ids[i],
            target_id=ids[i + 1], scored=i >= run.loss_from, p_target=sc.p_target, loss=sc.loss, rank=sc.rank, url="",
            kl=pair.kl[i] if d is not None else None, max_abs_diff=d, changed=None if d is None else d > SAME,
            delta_cls=delta_class(d) if d is not None else "", kl_cls=kl_class(pair.kl[i]) if d is not None else "",
        ))  # fmt: skip
    same_at = [i for i, c in enumerate(columns) if c.changed is False]
    differ_at = [i for i, c in enumerate(columns) if c.changed]
    first_input = next((i for i, (x, y) in enumerate(zip(text_a.seq, text_b.seq, strict=False)) if x != y), None)
    leaked = [i for i in differ_at if first_input is None or i < first_input]
    if leaked:  # the inputs up to i are the same, and still the prediction moved: it read later tokens
        verdict = t("predict.second.leak", k=label(first_input if first_input is not None else len(columns), first),
                    leaked=position_spans(leaked, first))  # fmt: skip
    elif first_input is None:
        verdict = t("predict.second.identical")
    else:
        verdict = t("predict.second.verdict", k=label(first_input, first),
                    same=position_spans(same_at, first) or "—", differ=position_spans(differ_at, first) or "—")  # fmt: skip
    retargeted = [i for i in same_at if i + 1 < len(text_a.seq) and text_a.seq[i + 1] != ids[i + 1]]
    if retargeted:  # the same prediction scored against another target: the loss differs, the distribution not
        verdict += " " + t("predict.second.target", positions=position_spans(retargeted, first))
    return SecondPrompt(second, tuple(columns), run.mean_loss, run.perplexity, pair.a.mean_loss,
                        tuple(number(i, first) for i in same_at), tuple(number(i, first) for i in differ_at),
                        verdict)  # fmt: skip


def lens_link(state: PredictQuery) -> str:
    params = {k: state.get(k) for k in (*LENS_KEYS, "lang") if state.get(k)}
    return "/lens?" + urlencode(params) if params else "/lens"


def cost_words(cost: RankCost, index: int, first: int, t: Any, done: bool = False) -> str:
    """The ranking's cost in words, before it starts (or under it, once `done`): what it runs, and how that stands
    against the limit. `index` is the ranked column, `first` the column of position 0 (positions named as the page
    numbers them)."""
    n = {"heads": f"{cost.heads:,}", "n": f"{cost.tokens:,}", "i": label(index, first), "per": f"{cost.per_token:,}",
         "total": f"{cost.total:,}", "limit": f"{cost.limit:,}"}  # fmt: skip
    if cost.allowed:
        return t("predict.rank.cost_done" if done else "predict.rank.cost", **n)
    if cost.max_tokens < 2:
        return t("predict.rank.unrankable", **n)
    return t("predict.rank.too_costly", **n, last=label(cost.max_tokens - 1, first))


async def rank(req: PredictRequest, text: Any, pos: int, lab: Lab, key: str, state: PredictQuery, t: Any) -> Ranking:
    """Every head ranked by its effect on the chosen prediction: the text as written, no switches."""
    target = text.seq[pos + 1]
    rq = RankRequest(preset=req.preset, text=req.text, token_ids=req.token_ids, bos=req.bos, position=pos,
                     target_id=target, ablate_mode=req.ablate_mode)  # fmt: skip
    doc = await ranking_of(rq, lab, key)
    out = {(p[0], p[1]) for p in req.ablate or []}
    heads = tuple(
        HeadEffect(h.layer, h.head, h.loss, h.delta, state.url(ablate=head_name(h.layer, h.head),
                                                               replace_at=None, replace_id=None, replace_token=None,
                                                               mask_off_layers=None, drop_sink_layers=None),
                   knocked=(h.layer, h.head) in out)
        for h in doc.heads[:RANKED]
    )  # fmt: skip
    first = bos_first(text.model.bos_id, text.seq)
    title, html = with_tokens(t, "predict.rank.title", {"target": text.labels[pos + 1]}, i=label(pos, first),
                              n=len(doc.heads))  # fmt: skip
    return Ranking(number(pos, first), text.labels[pos + 1], doc.loss, req.ablate_mode, len(doc.heads), title, heads,
                   html)  # fmt: skip


page_route(router, "/predict", "predict.html", PREDICT_KEYS, PredictQuery, build_predict, form, state_of=state_of)
