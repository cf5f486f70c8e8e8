"""Training runs through the job queue (`serve --redis`, app/train/queue.py), on a real redis-server: two web workers
(two apps, each with its own lab, sharing one Redis) and `attention-lab worker` processes. A run started on one is
seen by the other (status, page, stream resumed from Last-Event-ID, export, stop), is a preset on both once it ends;
a queue worker killed mid-run has its run reported failed within TRAIN_LEASE_S; the caps hold across web workers; a
pickled message put into Redis by hand is never unpickled. Every wait polls for a state, with a deadline.

One redis-server and one queue worker serve the tests that neither kill nor starve a worker (`shared`), each test
starting on an emptied Redis (`url`); the two that need a worker of their own (killed mid-run) or none (the caps)
start their own Redis and worker."""

from __future__ import annotations

import io
import os
import pickle
import signal
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import redis
from bs4 import BeautifulSoup
from fastapi.testclient import TestClient

from app.main import create_app
from app.settings import Settings
from app.train.queue import NAMESPACE, QUEUE
from tests.queue_worker import Shared, fresh
from tests.redis_server import available, redis_server
from tests.servers import served
from tests.wait import wait_until

from .test_api import TINY, events_until_end

pytestmark = pytest.mark.skipif(not available(), reason="redis-server is not installed")
LEASE_S = 4.0  # short for the tests; the lease is renewed every 0.5 s by a thread of its own
ROOT = Path(__file__).resolve().parents[3]
LONG = TINY | {"steps": 3000, "eval_every": 100}


def until(what: str, check: Callable[[], Any], timeout: float = 180) -> Any:
    """Poll `check` until it returns something true (a state reached); fail naming `what` past the deadline."""
    return wait_until(check, timeout, what, interval=0.02)


