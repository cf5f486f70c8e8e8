"""`/predict`, the training view (teacher forcing: inputs over targets shifted by one, each position's
probability, loss and rank, the mean loss; switches and a replaced token compared before → after, the leakage
proof in words; a ranking of the heads for one prediction).

It computes through the JSON API's own functions (`predict_of`, `ranking_of` and their documents), so the page and
/api/v1/predict show the same numbers."""

from __future__ import annotations

import dataclasses
import functools
import re
from dataclasses import dataclass, field
from typing import Annotated, Any
from urllib.parse import urlencode

from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse, Response
from markupsafe import Markup, escape

from ..lab import Lab, get_lab, request_key
from ..render.predicted import generators
from ..schemas import FieldError
from ..web.knockouts import head_name
from ..web.page import serve
from ..web.state import ViewState, within
from ..web.view import HIDDEN, View
from .compute import pair_of, predict_document, predict_of, ranking_document, ranking_of
from .request import LENS_KEYS, PREDICT_KEYS, PredictParams, PredictRequest, RankRequest, api_url, read_page, state_of
from .shown import SAME, Candidate, candidates, delta_class, kl_class, spans, switched_words, twin, with_tokens

router = APIRouter(include_in_schema=False)

RANKED = 12  # heads listed in the ranking


@dataclass(frozen=True)
class Column:
    """One position of the training table: its input, its target, and how well the run predicted it."""

    position: int
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
    delta_cls: str = field(default="", metadata=HIDDEN)
    kl_cls: str = field(default="", metadata=HIDDEN)


@dataclass(frozen=True)
class SecondPrompt:
    """A second text under the same switches, beside the first: its own training table, and per position (where
    both texts have one) how far its next-token distribution is from the first's (KL(A ‖ B), max |Δ log p|)."""

    text: str
    columns: tuple[Column, ...]
    mean_loss: float
    perplexity: float
    mean_loss_a: float
    same: tuple[int, ...]  # positions predicting exactly alike (max |Δ| ≤ 1e-5)
    differ: tuple[int, ...]
    verdict: str = ""


@dataclass(frozen=True)
class Chosen:
    """The chosen position's most likely next tokens, in this run and in the one compared."""

    position: int
    title: str
    top: tuple[Candidate, ...]
    before: tuple[Candidate, ...] | None = None
    title_html: Markup | None = field(default=None, metadata=HIDDEN)


@dataclass(frozen=True)
class HeadEffect:
    layer: int
    head: int
    loss: float
    delta: float
    url: str  # the training view with this head knocked out


@dataclass(frozen=True)
class Ranking:
    """The heads ranked by how much knocking each out raises one prediction's loss."""

    position: int
    target: str
    loss: float
    mode: str
    n_heads: int
    title: str
    heads: tuple[HeadEffect, ...]
    title_html: Markup | None = field(default=None, metadata=HIDDEN)


@dataclass(frozen=True)
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
    loss_from: int = 0
    n_scored: int = 0
    mean_loss: float = 0.0
    perplexity: float = 0.0
    switches: dict[str, Any] | None = None  # the API's switches (ablate, ablate_mode, mask_off_layers, …)
    switched: tuple[str, ...] = ()  # the switches in words
    replace: dict[str, Any] | None = None  # position, token_id, token
    compared: str | None = None  # what the "before" run is, in words
    before_mean_loss: float | None = None
    before_perplexity: float | None = None
    changed: tuple[int, ...] = ()  # positions whose prediction changed (max |Δ| > 1e-5)
    unchanged: tuple[int, ...] = ()
    verdict: str | None = None  # which positions changed and why, in words
    verdict_html: Markup | None = field(default=None, metadata=HIDDEN)
    notices: tuple[str, ...] = ()
    pos: int = 0
    chosen: Chosen | None = None
    ranking: Ranking | None = None
    ranking_error: str | None = None
    second: SecondPrompt | None = None  # two prompts side by side (`compare_text`)
    # Links.
    json_url: str = ""  # the API's answer for this view
    twin_url: str = ""  # this page as JSON
    rank_url: str = ""
    lens_url: str = ""
    present_url: str = ""
    compare_close_url: str = ""
    present: bool = False


def verdict(doc: dict[str, Any], changed: list[int], unchanged: list[int], t: Any) -> tuple[str, Markup]:
    """Which positions changed and which did not, and why, in words (as text, and as HTML)."""
    n = len(doc["positions"])
    same = t("predict.same", positions=spans(unchanged), tol="1e-5") if unchanged else ""
    moved = t("predict.moved", positions=spans(changed)) if changed else ""
    replaced = doc["replace"]
    off = bool(doc["switches"]["mask_off_layers"])
    why: tuple[str, Markup] = ("", Markup(""))
    if replaced is not None:
        r = replaced["position"]
        if not off and unchanged == list(range(r)) and r > 0:
            why = with_tokens(t, "predict.why.causal", {"token": replaced["token"]}, r=r)
        elif off and any(c < r for c in changed):
            why = with_tokens(t, "predict.why.leak", {}, r=r)
        elif not changed:
            why = with_tokens(t, "predict.why.nothing", {})
    elif not changed:
        why = with_tokens(t, "predict.why.nothing", {})
    elif len(changed) == n:
        why = with_tokens(t, "predict.why.all", {})

    def joined(parts: list[str]) -> str:
        return " ".join(p for p in parts if p).replace("。 ", "。")

    return joined([same, moved, why[0]]), Markup(joined([str(escape(same)), str(escape(moved)), str(why[1])]))


