"""The prediction pages: `/predict`, the training view (teacher forcing: inputs over targets shifted by one, each
position's probability, loss and rank, the mean loss; switches and a replaced token compared before → after, the
leakage proof in words; a ranking of the heads for one prediction), and `/lens`, the logit lens (layers × positions,
the probability of the model's final prediction read from each layer; a window of `LENS_WINDOW` positions drawn as
cells, the whole text as one picture, so the page stays small however long the text).

Both compute through the JSON API's own functions (`predict_of`, `lens_of`, `ranking_of` and their documents), so
the page and /api/v1/predict show the same numbers. The form speaks the page's words (`heads=1.0, 16.0`, a checkbox
for the mask, a token to put somewhere by id or by text); `request_body` turns them into the API's fields.
"""

from __future__ import annotations

import dataclasses
import functools
import io
import json
import re
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Annotated, Any, TypeVar
from urllib.parse import urlencode

import numpy as np
from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse, Response
from markupsafe import Markup, escape
from PIL import Image
from pydantic import BaseModel

from ..lab import Lab, get_lab, request_key
from ..render.heatmap import colourise, data_uri
from ..render.predicted import generators
from ..schemas import FieldError, from_query
from ..templating import TEMPLATES
from ..web.page import serve
from ..web.state import ViewState, parse_heads, parse_int
from ..web.view import HIDDEN, View
from .view import (
    LensRequest,
    PredictRequest,
    RankRequest,
    lens_document,
    lens_of,
    pair_of,
    predict_document,
    predict_of,
    ranking_document,
    ranking_of,
)

router = APIRouter(include_in_schema=False)

DEFAULT_TEXT = {"en": "The cat sat on the mat.", "zh": "我喜欢苹果"}
SWITCH_KEYS = ("heads", "ablate_mode", "mask_off_layers", "drop_sink_layers")
PREDICT_KEYS = ("preset", "text", "token_ids", "bos", "eos", "loss_from", *SWITCH_KEYS, "replace_at", "replace_id",
                "replace_token")  # fmt: skip
LENS_KEYS = ("preset", "text", "token_ids", "bos", *SWITCH_KEYS)
# `form=1` marks a submitted form: an unticked box sends nothing, so there an absent bos/eos means "off".
PREDICT_VIEW = ("pos", "rank", "present", "form", "compare_text")
LENS_VIEW = ("start", "cell", "present", "form")  # `start`: the first position of the lens's window
# The lens shows a window of positions (the JSON twin and the API keep every one): its page stays a few hundred kB
# however long the text, where a cell per layer and position of a 1,000-token text was 140 MB of HTML.
LENS_WINDOW = 32
LENS_WINDOW_PRESENT = 12  # on a projector: fewer positions, each number large enough to read from the back
SAME = 1e-5  # max |Δ| at or below which a position counts as unchanged (the leakage proof's tolerance)
RANKED = 12  # heads listed in the ranking


# -- the form's words as the API's fields -------------------------------------------------------------------------

FLAGS = {"1": True, "true": True, "on": True, "0": False, "false": False, "off": False}


def _show(text: str, limit: int = 30) -> str:
    shown = text if len(text) <= limit else text[:limit] + "…"
    return repr(shown) if shown.isprintable() else ascii(shown)


def parse_flag(name: str, raw: str, default: bool) -> bool:
    if raw == "":
        return default
    if raw.lower() not in FLAGS:
        raise FieldError(name, f"must be 1 or 0 (true or false), got {_show(raw)}")
    return FLAGS[raw.lower()]


def state_of(request: Request, path: str, keys: tuple[str, ...], view: tuple[str, ...]) -> ViewState:
    """The page's view state; a submitted form's unticked boxes become explicit `0`s (and `form` is dropped)."""
    state = ViewState.of(request.query_params, path, keys, view)
    if "replace_token" in state.params:  # a token's own spaces count (" dog" is not "dog"): kept as typed
        state.params["replace_token"] = request.query_params["replace_token"]
    if state.params.pop("form", None) is not None:
        for name in ("bos", "eos"):
            if name in keys:
                state.params.setdefault(name, "0")
    return state


def default_text(state: ViewState, lang: str) -> dict[str, str]:
    """A first visit's text, in the page's language (nothing when the URL gives text or token ids)."""
    return {} if state.get("text") or state.get("token_ids") else {"text": DEFAULT_TEXT[lang]}