@contextmanager
def queue_worker(url: str, stderr: Any = subprocess.PIPE) -> Iterator[subprocess.Popen[bytes]]:
    """`attention-lab worker --redis URL` in a process of its own (its own session: a kill takes its runs with it)."""
    env = os.environ | {"ATTENTION_LAB_TRAIN_LEASE_S": str(LEASE_S), "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "app.cli", "worker", "--redis", url], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=stderr, start_new_session=True)  # fmt: skip
    try:
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
def shared() -> Iterator[Shared]:
    """One redis-server and one queue worker (with its fork server, its torch imported once) for the tests that
    neither kill nor starve them; the tests that do (a worker killed mid-run, the caps with no worker) start their own."""
    with redis_server() as url, tempfile.TemporaryFile() as log, queue_worker(url, stderr=log) as worker:
        yield Shared(url, worker, log)


@pytest.fixture
def url(shared: Shared) -> str:
    """The shared Redis, emptied for this test (tests/queue_worker.py)."""
    return fresh(shared)


def web(url: str, **overrides: Any) -> Settings:
    given: dict[str, Any] = {"pretrained": False, "redis_url": url, "workers": 2, "train_lease_s": LEASE_S,
                             "train_max_steps": 3000} | overrides  # fmt: skip
    return Settings(**given)


@contextmanager
def two_web_workers(url: str, **overrides: Any) -> Iterator[tuple[TestClient, TestClient]]:
    with ExitStack() as stack:
        a = stack.enter_context(TestClient(create_app(web(url, **overrides))))
        b = stack.enter_context(TestClient(create_app(web(url, **overrides))))
        yield a, b


def status(client: TestClient, run_id: str) -> dict[str, Any]:
    r = client.get(f"/api/v1/train/{run_id}")
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


def test_a_run_started_on_one_worker_is_everywhere(url: str) -> None:
    with two_web_workers(url) as (a, b):
        r = a.post("/api/v1/train", json=TINY)
        assert r.status_code == 202, r.text
        run_id = r.json()["id"]
        assert status(b, run_id)["status"] in ("queued", "running", "done")  # the other worker sees it at once
        seen = events_until_end(b, run_id)  # followed from the worker that did not start it
        assert seen[0][0] == "state" and seen[-1][0] == "end" and seen[-1][1]["status"] == "done", seen[-1]
        state = status(a, run_id)
        assert state["status"] == "done" and state["step"] == 20 and len(state["loss"]) == 20
        assert state["preset"] == f"train-{run_id}" and state["exportable"]
        # A stream resumed with Last-Event-ID on either worker: the events after it, numbered on, without the state.
        with b.stream("GET", f"/api/v1/train/{run_id}/events", headers={"Last-Event-ID": "3"}) as s:
            lines = [line for line in s.iter_lines() if line]
        assert lines[0] == "id: 4" and not any(line == "event: state" for line in lines) and "event: end" in lines
        # 40 requests for its status, page, stream and export, alternating workers: every one answers.
        for i in range(40):
            c = (a, b)[i % 2]
            kind = ("status", "page", "stream", "export")[i % 4]
            if kind == "status":
                assert status(c, run_id)["status"] == "done"
            elif kind == "page":
                page = c.get(f"/train?run={run_id}")
                assert page.status_code == 200, page.text
                soup = BeautifulSoup(page.text, "html.parser")
                assert soup.select_one(f"#run-{run_id}")["data-status"] == "done"
                assert len(soup.select(".train-heads img")) == 2
            elif kind == "stream":
                assert events_until_end(c, run_id)[-1][1]["status"] == "done"
            else:
                z = c.get(f"/api/v1/train/{run_id}/export")
                assert z.status_code == 200, z.text
                names = {n.split("/")[-1] for n in zipfile.ZipFile(io.BytesIO(z.content)).namelist()}
                assert names == {"config.json", "model.safetensors", "tokenizer.json"}
        # A preset on both workers: listed, and the lab answers on it.
        for c in (a, b):
            assert f"train-{run_id}" in [m["name"] for m in c.get("/api/v1/models").json()["models"]]
            got = c.get("/api/v1/attention", params={"preset": f"train-{run_id}", "text": "ABCA"})
            assert got.status_code == 200, got.text
        assert [j["id"] for j in a.get("/api/v1/train").json()["runs"]] == [run_id]


def sse_kinds(url: str, headers: dict[str, str] | None = None) -> list[tuple[str, dict[str, Any]]]:
    out, kind = [], ""
    with httpx.stream("GET", url, headers=headers, timeout=60) as r:  # a connection of its own
        assert r.status_code == 200, r.read()
        for line in r.iter_lines():
            if line.startswith("event: "):
                kind = line[7:]
            elif line.startswith("data: "):
                out.append((kind, orjson.loads(line[6:])))
    return out


def test_serve_two_workers_with_redis_from_fresh_connections(url: str) -> None:
    """`serve --workers 2 --redis` as an operator runs it (the issue's report: 404s, 422s, streams cut short), each
    request on a connection of its own, so that either worker may answer it: 100 requests for the run's status, page,
    stream and export all succeed; its preset answers on every worker, and a pruning curve and a patching grid on it
    are jobs a queue worker computes (loading the run's weights from Redis), the same answer from either worker."""
    with served({"PRETRAINED": "false", "TRAIN_LEASE_S": str(LEASE_S)}, "--workers", "2", "--redis", url) as (base, _):
        r = httpx.post(base + "/api/v1/train", json=TINY)
        assert r.status_code == 202, r.text
        run_id = r.json()["id"]
        assert sse_kinds(f"{base}/api/v1/train/{run_id}/events")[-1] == (
            "end",
            {"status": "done", "step": 20, "message": ""},
        )
        failures = []
        for i in range(100):
            kind = ("status", "page", "stream", "export")[i % 4]
            if kind == "status":
                got = httpx.get(f"{base}/api/v1/train/{run_id}")
                ok = got.status_code == 200 and got.json()["status"] == "done"
            elif kind == "page":
                got = httpx.get(f"{base}/train", params={"run": run_id})
                ok = got.status_code == 200 and f'id="run-{run_id}"' in got.text
            elif kind == "stream":
                ok = sse_kinds(f"{base}/api/v1/train/{run_id}/events")[-1][0] == "end"
            else:
                got = httpx.get(f"{base}/api/v1/train/{run_id}/export")
                ok = got.status_code == 200 and got.headers["content-type"] == "application/zip"
            if not ok:
                failures.append(kind)
        assert failures == []
        for _ in range(10):  # a preset of whichever worker answers
            names = [m["name"] for m in httpx.get(base + "/api/v1/models").json()["models"]]
            assert f"train-{run_id}" in names
            got = httpx.get(base + "/api/v1/attention", params={"preset": f"train-{run_id}", "text": "ABCA"})
            assert got.status_code == 200, got.text
        r = redis.Redis.from_url(url)
        for path, params in (("/api/v1/prune", {"text": "ABCABCAB"}), ("/api/v1/patch", {"clean": "ABCA",
                                                                                          "corrupted": "ABCB"})):  # fmt: skip
            answers = [httpx.get(base + path, params={"preset": f"train-{run_id}", **params}, timeout=120)
                       for _ in range(6)]  # fmt: skip
            assert [a.status_code for a in answers] == [200] * 6, answers[0].text
            assert all(a.json() == answers[0].json() for a in answers)
        kinds = sorted(r.hget(k, "kind") for k in r.scan_iter("lab:job:*"))
        assert kinds == [b"patch", b"prune"] and all(r.hget(k, "status") == b"done" for k in r.scan_iter("lab:job:*"))


def test_a_dropped_run_leaves_every_worker(url: str) -> None:
    """TRAIN_MAX_KEPT = 1: the next run drops the first, and its preset is gone from both workers (a 422 naming
    `preset`), the new one served on both."""
    with two_web_workers(url, train_max_kept=1) as (a, b):
        first = a.post("/api/v1/train", json=TINY).json()["id"]
        assert events_until_end(b, first)[-1][1]["status"] == "done"
        for c in (a, b):
            assert c.get("/api/v1/attention", params={"preset": f"train-{first}", "text": "ABCA"}).status_code == 200
        second = b.post("/api/v1/train", json=TINY | {"seed": 1}).json()["id"]
        assert events_until_end(a, second)[-1][1]["status"] == "done"
        for c in (a, b):
            assert c.get(f"/api/v1/train/{first}").status_code == 404
            names = [m["name"] for m in c.get("/api/v1/models").json()["models"]]
            assert f"train-{first}" not in names and f"train-{second}" in names
            r = c.get("/api/v1/attention", params={"preset": f"train-{first}", "text": "ABCA"})
            assert r.status_code == 422 and any("preset" in d["loc"] for d in r.json()["detail"])


def test_a_web_worker_restarted_mid_run_loses_nothing(url: str) -> None:
    with TestClient(create_app(web(url))) as a:
        run_id = a.post("/api/v1/train", json=TINY | {"steps": 400, "eval_every": 50}).json()["id"]
        until("the run to train", lambda: status(a, run_id)["step"] > 0)
    with TestClient(create_app(web(url))) as again:  # a fresh worker: the run went on, its stream resumes
        assert events_until_end(again, run_id)[-1][1]["status"] == "done"
        state = status(again, run_id)
        assert state["step"] == 400 and state["preset"] == f"train-{run_id}"


def test_a_queue_worker_killed_mid_run_fails_the_run_with_a_message() -> None:
    with redis_server() as url, two_web_workers(url) as (a, b):
        with queue_worker(url) as worker:
            run_id = a.post("/api/v1/train", json=LONG).json()["id"]
            until("the run to train", lambda: status(b, run_id)["step"] > 0)
            os.killpg(worker.pid, signal.SIGKILL)  # the worker and its training process, as a crashed machine
            worker.wait()
            killed = time.monotonic()
            state = until("the run to fail", lambda: (s := status(a, run_id))["status"] == "failed" and s)
        assert time.monotonic() - killed < LEASE_S + 5
        assert "no heartbeat" in state["message"] and "TRAIN_LEASE_S" in state["message"]
        assert events_until_end(b, run_id)[-1][1]["status"] == "failed"
        # Its place is free again, and a new worker trains the next run.
        with queue_worker(url):
            again = b.post("/api/v1/train", json=TINY).json()["id"]
            assert events_until_end(a, again)[-1][1]["status"] == "done"


def test_stop_from_the_other_worker(url: str) -> None:
    """Only the run's starter stops it, on either web worker: its stop token's hash is kept with the run in Redis. A
    stop without it, or with a wrong one, is a 403 naming `stop_token` on the other worker, and the run trains on."""
    with two_web_workers(url) as (a, b):
        started = a.post("/api/v1/train", json=LONG).json()
        run_id = started["id"]
        until("the run to train", lambda: status(b, run_id)["step"] > 0)
        for refused in (b.post(f"/api/v1/train/{run_id}/stop"),
                        b.post(f"/api/v1/train/{run_id}/stop", json={"stop_token": "x" + started["stop_token"]}),
                        b.delete(f"/api/v1/train/{run_id}", headers={"Authorization": "Bearer nope"})):  # fmt: skip
            assert refused.status_code == 403, refused.text
            assert refused.json()["detail"][0]["loc"] == ["body", "stop_token"]
        step = status(a, run_id)["step"]
        until("the run to train on", lambda: (s := status(b, run_id))["status"] == "running" and s["step"] > step)
        r = b.post(f"/api/v1/train/{run_id}/stop", json={"stop_token": started["stop_token"]})
        assert r.status_code == 200 and r.json()["stopping"]
        assert events_until_end(a, run_id)[-1][1]["status"] == "cancelled"
        assert status(b, run_id)["message"] == "stopped"


def test_the_caps_hold_across_web_workers() -> None:
    """No queue worker here: the runs stay queued, so the caps are tested alone."""
    with redis_server() as url, two_web_workers(url, train_max_running=1, train_max_queued=1,
                                                train_max_per_client=0) as (a, b):  # fmt: skip
        first, token = (s := a.post("/api/v1/train", json=TINY).json())["id"], s["stop_token"]
        second = b.post("/api/v1/train", json=TINY).json()
        full = a.post("/api/v1/train", json=TINY)
        assert full.status_code == 503 and int(full.headers["Retry-After"]) > 0
        assert b.post("/api/v1/train", json=TINY).status_code == 503
        r = b.post(f"/api/v1/train/{first}/stop", json={"stop_token": token})  # a queued run ends at once, everywhere
        assert r.json()["status"] == "cancelled" and status(a, first)["message"] == "stopped before it started"
        assert "none is running" in until("the message", lambda: status(a, second["id"])["message"], timeout=30)
        third = b.post("/api/v1/train", json=TINY)
        assert third.status_code == 202
        for run in (second, third.json()):
            a.post(f"/api/v1/train/{run['id']}/stop", json={"stop_token": run["stop_token"]})
    with redis_server() as url, two_web_workers(url, train_max_per_client=1) as (a, b):
        assert a.post("/api/v1/train", json=TINY).status_code == 202
        mine = b.post("/api/v1/train", json=TINY)  # the same address, the other worker
        assert mine.status_code == 503 and "TRAIN_MAX_PER_CLIENT" in mine.json()["message"]


class Marker:
    """Unpickling this touches a file: the proof that a payload was (or was not) unpickled."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, ...]:
        return (Path.touch, (self.path,))


def test_a_pickled_message_is_never_unpickled(shared: Shared, url: str, tmp_path: Path) -> None:
    marker = tmp_path / "unpickled"
    logged = shared.log_end()  # the worker's log before this test
    with TestClient(create_app(web(url))) as a:
        r = redis.Redis.from_url(url)
        payload = pickle.dumps({"queue_name": QUEUE, "actor_name": "train_run", "args": [Marker(marker)],
                                "kwargs": {}, "options": {}, "message_id": "x", "message_timestamp": 0})  # fmt: skip
        assert pickle.loads(pickle.dumps(Marker(marker))) is None and marker.exists()  # the payload works...
        marker.unlink()
        r.hset(f"{NAMESPACE}:{QUEUE}.msgs", "by-hand", payload)
        r.rpush(f"{NAMESPACE}:{QUEUE}", "by-hand")
        until("the worker to take the message", lambda: r.llen(f"{NAMESPACE}:{QUEUE}") == 0)
        run_id = a.post("/api/v1/train", json=TINY).json()["id"]  # the worker still trains what comes next
        assert events_until_end(a, run_id)[-1][1]["status"] == "done"
        assert not marker.exists()  # ...and the worker never unpickled it
    until(
        "the worker to log its refusal", lambda: b"DecodeError" in shared.log_since(logged), timeout=30
    )  # refused as it was read
