"""Heavy computations as jobs of the queue (`serve --redis`, app/lab/jobs.py), on a real redis-server, two web workers
(two apps, each with its own lab, sharing one Redis) and real `attention-lab worker` processes, on tiny decoders built
here: the pruning curve, a patching grid and the head ranking computed by a queue worker are the numbers the lab
computes in-process; either web worker answers from the one job; a field's error comes back as the request's own 422;
a queue worker killed mid-job fails it with a message within TRAIN_LEASE_S, and asking again computes it again. Every
wait polls for a state, with a deadline."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import pytest
import redis
from fastapi.testclient import TestClient

from app.lab.jobs import LIVE, PREFIX, WORKERS
from app.main import create_app
from app.settings import Settings
from tests.conftest import make_client
from tests.queue_worker import Shared, fresh
from tests.redis_server import available, redis_server

pytestmark = pytest.mark.skipif(not available(), reason="redis-server is not installed")
LEASE_S = 4.0
# The lease of the test that stops a queue worker: longer than every wait of that test, so that its clients hearing
# at all shows that the stop, not the lease running out, ended the job (no reading of the test machine's clock).
STOP_LEASE_S = 600.0
ROOT = Path(__file__).resolve().parents[3]
TEXT = "The cat sat on the mat. The dog sat on the log."
LIMITS = {"max_prune_tokens": 64, "max_patch_tokens": 12}


def until(what: str, check: Callable[[], Any], timeout: float = 120, every: float = 0.05) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(every)


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> str:
    """`tiny` (the head views' test decoder) and `slow` (24 layers of 16 heads: a pruning curve of some seconds)."""
    pytest.importorskip("transformers")
    import tests.own_models as own

    root = tmp_path_factory.mktemp("jobs")
    tiny, _ = own.build("llama", root / "tiny", seed=5)
    sizes = own.SIZES
    own.SIZES = {"hidden_size": 128, "intermediate_size": 128, "num_hidden_layers": 24, "num_attention_heads": 16}
    try:
        slow, _ = own.build("llama", root / "slow", seed=1)
    finally:
        own.SIZES = sizes
    return f"tiny={tiny}{os.pathsep}slow={slow}"


@contextmanager
def queue_worker(url: str, models: str, stderr: Any = subprocess.PIPE,
                 lease_s: float = LEASE_S) -> Iterator[subprocess.Popen[bytes]]:  # fmt: skip
    """`attention-lab worker --redis URL` with the web workers' models and limits, once it has beaten in Redis."""
    env = os.environ | {"ATTENTION_LAB_TRAIN_LEASE_S": str(lease_s), "PYTHONPATH": str(ROOT),
                        "ATTENTION_LAB_MODELS": models, "ATTENTION_LAB_PRETRAINED": "false",
                        "ATTENTION_LAB_DEVICE": "cpu"} | {f"ATTENTION_LAB_{k.upper()}": str(v)
                                                          for k, v in LIMITS.items()}  # fmt: skip
    r = redis.Redis.from_url(url)
    before = {m for m, _ in r.zrange(WORKERS, 0, -1, withscores=True)}
    proc = subprocess.Popen([sys.executable, "-m", "app.cli", "worker", "--redis", url], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=stderr, start_new_session=True)  # fmt: skip
    try:
        until("the queue worker to beat", lambda: set(r.zrange(WORKERS, 0, -1)) - before or proc.poll() is not None)
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        yield proc
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


@pytest.fixture(scope="module")
def shared(models: str) -> Iterator[Shared]:
    """One redis-server and one queue worker (its imports, its lab and its models loaded once) for the tests that
    neither kill nor stop it; those that do, and the one without a worker, start their own (tests/queue_worker.py)."""
    with redis_server() as url, tempfile.TemporaryFile() as log, queue_worker(url, models, stderr=log) as worker:
        yield Shared(url, worker, log)


@pytest.fixture
def url(shared: Shared) -> str:
    """The shared Redis, emptied for this test."""
    return fresh(shared)


def web(url: str, models: str, **overrides: Any) -> Settings:
    return Settings(device="cpu", pretrained=False, models=models, redis_url=url, workers=2,
                    **{"train_lease_s": LEASE_S} | LIMITS | overrides)  # type: ignore[arg-type]  # fmt: skip


@contextmanager
def two_web_workers(url: str, models: str, **overrides: Any) -> Iterator[tuple[TestClient, TestClient]]:
    with ExitStack() as stack:
        a = stack.enter_context(TestClient(create_app(web(url, models, **overrides))))
        b = stack.enter_context(TestClient(create_app(web(url, models, **overrides))))
        yield a, b


def jobs(r: redis.Redis) -> dict[str, dict[str, str]]:
    """Every job in Redis, by id: its hash."""
    out = {}
    for key in r.scan_iter(PREFIX + "*"):
        out[key.decode().removeprefix(PREFIX)] = {k.decode(): v.decode() for k, v in r.hgetall(key).items()}
    return out


def local_cached(client: TestClient, kind: str) -> bool:
    """Whether this web worker's own lab computed (and keeps) a computation of `kind`."""
    found: list[Any] = []
    client.app.state.lab.cache.discard(lambda k: found.append(k) and False)  # type: ignore[attr-defined]  # looks only
    return any(isinstance(k, tuple) and k[:1] == (kind,) for k in found)


ASKED = [
    ("prune", "/api/v1/prune", {"preset": "tiny", "text": TEXT, "ablate_mode": "mean", "rise": 0.1}),
    ("patch", "/api/v1/patch", {"preset": "tiny", "clean": "The cat sat.", "corrupted": "The dog sat."}),
    ("head_ranking", "/api/v1/head_ranking", {"preset": "tiny", "text": TEXT}),
]


def test_heavy_work_is_a_job_any_web_worker_answers(models: str, shared: Shared, url: str) -> None:
    with make_client(pretrained=False, models=models, **LIMITS) as alone:  # no Redis: computed in-process, as today
        expected = {kind: alone.get(path, params=params).json() for kind, path, params in ASKED}
        assert local_cached(alone, "prune")
    worker = shared.worker
    with two_web_workers(url, models) as (a, b):
        # It yields the cores to the pages served beside it (--nice 10 by default): a page waits on no curve.
        assert os.getpriority(os.PRIO_PROCESS, worker.pid) == min(19, os.getpriority(os.PRIO_PROCESS, 0) + 10)
        r = redis.Redis.from_url(url)
        for kind, path, params in ASKED:
            got = a.get(path, params=params)
            assert got.status_code == 200, got.text
            assert got.json() == expected[kind]  # the queue worker's numbers are the lab's
            again = b.post(path, json=params)  # the other web worker: the same job, its result from Redis
            assert again.status_code == 200 and again.json() == expected[kind]
        done = jobs(r)
        assert sorted(j["kind"] for j in done.values()) == ["head_ranking", "patch", "prune"]
        assert all(j["status"] == "done" and j["owner"] for j in done.values())
        assert 0 < r.ttl(PREFIX + next(iter(done))) <= 600 and r.scard(LIVE) == 0
        for c in (a, b):  # neither web worker computed any of it
            assert not any(local_cached(c, kind) for kind, _, _ in ASKED)
        # A field's error, found by the queue worker, is the request's own 422 naming it.
        bad = b.get(
            "/api/v1/patch", params={"preset": "tiny", "clean": "The cat sat.", "corrupted": "A dog sat there."}
        )
        assert bad.status_code == 422 and any("corrupted" in d["loc"] for d in bad.json()["detail"]), bad.text
        # The /heads page's pruning curve comes from the same job.
        page = a.get("/heads", params={"preset": "tiny", "text": TEXT, "prune": "1"})
        assert page.status_code == 200, page.text


def test_a_queue_worker_killed_mid_job_fails_it_with_a_message(models: str) -> None:
    params = {"preset": "slow", "text": TEXT}
    with redis_server() as url, two_web_workers(url, models) as (a, b):
        r = redis.Redis.from_url(url)
        with queue_worker(url, models) as worker, ExitStack() as stack:
            from concurrent.futures import ThreadPoolExecutor

            pool = stack.enter_context(ThreadPoolExecutor(1))
            asked = pool.submit(a.get, "/api/v1/prune", params=params)
            running = until("the job to report progress", lambda: [j for j in jobs(r).values()
                                                                   if j["status"] == "running" and int(j["done"])])  # fmt: skip
            assert running[0]["kind"] == "prune"
            os.killpg(worker.pid, signal.SIGKILL)  # as a crashed machine
            worker.wait()
            killed = time.monotonic()
            answer = asked.result(timeout=LEASE_S + 30)
        assert time.monotonic() - killed < LEASE_S + 5
        assert answer.status_code == 503 and int(answer.headers["Retry-After"]) > 0, answer.text
        assert "no heartbeat" in answer.json()["message"] and "TRAIN_LEASE_S" in answer.text
        (job,) = jobs(r).values()
        assert job["status"] == "failed" and "no heartbeat" in job["message"] and r.scard(LIVE) == 0
        # Asking again, from the other web worker, with a queue worker running: computed again.
        with queue_worker(url, models):
            again = b.get("/api/v1/prune", params=params)
            assert again.status_code == 200, again.text
            assert len(again.json()["order"]) == 24 * 16
        (job,) = jobs(r).values()
        assert job["status"] == "done"


def test_a_queue_worker_stopped_mid_job_ends_it_at_once_and_another_web_worker_joins_it(models: str) -> None:
    """SIGTERM: the job in hand stops at its next step and is reported failed with a message (its client hears a
    503 with Retry-After at once, not after the lease); a second web worker asking for the same computation
    meanwhile (the same URL: free of its client's share) waits for the same job (one job in Redis), and hears the
    same. The text is three sentences long so that the job outlasts the second worker's joining on a loaded machine
    (at 21 tokens it took 1.4 s, and a second request slowed by a busy core found it done); the worker is stopped as
    soon as the second one waits, so the length costs no time."""
    from concurrent.futures import ThreadPoolExecutor

    params = {"preset": "slow", "text": " ".join([TEXT] * 3)}
    with redis_server() as url, two_web_workers(url, models, train_lease_s=STOP_LEASE_S) as (a, b):
        r = redis.Redis.from_url(url)
        with queue_worker(url, models, lease_s=STOP_LEASE_S) as worker, ThreadPoolExecutor(2) as pool:
            first = pool.submit(a.get, "/api/v1/prune", params=params)
            until("the job to report progress",
                  lambda: first.done() or [j for j in jobs(r).values() if int(j.get("done", 0))])  # fmt: skip
            assert not first.done(), first.result().text[:300]
            second = pool.submit(b.get, "/api/v1/prune", params=params)  # the other worker: the same job
            waiting = b.app.state.lab.jobs.waiting  # type: ignore[attr-defined]
            until("the second worker to wait for the job", lambda: list(waiting.values()) == [1] or second.done())
            assert not second.done(), f"answered before the job was stopped: {second.result().text[:300]} {jobs(r)}"
            worker.terminate()
            answers = [first.result(timeout=60), second.result(timeout=60)]  # the clients' answers...
            assert worker.wait(30) == 0  # ...not the worker's own exit that follows
        for answer in answers:
            assert answer.status_code == 503 and "shut down" in answer.json()["message"], answer.text
        (job,) = jobs(r).values()
        assert job["status"] == "failed" and "shut down" in job["message"], job
        # Ended at once, not after the lease: on Redis's one clock, the job ended while its lease still held (a lease
        # as long as STOP_LEASE_S could not have run out within the clients' wait: only the stop can have ended it).
        assert float(job["finished"]) < float(job["lease"]), job


@pytest.mark.parametrize("per_client", [1, 0])
def test_a_full_queue_and_one_clients_share_hold_across_web_workers(models: str, url: str, per_client: int) -> None:
    """One job in flight at once in all (MAX_LARGE_CONCURRENT 1 + MAX_LARGE_QUEUED 0): a second computation asked of
    the other web worker is a 503 with Retry-After; with MAX_HEAVY_PER_CLIENT 1 the same client (one address for both
    test clients) is refused first, a 429 naming the setting, by the worker that does not hold its request. Each case
    asks for a curve of its own text: the shared queue worker keeps the curves it computed, and the one in flight must
    be computed."""
    from concurrent.futures import ThreadPoolExecutor

    slow = {"preset": "slow", "text": f"{TEXT} ({per_client})"}
    with two_web_workers(url, models, max_large_concurrent=1, max_large_queued=0,
                         max_heavy_per_client=per_client) as (a, b):  # fmt: skip
        r = redis.Redis.from_url(url)
        with ThreadPoolExecutor(1) as pool:
            asked = pool.submit(a.get, "/api/v1/prune", params=slow)
            until("the job to run", lambda: [j for j in jobs(r).values() if j["status"] == "running"])
            other = b.get(*ASKED[0][1:2], params=ASKED[0][2])
            if per_client:
                assert other.status_code == 429 and "MAX_HEAVY_PER_CLIENT" in other.text, other.text
            else:
                assert other.status_code == 503 and int(other.headers["Retry-After"]) > 0, other.text
            assert asked.result(timeout=300).status_code == 200
        assert b.get(*ASKED[0][1:2], params=ASKED[0][2]).status_code == 200  # its turn now


def test_without_a_queue_worker_the_web_worker_computes(models: str) -> None:
    """--redis with no queue worker heard from: computed here, as without Redis (no job is queued for nobody)."""
    with redis_server() as url, two_web_workers(url, models) as (a, _):
        kind, path, params = ASKED[0]
        assert a.get(path, params=params).status_code == 200
        assert local_cached(a, kind) and jobs(redis.Redis.from_url(url)) == {}


def test_a_pickled_job_message_is_never_unpickled(models: str, shared: Shared, url: str, tmp_path: Path) -> None:
    from app.lab.jobs import JOB_ACTOR, JOBS_QUEUE, NAMESPACE
    from tests.app.train.test_queue import Marker

    marker = tmp_path / "unpickled"
    logged = shared.log_end()  # the worker's log before this test
    with two_web_workers(url, models) as (a, _):
        import pickle

        r = redis.Redis.from_url(url)
        payload = pickle.dumps({"queue_name": JOBS_QUEUE, "actor_name": JOB_ACTOR, "args": [Marker(marker)],
                                "kwargs": {}, "options": {}, "message_id": "x", "message_timestamp": 0})  # fmt: skip
        r.hset(f"{NAMESPACE}:{JOBS_QUEUE}.msgs", "by-hand", payload)
        r.rpush(f"{NAMESPACE}:{JOBS_QUEUE}", "by-hand")
        until("the worker to take the message", lambda: r.llen(f"{NAMESPACE}:{JOBS_QUEUE}") == 0)
        _, path, params = ASKED[0]
        assert a.get(path, params=params).status_code == 200  # the worker still computes what comes next
        assert [j["status"] for j in jobs(r).values()] == ["done"]
        assert not marker.exists()
    until("the worker to log its refusal", lambda: b"DecodeError" in shared.log_since(logged), timeout=30)