def decoder(lab: Lab, preset: str) -> Any:
    """The loaded decoder `preset`, or the API's own refusal naming the field."""
    if preset not in lab.models or not getattr(lab.models[preset], "generates", False):
        names = ", ".join(generators(lab.models)) or "none on this server"
        raise FieldError("preset", f"predictions need a causal language model: {names}")
    return lab.models[preset]


def token_of(model: Any, text: str) -> tuple[int, int]:
    """The first token of `text` through the model's tokenizer (past a BOS the tokenizer adds), and how many."""
    ids = model.tokenize(text)
    if ids and len(ids) > 1 and ids[0] == model.bos_id:
        ids = ids[1:]
    if not ids:
        raise FieldError("replace_token", "the tokenizer gives no token for it")
    return ids[0], len(ids)


async def request_body(
    state: ViewState, prompt: Mapping[str, str], lab: Lab, model_cls: type[BaseModel]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The API request body of the page's state, and what the page says about how it read it (`replaced_by`: a
    token given by text)."""
    names = [n for n in ("preset", "text", "token_ids", "loss_from", "ablate_mode", "mask_off_layers",
                         "drop_sink_layers") if n in model_cls.model_fields]  # fmt: skip
    raw = {n: state.get(n) for n in names if state.get(n)} | dict(prompt)
    body = from_query(raw, None, model_cls)
    if heads := parse_heads(state.get("heads")):
        body["ablate"] = heads
    for name in ("bos", "eos"):
        if name in model_cls.model_fields and state.get(name):
            body[name] = parse_flag(name, state.get(name), True)
    said: dict[str, Any] = {}
    if "replace" not in model_cls.model_fields:
        return body, said
    at, by_id, by_text = state.get("replace_at"), state.get("replace_id"), state.get("replace_token")
    if not (at or by_id or by_text):
        return body, said
    if not at:
        raise FieldError("replace_at", "give the input position whose token is replaced")
    position = parse_int("replace_at", at, 0, 0, 1_000_000)
    if by_id and by_text:
        raise FieldError("replace_token", "give the new token by its id or by its text, not both")
    if by_id:
        token = parse_int("replace_id", by_id, 0, 0, 10_000_000)
    elif by_text:
        model = decoder(lab, str(body.get("preset", "smollm2")))
        token, n = await lab.off_loop(model.name if model.name in lab.models else None, token_of, model, by_text)
        said = {"text": by_text, "n": n}
    else:
        raise FieldError("replace_id", "give the new token: its id, or its text in replace_token")
    body["replace"] = {"position": position, "token_id": token}
    return body, said


@contextmanager
def page_fields() -> Iterator[None]:
    """The API's field names as the form's: `ablate` is typed as `heads`, `replace` as replace_at/replace_id."""
    try:
        yield
    except FieldError as e:
        if e.field == "ablate":
            raise FieldError("heads", e.message) from None
        if e.field == "replace":
            which, _, rest = e.message.partition(": ")
            name = {"position": "replace_at", "token_id": "replace_id"}.get(which)
            raise FieldError(name or "replace_at", rest if name else e.message) from None
        raise


Req = TypeVar("Req", bound=BaseModel)
Run = TypeVar("Run")


async def read_page(state: ViewState, lab: Lab, key: str, ctx: dict[str, Any], model_cls: type[Req],
                    compute: Callable[[Req, Lab, str], Awaitable[Run]]
                    ) -> tuple[Req, Run, dict[str, str], dict[str, Any]]:  # fmt: skip
    """What both prediction pages start with: the page's state as the API's request `model_cls` (a first visit's
    text in the page's language, also the form's placeholder `ctx["prompt"]`), validated, and `compute`'s answer
    to it; a refused field named as the form names it. Returns the request, the answer, the prompt used and what
    the page says about how it read the form (`request_body`)."""
    prompt = default_text(state, ctx["lang"])
    ctx["prompt"] = prompt.get("text", "")
    with page_fields():
        body, said = await request_body(state, prompt, lab, model_cls)
        req = model_cls.model_validate(body)
        return req, await compute(req, lab, key), prompt, said


def api_url(path: str, req: BaseModel) -> str:
    """The API's GET URL for a validated request: every field that differs from its default."""
    items = []
    for name, info in type(req).model_fields.items():
        value = getattr(req, name)
        if value is None or value == info.default:
            continue
        if isinstance(value, bool):
            text = "true" if value else "false"
        elif isinstance(value, BaseModel):
            text = json.dumps(value.model_dump(), separators=(",", ":"))
        elif name == "ablate":
            text = json.dumps(value, separators=(",", ":"))
        elif isinstance(value, list):
            text = ",".join(str(v) for v in value)
        else:
            text = str(value)
        items.append((name, text))
    return f"{path}?{urlencode(items)}"


