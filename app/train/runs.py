"""Training runs as background jobs: each in a process of its own (one torch thread, its own interpreter: the
server's event loop, its large-work slots and its GIL are never held by a run), at most `train_max_running` at
once and `train_max_queued` waiting (past that, 503 with Retry-After), `train_max_kept` finished runs kept (the
oldest dropped), each bounded in steps and wall time, cancellable between steps.

One code path runs a run wherever it runs: `supervise` starts the training process, reads every event of
`engine.train.train` from its pipe and hands it to a `Sink`, checks the wall-time bound and the sink's "stop"
while it waits, and tells the sink how the run ended. Two places host it:

- `Runs` (this module, the embedded default: no `--redis`): a thread of the web server supervises each run and its
  sink is the server's own copy of the run (`LocalSink`: `Run.apply`, the event log that the SSE stream follows).
- `app/train/queue.py` (`serve --redis`): a queue worker (`attention-lab worker --redis URL`) supervises it and its
  sink writes the run's state, events and weights to Redis, where every web worker reads them (`RedisRuns`).

A run that ends with its weights is served as a preset (app/train/presets.py) before its end is told: a page that
hears `end` can open the lab on it; a dropped run's preset goes with it. The web side's interface (`start`, `get`,
`all`, `wait`, `stop`, `weights`) is the same for both, so the API and the page have one path; a run whose weights
are here is exported by one `export_zip`."""

from __future__ import annotations

import asyncio
import contextlib
import io
import multiprocessing as mp
import os
import secrets
import tempfile
import threading
import time
import zipfile
from collections import OrderedDict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

from engine.encdec_train import export as export_encdec
from engine.train import Run, export

from . import arch
from .child import train_in_child
from .presets import Presets

# The run's process yields the cores to the server's own (nice 10): a request to any page waits on no training step.
TRAIN_NICENESS = 10  # the fork server's too (app/train/forkserver.py NICENESS)
POLL_S = 0.5  # how often a supervisor asks its sink whether to stop (and a queue worker renews its lease)


def context() -> Any:
    """Where a run's process comes from: a fork server, a clean process of its own (never a fork of the server, which
    holds threads and sockets) started at the first run, that imported the trainer and torch with it once
    (app/train/forkserver.py, at TRAIN_NICENESS); each run is forked from it ready to train. A spawned process imported
    torch and the trainer again for every run: seconds of CPU before its first step, many more on a loaded machine."""
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["app.train.forkserver"])
    return ctx


class Sink(Protocol):
    """Where a supervised run's events go: the server's memory (`LocalSink`) or Redis (app/train/queue.py)."""

    def event(self, kind: str, data: dict[str, Any]) -> None: ...  # step, eval, snapshot (with its weights)

    def weights(self, params: dict[str, Any]) -> None: ...  # the trained weights (numpy arrays), before its end

    def note(self, message: str) -> None: ...  # why it failed or was stopped (said with its end)

    def end(self, data: dict[str, Any]) -> None: ...  # the run's own end: done or cancelled

    def died(self, message: str) -> None: ...  # the process ended without an end of its own: failed

    def poll(self) -> bool: ...  # every POLL_S while it trains: True stops the run at its next step


def supervise(config: dict[str, Any], sink: Sink, max_wall_s: float, cancel: Any = None,
              ctx: Any = None) -> None:  # fmt: skip
    """Train `config` in a process of its own, every event to `sink`; stopped (between steps) when `cancel` is set,
    when the sink's `poll` says so, or past `max_wall_s`. Returns once the process is gone."""
    ctx = ctx or context()
    cancel = cancel if cancel is not None else ctx.Event()
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=train_in_child, args=(config, child, cancel), daemon=True)
    proc.start()
    child.close()
    with contextlib.suppress(OSError, AttributeError):  # from its start (torch's import too): the lab first
        os.setpriority(os.PRIO_PROCESS, proc.pid or 0, TRAIN_NICENESS)
    started = time.monotonic()
    next_poll = started
    ended: dict[str, Any] | None = None  # the child's `end`, told once its weights are in and served
    failed = False
    try:
        while True:
            now = time.monotonic()
            if now >= next_poll:  # on time, even while the pipe is never quiet
                next_poll = now + POLL_S
                if sink.poll():
                    cancel.set()
                if now - started > max_wall_s and not cancel.is_set():
                    sink.note(f"stopped at the server's limit of {max_wall_s:g} s (TRAIN_MAX_WALL_S)")
                    cancel.set()
            if not parent.poll(POLL_S):
                continue
            try:
                kind, data = parent.recv()
            except EOFError:
                break
            if kind == "params":
                sink.weights(data)
                break
            if kind == "failed":
                sink.note(data["message"])
                failed = True
                break
            if kind == "end":
                ended = data
                continue
            sink.event(kind, data)
    finally:
        cancel.set()
        proc.join(10)
        if proc.is_alive():
            proc.kill()
            proc.join()
        parent.close()
    if ended is not None and not failed:
        sink.end(ended)
    else:
        sink.died(f"the training process ended (exit code {proc.exitcode})")


