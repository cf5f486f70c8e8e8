"""The page /train: start a run, watch it learn (the loss curve with the phase change marked, every head's weights on
the probe at log-spaced steps, the induction score over steps, samples), and two runs side by side (the mask-off
cheat). Drawn by the server; each live run's events ask for the live block again (htmx's SSE extension, `follow` in
templates/_train.html)."""

from __future__ import annotations

import functools
import html
from dataclasses import dataclass
from typing import Annotated, Any
from urllib.parse import parse_qsl, quote, urlencode

import numpy as np
from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from pydantic import ValidationError

from engine.train import Run, TrainConfig

from ..errors import clean, field_error
from ..render.charts import Series, line_chart
from ..render.heatmap import data_uri, png
from ..schemas import FieldError, said
from ..templating import LANGS, TEMPLATES, error_message, negotiate, translator
from ..web.origin import foreign
from ..web.page import VARY, Redraw, RefusedForm, page_context, query_of, room_query, screen_carry, serve, wants_json
from ..web.state import SHARED, Digits, PageQuery
from ..web.view import HIDDEN, View
from .api import (
    RunId,
    TrainIn,
    busy,
    holds_stop_token,
    job_of,
    presented_stop_token,
    runs_of,
    set_stop_cookie,
    start_run,
)
from .runs import Busy, Job

router = APIRouter(include_in_schema=False)
ENCDEC_FORM = {"task", "steps", "seed", "n_layer", "n_heads", "d_model", "direction", "length"}  # /cross's form
CURVE_POINTS = 200  # the training loss drawn as at most this many points (every step stays in the JSON)


class TrainQuery(PageQuery):
    """/train's view: the run shown, a second run beside it (the mask-off cheat), the snapshot whose heads are
    drawn (its index; the last by default)."""

    run: str = ""
    compare: str = ""
    snap: Digits(0) | None = None  # type: ignore[valid-type]


@dataclass(frozen=True)
class HeadMap:
    layer: int
    head: int
    induction: float
    image: Annotated[str, HIDDEN] = ""  # a PNG data URI of its weights on the probe


@dataclass(frozen=True)
class RunPanel:
    id: str
    status: str
    step: int
    steps: int
    settings: TrainConfig  # the run's, as the API's `config` writes them
    train_loss: float | None  # the last step's, under the run's own mask
    eval_loss: float | None  # held out, under the causal mask
    eval_own: float | None  # held out, under the run's own mask
    first: float | None
    second: float | None
    phase_change: int | None
    best_induction: float | None
    message: str
    snapshot_steps: list[int]
    snap: int | None  # the index drawn
    heads: list[HeadMap]
    samples: list[tuple[int, str]]
    events_url: str
    export_url: str | None
    preset: str | None  # the finished run served as a preset of this server (app/train/presets.py)
    lab_url: str | None  # the lab on that preset: the probe, the layer and head with the best induction score
    loss_chart: Annotated[str, HIDDEN] = ""
    induction_chart: Annotated[str, HIDDEN] = ""


class TrainView(View):
    template = "train.html"
    blocks = ("live",)
    kind = "train"

    runs: list[dict[str, Any]]
    shown: RunPanel | None
    compared: RunPanel | None
    cheat: str | None  # the two numbers of the mask-off cheat, in words
    defaults: dict[str, Any]
    live: bool