# -- what the pages show -------------------------------------------------------------------------------------------


def spans(positions: list[int]) -> str:
    """0, 1, 2, 5, 7, 8 as "0–2, 5, 7–8"."""
    runs: list[list[int]] = []
    for p in positions:
        if runs and p == runs[-1][-1] + 1:
            runs[-1].append(p)
        else:
            runs.append([p])
    return ", ".join(str(r[0]) if len(r) == 1 else f"{r[0]}–{r[-1]}" for r in runs)


def delta_class(v: float) -> str:
    """max |Δ log p| as a colour: white for unchanged (≤ 1e-5) to dark red for a prediction turned over."""
    bins = (SAME, 1e-3, 0.1, 1.0, 5.0)
    return f"dv-p{sum(v > b for b in bins)}"


def kl_class(v: float) -> str:
    bins = (1e-7, 1e-4, 1e-2, 0.1, 1.0)
    return f"dv-p{sum(v > b for b in bins)}"


def small(v: float) -> str:
    """A number that may be tiny (max |Δ|, KL): 0, 3e-7, 0.012, 17.6."""
    if v == 0:
        return "0"
    if abs(v) < 0.01:
        mantissa, _, exp = f"{v:.0e}".partition("e")
        return f"{mantissa}e{int(exp)}"
    return f"{v:.3g}" if abs(v) < 100 else f"{v:.0f}"


TEMPLATES.env.filters["tiny"] = small


def with_tokens(t: Any, key: str, tokens: Mapping[str, str], **values: Any) -> tuple[str, Markup]:
    """The message `key` as text, and as HTML with each of `tokens` (a model's text, not the page's words) marked
    as a token, <span class="tok">…</span>."""
    marks = {k: f"\x00{i}\x00" for i, k in enumerate(tokens)}
    html = str(escape(t(key, **values, **marks)))
    for i, v in enumerate(tokens.values()):
        html = html.replace(f"\x00{i}\x00", str(Markup('<span class="tok">{}</span>').format(v.replace(" ", "␣"))))
    return t(key, **values, **tokens), Markup(html)


def twin(state: ViewState) -> str:
    """The page's `.json` twin: the same view as data."""
    path, _, query = state.url().partition("?")
    return f"{path}.json" + (f"?{query}" if query else "")


@dataclass(frozen=True)
class Candidate:
    token: str
    token_id: int
    p: float
    target: bool = False  # the position's target


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


@dataclass(frozen=True)
class LensCell:
    p_final: float  # the probability, read from this layer, of the model's final prediction here
    top: tuple[Candidate, ...]
    first: bool = False  # the layer from which the final prediction stays top-1
    top1: bool = False  # the final prediction is top-1 at this layer
    cls: str = field(default="", metadata=HIDDEN)
    title: str = field(default="", metadata=HIDDEN)  # written for the cells of the page's window only


@dataclass(frozen=True)
class LensWindow:
    """A window of positions the lens's overview map jumps to: `start` … `stop` − 1."""

    start: int
    stop: int
    current: bool = False  # it overlaps the window on the page


# A GET form's hidden fields around one control: those the page's URL writes before it, and those after it.
FormFields = tuple[tuple[tuple[str, str], ...], tuple[tuple[str, str], ...]]


