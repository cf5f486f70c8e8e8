"""/api/v1/train: start a training run (202), read its state, follow its events (SSE), stop it, download it as a
Hugging Face directory (.zip). The page /train uses this API; so can scripts and tests."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import secrets
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Annotated, Any, Literal
from urllib.parse import parse_qsl

import orjson
from fastapi import APIRouter, FastAPI, HTTPException, Path, Request, Response
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from engine import encdec
from engine.train import LIMITS, TrainConfig, make_config

from ..errors import field_error
from ..schemas import ERRORS, FieldError, Problem, said
from ..web.sse import RESPONSES, EventSourceResponse, ServerSentEvent, event, stream
from ..web.state import AsciiInt
from . import arch
from .presets import Presets
from .runs import Busy, Job, Runs, export_zip

if TYPE_CHECKING:
    from .queue import RedisRuns

router = APIRouter(prefix="/api/v1/train", tags=["train"])
RunId = Annotated[str, Path(pattern=r"^[A-Za-z0-9_-]{1,32}$", description="the run's id, as POST answered")]
KEEPALIVE_S = 10.0


def _bounded(name: str, description: str) -> Any:
    low, high = LIMITS[name]
    return Field(getattr(TrainConfig, name), ge=low, le=high, description=description)


def _encdec(name: str, description: str) -> Any:
    low, high = encdec.LIMITS[name]
    return Field(getattr(encdec.EncDecConfig, name), ge=low, le=high, description=description)


class TrainIn(BaseModel):
    """A training run: the task, the model's sizes and choices, and the optimiser's. Every field has a default.
    `arch` picks the model: the decoder-only GPT (tasks repeat, text) or the encoder–decoder (tasks reverse,
    numbers; the fields it does not set take its own defaults, engine/encdec.py)."""

    model_config = ConfigDict(extra="forbid")

    arch: Literal["gpt", "encoder-decoder"] = Field("gpt", description="gpt (decoder-only) | encoder-decoder")
    task: Literal["repeat", "text", "reverse", "numbers"] = Field(
        "repeat", description="gpt: repeat | text; encoder-decoder: reverse | numbers"
    )
    n_layer: AsciiInt = _bounded("n_layer", "decoder blocks")
    n_heads: AsciiInt = _bounded("n_heads", "heads per block")
    d_model: AsciiInt = _bounded(
        "d_model", "width of the residual stream (a multiple of n_heads; of 2·n_heads with RoPE)"
    )
    mlp: bool = Field(False, description="each block with its MLP (false: attention only)")
    positions: Literal["rope", "learned"] = Field("rope", description="rope (exported as a Llama) | learned (a GPT-2)")
    causal: bool = Field(True, description="false: the mask-off cheat")
    steps: AsciiInt = _bounded("steps", "optimiser steps (at most the server's TRAIN_MAX_STEPS)")
    batch: AsciiInt = _bounded("batch", "sequences per step")
    lr: float = Field(3e-3, gt=0, le=1, description="AdamW's learning rate")
    weight_decay: float = Field(0.01, ge=0, le=1)
    seed: AsciiInt = Field(0, ge=0, le=2**31 - 1)
    n_repeat: AsciiInt = _bounded("n_repeat", "repeat: random tokens in each copy")
    vocab: AsciiInt = _bounded("vocab", "repeat: kinds of token")
    context: AsciiInt = _bounded("context", "text: characters per training sequence")
    eval_every: AsciiInt = _bounded("eval_every", "steps between held-out losses")
    n_snapshots: AsciiInt = _bounded("n_snapshots", "log-spaced steps at which the heads are read")
    sample_chars: AsciiInt = _bounded("sample_chars", "text: characters written at each snapshot")
    length: AsciiInt = _encdec("length", "encoder-decoder, reverse: the longest sequence")
    symbols: AsciiInt = _encdec("symbols", "encoder-decoder, reverse: kinds of symbol")
    max_number: AsciiInt = _encdec("max_number", "encoder-decoder, numbers: 1 … max_number, a tenth held out")
    direction: Literal["en-zh", "zh-en"] = Field("en-zh", description="encoder-decoder, numbers: which way")


GPT_TASKS, ENCDEC_TASKS = ("repeat", "text"), ("reverse", "numbers")
ENCDEC_ONLY = frozenset({"length", "symbols", "max_number", "direction"})
GPT_ONLY = frozenset({"mlp", "positions", "causal", "n_repeat", "vocab", "context", "sample_chars"})


def config_of(body: TrainIn) -> arch.AnyConfig:
    """The engine's config of a request: the GPT's from every field (as before), the encoder–decoder's from the
    fields the request sets (its own defaults for the rest); a field of the other model is a 422 naming it."""
    given = body.model_fields_set - {"arch"}
    if body.arch == "gpt":
        if body.task not in GPT_TASKS:
            raise FieldError("task", said("gpt_tasks", task=body.task))
        if wrong := sorted(given & ENCDEC_ONLY):
            raise FieldError(wrong[0], said("encdec_setting"))
        return make_config(**body.model_dump(exclude=set(ENCDEC_ONLY | {"arch"})))
    if "task" in given and body.task not in ENCDEC_TASKS:
        raise FieldError("task", said("encdec_tasks", task=body.task))
    if wrong := sorted(given & GPT_ONLY):
        raise FieldError(wrong[0], said("gpt_setting"))
    task = body.task if "task" in given else "reverse"
    return encdec.make_config(**{k: getattr(body, k) for k in given - {"task"}}, task=task)


class Started(BaseModel):
    id: str
    status_url: str
    events_url: str
    page_url: str
    stop_token: str = Field(description="what stops the run (POST …/stop): shown only here, only to its starter")


# Who may stop a run: whoever started it. The start answers a random stop token once (the API's JSON `stop_token`; the
# page's form, a cookie of the browser that sent it, HttpOnly, sent only to that run's API paths); the run keeps only
# its SHA-256 (with the run: in this process, or in its Redis hash, so any web worker checks it). A stop without the
# token, or with another, is a 403 naming `stop_token`: a student who sees the projected run's id cannot stop it.
STOP_FIELD = "stop_token"
STOP_COOKIE_AGE_S = 86_400  # the browser keeps a run's stop token a day (a run lasts minutes)


def stop_cookie(run_id: str) -> str:
    return f"lab_stop_{run_id}"


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def new_stop_token() -> tuple[str, str]:
    """A run's stop token and the hash the run keeps."""
    token = secrets.token_urlsafe(24)
    return token, token_hash(token)


