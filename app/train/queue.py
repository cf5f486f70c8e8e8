"""Training runs through a job queue (`serve --redis URL`): reachable from every web worker, trained by queue workers
(`attention-lab worker --redis URL`) on any machine that reaches Redis.

The queue is Dramatiq's Redis broker (docs/serving.md says why): a message per run, naming only the run's id, JSON
(Dramatiq's JSONEncoder, set explicitly: a payload that is not JSON — a pickle put into Redis by hand — fails to
decode and is never unpickled), acknowledged when the job ends; a worker's unacknowledged message is handed to
another only after its heartbeats stop. Everything else about a run is ours, in Redis, read by every web worker:

    lab:train:run:<id>          hash: config, labels, probe (JSON), status, message, preset, step, events (count),
                                client, created/started/finished, owner and lease (the queue worker running it)
    lab:train:run:<id>:events   stream: event n has the id 0-n (so an SSE `Last-Event-ID: n` resumes at XRANGE
                                0-(n+1)), fields k (kind) and d (JSON data, a snapshot with its weights)
    lab:train:run:<id>:weights  the trained weights, safetensors, stored once; each web worker loads them on first use
    lab:train:runs              zset of the kept runs by creation (TRAIN_MAX_KEPT: the oldest finished dropped)
    lab:train:live              set of the queued and running runs (TRAIN_MAX_RUNNING + TRAIN_MAX_QUEUED: 503)
    lab:train:client:<address>  set of one address's live runs (TRAIN_MAX_PER_CLIENT: 503)
    lab:train:log               stream of runs finished and dropped: each web worker follows it to serve or drop
                                their presets

Every change is one Lua script (start, claim, append, renew, finish, reap), so two web workers never admit past the
caps, and a worker that lost its run (its lease expired and the run was reported failed) writes nothing more. A
running run's owner renews its lease every POLL_S; a run whose lease ran out (`TRAIN_LEASE_S`, on Redis's clock) is
reported failed by whoever looks first: any web worker reading it, any queue worker's reaper, the next start."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import signal
import socket
import tempfile
import threading
import time
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from engine.train import Run

from ..lab import jobs as J
from ..lab.cancel import Cancelled
from ..lab.jobs import JOB_ACTOR, JOBS_QUEUE, NAMESPACE, TRAIN_QUEUE, make_broker
from ..lab.progress import JOB_PROGRESS
from ..lab.redis_io import CLAIM, LUA_LEASES, LUA_NOW, as_str, as_strs, async_client, queue_message
from . import arch
from .runs import POLL_S, Busy, Job, per_client_busy, supervise

if TYPE_CHECKING:
    import redis

    from ..settings import Settings
    from .presets import Presets

LOG = logging.getLogger("attention_lab.train")
QUEUE = TRAIN_QUEUE  # Dramatiq's keys (NAMESPACE): lab:queue:train (message ids), lab:queue:train.msgs (id -> JSON)
ACTOR = "train_run"
PREFIX = "lab:train:"
RUNS = PREFIX + "runs"
LIVE = PREFIX + "live"
RUN_LOG = PREFIX + "log"
LIVE_STATUSES = ("queued", "running")
WORKERS = J.WORKERS  # zset: queue worker -> its last beat (its reaper's, every second; not Dramatiq's, which
# the web workers' own broker, enqueueing, writes to as well)
IDLE_POLL_MS = 100  # the longest an idle queue worker takes to see a message (Dramatiq's worker_timeout)
NO_WORKER_S = 5.0  # a run queued this long, with no queue worker heard from, says so


def run_key(run_id: str, suffix: str = "") -> str:
    return f"{PREFIX}run:{run_id}{suffix}"


# What every script below begins with (`lua`): the time on Redis's clock (one clock for every machine), its run's
# keys built from its id (one Redis, as the rooms use; not a cluster), a run's end, the leases' scripts.
LUA_KEYS = f"""{LUA_NOW}
local function key(id) return '{PREFIX}run:' .. id end
local function finish(id, status, message, data, preset)
  local h = key(id)
  local n = redis.call('HINCRBY', h, 'events', 1)
  redis.call('XADD', h .. ':events', '0-' .. n, 'k', 'end', 'd', data)
  redis.call('HSET', h, 'status', status, 'message', message, 'finished', now(), 'preset', preset)
  redis.call('SREM', '{LIVE}', id)
  redis.call('SREM', '{PREFIX}client:' .. (redis.call('HGET', h, 'client') or ''), id)
  redis.call('XADD', '{RUN_LOG}', 'MAXLEN', '~', '1000', '*', 'finished', id)
  return n