def predict_view(doc: dict[str, Any], t: Any, state: ViewState, labels: tuple[str, ...], said: dict[str, Any],
                 n_layer: int) -> PredictView:  # fmt: skip
    """The View of an /api/v1/predict document (`labels`: the training sequence's own labels, for the targets)."""
    rows = doc["positions"]
    n = len(rows)
    chosen_pos = state.read(PredictParams).pos
    pos = -1 if chosen_pos is None else within("pos", chosen_pos, 0, n - 1)
    compare = doc["before"] is not None
    replaced = doc["replace"]
    if pos < 0:  # the position to look at first: where a replaced token enters, the largest change, or the last
        if replaced is not None:
            pos = replaced["position"]
        elif compare:
            pos = max(range(n), key=lambda i: rows[i]["kl"])
        else:
            pos = n - 1
    columns = []
    for i, r in enumerate(rows):
        b = r.get("before")
        d = r.get("max_abs_diff")
        columns.append(Column(
            position=i, input=r["input"], target=r["target"], input_id=r["input_id"], target_id=r["target_id"],
            scored=r["scored"], p_target=r["p_target"], loss=r["loss"], rank=r["rank"], url=state.url(pos=i),
            replaced_from=labels[i] if replaced is not None and replaced["position"] == i else None,
            target_was=b.get("target") if b else None,
            before_p=b["p_target"] if b else None, before_loss=b["loss"] if b else None,
            before_rank=b["rank"] if b else None, kl=r.get("kl"), max_abs_diff=d,
            changed=None if d is None else d > SAME,
            delta_cls=delta_class(d) if d is not None else "", kl_cls=kl_class(r["kl"]) if d is not None else "",
        ))  # fmt: skip
    changed = [c.position for c in columns if c.changed]
    unchanged = [c.position for c in columns if c.changed is False]
    r = rows[pos]
    title, title_html = with_tokens(t, "predict.chosen", {"input": r["input"], "target": r["target"]}, i=pos)
    chosen = Chosen(
        pos,
        title,
        candidates(r["top"], r["target_id"]),
        candidates(r["before"]["top"], r["before"].get("target_id", r["target_id"])) if compare else None,
        title_html,
    )
    said_verdict = verdict(doc, changed, unchanged, t) if compare else (None, None)
    notices = []
    for c in columns:  # the prediction before the replaced token is the same, its target is not
        if c.target_was is not None:
            notices.append(t("predict.retargeted", i=c.position, token=c.target.replace(" ", "␣"),
                             was=c.target_was.replace(" ", "␣"), r=c.position + 1))  # fmt: skip
    if said and said["n"] > 1:
        notices.append(t("predict.replace_text", text=said["text"], n=said["n"], token=replaced["token"]))
    if any(re.search(r"[₁₂₃₄]", label) for label in labels):
        notices.append(t("predict.pieces"))
    if any("⟨" in c.token for c in (*chosen.top, *(chosen.before or ()))):
        notices.append(t("predict.bytes"))
    before = doc["before"]
    return PredictView(
        preset=doc["preset"],
        text=state.get("text"),
        tokens=tuple(doc["tokens"]),
        targets=tuple(doc["targets"]),
        columns=tuple(columns),
        loss_from=doc["loss_from"],
        n_scored=sum(c.scored for c in columns),
        mean_loss=doc["mean_loss"],
        perplexity=doc["perplexity"],
        switches=doc["switches"],
        switched=switched_words(doc["switches"], n_layer, t),
        replace=replaced,
        compared=(t("predict.compared.replace") if replaced is not None else t("predict.compared.switches"))
        if compare else None,
        before_mean_loss=before["mean_loss"] if before else None,
        before_perplexity=before["perplexity"] if before else None,
        changed=tuple(changed),
        unchanged=tuple(unchanged),
        verdict=said_verdict[0],
        verdict_html=said_verdict[1],
        notices=tuple(notices),
        pos=pos,
        chosen=chosen,
    )  # fmt: skip


@router.get("/predict", response_class=HTMLResponse)
async def predict_page(request: Request, lab: Annotated[Lab, Depends(get_lab)]) -> Response:
    state = state_of(request, "/predict", PREDICT_KEYS, PredictParams)
    present = state.present
    build = functools.partial(build_predict, state, lab, request_key(request))
    return await serve(request, lab, "predict.html", state, build, blocks=(), present=present,
                       presets=generators(lab.models))  # fmt: skip