def holds_stop_token(job: Job, token: str | None) -> bool:
    """The token is the one this run's start answered (compared in constant time; a run kept without one: no one)."""
    return bool(token and job.stop_hash) and hmac.compare_digest(token_hash(token or ""), job.stop_hash)


def set_stop_cookie(response: Response, request: Request, run_id: str, token: str) -> None:
    """The browser that started the run keeps its stop token, sent back only to /api/v1/train/<id>…"""
    response.set_cookie(stop_cookie(run_id), token, max_age=STOP_COOKIE_AGE_S, path=f"/api/v1/train/{run_id}",
                        httponly=True, samesite="strict", secure=request.url.scheme == "https")  # fmt: skip


async def presented_stop_token(request: Request, run_id: str) -> str | None:
    """The stop token a stop presents: the body's `stop_token` (JSON or a form), `Authorization: Bearer`, or the
    cookie of the browser that started the run."""
    raw = await request.body()
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    token: Any = None
    if raw and kind == "application/json":
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError:
            body = None
        token = body.get(STOP_FIELD) if isinstance(body, dict) else None
    elif raw and kind == "application/x-www-form-urlencoded":
        token = dict(parse_qsl(raw.decode("utf-8", "replace"))).get(STOP_FIELD)
    auth = request.headers.get("authorization", "")
    if not token and auth[:7].lower() == "bearer ":
        token = auth[7:].strip()
    token = token or request.cookies.get(stop_cookie(run_id))
    return token if isinstance(token, str) and token else None


def runs_of(request: Request) -> Runs | RedisRuns:
    """The app's runs: in this process (`Runs`), or in Redis, trained by queue workers (`RedisRuns`)."""
    runs: Runs | RedisRuns = request.app.state.train
    return runs