end
{LUA_LEASES}"""

# ARGV: id, cap, per-client cap (0: none), client, then the hash's field/value pairs. 1, 0 (full), -1 (the client's).
START = f"""
local id, cap, mine = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local ckey = '{PREFIX}client:' .. ARGV[4]
if redis.call('SCARD', '{LIVE}') >= cap then return 0 end
if mine > 0 and redis.call('SCARD', ckey) >= mine then return -1 end
redis.call('HSET', key(id), unpack(ARGV, 5))
redis.call('HSET', key(id), 'created', now())
redis.call('SADD', '{LIVE}', id)
redis.call('SADD', ckey, id)
redis.call('ZADD', '{RUNS}', now(), id)
return 1
"""

# ARGV: id, owner, kind, data, step ('' : none). The event's number, or 0: the run is no longer this worker's.
APPEND = """
if not holds(ARGV[1], ARGV[2]) then return 0 end
local h = key(ARGV[1])
local n = redis.call('HINCRBY', h, 'events', 1)
redis.call('XADD', h .. ':events', '0-' .. n, 'k', ARGV[3], 'd', ARGV[4])
if ARGV[5] ~= '' then redis.call('HSET', h, 'step', ARGV[5]) end
return n
"""

# ARGV: id, owner, lease seconds. 1: stop it (asked for), 0: go on, -1: the run is no longer this worker's.
RENEW = """
if not holds(ARGV[1], ARGV[2]) then return -1 end
redis.call('HSET', key(ARGV[1]), 'lease', now() + tonumber(ARGV[3]))
return tonumber(redis.call('HGET', key(ARGV[1]), 'cancel') or '0')
"""

# ARGV: id, the status it must have, owner ('': any), status, message, end data (JSON), preset. The end event's
# number, or 0 (the run was not in that status, or not this owner's).
FINISH = """
local h = key(ARGV[1])
if redis.call('HGET', h, 'status') ~= ARGV[2] then return 0 end
if ARGV[3] ~= '' and redis.call('HGET', h, 'owner') ~= ARGV[3] then return 0 end
return finish(ARGV[1], ARGV[4], ARGV[5], ARGV[6], ARGV[7])
"""

# ARGV: the message. Every running run whose lease ran out ends failed; ids of runs gone leave the live set.
REAP = f"""
return reap('{LIVE}', function(id)
  local step = redis.call('HGET', key(id), 'step') or '0'
  finish(id, 'failed', ARGV[1], '{{"status":"failed","step":' .. step .. ',"message":"' .. ARGV[1] .. '"}}', '')
end)
"""


def lua(script: str) -> str:
    return LUA_KEYS + script


def lost_message(lease_s: float) -> str:
    """What a run whose worker died says."""
    return J.lost_message(lease_s, "training it", "the run is lost, start it again")


def load_weights(blob: bytes) -> dict[str, Any]:
    from safetensors.torch import load

    return load(blob)


def run_of(meta: dict[str, str]) -> arch.AnyRun:
    """A run's numbers as its hash has them, before its events: config, labels, probe, status."""
    return arch.run_of(orjson.loads(meta["config"]), orjson.loads(meta["labels"]), orjson.loads(meta["probe"]),
                       meta["status"])  # fmt: skip