@dataclass(frozen=True)
class LensView(View):
    """The logit lens: each layer's residual stream through the final norm and the unembedding; `rows[l][i]` is
    layer l at position i (the probability there of the model's final prediction, and the top tokens); `final`
    the model's prediction at each position and `first_top1` the layer from which it stays the most likely. The
    page draws the cells of one window of positions, `start` … `stop` − 1 (`window_size` at a time, fewer in
    presenter mode); `rows` holds every position."""

    template = "lens.html"
    blocks = ()
    kind = "lens"

    preset: str = ""
    text: str = ""
    tokens: tuple[str, ...] = ()
    final: tuple[str, ...] = ()
    first_top1: tuple[int | None, ...] = ()
    n_layer: int = 0
    rows: tuple[tuple[LensCell, ...], ...] = ()
    switches: dict[str, Any] | None = None
    switched: tuple[str, ...] = ()
    # Side by side: the same text without the switches (when there are any) and where the final prediction changed.
    before_final: tuple[str, ...] = ()
    before_first: tuple[int | None, ...] = ()
    changed: tuple[int, ...] = ()
    changed_note: str = ""
    cell: tuple[int, int] | None = None  # (layer, position) chosen
    cell_title: str = ""
    cell_title_html: Markup | None = field(default=None, metadata=HIDDEN)
    cell_top: tuple[Candidate, ...] = ()
    summary: str = ""
    # The window of positions drawn as cells, and the links to the ones before and after it.
    start: int = 0
    stop: int = 0  # one past the window's last position
    window_size: int = LENS_WINDOW
    prev_url: str | None = None
    next_url: str | None = None
    windows: tuple[LensWindow, ...] = field(default=(), metadata=HIDDEN)  # the overview's, when there are several
    overview: str = field(default="", metadata=HIDDEN)  # every layer and position as one picture (a PNG data URI)
    cell_form: FormFields = field(default=((), ()), metadata=HIDDEN)  # the state around `cell`
    start_form: FormFields = field(default=((), ()), metadata=HIDDEN)  # the state around `start`
    json_url: str = ""
    twin_url: str = ""
    predict_url: str = ""
    present_url: str = ""
    present: bool = False


def switched_words(switches: Mapping[str, Any], n_layer: int, t: Any) -> tuple[str, ...]:
    out = []
    if switches["ablate"]:
        heads = ", ".join(f"{i}.{h}" for i, h in switches["ablate"])
        out.append(t("predict.sw.ablate." + switches["ablate_mode"], heads=heads))
    for name in ("mask_off_layers", "drop_sink_layers"):
        layers = switches[name]
        if layers:
            which = t("predict.sw.all") if len(layers) == n_layer else ", ".join(str(i) for i in layers)
            out.append(t(f"predict.sw.{name}", layers=which))
    return tuple(out)


def candidates(top: list[dict[str, Any]], target_id: int) -> tuple[Candidate, ...]:
    return tuple(Candidate(c["token"], c["token_id"], c["p"], c["token_id"] == target_id) for c in top)


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
    pos = parse_int("pos", state.get("pos"), -1, 0, n - 1)
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
            position=i, input=r["input"], target=labels[i + 1], input_id=r["input_id"], target_id=r["target_id"],
            scored=r["scored"], p_target=r["p_target"], loss=r["loss"], rank=r["rank"], url=state.url(pos=i),
            replaced_from=labels[i] if replaced is not None and replaced["position"] == i else None,
            before_p=b["p_target"] if b else None, before_loss=b["loss"] if b else None,
            before_rank=b["rank"] if b else None, kl=r.get("kl"), max_abs_diff=d,
            changed=None if d is None else d > SAME,
            delta_cls=delta_class(d) if d is not None else "", kl_cls=kl_class(r["kl"]) if d is not None else "",
        ))  # fmt: skip
    changed = [c.position for c in columns if c.changed]
    unchanged = [c.position for c in columns if c.changed is False]
    r = rows[pos]
    title, title_html = with_tokens(t, "predict.chosen", {"input": r["input"], "target": labels[pos + 1]}, i=pos)
    chosen = Chosen(
        pos,
        title,
        candidates(r["top"], r["target_id"]),
        candidates(r["before"]["top"], r["target_id"]) if compare else None,
        title_html,
    )
    said_verdict = verdict(doc, changed, unchanged, t) if compare else (None, None)
    notices = []
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
        targets=tuple(labels[1:]),
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
    state = state_of(request, "/predict", PREDICT_KEYS, PREDICT_VIEW)
    present = state.get("present") == "1"
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
        "present_url": state.url(present=None if state.get("present") == "1" else "1"),
        "present": state.get("present") == "1",
    }
    if state.get("compare_text"):
        extra["second"] = await second_prompt(req, state, lab, key, t)
        extra["compare_close_url"] = state.url(compare_text=None)
    if state.get("rank") == "1":
        try:
            extra["ranking"] = await rank(req, text, view.pos, lab, key, state, t)
        except FieldError as e:
            extra["ranking_error"] = t("error.field", field=e.field, message=e.message)
    return dataclasses.replace(view, **extra)