async def build_predict(state: ViewState, lab: Lab, key: str, ctx: dict[str, Any]) -> PredictView:
    """What /predict shows for `state` (its JSON face is the page's `.json` twin)."""
    t = ctx["t"]
    req, (text, _iv, pred), prompt, said = await read_page(state, lab, key, ctx, PredictRequest, predict_of)
    doc = predict_document(text, _iv, pred)
    view = predict_view(doc, t, state, text.labels, said, text.model.arch.n_layer)
    extra: dict[str, Any] = {
        "text": state.get("text") or prompt.get("text", ""),
        "json_url": api_url("/api/v1/predict", req),
        "twin_url": twin(state),
        "rank_url": state.url(pos=view.pos, rank=1),
        "lens_url": lens_link(state),
        "present_url": state.url(present=None if state.present else "1"),
        "present": state.present,
    }
    p = state.read(PredictParams)
    if p.compare_text:
        extra["second"] = await second_prompt(req, state, lab, key, t)
        extra["compare_close_url"] = state.url(compare_text=None)
    if p.rank:
        try:
            extra["ranking"] = await rank(req, text, view.pos, lab, key, state, t)
        except FieldError as e:
            extra["ranking_error"] = t("error.field", field=e.field, message=e.message)
    return dataclasses.replace(view, **extra)


async def second_prompt(req: PredictRequest, state: ViewState, lab: Lab, key: str, t: Any) -> SecondPrompt:
    """The second prompt's table under the same switches, each position compared with the first text's."""
    second = state.read(PredictParams).compare_text
    text_a, text_b, pair = await pair_of(req, second, lab, key)
    run, ids, labels = pair.b, list(text_b.seq), list(text_b.labels)
    columns = []
    for i, sc in enumerate(run.positions):
        d = pair.max_abs_diff[i] if i < len(pair.max_abs_diff) else None
        columns.append(Column(
            position=i, input=labels[i], target=labels[i + 1], input_id=ids[i], target_id=ids[i + 1],
            scored=i >= run.loss_from, p_target=sc.p_target, loss=sc.loss, rank=sc.rank, url="",
            kl=pair.kl[i] if d is not None else None, max_abs_diff=d, changed=None if d is None else d > SAME,
            delta_cls=delta_class(d) if d is not None else "", kl_cls=kl_class(pair.kl[i]) if d is not None else "",
        ))  # fmt: skip
    same = tuple(c.position for c in columns if c.changed is False)
    differ = tuple(c.position for c in columns if c.changed)
    first_input = next((i for i, (x, y) in enumerate(zip(text_a.seq, text_b.seq, strict=False)) if x != y), None)
    leaked = [i for i in differ if first_input is None or i < first_input]
    if leaked:  # the inputs up to i are the same, and still the prediction moved: it read later tokens
        verdict = t("predict.second.leak", k=first_input if first_input is not None else len(columns),
                    leaked=spans(leaked))  # fmt: skip
    elif first_input is None:
        verdict = t("predict.second.identical")
    else:
        verdict = t("predict.second.verdict", k=first_input, same=spans(list(same)) or "—",
                    differ=spans(list(differ)) or "—")  # fmt: skip
    retargeted = [i for i in same if i + 1 < len(text_a.seq) and text_a.seq[i + 1] != ids[i + 1]]
    if retargeted:  # the same prediction scored against another target: the loss differs, the distribution not
        verdict += " " + t("predict.second.target", positions=spans(retargeted))
    return SecondPrompt(second, tuple(columns), run.mean_loss, run.perplexity, pair.a.mean_loss,
                        same, differ, verdict)  # fmt: skip


def lens_link(state: ViewState) -> str:
    params = {k: state.get(k) for k in LENS_KEYS if state.get(k)}
    if state.get("lang"):
        params["lang"] = state.get("lang")
    return "/lens?" + urlencode(params) if params else "/lens"


async def rank(req: PredictRequest, text: Any, pos: int, lab: Lab, key: str, state: ViewState, t: Any) -> Ranking:
    """Every head ranked by its effect on the chosen prediction: the text as written, no switches."""
    target = text.seq[pos + 1]
    rq = RankRequest(preset=req.preset, text=req.text, token_ids=req.token_ids, bos=req.bos, position=pos,
                     target_id=target, ablate_mode=req.ablate_mode)  # fmt: skip
    t2, ranking = await ranking_of(rq, lab, key)
    doc = ranking_document(t2, ranking, req.ablate_mode)
    heads = tuple(
        HeadEffect(h["layer"], h["head"], h["loss"], h["delta"], state.url(ablate=head_name(h["layer"], h["head"]),
                                                                         rank=None, replace_at=None, replace_id=None,
                                                                         replace_token=None, mask_off_layers=None,
                                                                         drop_sink_layers=None))
        for h in doc["heads"][:RANKED]
    )  # fmt: skip
    title, html = with_tokens(t, "predict.rank.title", {"target": text.labels[pos + 1]}, i=pos, n=len(doc["heads"]))
    return Ranking(pos, text.labels[pos + 1], doc["loss"], req.ablate_mode, len(doc["heads"]), title, heads, html)