# -- the web side -------------------------------------------------------------------------------------------------
class RedisRuns:
    """The runs as every web worker sees them: each kept in Redis and mirrored here (a `Job` brought up to date from
    its hash and event stream on every read), trained by whichever queue worker takes it."""

    def __init__(self, url: str, settings: Settings, presets: Presets | None = None) -> None:
        s = settings
        self.max_running, self.max_queued, self.max_kept = s.train_max_running, s.train_max_queued, s.train_max_kept
        self.max_wall_s, self.max_per_client, self.presets = s.train_max_wall_s, s.train_max_per_client, presets
        self.lease_s = s.train_lease_s
        self.url = url
        self.redis = async_client(url)
        self._start, self._finish = self.redis.register_script(lua(START)), self.redis.register_script(lua(FINISH))
        self._reap = self.redis.register_script(lua(REAP))
        self.jobs: dict[str, Job] = {}  # mirrors, by id
        self._broker: Any = None
        self._log_id = "0-0"  # how far this worker has followed lab:train:log
        self._log_lock = asyncio.Lock()
        self._serve_lock = asyncio.Lock()
        self._loaded: set[str] = set()  # presets this worker serves

    def _enqueue(self, run_id: str) -> None:
        if self._broker is None:
            self._broker = make_broker(self.url)
        self._broker.enqueue(queue_message(QUEUE, ACTOR, run_id))

    async def start(self, config: arch.AnyConfig, text: str | None = None, client: str = "",
                    stop_hash: str = "") -> Job:  # fmt: skip
        """Queue a run in Redis, with its stop token's hash (every web worker checks a stop against it)."""
        new = arch.new_run(config, "queued", text)  # the task's own errors (a text too short) before it is queued
        if text is not None:
            raise ValueError("a queued run trains on its task's own data")
        await self.reap()
        run_id = secrets.token_urlsafe(8)
        fields: dict[str, bytes | str | int | float] = {"config": orjson.dumps(asdict(config)), "labels": orjson.dumps(new.labels),
                  "probe": orjson.dumps(new.probe), "status": "queued", "message": "", "preset": "",
                  "events": 0, "step": 0, "client": client, "max_wall_s": self.max_wall_s,
                  "stop_hash": stop_hash}  # fmt: skip
        flat: list[bytes | str | int | float] = [x for kv in fields.items() for x in kv]
        got = int(await self._start(args=[run_id, self.max_running + self.max_queued, self.max_per_client, client,
                                          *flat]))  # fmt: skip
        if got == 0:
            raise Busy(30)
        if got < 0:
            raise per_client_busy(self.max_per_client)
        try:
            await asyncio.to_thread(self._enqueue, run_id)
        except Exception as e:
            await self._end(run_id, "queued", "failed", f"not queued: {type(e).__name__}: {e}")
            raise
        await self._drop_old()
        job = await self.get(run_id)
        assert job is not None
        return job

    async def _end(self, run_id: str, expected: str, status: str, message: str, step: int = 0) -> int:
        data = orjson.dumps({"status": status, "step": step, "message": message})
        return int(await self._finish(args=[run_id, expected, "", status, message, data, ""]))

    async def reap(self) -> int:
        """Every running run whose queue worker stopped renewing its lease: failed, with a message."""
        return int(await self._reap(args=[lost_message(self.lease_s)]))

    async def _drop_old(self) -> None:
        ids = [as_str(i) for i in await self.redis.zrange(RUNS, 0, -1)]
        if len(ids) <= self.max_kept:
            return
        async with self.redis.pipeline(transaction=False) as p:
            for run_id in ids:
                p.hget(run_key(run_id), "status")
            statuses = await p.execute()
        finished = [i for i, st in zip(ids, statuses, strict=True) if st is None or as_str(st) not in LIVE_STATUSES]
        for run_id in finished[: len(ids) - self.max_kept]:
            async with self.redis.pipeline(transaction=True) as p:
                p.delete(run_key(run_id), run_key(run_id, ":events"), run_key(run_id, ":weights"))
                p.zrem(RUNS, run_id)
                p.xadd(RUN_LOG, {"dropped": run_id}, maxlen=1000, approximate=True)
                await p.execute()
        await self.catch_up()

    async def get(self, run_id: str) -> Job | None:
        """The run brought up to date (None: no such run kept). A running one whose lease ran out ends failed."""
        job = self.jobs.get(run_id)
        seen = len(job.events) if job else 0
        async with self.redis.pipeline(transaction=True) as p:
            p.hgetall(run_key(run_id))
            p.xrange(run_key(run_id, ":events"), f"0-{seen + 1}", "+")
            raw, events = await p.execute()
        if not raw:
            self.jobs.pop(run_id, None)
            return None
        meta = as_strs(raw)
        if meta["status"] == "running" and float(meta.get("lease") or 0) < time.time() + 1 and await self.reap():
            return await self.get(run_id)  # reported failed just now: read again, with its end
        if job is None:
            job = self.jobs[run_id] = Job(run_id, run_of(meta), created=float(meta.get("created") or time.time()))
        for _, fields in events:
            job.record(as_str(fields[b"k"]), orjson.loads(fields[b"d"]))
        job.run.status, job.message = meta["status"], meta.get("message", "")
        job.started = float(meta["started"]) if meta.get("started") else None
        job.finished = float(meta["finished"]) if meta.get("finished") else None
        job.preset = meta.get("preset") or None
        job.stop_hash = meta.get("stop_hash", "")
        waited = job.status == "queued" and not job.message and time.time() - job.created > NO_WORKER_S
        if waited and not await self.redis.zcount(WORKERS, time.time() - 60, "+inf"):  # no queue worker beat (each
            # beats every second in lab:train:workers, on its own clock) for a minute
            job.message = "waiting for a queue worker: none is running (start `attention-lab worker --redis URL`)"
        if not job.live and (job.preset or arch.is_encdec(job.run.config)) and not job.run.params:
            await self.weights(job)  # an encoder–decoder is no preset, but its state says whether it exports
        if job.preset and job.preset not in self._loaded:
            await self._serve(run_id)
        return job

    async def all(self) -> list[Job]:
        ids = [as_str(i) for i in await self.redis.zrange(RUNS, 0, -1)]
        for gone in set(self.jobs) - set(ids):
            self.jobs.pop(gone, None)
        jobs = [await self.get(run_id) for run_id in ids]
        return [j for j in jobs if j is not None]

    async def wait(self, job: Job, seen: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if await self.get(job.id) is None or len(job.events) > seen:
                return
            await asyncio.sleep(0.2)

    async def stop(self, job: Job) -> None:
        """A queued run ends now ("stopped before it started"); a running one at its next step (its worker sees the
        flag within POLL_S)."""
        if job.status == "queued" and await self._end(job.id, "queued", "cancelled", "stopped before it started"):
            await self.get(job.id)
            return
        await self.redis.hset(run_key(job.id), "cancel", "1")
        await self.get(job.id)

    def stop_all(self) -> None:
        """The web server stops: the runs go on in the queue workers (any other web worker serves them)."""

    def close(self, timeout: float = 20.0) -> None:
        """As `stop_all`: nothing of a run is in this process."""

    async def aclose(self) -> None:
        await self.redis.aclose()
        await self.redis.connection_pool.disconnect()
        if self._broker is not None:
            self._broker.close()
        lab = self.presets.lab if self.presets is not None else None
        if lab is not None and lab.jobs is not None:  # the lab's heavy jobs' connections, closed with the runs'
            await lab.jobs.aclose()

    async def weights(self, job: Job) -> bool:
        if job.run.params:
            return True
        blob: Any = await self.redis.get(run_key(job.id, ":weights"))
        if blob is None:
            return False
        job.run.params = await asyncio.to_thread(load_weights, bytes(blob))
        return True

    async def _serve(self, run_id: str) -> None:
        """Serve the finished run as a preset of this worker (its weights from Redis), if it is not yet: one at a
        time (a request's read and the background catch-up may both get here for the same run)."""
        job = self.jobs.get(run_id)
        if self.presets is None or job is None or not job.preset or job.preset in self._loaded:
            return
        async with self._serve_lock:
            if job.preset in self._loaded or not await self.weights(job):
                return
            if job.preset not in self.presets.lab.models and job.preset not in self.presets.encdec:
                name, why = await asyncio.to_thread(self.presets.add, run_id, job.run)
                if name is None:
                    LOG.warning("attention-lab: run %s is not served here: %s", run_id, why)
                    return
            self._loaded.add(job.preset)

    async def catch_up(self) -> None:
        """Follow lab:train:log: serve the runs finished since, drop the presets of the runs dropped (by any worker)."""
        if self.presets is None:
            return
        async with self._log_lock:
            while True:
                got: Any = await self.redis.xread({RUN_LOG: self._log_id}, count=100)
                if not got:
                    return
                entries: list[tuple[bytes, dict[bytes, bytes]]] = got[0][1]
                for entry_id, fields in entries:
                    self._log_id = as_str(entry_id)
                    if b"finished" in fields:
                        await self.get(as_str(fields[b"finished"]))  # serves its preset, when it has one
                    elif b"dropped" in fields:
                        run_id = as_str(fields[b"dropped"])
                        self.jobs.pop(run_id, None)
                        name = f"train-{run_id}"
                        if name in self._loaded:
                            self._loaded.discard(name)
                            self.presets.remove(name)


class CatchUp:
    """Keeps this web worker's presets in step with the runs of every worker: each request starts a catch-up (one
    XREAD of lab:train:log, then the finished runs served as presets and the dropped ones dropped) unless one is under
    way, in the background: a request waits for it only when it could name a run's preset (`train-` in its query, a
    body: any POST, or the list of models), so a page that names none never waits on a run's weights being loaded.
    None for static files, /healthz and /metrics. While Redis does not answer, requests are served as this worker
    knows the runs, and it asks again at most once a second."""

    SKIP = ("/static/", "/vendor/", "/healthz", "/metrics", "/favicon")
    LISTS = ("/api/v1/models", "/models", "/api/v1/presets")
    RETRY_S = 1.0

    def __init__(self, app: Any, runs: RedisRuns) -> None:
        self.app, self.runs = app, runs
        self._quiet_until = 0.0
        self._task: asyncio.Task[None] | None = None

    def _needs(self, scope: Any) -> bool:
        return (scope["method"] not in ("GET", "HEAD") or b"train-" in scope.get("query_string", b"")
                or scope["path"] in self.LISTS)  # fmt: skip

    def _done(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and (e := task.exception()) is not None:  # Redis away: not again for a second
            self._quiet_until = time.monotonic() + self.RETRY_S
            LOG.warning("training runs: Redis did not answer (%s: %s)", type(e).__name__, e)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and not scope["path"].startswith(self.SKIP):
            task, loop = self._task, asyncio.get_running_loop()
            if (task is None or task.done() or task.get_loop() is not loop) and time.monotonic() >= self._quiet_until:
                task = self._task = loop.create_task(self.runs.catch_up())
                task.add_done_callback(self._done)
            if task is not None and task.get_loop() is loop and self._needs(scope):
                with contextlib.suppress(Exception):  # said by _done; the request is served as this worker knows
                    await asyncio.shield(task)
        await self.app(scope, receive, send)


# -- the queue worker ---------------------------------------------------------------------------------------------
class RedisSink:
    """A run supervised by a queue worker: its events, weights and end into Redis, its lease renewed."""

    def __init__(self, r: redis.Redis, scripts: dict[str, Any], run_id: str, owner: str, lease_s: float,
                 max_model_mb: float, stopping: threading.Event) -> None:  # fmt: skip
        self.r, self.scripts, self.id, self.owner, self.lease_s = r, scripts, run_id, owner, lease_s
        self.max_model_mb, self.stopping = max_model_mb, stopping
        self.message, self.preset, self.step, self.lost, self.asked = "", "", 0, False, False
        self._done = threading.Event()
        # The lease is renewed by a thread of its own, every POLL_S: whatever the supervisor is doing (checking the
        # weights takes seconds on a busy machine), a live worker never lets it run out.
        self._beat = threading.Thread(target=self._heartbeat, name=f"lease-{run_id}", daemon=True)
        self._beat.start()

    def _heartbeat(self) -> None:
        while not self._done.wait(POLL_S):
            try:
                got = int(self.scripts["renew"](args=[self.id, self.owner, self.lease_s]))
            except Exception as e:  # Redis away a moment: try again; past the lease the run is reported failed
                LOG.warning("run %s: lease not renewed (%s: %s)", self.id, type(e).__name__, e)
                continue
            if got < 0:
                self.lost = True
                return
            self.asked = got == 1

    def close(self) -> None:
        self._done.set()
        self._beat.join(5)

    def event(self, kind: str, data: dict[str, Any]) -> None:
        if kind == "step":
            self.step = data["step"]
        step = str(data["step"]) if kind == "step" else ""
        if not int(self.scripts["append"](args=[self.id, self.owner, kind, orjson.dumps(data), step])):
            self.lost = True  # reported failed (or stopped) meanwhile: the next poll stops the run

    def weights(self, params: dict[str, Any]) -> None:
        """Stored once, as safetensors; served as a preset if it loads as `serve --model` would load its export."""
        import torch
        from safetensors.torch import save

        from engine.encdec_train import export as export_encdec
        from engine.encdec_train import load_export
        from engine.models import ModelError, load
        from engine.train import export

        run = run_of(as_strs(self.r.hgetall(run_key(self.id))))
        run.params = {k: torch.from_numpy(v) for k, v in params.items()}
        self.r.set(run_key(self.id, ":weights"), save({k: v.contiguous() for k, v in run.params.items()}))
        name = f"train-{self.id}"
        with tempfile.TemporaryDirectory() as tmp:
            try:
                if isinstance(run, Run):
                    load(export(run, Path(tmp) / name), name, self.max_model_mb)
                else:  # an encoder–decoder: its export read back as every web worker will (app/train/presets.py)
                    load_export(export_encdec(run, Path(tmp) / name), self.max_model_mb)
                self.preset = name
            except (ModelError, ValueError, OSError) as e:
                self.message = f"not served as a preset: {e}"

    def note(self, message: str) -> None:
        self.message = message

    def end(self, data: dict[str, Any]) -> None:
        message = self.message or ("stopped" if data["status"] == "cancelled" else "")
        end = orjson.dumps({**data, "message": message})  # the same end event as every other (`Job.record`'s)
        self.scripts["finish"](args=[self.id, "running", self.owner, data["status"], message, end, self.preset])

    def died(self, message: str) -> None:
        message = self.message or message
        data = orjson.dumps({"status": "failed", "step": self.step, "message": message})
        self.scripts["finish"](args=[self.id, "running", self.owner, "failed", message, data, ""])

    def poll(self) -> bool:
        if self.stopping.is_set():
            self.message = self.message or "stopped: its queue worker was shut down"
            return True
        return self.asked or self.lost


class JobSink:
    """A heavy job computed by a queue worker: its lease renewed and its progress written every LEASE_EVERY_S by a
    thread of its own (the computation only notes its latest count), its end written once."""

    def __init__(self, scripts: dict[str, Any], jid: str, owner: str, lease_s: float) -> None:
        self.scripts, self.id, self.owner, self.lease_s = scripts, jid, owner, lease_s
        self.done, self.total = 0, 0
        self._stop = threading.Event()
        self._beat = threading.Thread(target=self._heartbeat, name=f"job-{jid[:8]}", daemon=True)
        self._beat.start()

    def progress(self, done: int, total: int) -> None:
        self.done, self.total = done, total

    def _heartbeat(self) -> None:
        while not self._stop.wait(J.LEASE_EVERY_S):
            with contextlib.suppress(Exception):  # Redis away a moment: past the lease the job is reported failed
                self.scripts["job_renew"](args=[self.id, self.owner, self.lease_s, self.done, self.total])

    def end(self, status: str, field: str, value: bytes | str) -> None:
        self._stop.set()
        self._beat.join(5)
        self.scripts["job_finish"](args=[self.id, self.owner, status, field, value, J.RESULT_TTL_S])


class QueueWorker:
    """`attention-lab worker`: Dramatiq worker threads, each supervising one run or computing one heavy job at a time
    (app/lab/jobs.py: the kinds its modules declared), and a reaper."""

    def __init__(self, url: str, concurrency: int, settings: Settings) -> None:
        import redis as syncredis

        self.url, self.concurrency, self.settings = url, concurrency, settings
        self.r = syncredis.Redis.from_url(url, socket_timeout=10, socket_connect_timeout=5)
        self.scripts = {name: self.r.register_script(lua(src))
                        for name, src in (("claim", CLAIM), ("append", APPEND), ("renew", RENEW), ("finish", FINISH),
                                          ("reap", REAP))}  # fmt: skip
        for name, src in (("claim", CLAIM), ("renew", J.RENEW), ("finish", J.FINISH), ("reap", J.REAP)):
            self.scripts[f"job_{name}"] = self.r.register_script(J.lua(src))
        self.stopping = threading.Event()
        self.name = f"{socket.gethostname()}:{os.getpid()}"
        self._lab: Any = None  # the lab heavy jobs are computed in, made on the first
        self._lab_lock = threading.Lock()

    def lab(self) -> Any:
        """This worker's lab (its own models, caches and memory budget, as a web worker's), made once."""
        with self._lab_lock:
            if self._lab is None:
                from ..lab import Lab

                lab = Lab(self.settings)
                lab.jobs = None  # computes here: a queue worker's job is no job of the queue again
                from engine import TraceCache

                from .presets import Presets

                self._presets = Presets(lab, TraceCache(2**20), self.settings.max_model_mb)  # runs named by jobs
                self._lab = lab
            return self._lab

    def _serve_run(self, lab: Any, preset: str) -> None:
        """A finished training run named as a job's preset (`train-<id>`): served by this worker's lab from the run's
        weights in Redis, as a web worker serves it (a 422 naming `preset` when there is no such run)."""
        if not preset.startswith("train-") or preset in lab.models:
            return
        run_id = preset.removeprefix("train-")
        blob = self.r.get(run_key(run_id, ":weights"))
        raw = self.r.hgetall(run_key(run_id))
        if blob is None or not raw:
            return
        run = run_of(as_strs(raw))
        if not isinstance(run, Run):
            return
        run.params = load_weights(bytes(blob))  # type: ignore[arg-type]
        with self._lab_lock:
            if preset not in lab.models:
                self._presets.add(run_id, run)

    def job(self, jid: str) -> None:
        """The heavy jobs' actor: claim the job (only a queued one), compute it with its kind's own `here` in this
        worker's lab, write its result (JSON), a field's error (a 422 for its client) or its failure."""
        owner = f"{self.name}:{secrets.token_hex(4)}"
        lease = self.settings.train_lease_s
        if not int(self.scripts["job_claim"](args=[jid, owner, lease])):
            return
        meta = as_strs(self.r.hgetall(J.job_key(jid)))
        sink = JobSink(self.scripts, jid, owner, lease)
        LOG.info("job %s: %s (%s)", jid[:12], meta.get("kind"), owner)
        try:
            from ..web.view import plain

            kind = J.KINDS.get(meta.get("kind", ""))
            if kind is None:
                raise ValueError(f"no job kind {meta.get('kind')!r} in this worker")
            req = kind.request.model_validate(orjson.loads(meta["request"]))
            lab = self.lab()
            self._serve_run(lab, str(getattr(req, "preset", "")))
            token = JOB_PROGRESS.set(sink.progress)
            try:
                result: Any = asyncio.run(kind.here(req, lab, None))
            finally:
                JOB_PROGRESS.reset(token)
            sink.end("done", "result", orjson.dumps(plain(result)))
        except Exception as e:  # reported, never left running
            error = J.error_of(e)
            if isinstance(e, Cancelled):  # this worker is shutting down (SIGTERM): asked again, another computes it
                sink.end("failed", "message", "its queue worker was shut down mid-computation; ask again")
            elif error is not None:
                sink.end("done", "error", orjson.dumps(error))
            else:
                LOG.exception("job %s failed", jid[:12])
                sink.end("failed", "message", f"the queue worker failed to compute it: {type(e).__name__}: {e}")
        LOG.info("job %s: ended", jid[:12])

    def train(self, run_id: str) -> None:
        """The actor: claim the run (only a queued one: one stopped, failed or taken is left alone), supervise it."""
        owner = f"{self.name}:{secrets.token_hex(4)}"
        lease = self.settings.train_lease_s
        if not int(self.scripts["claim"](args=[run_id, owner, lease])):
            return
        meta = as_strs(self.r.hgetall(run_key(run_id)))
        LOG.info("run %s: training (%s)", run_id, owner)
        sink = RedisSink(self.r, self.scripts, run_id, owner, lease, self.settings.max_model_mb, self.stopping)
        try:
            supervise(orjson.loads(meta["config"]), sink, float(meta.get("max_wall_s") or 300))
        except Exception as e:  # reported, never left running
            sink.died(f"{type(e).__name__}: {e}")
        finally:
            sink.close()
        LOG.info("run %s: ended", run_id)

    def _reaper(self) -> None:
        message = lost_message(self.settings.train_lease_s)
        while True:  # beats at once (the web workers queue jobs only once a worker has beaten), then every second
            with contextlib.suppress(Exception):
                self.r.zadd(WORKERS, {self.name: time.time()})
                self.r.zremrangebyscore(WORKERS, "-inf", time.time() - 3600)
                if n := int(self.scripts["reap"](args=[message])):
                    LOG.warning("%d run(s) lost their queue worker: reported failed", n)
                if n := int(self.scripts["job_reap"](args=[J.lost_message(self.settings.train_lease_s),
                                                           J.RESULT_TTL_S])):  # fmt: skip
                    LOG.warning("%d job(s) lost their queue worker: reported failed", n)
            if self.stopping.wait(1.0):
                return

    def run(self) -> int:
        import dramatiq

        broker = make_broker(self.url)
        dramatiq.Actor(self.train, broker=broker, actor_name=ACTOR, queue_name=QUEUE, priority=0, options={})
        dramatiq.Actor(self.job, broker=broker, actor_name=JOB_ACTOR, queue_name=JOBS_QUEUE, priority=0, options={})
        # An idle consumer polls its queue with a backoff up to `worker_timeout`: Dramatiq's 1 s default held a job or
        # a run queued on an idle worker up to a second (half a second on average) before it began; 0.1 s costs Redis
        # ten cheap fetches a second per queue, and stops the worker sooner on SIGTERM.
        worker = dramatiq.Worker(broker, queues={QUEUE, JOBS_QUEUE}, worker_threads=self.concurrency,
                                 worker_timeout=IDLE_POLL_MS)  # fmt: skip
        worker.queue_prefetch = self.concurrency  # hold no run that no thread of this worker is free to train
        done = threading.Event()

        def stop(signum: int, frame: Any) -> None:
            done.set()

        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, stop)
        threading.Thread(target=self._reaper, name="reaper", daemon=True).start()
        worker.start()
        LOG.info("attention-lab worker %s: %d run(s) at once from %s", self.name, self.concurrency, NAMESPACE)
        done.wait()
        self.stopping.set()  # the runs in hand end at their next step, reported as stopped
        if self._lab is not None:
            self._lab.stop()  # and the jobs in hand at theirs, reported failed (asking again computes them again)
        worker.stop(timeout=15_000)
        broker.close()
        return 0