def loss_chart(job: Job, t: Any) -> str:
    r = job.run
    assert isinstance(r, Run)
    every = max(1, len(r.loss) // CURVE_POINTS)
    steps = list(range(1, len(r.loss) + 1, every))
    series = [Series(t("train.series.train"), steps, [r.loss[s - 1] for s in steps])]
    if r.eval_steps:
        series.append(Series(t("train.series.eval"), r.eval_steps, r.eval_loss, dashed=True))
    if r.eval_second:
        series.append(Series(t("train.series.second"), r.eval_steps, r.eval_second))
    if r.phase_change is not None and r.eval_loss:
        top = max([*r.eval_loss, *(r.loss or [0.0])])
        series.append(Series(t("train.series.phase", step=r.phase_change), [r.phase_change] * 2, [0.0, top], True))
    if not r.loss and not r.eval_steps:
        return ""
    return line_chart(series, t("train.chart.loss"), t("train.chart.step"), t("train.chart.nats"), chart_id="loss",
                      x_range=(0, r.config.steps))  # fmt: skip


def induction_chart(job: Job, t: Any) -> str:
    assert isinstance(job.run, Run)
    snaps = [s for s in job.run.snapshots if s.step > 0]  # log-spaced steps, drawn on a log axis
    if len(snaps) < 2:
        return ""
    series = [Series(f"L{layer}.H{head}", [s.step for s in snaps], [s.induction[layer][head] for s in snaps])
              for layer in range(len(snaps[0].induction)) for head in range(len(snaps[0].induction[layer]))]  # fmt: skip
    return line_chart(series, t("train.chart.induction"), t("train.chart.step"), t("train.chart.score"),
                      x_log=True, chart_id="induction", x_range=(snaps[0].step, job.run.config.steps))  # fmt: skip


def lab_url(job: Job, lang: str) -> str | None:
    """The lab's softmax stage on the run's preset, reading its probe (n tokens twice), at its best induction head."""
    r = job.run
    if job.preset is None or not isinstance(r, Run):
        return None
    query = {"preset": job.preset, "text": "".join(r.labels[i] for i in r.probe), "stage": "softmax"}
    if r.snapshots:
        scores = r.snapshots[-1].induction
        layer, head = max(((i, h) for i, row in enumerate(scores) for h in range(len(row))),
                          key=lambda lh: scores[lh[0]][lh[1]])  # fmt: skip
        query |= {"layer": str(layer), "head": str(head)}
    return "/?" + urlencode(query | {"lang": lang})


def panel(job: Job, snap: int | None, t: Any, lang: str = "en") -> RunPanel:
    r = job.run
    assert isinstance(r, Run), "find() gives /train the GPT's runs only"
    snaps = r.snapshots
    pick = None if not snaps else min(snap, len(snaps) - 1) if snap is not None else len(snaps) - 1
    heads = []
    if pick is not None:
        s = snaps[pick]
        for layer, w in enumerate(s.weights):
            for head in range(w.shape[0]):
                a = w[head].numpy().astype(np.float64)
                picture = data_uri(png(a, "sequential", 160))
                heads.append(HeadMap(layer, head, s.induction[layer][head], picture))
    last = lambda xs: xs[-1] if xs else None  # noqa: E731
    return RunPanel(
        id=job.id, status=r.status, step=r.step, steps=r.config.steps, settings=r.config,
        train_loss=last(r.loss), eval_loss=last(r.eval_loss), eval_own=last(r.eval_own), first=last(r.eval_first),
        second=last(r.eval_second), phase_change=r.phase_change, best_induction=r.best_induction(),
        message=job.message, snapshot_steps=[s.step for s in snaps], snap=pick, heads=heads,
        samples=[(s.step, s.sample) for s in snaps if s.sample], events_url=f"/api/v1/train/{job.id}/events",
        export_url=f"/api/v1/train/{job.id}/export" if r.params else None, preset=job.preset,
        lab_url=lab_url(job, lang), loss_chart=loss_chart(job, t),
        induction_chart=induction_chart(job, t),
    )  # fmt: skip


def cheat_words(a: RunPanel, b: RunPanel, t: Any) -> str | None:
    """The cheat's two numbers, when one run has the mask and the other not."""
    honest, cheat = (a, b) if a.settings.causal else (b, a)
    if honest.settings.causal == cheat.settings.causal or None in (honest.train_loss, cheat.train_loss):
        return None
    return t("train.cheat.words", honest_train=honest.train_loss, cheat_train=cheat.train_loss,
             honest_eval=honest.eval_loss, cheat_eval=cheat.eval_loss)  # fmt: skip


# A lesson's step links to the class's run before it exists: these names stand for the newest kept run whose causal
# mask is on (`latest`) or off (`latest-unmasked`, the cheat's twin).
LATEST = {"latest": True, "latest-unmasked": False}


async def resolved(request: Request, run_id: str) -> Job | None:
    """The run a URL names (None: none, or none kept: `find` says so on the page)."""
    try:
        return await find(request, "run", run_id)
    except FieldError:
        return None


async def find(request: Request, key: str, run_id: str) -> Job | None:
    if not run_id:
        return None
    if run_id in LATEST:
        jobs = reversed(await runs_of(request).all())
        return next((j for j in jobs if isinstance(j.run, Run) and j.run.config.causal == LATEST[run_id]), None)
    job = await runs_of(request).get(run_id)
    if job is None:
        raise FieldError(key, said("no_run", run=run_id))
    if not isinstance(job.run, Run):
        raise FieldError(key, said("run_encdec", run=run_id))
    return job


@router.get("/train", response_class=HTMLResponse)
async def train_page(
    request: Request,
    state: Annotated[TrainQuery, Depends(query_of(TrainQuery, "/train"))],
) -> Response:
    p = state
    chosen = [await resolved(request, run_id) for run_id in (p.run, p.compare)]
    jobs = [j for j in chosen if j is not None]
    shows = "|".join(f"{j.id}:{len(j.events)}:{j.status}:{bool(j.run.params)}:{j.preset}" for j in jobs)
    shows += "|runs:" + ",".join(f"{j.id}:{j.status}:{j.run.step}" for j in await runs_of(request).all())  # the list
    json_url = f"/api/v1/train/{chosen[0].id}" if chosen[0] else "/api/v1/train"
    build = functools.partial(train_view, request, state)
    return await serve(request, "train.html", state, build, json_url=json_url, shows=shows, blocks=("live",),
                       pushed=False)  # fmt: skip


async def train_view(request: Request, state: TrainQuery, ctx: dict[str, Any]) -> TrainView:
    t = ctx["t"]
    p = state
    shown = await find(request, "run", p.run)
    compared = await find(request, "compare", p.compare)
    a = panel(shown, p.snap, t, ctx["lang"]) if shown else None
    b = panel(compared, p.snap, t, ctx["lang"]) if compared else None
    runs = [{"id": j.id, "status": j.status, "task": j.run.config.task, "causal": j.run.config.causal,
             "step": j.run.step, "steps": j.run.config.steps} for j in reversed(await runs_of(request).all())
            if isinstance(j.run, Run)]  # fmt: skip
    return TrainView(runs=runs, shown=a, compared=b, cheat=cheat_words(a, b, t) if a and b else None,
                     defaults=TrainIn().model_dump(), live=any(j.live for j in (shown, compared) if j))  # fmt: skip


@router.post("/api/v1/train/{run_id}/stop/page", response_class=HTMLResponse)
async def stop_from_page(request: Request, run_id: RunId) -> Response:
    """The pages' Stop button (/train's run panel, /cross's status line), in htmx: the API's stop, answered in words.
    The page is cached by URL, so every viewer has the button, and only the browser that started the run holds its
    stop token (the cookie lab_stop_<id>, sent to /api/v1/train/<id>/… alone: hence this path). The JSON API's 403
    was swallowed by htmx there (no swap), so another browser's click did nothing visible; here it stops nothing and
    answers the reason, in the page's language (`?lang=`), into the slot beside the button, which htmx keeps across
    the live block's redraws (hx-preserve). A 200: htmx swaps 2xx and 422 alone (templates/_base.html), and this
    answer is the slot's words, not the API's refusal; the API's own 403 is unchanged. The starter's click stops the
    run and empties the slot; the live block then shows it stopping."""
    job = await job_of(request, run_id)
    if not holds_stop_token(job, await presented_stop_token(request, run_id)):
        t = translator(negotiate(request.query_params.get("lang"), request.headers.get("accept-language")))
        return HTMLResponse(html.escape(t("train.stop_refused")), headers={"Cache-Control": "no-store"})
    await runs_of(request).stop(job)
    return HTMLResponse("", headers={"Cache-Control": "no-store"})


@router.post("/train")
async def train_form(request: Request) -> Response:
    """The page's form: start a run (with `cheat=1`, two: the mask on and off, same seed) and show it. /cross's form
    (`arch=encoder-decoder`) starts an encoder–decoder here too, and is sent back to /cross. Refused, a form is its
    page again with the error under its field (/train's `refused_form`, /cross's `cross_refused`); a client that
    asks for JSON (`Accept: application/json`) gets the API's 422."""
    if (refused := foreign(request, "start a training run")) is not None:  # another site's form starts nothing here
        return field_error("header", refused[0], refused[1], status=403)
    raw = (await request.body()).decode("utf-8", "replace")
    form = dict(parse_qsl("&".join(raw.split("&", 64)[:64])))  # urlencoded; past 64 fields the rest is ignored
    encdec = form.get("arch") == "encoder-decoder"
    fields = ENCDEC_FORM if encdec else set(TrainIn.model_fields) - {"arch"}
    given: dict[str, Any] = {k: v for k, v in form.items() if k in fields and v != ""}
    if encdec:
        given = {k: v for k, v in given.items() if k != ("length" if given.get("task") == "numbers" else "direction")}
        given["arch"] = "encoder-decoder"
    else:
        for flag in ("mlp", "causal"):
            given[flag] = form.get(flag) == "1"
    lang = form.get("lang") or "en"
    try:
        body = TrainIn.model_validate(given)
        first, first_token = await start_run(request, body)
        second = (
            await start_run(request, body.model_copy(update={"causal": not body.causal}))
            if form.get("cheat") and not encdec
            else None
        )
    except ValidationError as e:
        if wants_json(request):  # a script that asks for JSON: the API's answer
            raise FieldError(str(e.errors()[0]["loc"][0]), e.errors()[0]["msg"]) from None
        bad = [(str(err["loc"][1]), err["msg"]) for err in clean(e.errors(), "body")]
        return cross_refused(form, bad) if encdec else await refused_form(request, form, bad)
    except FieldError as e:
        if wants_json(request):
            raise
        bad = [(e.field, e.message)]
        return cross_refused(form, bad) if encdec else await refused_form(request, form, bad)
    except Busy as e:
        return busy(e)
    carry = "".join(f"&{k}={quote(form[k])}" for k in SHARED if form.get(k))  # presenter mode, the lesson
    page = "/cross" if encdec else "/train"
    url = f"{page}?run={first.id}" + (f"&compare={second[0].id}" if second else "") + carry + f"&lang={lang}"
    response = RedirectResponse(url, status_code=303)
    for job, token in ((first, first_token), *([second] if second else [])):  # this browser's Stop stops them
        set_stop_cookie(response, request, job.id, token)
    return response


# The fields templates/train.html's form shows, each by its label's catalogue key (d_model is called so in both).
FORM_LABELS = {"task": "train.task", "n_layer": "train.n_layer", "n_heads": "train.n_heads", "d_model": "",
               "positions": "train.positions", "steps": "train.steps", "lr": "train.lr", "seed": "seed"}  # fmt: skip
TYPED_CHARS = 40  # a typed value shown again in the form at most this long


def cross_refused(form: dict[str, str], bad: list[tuple[str, str]]) -> Response:
    """/cross's form refused: /cross drawn again (by its own route: `Redraw`) with a 422, in the form's language,
    each error under its field and the values as typed kept in the form, as /train's own form is."""
    query = urlencode({k: form[k] for k in ("lang", *SHARED) if form.get(k)})
    typed = {k: v[:TYPED_CHARS] for k, v in form.items() if k in ENCDEC_FORM and v != ""}
    return Redraw("/cross" + (f"?{query}" if query else ""), RefusedForm(tuple(bad), typed))


async def refused_form(request: Request, form: dict[str, str], bad: list[tuple[str, str]]) -> Response:
    """The form refused (a field out of bounds, a d_model the heads do not divide, more steps than this server
    allows): /train again with a 422, in the form's language, the values as typed kept in the form and each error
    beside its field (those of fields the form does not show above it), as every page says bad input."""
    lang = negotiate(form.get("lang"), request.headers.get("accept-language"))
    t = translator(lang)
    state = TrainQuery.of({k: form[k] for k in ("lang", *SHARED) if form.get(k)}, "/train")
    ctx = page_context(
        "train", lang, {code: state.lang_url(code) for code in LANGS}, 422, state=state, json_url="/api/v1/train",
        room_query=room_query(request, state), hints=state.hints, present=state.present,
        present_url=state.url(present=None if state.present else "1"), carry=screen_carry(state.params, lang),
    )  # fmt: skip
    view = await train_view(request, state, ctx)
    ctx.update(view.context(), view=view)
    said_ = {field: t("error.field", field=t(FORM_LABELS[field]) if FORM_LABELS.get(field) else field,
                      message=error_message(message, lang)) for field, message in bad}  # fmt: skip
    ctx["field_errors"] = {field: text for field, text in said_.items() if field in FORM_LABELS}
    ctx["error"] = [text for field, text in said_.items() if field not in FORM_LABELS] or None
    fields = set(TrainIn.model_fields) - {"arch"}
    typed = {k: v[:TYPED_CHARS] for k, v in form.items() if k in fields and v != ""}
    flags = {flag: form.get(flag) == "1" for flag in ("mlp", "causal", "cheat")}
    ctx["defaults"] = view.defaults | typed | flags
    headers = {"Vary": VARY, "Cache-Control": "no-store",
               "X-Lab-Error": quote("; ".join(said_.values()), safe=" :;,.()'=-_")}  # fmt: skip
    return TEMPLATES.TemplateResponse(request, "train.html", ctx, status_code=422, headers=headers)
