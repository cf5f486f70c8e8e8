"""Heavy computations as jobs of the queue (`serve --redis URL`): the pruning curve, the patching grid and the head
ranking, each declared once by its feature as a `JobKind` (its name, its request's and its result's types, and how it
is computed here, `here`), and asked for through `Lab.job`, the one place that decides: without Redis, `here` in this
process exactly as before; with it, a job of the queue that any `attention-lab worker` takes (app/train/queue.py
`QueueWorker.job` runs the same `here` in a lab of its own), its state, progress and result in Redis for every web
worker:

    lab:job:<id>      hash: kind, request (JSON), status (queued, running, done, failed), done and total (progress),
                      result (JSON, pydantic's) or error (a field's 422, JSON), message (why it failed), client,
                      owner and lease (the queue worker computing it), created/started/finished
    lab:jobs:live     set of the queued and running jobs (MAX_LARGE_CONCURRENT + MAX_LARGE_QUEUED of them in all,
                      across every web worker: past that, 503 with Retry-After)

A job's id is a hash of its kind and its request (JSON, keys sorted): the same computation asked for on any web worker
is one job, computed once, and its result stays in Redis for RESULT_TTL_S for everyone. Its message on the queue names
only that id (Dramatiq's JSON encoder: a pickled payload is refused as it is read, never unpickled); its request is
JSON, validated again by the worker as any request is. A worker renews its lease every POLL_S; a running job whose
lease ran out (TRAIN_LEASE_S: one lease for every job of the queue, on Redis's clock) ends failed with a message,
reported by whoever looks first (a web worker waiting for it, any queue worker's reaper), and asking again computes
it again. While no queue worker has been heard from for a minute, a web worker computes here, as without Redis."""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import orjson
from redis.exceptions import RedisError
from starlette.exceptions import HTTPException

from engine.budget import Busy

from .cancel import Cancelled
from .redis_io import LUA_LEASES, LUA_NOW, as_str, async_client, queue_message

if TYPE_CHECKING:
    import dramatiq
    from pydantic import BaseModel

    from ..settings import Settings
    from .service import Lab

R = TypeVar("R")
NAMESPACE = "lab:queue"  # Dramatiq's keys: lab:queue:<queue> (message ids), lab:queue:<queue>.msgs (id -> JSON)
TRAIN_QUEUE, JOBS_QUEUE = "train", "jobs"
JOB_ACTOR = "heavy_job"
PREFIX = "lab:job:"
LIVE = "lab:jobs:live"
WORKERS = "lab:train:workers"  # zset: queue worker -> its last beat (every second, app/train/queue.py)
RESULT_TTL_S = 600  # a finished job's result (or failure) stays this long for every web worker
LIVE_TTL_S = 6 * 3600  # a queued or running job's hash, should every worker and reaper be gone
POLL_S = 0.1  # a web worker's look at a job it waits for
LEASE_EVERY_S = 0.5  # a queue worker renews its job's lease (and writes its progress) this often


@dataclass(frozen=True)
class JobKind(Generic[R]):
    """One kind of heavy computation: its request (a pydantic model, JSON on the wire), its result (a dataclass,
    written on the wire and read back by pydantic: app/web/view.py `plain`, `read`), and `here(req, lab,
    progress_key)`, how it is computed in a lab: a web worker's without Redis, a queue worker's with it."""

    name: str
    request: type[BaseModel]
    result: type[R]
    here: Callable[[Any, Lab, str | None], Coroutine[Any, Any, R]]
    unit: str = "layers"


KINDS: dict[str, JobKind[Any]] = {}


def job_kind(name: str, request: type[BaseModel], result: type[R],
             unit: str = "layers") -> Callable[[Callable[[Any, Lab, str | None], Coroutine[Any, Any, R]]], JobKind[R]]:  # fmt: skip
    """Declares `here` as the job kind `name` (known to every queue worker that imports its module)."""

    def register(here: Callable[[Any, Lab, str | None], Coroutine[Any, Any, R]]) -> JobKind[R]:
        kind = JobKind(name, request, result, here, unit)
        KINDS[name] = kind
        return kind

    return register


def job_key(jid: str) -> str:
    return PREFIX + jid


def make_broker(url: str) -> dramatiq.Broker:
    """Dramatiq's Redis broker on `url`, JSON only, with no middleware of Dramatiq's own (no retries: a failed job is
    reported, not run again behind the client's back; no time limit: TRAIN_MAX_WALL_S bounds a run)."""
    import dramatiq
    from dramatiq.brokers.redis import RedisBroker

    dramatiq.set_encoder(dramatiq.JSONEncoder())  # never PickleEncoder: Redis must not be a way to run code here
    broker = RedisBroker(url=url, namespace=NAMESPACE, middleware=[], heartbeat_timeout=30_000)
    broker.declare_queue(TRAIN_QUEUE)
    broker.declare_queue(JOBS_QUEUE)
    return broker