@dataclass
class Job:
    id: str
    run: arch.AnyRun
    created: float = field(default_factory=time.time)
    started: float | None = None
    finished: float | None = None
    message: str = ""  # why it failed or was stopped
    events: list[tuple[str, dict[str, Any]]] = field(default_factory=list)  # what the stream replays (no weights)
    cancel: Any = None
    preset: str | None = None  # the preset the finished run is served as (app/train/presets.py)
    client: str = ""  # the client address that started it (TRAIN_MAX_PER_CLIENT)
    stop_hash: str = ""  # the SHA-256 of its stop token, which only its starter was given (app/train/api.py)

    @property
    def status(self) -> str:
        return self.run.status

    @property
    def live(self) -> bool:
        return self.status in ("queued", "running")

    def record(self, kind: str, data: dict[str, Any]) -> None:
        """One event of the run, into its numbers and its event log (the log without the snapshots' weights)."""
        self.run.apply(kind, data)
        self.events.append((kind, {k: v for k, v in data.items() if k != "weights"}))
        if kind == "end":
            self.finished = self.finished or time.time()

    def state(self) -> dict[str, Any]:
        """The run as GET /api/v1/train/{id} answers it."""
        r = self.run
        snaps = arch.snapshots_state(r)
        if isinstance(r, Run):
            return {"id": self.id, **r.summary(), "labels": r.labels, "probe": r.probe, "snapshots": snaps,
                    "samples": [s.sample for s in r.snapshots if s.sample], "message": self.message,
                    "exportable": bool(r.params), "preset": self.preset, "events": len(self.events)}  # fmt: skip
        return {"id": self.id, **r.summary(), "labels": r.labels, "probe": r.probe, "target": r.target,
                "snapshots": snaps, "message": self.message, "exportable": bool(r.params), "preset": self.preset,
                "events": len(self.events)}  # fmt: skip


class Busy(Exception):
    def __init__(self, retry_after: int, message: str = "the trainer is busy: try again later") -> None:
        super().__init__(message)
        self.retry_after = retry_after
        self.message = message


def per_client_busy(cap: int) -> Busy:
    return Busy(30, f"this address already has {cap} training run{'s' if cap != 1 else ''} queued or running "
                    "(TRAIN_MAX_PER_CLIENT): try again when one ends")  # fmt: skip


class LocalSink:
    """A run supervised by a thread of the web server: its events into the server's copy of the run."""

    def __init__(self, job: Job, presets: Presets | None) -> None:
        self.job, self.presets = job, presets

    def event(self, kind: str, data: dict[str, Any]) -> None:
        self.job.record(kind, data)

    def weights(self, params: dict[str, Any]) -> None:
        import torch

        job = self.job
        job.run.params = {k: torch.from_numpy(v) for k, v in params.items()}
        if self.presets is not None:  # a GPT to the lab's models, an encoder–decoder to /cross (app/train/presets.py)
            job.preset, why = self.presets.add(job.id, job.run)
            if why:
                job.message = f"not served as a preset: {why}"

    def note(self, message: str) -> None:
        self.job.message = message

    def end(self, data: dict[str, Any]) -> None:
        job = self.job
        if data["status"] == "cancelled" and not job.message:
            job.message = "stopped"
        job.record("end", {**data, "message": job.message})  # every end says why, as `end_run`'s and a late stream's

    def died(self, message: str) -> None:
        if self.job.live:
            end_run(self.job, "failed", self.job.message or message)

    def poll(self) -> bool:
        return False  # job.cancel is the process's own event: stopping sets it at once


def end_run(job: Job, status: str, message: str) -> None:
    job.run.status, job.message = status, message
    job.finished = time.time()
    job.events.append(("end", {"status": status, "step": job.run.step, "message": message}))