async def second_prompt(req: PredictRequest, state: ViewState, lab: Lab, key: str, t: Any) -> SecondPrompt:
    """The second prompt's table under the same switches, each position compared with the first text's."""
    text_a, text_b, pair = await pair_of(req, state.get("compare_text"), lab, key)
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
    return SecondPrompt(state.get("compare_text"), tuple(columns), run.mean_loss, run.perplexity, pair.a.mean_loss,
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
        HeadEffect(h["layer"], h["head"], h["loss"], h["delta"], state.url(heads=f"{h['layer']}.{h['head']}",
                                                                         rank=None, replace_at=None, replace_id=None,
                                                                         replace_token=None, mask_off_layers=None,
                                                                         drop_sink_layers=None))
        for h in doc["heads"][:RANKED]
    )  # fmt: skip
    title, html = with_tokens(t, "predict.rank.title", {"target": text.labels[pos + 1]}, i=pos, n=len(doc["heads"]))
    return Ranking(pos, text.labels[pos + 1], doc["loss"], req.ablate_mode, len(doc["heads"]), title, heads, html)


# -- /lens ---------------------------------------------------------------------------------------------------------


@router.get("/lens", response_class=HTMLResponse)
async def lens_page(request: Request, lab: Annotated[Lab, Depends(get_lab)]) -> Response:
    state = state_of(request, "/lens", LENS_KEYS, LENS_VIEW)
    present = state.get("present") == "1"
    build = functools.partial(build_lens, state, lab, request_key(request))
    return await serve(request, lab, "lens.html", state, build, blocks=(), present=present,
                       presets=generators(lab.models))  # fmt: skip


def parse_cell(raw: str, n_layer: int, n: int) -> tuple[int, int] | None:
    if not raw:
        return None
    layer, dot, position = raw.partition(".")
    if not dot:
        raise FieldError("cell", f"must be layer.position, e.g. 29.3; got {_show(raw)}")
    return parse_int("cell", layer, 0, 0, n_layer - 1), parse_int("cell", position, 0, 0, n - 1)


def top_words(top: tuple[Candidate, ...]) -> str:
    return ", ".join(f"{c.token!r} {c.p:.2f}" for c in top)


def lens_window(state: ViewState, n: int, chosen: tuple[int, int] | None) -> tuple[int, int, int]:
    """The window of positions the page draws: `start` (a parameter: 0 … n − 1; else the window of the chosen
    cell, else the first), one past its last position, and its size (`LENS_WINDOW`, `LENS_WINDOW_PRESENT` in
    presenter mode)."""
    size = LENS_WINDOW_PRESENT if state.get("present") == "1" else LENS_WINDOW
    start = parse_int("start", state.get("start"), -1, 0, n - 1)
    if start < 0:
        start = chosen[1] // size * size if chosen is not None else 0
    return start, min(n, start + size), size


def form_fields(state: ViewState, name: str) -> FormFields:
    """The page's state as the hidden fields of a GET form whose control `name` changes one parameter: the fields
    the URL writes before `name` (to go before the control) and those after it, so that the form goes to
    `state.url(name=value)` itself. A form carries a long text once, where a link per cell carried it in each."""
    at = state.page_keys.index(name)
    kept = [k for k in state.page_keys if k in state.params and k != name]
    return (tuple((k, state.params[k]) for k in kept if state.page_keys.index(k) < at),
            tuple((k, state.params[k]) for k in kept if state.page_keys.index(k) > at))  # fmt: skip


def overview_png(p_final: np.ndarray, width: int) -> str:
    """Every layer (rows) and position (columns) of the lens in one picture, a pixel per cell, in the colours of
    its cells (viridis, 0 → 1): a PNG data URI `width` pixels wide, the columns past the text left white so that
    each window of the overview is as wide as the next."""
    rgb = np.full((p_final.shape[0], width, 3), 255, dtype=np.uint8)
    rgb[:, : p_final.shape[1]] = colourise(p_final, "sequential")
    buf = io.BytesIO()
    Image.fromarray(rgb, "RGB").save(buf, "PNG", compress_level=6)
    return data_uri(buf.getvalue())