async def job_of(request: Request, run_id: str) -> Job:
    job = await runs_of(request).get(run_id)
    if job is None:
        raise HTTPException(404, f"no training run {run_id!r} (finished runs are kept while newer ones allow)")
    return job


async def start_run(request: Request, body: TrainIn) -> tuple[Job, str]:
    """Check the body against the server's bounds and queue it (FieldError names the field; Busy is 503): the run
    and its stop token, which only this answer holds."""
    limit = request.app.state.settings.train_max_steps
    config = config_of(body)
    if config.steps > limit:
        raise FieldError("steps", said("train_max_steps", limit=limit))
    client = (request.client.host if request.client else "") or "?"
    token, hashed = new_stop_token()
    return await runs_of(request).start(config, client=client, stop_hash=hashed), token


def busy(exc: Busy) -> JSONResponse:
    return JSONResponse({"message": exc.message, "detail": []}, status_code=503,
                        headers={"Retry-After": str(exc.retry_after)})  # fmt: skip


@router.post(
    "",
    summary="Start training a small GPT or encoder-decoder",
    status_code=202,
    response_model=Started,
    responses={422: ERRORS[422], 503: {"description": "busy"}},
)
async def start(request: Request, body: TrainIn) -> Any:
    """Start a run; it trains in the background (one at a time by default), in a process of its own. The answer's
    `stop_token` is what stops it (POST …/stop): it is never shown again."""
    try:
        job, token = await start_run(request, body)
    except Busy as e:
        return busy(e)
    base = f"/api/v1/train/{job.id}"
    page = "cross" if arch.is_encdec(job.run.config) else "train"
    return JSONResponse(
        {
            "id": job.id,
            "status_url": base,
            "events_url": base + "/events",
            "page_url": f"/{page}?run={job.id}",
            "stop_token": token,
        },
        status_code=202,
        headers={"Location": base},
    )


@router.get("", summary="The training runs kept")
async def runs(request: Request) -> dict[str, Any]:
    """The runs kept, newest last: id, status, step, steps, the last losses, the preset a finished one is served as."""
    out = []
    for job in await runs_of(request).all():
        r = job.run
        out.append({"id": job.id, "status": r.status, "step": r.step, "steps": r.config.steps, "task": r.config.task,
                    "causal": getattr(r.config, "causal", None), "arch": arch.ENCDEC if arch.is_encdec(r.config) else "gpt", "loss": r.loss[-1] if r.loss else None,
                    "eval_loss": r.eval_loss[-1] if r.eval_loss else None, "preset": job.preset})  # fmt: skip
    return {"runs": out}


@router.get(
    "/{run_id}",
    summary="One training run: its losses, snapshots and samples",
    responses={404: {"description": "no such run"}},
)
async def state(request: Request, run_id: RunId) -> Response:
    """The run: status, step, every step's training loss, the held-out losses, the snapshots' induction scores."""
    return Response(orjson.dumps((await job_of(request, run_id)).state()), media_type="application/json")


@router.get("/{run_id}/events", summary="Follow a training run as server-sent events",
            response_class=EventSourceResponse, responses=RESPONSES | {404: {"description": "no such run"}})  # fmt: skip
async def events(request: Request, run_id: RunId) -> EventSourceResponse:
    """`event: state` (the run so far), then `step`, `eval`, `snapshot` (without the weights) as they happen and
    `end`; a comment every few seconds. Each event has its number as its id: a client that reconnects with
    `Last-Event-ID` (any web worker) gets the events after it, without the state again."""
    job = await job_of(request, run_id)
    after = request.headers.get("last-event-id", "")
    resume = int(after) if after.isdigit() and int(after) <= len(job.events) else None
    return stream(follow(runs_of(request), job, resume), KEEPALIVE_S)


async def follow(runs: Runs | RedisRuns, job: Job, resume: int | None = None) -> AsyncIterator[ServerSentEvent]:
    """The run's events from `resume` (None: its state first); ends with its `end`. A client that leaves cancels it
    (the run goes on: a page that left does not stop it)."""
    if resume is None:
        sent = len(job.events)
        yield event("state", job.state(), sent)
        if not job.live and sent == len(job.events):
            yield event("end", {"status": job.status, "step": job.run.step, "message": job.message})
            return
    else:
        sent = resume
    while True:
        new = job.events[sent:]
        for kind, data in new:
            sent += 1
            yield event(kind, data, sent)
            if kind == "end":
                return
        if not new:
            await runs.wait(job, sent, 1.0)


