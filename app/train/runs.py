"""Training runs as background jobs: each in a process of its own (one torch thread, its own interpreter: the
server's event loop, its large-work slots and its GIL are never held by a run), at most `train_max_running` at
once and `train_max_queued` waiting (past that, 503 with Retry-After), `train_max_kept` finished runs kept (the
oldest dropped), each bounded in steps and wall time, cancellable between steps.

The child reports every event of `engine.train.train` through a pipe; a thread of the server replays them into its
copy of the run (`Run.apply`) and keeps the event log that the SSE stream follows. A run that ends with its weights
is served as a preset of the running server (app/train/presets.py) before its end is told: a page that hears `end`
can open the lab on it; a dropped run's preset goes with it."""

from __future__ import annotations

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
from typing import Any

from engine.train import Run, TrainConfig, export, make_data

from .presets import Presets

# The run's process yields the cores to the server's own (nice 10): a request to any page waits on no training step.
TRAIN_NICENESS = 10


def _child(config: dict[str, Any], conn: Any, cancel: Any) -> None:
    """In the run's own process: train and send every event, then the weights."""
    import torch

    from engine.train import make_config, train

    torch.set_num_threads(1)  # tiny matrices: one thread is faster than two fighting the server for the cores
    try:
        run = train(make_config(**config), lambda kind, data: conn.send((kind, data)), cancel)
        conn.send(("params", {k: v.numpy() for k, v in run.params.items()}))
    except Exception as e:  # reported to the page, not lost in a child's stderr
        conn.send(("failed", {"message": f"{type(e).__name__}: {e}"}))
    finally:
        conn.close()


@dataclass
class Job:
    id: str
    run: Run
    created: float = field(default_factory=time.time)
    started: float | None = None
    finished: float | None = None
    message: str = ""  # why it failed or was stopped
    events: list[tuple[str, dict[str, Any]]] = field(default_factory=list)  # what the stream replays (no weights)
    cancel: Any = None
    preset: str | None = None  # the preset the finished run is served as (app/train/presets.py)

    @property
    def status(self) -> str:
        return self.run.status

    @property
    def live(self) -> bool:
        return self.status in ("queued", "running")

    def state(self) -> dict[str, Any]:
        """The run as GET /api/v1/train/{id} answers it."""
        r = self.run
        snaps = [{"step": s.step, "induction": s.induction, "eval_loss": s.eval_loss, "sample": s.sample}
                 for s in r.snapshots]  # fmt: skip
        return {"id": self.id, **r.summary(), "labels": r.labels, "probe": r.probe, "snapshots": snaps,
                "samples": [s.sample for s in r.snapshots if s.sample], "message": self.message,
                "exportable": bool(r.params), "preset": self.preset, "events": len(self.events)}  # fmt: skip


class Busy(Exception):
    def __init__(self, retry_after: int) -> None:
        super().__init__("training queue full")
        self.retry_after = retry_after


class Runs:
    """The server's training runs: admission, the worker threads, the kept runs."""

    def __init__(self, max_running: int, max_queued: int, max_kept: int, max_wall_s: float,
                 presets: Presets | None = None) -> None:  # fmt: skip
        self.max_running, self.max_queued, self.max_kept = max_running, max_queued, max_kept
        self.max_wall_s, self.presets = max_wall_s, presets
        self.jobs: OrderedDict[str, Job] = OrderedDict()
        self._lock = threading.Lock()
        self._slots = threading.Semaphore(max_running)
        self._ctx = mp.get_context("spawn")  # never fork a server that holds threads and sockets
        self._threads: set[threading.Thread] = set()  # the runs' threads (queued or training), for `close`

    def start(self, config: TrainConfig, text: str | None = None) -> Job:
        """Queue a run (Busy when the queue is full); its thread waits for a slot, then trains in a child."""
        data = make_data(config, text)  # the task's own errors (a text too short) before anything is queued
        with self._lock:
            if sum(j.live for j in self.jobs.values()) >= self.max_running + self.max_queued:
                raise Busy(30)
            job = Job(secrets.token_urlsafe(8), Run(config, data.labels(), data.probe()[0].tolist(), status="queued"))
            job.cancel = self._ctx.Event()
            self.jobs[job.id] = job
            self._drop_old()
        thread = threading.Thread(target=self._work, args=(job,), name=f"train-{job.id}", daemon=True)
        self._threads.add(thread)
        thread.start()
        return job

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
                self._end(job, "cancelled", "stopped before it started")
                return
            job.run.status = "running"
            job.started = time.time()
            parent, child = self._ctx.Pipe(duplex=False)
            proc = self._ctx.Process(target=_child, args=(asdict(job.run.config), child, job.cancel), daemon=True)
            proc.start()
            child.close()
            with contextlib.suppress(OSError, AttributeError):  # from its start (torch's import too): the lab first
                os.setpriority(os.PRIO_PROCESS, proc.pid or 0, TRAIN_NICENESS)
            try:
                self._follow(job, parent)
            finally:
                job.cancel.set()
                proc.join(10)
                if proc.is_alive():
                    proc.kill()
                    proc.join()
                parent.close()
            if job.live:  # the child died without saying how
                self._end(job, "failed", job.message or f"the training process ended (exit code {proc.exitcode})")

    def _follow(self, job: Job, conn: Any) -> None:
        import torch

        ended: dict[str, Any] | None = None  # the child's `end`, told once its weights are in and served
        try:
            while True:
                if (got := self._next(job, conn)) is None:
                    return
                kind, data = got
                if kind == "params":
                    job.run.params = {k: torch.from_numpy(v) for k, v in data.items()}
                    if self.presets is not None:
                        job.preset, why = self.presets.add(job.id, job.run)
                        if why:
                            job.message = f"not served as a preset: {why}"
                    return
                if kind == "failed":
                    job.message = data["message"]
                    return
                if kind == "end":
                    ended = data
                    continue
                job.run.apply(kind, data)
                job.events.append((kind, {k: v for k, v in data.items() if k != "weights"}))
        finally:
            if ended is not None:
                job.run.apply("end", ended)
                job.events.append(("end", ended))
                job.finished = time.time()
                if ended["status"] == "cancelled" and not job.message:
                    job.message = "stopped"

    def _next(self, job: Job, conn: Any) -> tuple[str, dict[str, Any]] | None:
        """The child's next message (None: it closed the pipe); the wall-time bound is checked while waiting."""
        while True:
            if not conn.poll(0.5):
                if job.started is not None and time.time() - job.started > self.max_wall_s and not job.cancel.is_set():
                    job.message = f"stopped at the server's limit of {self.max_wall_s:g} s (TRAIN_MAX_WALL_S)"
                    job.cancel.set()
                continue
            try:
                got: tuple[str, dict[str, Any]] = conn.recv()
            except EOFError:
                return None
            return got

    def _end(self, job: Job, status: str, message: str) -> None:
        job.run.status, job.message = status, message
        job.finished = time.time()
        job.events.append(("end", {"status": status, "step": job.run.step, "message": message}))

    def stop(self, job: Job) -> None:
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

    def export_zip(self, job: Job) -> bytes:
        """The run as a Hugging Face directory (config.json, model.safetensors, tokenizer.json), zipped."""
        buf = io.BytesIO()
        with tempfile.TemporaryDirectory() as tmp:
            path = export(job.run, Path(tmp) / job.id)
            with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
                for f in sorted(path.iterdir()):
                    z.write(f, f"train-{job.id}/{f.name}")
        return buf.getvalue()