def lost_message(lease_s: float, doing: str = "computing it", then: str = "ask again to compute it again") -> str:
    """What a job (or a run: `doing`, `then`) whose worker died says (JSON-safe: no quotes, no backslashes)."""
    return f"the queue worker {doing} stopped answering: no heartbeat for {lease_s:g} s (TRAIN_LEASE_S); {then}"


LUA = f"""{LUA_NOW}
local function key(id) return '{PREFIX}' .. id end
local function ended(id, status, field, value, ttl)
  redis.call('HSET', key(id), 'status', status, field, value, 'finished', now())
  redis.call('EXPIRE', key(id), ttl)
  redis.call('SREM', '{LIVE}', id)
end
{LUA_LEASES}"""

# ARGV: id, kind, request, client, cap, live TTL. 'new' (queue it), 'full', or the live or finished job's status.
SUBMIT = f"""
local id = ARGV[1]
local st = redis.call('HGET', key(id), 'status')
if st == 'queued' or st == 'running' or st == 'done' then return st end
if redis.call('SCARD', '{LIVE}') >= tonumber(ARGV[5]) then return 'full' end
redis.call('DEL', key(id))
redis.call('HSET', key(id), 'kind', ARGV[2], 'request', ARGV[3], 'status', 'queued', 'client', ARGV[4],
           'created', now(), 'done', 0, 'total', 0)
redis.call('EXPIRE', key(id), tonumber(ARGV[6]))
redis.call('SADD', '{LIVE}', id)
return 'new'
"""

# ARGV: id, owner, lease seconds, done, total. 1, or 0: the job is no longer this worker's.
RENEW = """
if not holds(ARGV[1], ARGV[2]) then return 0 end
redis.call('HSET', key(ARGV[1]), 'lease', now() + tonumber(ARGV[3]), 'done', ARGV[4], 'total', ARGV[5])
return 1
"""

# ARGV: id, owner, status, field, value, TTL. 1, or 0: the job is no longer this worker's (reported failed).
FINISH = """
if not holds(ARGV[1], ARGV[2]) then return 0 end
ended(ARGV[1], ARGV[3], ARGV[4], ARGV[5], tonumber(ARGV[6]))
return 1
"""

# ARGV: the message, TTL. Every running job whose lease ran out ends failed; ids of jobs gone leave the live set.
REAP = f"""
return reap('{LIVE}', function(id) ended(id, 'failed', 'message', ARGV[1], tonumber(ARGV[2])) end)
"""


def lua(script: str) -> str:
    return LUA + script


def raise_error(error: dict[str, Any]) -> None:
    """A job's error as the request's own: a field's 422 (FieldError), or the HTTP error the computation raised."""
    from ..schemas import FieldError

    if "field" in error:
        raise FieldError(error["field"], error["message"])
    raise HTTPException(int(error.get("status", 500)), error["message"])


def error_of(e: Exception) -> dict[str, Any] | None:
    """What a computation's error tells its client (None: a failure, not an answer)."""
    from ..schemas import FieldError

    if isinstance(e, FieldError):
        return {"field": e.field, "message": e.message}
    if isinstance(e, HTTPException) and e.status_code < 500:
        return {"status": e.status_code, "message": str(e.detail)}
    return None