class Stopped(BaseModel):
    id: str
    status: str = Field(description="the run's status as the stop found it")
    stopping: bool = Field(description="true: it ends at its next step")


STOP_BODY = {"schema": {"type": "object", "properties": {STOP_FIELD: {"type": "string"}}}}
STOPPING: dict[str, Any] = {
    "response_model": Stopped,
    "responses": {403: {"model": Problem, "description": "no stop token, or not this run's: `detail[].loc` names "
                                                         "`stop_token`; the run goes on"},
                  404: {"description": "no such run"}},
    "openapi_extra": {"requestBody": {"required": False, "content": {"application/json": STOP_BODY,
                                                                     "application/x-www-form-urlencoded": STOP_BODY}}},
}  # fmt: skip


@router.post("/{run_id}/stop", summary="Stop a training run (its starter)", **STOPPING)
async def stop(request: Request, run_id: RunId) -> Any:
    """Stop a run at its next step (a queued one never starts); its numbers so far stay viewable. Only its starter
    stops it: the `stop_token` its start answered, as the body's `stop_token` (JSON or a form), as `Authorization:
    Bearer <stop_token>`, or the cookie /train's form left in the browser that started it; without it, or with
    another run's, a 403 naming `stop_token` (the run goes on)."""
    job = await job_of(request, run_id)
    token = await presented_stop_token(request, run_id)
    if not holds_stop_token(job, token):
        said_ = (f"stopping run {run_id} needs the stop_token its start answered" if token is None
                 else f"this stop_token is not run {run_id}'s")  # fmt: skip
        return field_error("body", STOP_FIELD, said_, status=403)
    await runs_of(request).stop(job)
    return {"id": job.id, "status": job.status, "stopping": job.live}


@router.delete("/{run_id}", summary="Stop a training run (as POST …/stop)", **STOPPING)
async def cancel(request: Request, run_id: RunId) -> Any:
    """The same as POST …/stop, with the same stop token."""
    return await stop(request, run_id)


@router.get(
    "/{run_id}/export",
    summary="A finished run as a zipped Hugging Face model folder",
    responses={
        200: {"content": {"application/zip": {}}},
        404: {"description": "no such run"},
        409: {"description": "not finished"},
    },
)
async def export_run(request: Request, run_id: RunId) -> Response:
    """The finished run as a Hugging Face directory, zipped: config.json, model.safetensors, tokenizer.json
    (`attention-lab serve --model DIR`, or transformers' AutoModelForCausalLM)."""
    job = await job_of(request, run_id)
    if not await runs_of(request).weights(job):
        return JSONResponse({"message": f"run {job.id} is {job.status}: its weights come when it ends",
                             "detail": []}, status_code=409)  # fmt: skip
    body = await asyncio.to_thread(export_zip, job)  # the weights here now (`weights`)
    return Response(body, media_type="application/zip",
                    headers={"Content-Disposition": f'attachment; filename="train-{job.id}.zip"'})  # fmt: skip


def catch_up(app: FastAPI) -> None:
    """With Redis, each request first serves the runs finished on any worker as presets (and drops the dropped): added
    outside the response cache, so that no kept answer names a preset dropped elsewhere."""
    from .queue import CatchUp, RedisRuns

    if isinstance(app.state.train, RedisRuns):
        app.add_middleware(CatchUp, runs=app.state.train)


def install(app: FastAPI) -> None:
    """The app's runs, bounded by its settings; each finished one served as a preset of the lab. With Redis, the runs
    are jobs of the queue (app/train/queue.py), seen by every worker; without, they train in this process."""
    s = app.state.settings
    presets = Presets(app.state.lab, app.state.responses, s.max_model_mb)  # finished runs, served as presets
    if s.redis_url:
        from .queue import RedisRuns

        app.state.train = RedisRuns(s.redis_url, s, presets)
        return
    app.state.train = Runs(s.train_max_running, s.train_max_queued, s.train_max_kept, s.train_max_wall_s, presets,
                           s.train_max_per_client)  # fmt: skip