async def build_lens(state: ViewState, lab: Lab, key: str, ctx: dict[str, Any]) -> LensView:
    """What /lens shows for `state` (its JSON face is the page's `.json` twin): every layer and position as data,
    the cells of one window of positions on the page."""
    t = ctx["t"]
    req, (text, iv, lens), prompt, _ = await read_page(state, lab, key, ctx, LensRequest, lens_of)
    doc = lens_document(text, iv, lens)
    layers = doc["layers"]
    n_layer, n = len(layers), len(doc["tokens"])
    first = doc["first_top1"]
    chosen = parse_cell(state.get("cell"), n_layer, n)
    start, stop, size = lens_window(state, n, chosen)
    rows = []
    for li, row in enumerate(layers):
        cells = []
        for i, c in enumerate(row):
            top = candidates(c["top"], doc["final_ids"][i])
            title = t("lens.cell", layer=li, i=i, p=f"{c['p_final']:.3f}", final=doc["final"][i],
                      top=top_words(top)) if start <= i < stop else ""  # fmt: skip
            cells.append(LensCell(c["p_final"], top, first[i] == li, bool(top) and top[0].target,
                                  f"sq-{min(10, max(0, round(c['p_final'] * 10)))}", title))  # fmt: skip
        rows.append(tuple(cells))
    cell_top: tuple[Candidate, ...] = ()
    cell_title, cell_title_html = "", None
    if chosen is not None:
        li, i = chosen
        cell_top = rows[li][i].top
        cell_title, cell_title_html = with_tokens(t, "lens.chosen", {"token": doc["tokens"][i], "final": doc["final"][i]},
                                                  layer=li, i=i)  # fmt: skip
    windows: tuple[LensWindow, ...] = ()
    overview = ""
    if n > size:  # a text longer than one window: the whole map, each window of it a button
        windows = tuple(LensWindow(a, min(n, a + size), a < stop and start < a + size) for a in range(0, n, size))
        if ctx.get("html", True):
            p_final = np.array([[c["p_final"] for c in row] for row in layers], dtype=np.float32)
            overview = overview_png(p_final, len(windows) * size)
    settled = sorted(f for f in first if f is not None)
    summary = t("lens.summary", n=n, layers=n_layer, median=settled[len(settled) // 2] if settled else "—",
                earliest=settled[0] if settled else "—")  # fmt: skip
    predict_params = {k: state.get(k) for k in PREDICT_KEYS if state.get(k)} | dict(prompt)
    if state.get("lang"):
        predict_params["lang"] = state.get("lang")
    return LensView(
        preset=doc["preset"],
        text=state.get("text") or prompt.get("text", ""),
        tokens=tuple(doc["tokens"]),
        final=tuple(doc["final"]),
        first_top1=tuple(first),
        n_layer=n_layer,
        rows=tuple(rows),
        switches=doc["switches"],
        switched=switched_words(doc["switches"], text.model.arch.n_layer, t),
        before_final=tuple(doc["before"]["final"]) if doc["before"] else (),
        before_first=tuple(doc["before"]["first_top1"]) if doc["before"] else (),
        changed=tuple(doc["changed"]),
        changed_note=t("lens.changed", k=len(doc["changed"]), n=n) if doc["before"] else "",
        cell=chosen,
        cell_title=cell_title,
        cell_title_html=cell_title_html,
        cell_top=cell_top,
        summary=summary,
        start=start,
        stop=stop,
        window_size=size,
        prev_url=state.url(start=max(0, start - size)) if start > 0 else None,
        next_url=state.url(start=start + size) if start + size < n else None,
        windows=windows,
        overview=overview,
        cell_form=form_fields(state, "cell"),
        start_form=form_fields(state, "start"),
        json_url=api_url("/api/v1/logit_lens", req),
        twin_url=twin(state),
        predict_url="/predict?" + urlencode(predict_params),
        present_url=state.url(present=None if state.get("present") == "1" else "1"),
        present=state.get("present") == "1",
    )