class Runs:
    """The embedded trainer (no Redis): admission, the supervising threads, the kept runs, in this process."""

    def __init__(self, max_running: int, max_queued: int, max_kept: int, max_wall_s: float,
                 presets: Presets | None = None, max_per_client: int = 0) -> None:  # fmt: skip
        self.max_running, self.max_queued, self.max_kept = max_running, max_queued, max_kept
        self.max_wall_s, self.presets, self.max_per_client = max_wall_s, presets, max_per_client
        self.jobs: OrderedDict[str, Job] = OrderedDict()
        self._lock = threading.Lock()
        self._slots = threading.Semaphore(max_running)
        self._ctx = context()
        self._threads: set[threading.Thread] = set()  # the runs' threads (queued or training), for `close`

    async def start(self, config: arch.AnyConfig, text: str | None = None, client: str = "",
                    stop_hash: str = "") -> Job:  # fmt: skip
        """Queue a run (Busy when the queue is full); its thread waits for a slot, then trains in a child. The run
        keeps `stop_hash`, its stop token's hash (none: no one stops it but the server's end)."""
        run = arch.new_run(config, "queued", text)  # the task's own errors (a text too short) before it is queued
        with self._lock:
            live = [j for j in self.jobs.values() if j.live]
            if len(live) >= self.max_running + self.max_queued:
                raise Busy(30)
            if self.max_per_client and sum(j.client == client for j in live) >= self.max_per_client:
                raise per_client_busy(self.max_per_client)
            job = Job(secrets.token_urlsafe(8), run, client=client, stop_hash=stop_hash)
            job.cancel = self._ctx.Event()
            self.jobs[job.id] = job
            self._drop_old()
        thread = threading.Thread(target=self._work, args=(job,), name=f"train-{job.id}", daemon=True)
        self._threads.add(thread)
        thread.start()
        return job

    async def get(self, run_id: str) -> Job | None:
        return self.jobs.get(run_id)

    async def all(self) -> list[Job]:
        """The runs kept, oldest first."""
        return list(self.jobs.values())

    async def wait(self, job: Job, seen: int, timeout: float) -> None:
        """Until the run has more than `seen` events, at most `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while len(job.events) <= seen and time.monotonic() < deadline:
            await asyncio.sleep(0.2)

    def _drop_old(self) -> None:
        finished = [j for j in self.jobs.values() if not j.live]
        for old in finished[: max(0, len(self.jobs) - self.max_kept)]:
            del self.jobs[old.id]
            if old.preset is not None and self.presets is not None:
                self.presets.remove(old.preset)
                old.preset = None

    def _work(self, job: Job) -> None:
        try:
            self._train(job)
        finally:
            # The run's process has ended (or never started): its cross-process Event goes now, and with it the
            # named semaphores behind it, not at the server's exit, which a SIGTERM ends without exit handlers (the
            # resource tracker then warned of "leaked semaphore objects", five per run kept). A plain Event in its
            # place keeps the run's state (stop() may still set it).
            done = threading.Event()
            if job.cancel.is_set():
                done.set()
            job.cancel = done
            self._threads.discard(threading.current_thread())

    def _train(self, job: Job) -> None:
        with self._slots:
            if job.cancel.is_set():
                end_run(job, "cancelled", "stopped before it started")
                return
            job.run.status = "running"
            job.started = time.time()
            supervise(asdict(job.run.config), LocalSink(job, self.presets), self.max_wall_s, job.cancel, self._ctx)

    async def stop(self, job: Job) -> None:
        job.cancel.set()

    def stop_all(self) -> None:
        """The server stops: every run ends at its next step (or before it starts)."""
        for job in list(self.jobs.values()):
            job.cancel.set()

    def close(self, timeout: float = 20.0) -> None:
        """The server stops: every run ends (`stop_all`) and its thread is waited for, at most `timeout` seconds in
        all: its process joined, and its cross-process Event gone with it (`_work`), so nothing of the runs' is
        left to the process's exit."""
        self.stop_all()
        deadline = time.monotonic() + timeout
        for thread in list(self._threads):
            thread.join(max(0.0, deadline - time.monotonic()))

    async def aclose(self) -> None:
        """Nothing more to let go here (RedisRuns closes its connections)."""

    async def weights(self, job: Job) -> bool:
        """Whether the run's weights are here (the export's): in this process, once it has ended with them."""
        return bool(job.run.params)


def export_zip(job: Job) -> bytes:
    """The run as a Hugging Face directory (config.json, model.safetensors, tokenizer.json), zipped."""
    buf = io.BytesIO()
    with tempfile.TemporaryDirectory() as tmp:
        run, folder = job.run, Path(tmp) / job.id
        path = export(run, folder) if isinstance(run, Run) else export_encdec(run, folder)
        with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
            for f in sorted(path.iterdir()):
                z.write(f, f"train-{job.id}/{f.name}")
    return buf.getvalue()