class LoopRedis:
    """An async Redis client for the running event loop, made on first use there (an app served again, as a test's,
    runs in another loop, whose client is made anew), with its scripts registered."""

    def __init__(self, url: str, scripts: dict[str, str] | None = None) -> None:
        self.url, self.sources = url, scripts or {}
        self._client: Any = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.scripts: dict[str, Any] = {}

    def __call__(self) -> Any:
        loop = asyncio.get_running_loop()
        if self._client is None or self._loop is not loop:
            self._client, self._loop = async_client(self.url), loop
            self.scripts = {name: self._client.register_script(lua(src)) for name, src in self.sources.items()}
        return self._client

    def script(self, name: str) -> Any:
        self()
        return self.scripts[name]

    def add(self, name: str, source: str) -> None:
        """One more script (registered with the next client, and now if there is one)."""
        self.sources[name] = source
        if self._client is not None:
            self.scripts[name] = self._client.register_script(lua(source))

    async def aclose(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            await client.aclose()
            await client.connection_pool.disconnect()


class RedisJobs:
    """A web worker's side: each heavy computation submitted as a job (or joined, when the same one is queued, running
    or done), then waited for on the event loop, its progress reported under the request's key as in-process work's
    is, its result read back as the kind's result type."""

    def __init__(self, url: str, settings: Settings) -> None:
        self.url, self.settings = url, settings
        self.client = LoopRedis(url, {"submit": SUBMIT, "reap": REAP})  # the app's event loop's
        self.waiting: dict[str, int] = {}  # job id -> this worker's requests waiting for it
        self._broker: Any = None
        self._workers_seen = 0.0  # when a queue worker was last known to beat (monotonic)

    @property
    def redis(self) -> Any:
        return self.client()

    def _enqueue(self, jid: str) -> None:
        if self._broker is None:
            self._broker = make_broker(self.url)
        self._broker.enqueue(queue_message(JOBS_QUEUE, JOB_ACTOR, jid))

    async def workers(self) -> bool:
        """Whether a queue worker has beaten in the last minute (asked of Redis at most once a second while one has)."""
        if time.monotonic() - self._workers_seen < 1.0:
            return True
        if await self.redis.zcount(WORKERS, time.time() - 60, "+inf"):
            self._workers_seen = time.monotonic()
            return True
        return False

    async def reap(self) -> int:
        return int(await self.client.script("reap")(args=[lost_message(self.settings.train_lease_s), RESULT_TTL_S]))

    async def run(self, lab: Lab, kind: JobKind[R], req: BaseModel, key: str | None, client: str = "") -> R:
        try:
            queued = await self.workers()
        except RedisError:  # Redis away: computed here meanwhile
            queued = False
        if not queued:  # no queue worker: computed here, as without Redis
            return await kind.here(req, lab, key)
        request = req.model_dump(mode="json")
        blob = orjson.dumps({"kind": kind.name, "request": request}, option=orjson.OPT_SORT_KEYS)
        jid = hashlib.sha256(blob).hexdigest()[:32]  # the same computation asked for anywhere: one job
        r = self.redis
        cap = self.settings.max_large_concurrent + self.settings.max_large_queued
        args = [jid, kind.name, orjson.dumps(request), client, cap, LIVE_TTL_S]
        got = as_str(await self.client.script("submit")(args=args))
        if got == "full":
            raise Busy(0, lab.budget.limit, max(1, round(self.settings.queue_wait_s)))
        if got == "new":
            try:
                await asyncio.to_thread(self._enqueue, jid)
            except Exception:
                await r.srem(LIVE, jid)
                await r.delete(job_key(jid))
                raise
        return await self.wait(lab, kind, jid, key)

    async def wait(self, lab: Lab, kind: JobKind[R], jid: str, key: str | None) -> R:
        """The job's result once it is done: a field's error raised as the request's own (422), a failure as a 503 with
        Retry-After and its message (asking again computes it again); still queued after QUEUE_WAIT_S, a 503 with
        Retry-After (the job stays queued: asking again later finds it, or its result). A client gone stops the
        wait (the job goes on: its result is kept for whoever asks)."""
        self.waiting[jid] = self.waiting.get(jid, 0) + 1
        try:
            return await self._wait(lab, kind, jid, key)
        finally:
            self.waiting[jid] -= 1
            if not self.waiting[jid]:
                del self.waiting[jid]

    async def _wait(self, lab: Lab, kind: JobKind[R], jid: str, key: str | None) -> R:
        deadline = time.monotonic() + self.settings.queue_wait_s
        retry = max(1, round(self.settings.queue_wait_s))
        async with lab.watching(None) as watch:
            with lab.tracking(key, kind.unit) as update:
                seen = (-1, -1)
                while True:
                    if watch.left or lab.stopping:
                        raise Cancelled(lab.stopping)
                    fields = ("status", "done", "total", "result", "error", "message", "lease")
                    got = await self.redis.hmget(job_key(jid), *fields)
                    status, done, total, result, error, message, lease = (None if v is None else as_str(v) for v in got)
                    if status is None:
                        raise HTTPException(503, "the job was dropped before it ended; ask again",
                                            headers={"Retry-After": "1"})  # fmt: skip
                    if status == "done":
                        if error is not None:
                            raise_error(orjson.loads(error))
                        from ..web.view import read

                        value: R = read(kind.result, orjson.loads(result or "null"))
                        return value
                    if status == "failed":
                        raise HTTPException(503, message or "the job failed", headers={"Retry-After": "1"})
                    if status == "running":
                        count = (int(done or 0), int(total or 0))
                        if update is not None and count != seen:  # (its shared entry: one short SET, on a change)
                            update(*count)
                            seen = count
                        if float(lease or 0) < time.time() and await self.reap():
                            continue
                    elif time.monotonic() > deadline:
                        raise Busy(0, lab.budget.limit, retry)
                    await asyncio.sleep(POLL_S)

    async def aclose(self) -> None:
        await self.client.aclose()
        if self._broker is not None:
            self._broker.close()
