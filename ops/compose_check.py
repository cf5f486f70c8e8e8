"""`make compose-check`: start compose.yaml (two workers behind HAProxy, Redis with its append-only file), run a class
across both workers and check that it survives a worker restart and a Redis restart.

    python3 ops/compose_check.py

It starts its own copy of the set (project attention-lab-check-PID) with the proxy on a free loopback port and
each worker on one more (ops/compose.check.yaml), so a class already running on port 8000 is left alone, and takes
it down with its volume at the end. The image must exist (`make image`). Without a container engine or a compose
tool it says so and exits 0.
"""

from __future__ import annotations

import http.client as httpc
import os
import queue
import sys
import threading
import time
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from oci import (
    IMAGE,
    ROOT,
    CheckFailed,
    compose_tool,
    engine,
    free_port,
    healthy,
    http,
    image_exists,
    ok,
    require,
    run,
    say,
    stop_on_sigterm,
    wait_for,
)

PROJECT = f"attention-lab-check-{os.getpid()}"


@dataclass
class Event:
    kind: str  # state, poll, end, retry; "closed" when the stream itself ended
    data: str = ""
    id: int | None = None


@dataclass
class Follower:
    """One student's event stream (`GET /api/v1/rooms/<code>/events`) on one worker, read in a thread."""

    port: int
    code: str
    last_id: int | None = None
    events: queue.Queue[Event] = field(default_factory=queue.Queue)

    def __post_init__(self) -> None:
        self.conn = httpc.HTTPConnection("127.0.0.1", self.port, timeout=60)
        headers = {"Accept": "text/event-stream"}
        if self.last_id is not None:
            headers["Last-Event-ID"] = str(self.last_id)
        self.conn.request("GET", f"/api/v1/rooms/{self.code}/events", headers=headers)
        r = self.conn.getresponse()
        if r.status != 200:
            raise CheckFailed(f"following {self.code} on port {self.port}: {r.status} {r.read()[:200]!r}")
        threading.Thread(target=self._read, args=(r,), daemon=True).start()

    def _read(self, r: httpc.HTTPResponse) -> None:
        event = Event("message")
        try:
            while line := r.readline():
                text = line.decode().rstrip("\r\n")
                if not text:
                    if event.data or event.kind != "message":
                        self.events.put(event)
                    event = Event("message")
                elif text.startswith("event:"):
                    event.kind = text[6:].strip()
                elif text.startswith("data:"):
                    event.data += text[5:].strip()
                elif text.startswith("id:"):
                    event.id = int(text[3:].strip())
        except (OSError, ValueError, AttributeError, httpc.HTTPException):  # AttributeError: closed under it
            pass
        self.events.put(Event("closed"))

    def next(self, kind: str, timeout: float = 30) -> Event:
        """The next event of `kind`, skipping any other (a stream's state on connect, a poll's echo)."""
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            try:
                event = self.events.get(timeout=left)
            except queue.Empty:
                break
            if event.kind == kind:
                if event.id is not None:
                    self.last_id = event.id
                return event
            if event.kind == "closed":
                raise CheckFailed(f"the stream on port {self.port} ended while waiting for `{kind}`")
        raise CheckFailed(f"no `{kind}` event on port {self.port} within {timeout:.0f} s")

    def close(self) -> None:
        self.conn.close()


class Probe:
    """Asks the proxy for one URL every 0.2 s in a thread while the block runs; the statuses it got."""

    def __init__(self, port: int, path: str) -> None:
        self.port, self.path = port, path
        self.statuses: list[int | str] = []
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._ask, daemon=True)

    def _ask(self) -> None:
        while not self.done.wait(0.2):
            try:
                self.statuses.append(http(self.port, self.path, timeout=30).status)
            except (OSError, httpc.HTTPException) as e:
                self.statuses.append(type(e).__name__)

    def __enter__(self) -> Probe:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.done.set()
        self.thread.join()


class Compose:
    def __init__(self, eng: str) -> None:
        self.eng = eng
        self.tool = compose_tool(eng)
        self.ports = {"proxy": free_port(), "lab-a": free_port(), "lab-b": free_port()}
        self.env = dict(os.environ, LAB_IMAGE=IMAGE, LAB_ADDRESS="127.0.0.1", LAB_PORT=str(self.ports["proxy"]),
                        CHECK_PORT_A=str(self.ports["lab-a"]), CHECK_PORT_B=str(self.ports["lab-b"]))  # fmt: skip

    def __call__(self, *args: str, check: bool = True, merge: bool = False, timeout: float = 300) -> str:
        files = ["-f", os.path.join(ROOT, "compose.yaml"), "-f", os.path.join(ROOT, "ops", "compose.check.yaml")]
        cmd = [*self.tool, "-p", PROJECT, *files, *args]
        return run(cmd, check=check, merge=merge, env=self.env, cwd=ROOT, timeout=timeout)


def wait_healthy(c: Compose, names: tuple[str, ...], timeout: float = 300) -> None:
    for name in names:
        port = c.ports[name]

        def answering(port: int = port) -> bool:
            return healthy(port)

        wait_for(f"{name} /healthz", answering, timeout=timeout)


def main() -> int:
    eng = engine()
    require(image_exists(eng), f"no image {IMAGE}: run `make image` first")
    c = Compose(eng)
    say(f"starting compose.yaml as {PROJECT} ({' '.join(c.tool)}): proxy on 127.0.0.1:{c.ports['proxy']}, "
        f"lab-a on :{c.ports['lab-a']}, lab-b on :{c.ports['lab-b']}")  # fmt: skip
    start = time.perf_counter()
    try:
        c("up", "-d")
        wait_healthy(c, ("proxy", "lab-a", "lab-b"))
        ok(f"the proxy and both workers answer /healthz, {time.perf_counter() - start:.0f} s after `up -d`")
        run_class(c)
        train_on_both(c)
    except BaseException:
        say("--- the services' last log lines:")
        for service in ("web", "lab-a", "lab-b", "worker", "redis"):
            say(f"[{service}]\n" + c("logs", "--tail", "15", service, check=False, merge=True))
        raise
    finally:
        c("down", "-v", check=False, timeout=120)
        if eng == "podman":  # podman-compose 1.0 leaves the project's network behind
            run([eng, "network", "rm", f"{PROJECT}_default"], check=False, quiet=True)
    say(
        "PASSED: a class on two workers behind one port, through a worker restart and a Redis restart; a training "
        "run trained by the worker service, seen from both workers"
    )
    return 0


def run_class(c: Compose) -> None:
    proxy, a, b = c.ports["proxy"], c.ports["lab-a"], c.ports["lab-b"]
    r = http(proxy, "/api/v1/rooms", method="POST", body={"page": "/", "query": "stage=scores"})
    require(r.status == 201, f"POST /api/v1/rooms through the proxy: {r.status} {r.body[:200]!r}")
    room = r.json()
    code, teacher = room["code"], {"Authorization": f"Bearer {room['teacher_token']}"}
    ok(f"a teacher opens room {code} through the proxy")

    on_a, on_b = Follower(a, code), Follower(b, code)
    for f in (on_a, on_b):
        require(f.next("state").id == room["version"], f"the state on connect on port {f.port}")
    followers = wait_for("2 followers", lambda: http(proxy, f"/api/v1/rooms/{code}").json()["followers"] == 2, 10)
    require(followers, "followers")
    ok("a student follows it on lab-a and one on lab-b (the room counts 2 followers, shared in Redis)")

    version = put_state(proxy, code, teacher, "stage=softmax")
    for f in (on_a, on_b):
        event = f.next("state")
        require(event.id == version and "stage=softmax" in event.data, f"port {f.port} got {event}")
    ok("the teacher's step (PUT through the proxy) reaches the students on both workers")

    poll = {"prompt": "Which matrix has rows that sum to 1?", "kind": "choice", "options": ["scores", "weights"],
            "answer": "weights"}  # fmt: skip
    r = http(proxy, f"/api/v1/rooms/{code}/polls", method="POST", body=poll, headers=teacher)
    require(r.status == 201, f"opening a poll: {r.status} {r.body[:200]!r}")
    poll_id = r.json()["id"]
    for f in (on_a, on_b):
        f.next("poll")
    answer(a, code, poll_id, "s1", "weights")
    answer(b, code, poll_id, "s2", "scores")
    ok("a poll opens on both workers' streams; one student answers on lab-a, one on lab-b")

    before = http(a, f"/api/v1/rooms/{code}").json()
    restarted = time.perf_counter()
    with Probe(proxy, f"/api/v1/rooms/{code}") as probe:  # a student's page asking through the proxy meanwhile
        c("restart", "lab-b")
        on_b.next("closed", timeout=60)
        wait_healthy(c, ("lab-b",), timeout=240)
    ok(f"lab-b restarted (its student's stream ended), answering again in {time.perf_counter() - restarted:.0f} s")
    require(bool(probe.statuses) and set(probe.statuses) == {200}, f"through the proxy meanwhile: {probe.statuses}")
    ok(f"meanwhile all {len(probe.statuses)} requests through the proxy were answered (200)")

    after = http(b, f"/api/v1/rooms/{code}").json()
    require({k: after[k] for k in ("version", "poll", "query")} == {k: before[k] for k in ("version", "poll", "query")},
            f"the room on the restarted worker: {after} (before: {before})")  # fmt: skip
    open_poll = http(b, f"/api/v1/rooms/{code}/polls/{poll_id}", headers=teacher).json()
    require(open_poll["status"] == "open" and open_poll["total"] == 2, f"the poll after the restart: {open_poll}")
    ok(f"on the restarted lab-b the room is as it was (version {after['version']}) and its poll open with 2 answers")

    def proxied_to_b() -> bool:  # HAProxy checks it every 2 s and takes it back after one good check
        for _ in range(2):
            http(proxy, "/api/v1/presets")  # a path the check asks no worker for directly
        return '"path":"/api/v1/presets"' in c("logs", "lab-b", merge=True)

    wait_for("the proxy sending requests to the restarted lab-b", proxied_to_b, timeout=60, every=2)
    ok("the proxy sends requests to the restarted lab-b again")

    on_b = Follower(b, code, last_id=on_b.last_id)  # the page reconnects with Last-Event-ID
    answer(b, code, poll_id, "s3", "weights")
    version = put_state(proxy, code, teacher, "stage=mask")
    for f in (on_a, on_b):
        require(f.next("state").id == version, f"port {f.port} after the restart")
    closed = http(proxy, f"/api/v1/rooms/{code}/polls/{poll_id}/close", method="POST", headers=teacher)
    require(closed.status == 200, f"closing the poll: {closed.status} {closed.body[:200]!r}")
    result = closed.json()
    require(result["counts"] == {"scores": 1, "weights": 2} and result["total"] == 3, f"the poll's result: {result}")
    for f in (on_a, on_b):
        f.next("poll")
    ok("the reconnected student answers and follows on lab-b; the reveal counts all 3 answers (weights 2, scores 1)")

    snapshot = http(proxy, f"/api/v1/rooms/{code}").json()
    c("restart", "redis")
    on_a.next("closed", timeout=60)  # `event: retry`, then the stream ends: the page reconnects
    same = ("version", "poll", "query", "page")
    for port in (a, b):  # each worker reconnects to Redis on its own (a 503 with Retry-After until then)
        back = wait_for("the room after a Redis restart", partial(room_back, port, code), timeout=120)
        require({k: back[k] for k in same} == {k: snapshot[k] for k in same}, f"after the Redis restart: {back}")
    kept = wait_for(
        "the poll after a Redis restart", lambda: answer_of(proxy, f"/api/v1/rooms/{code}/polls/{poll_id}"), 60
    )
    require(kept["counts"] == result["counts"] and kept["status"] == "closed", f"the poll after Redis: {kept}")
    on_a = wait_for("a stream on lab-a again", lambda: Follower(a, code, last_id=version), timeout=60)
    version = put_state(proxy, code, teacher, "stage=weighted_sum")
    require(on_a.next("state").id == version, "the step after the Redis restart")
    ok("Redis restarted (append-only file): the room, its version and the poll's counts are all back, and steps "
       "reach the students again")  # fmt: skip

    r = http(proxy, f"/api/v1/rooms/{code}", method="DELETE", headers=teacher)
    require(r.status == 204, f"ending the class: {r.status}")
    on_a.next("end")
    for f in (on_a, on_b):
        f.close()
    ok("the teacher ends the class; the student's stream says so")


# A run of a few seconds (tests/app/train/test_api.py's TINY).
TINY_RUN = {"n_layer": 1, "n_heads": 2, "d_model": 32, "n_repeat": 4, "vocab": 8, "batch": 8, "steps": 20,
            "eval_every": 5, "n_snapshots": 3}  # fmt: skip


def train_on_both(c: Compose) -> None:
    """A training run started on lab-a is trained by the `worker` service and is everywhere: followed to its end on
    lab-b, its status, page and export from both workers and the proxy, a preset of both; a pruning curve on it is a
    job the `worker` service computes, the same answer on both."""
    proxy, a, b = c.ports["proxy"], c.ports["lab-a"], c.ports["lab-b"]
    r = http(a, "/api/v1/train", method="POST", body=TINY_RUN)
    require(r.status == 202, f"POST /api/v1/train on lab-a: {r.status} {r.body[:200]!r}")
    run_id = r.json()["id"]
    events = http(b, f"/api/v1/train/{run_id}/events", timeout=300)  # the stream ends with the run
    require(events.status == 200 and b"event: end" in events.body and b'"status":"done"' in events.body,
            f"the run's stream on lab-b: {events.status} {events.body[-300:]!r}")  # fmt: skip
    ok(f"a training run started on lab-a, trained by the worker service, followed to its end on lab-b ({run_id})")
    for port in (a, b, proxy):
        state = http(port, f"/api/v1/train/{run_id}")
        require(state.status == 200 and state.json()["status"] == "done", f"its status on {port}: {state.status}")
        page = http(port, f"/train?run={run_id}")
        require(page.status == 200 and f'id="run-{run_id}"'.encode() in page.body, f"its page on {port}: {page.status}")
        z = http(port, f"/api/v1/train/{run_id}/export")
        require(z.status == 200 and z.headers.get("content-type") == "application/zip", f"its export on {port}")
        names = [m["name"] for m in http(port, "/api/v1/models").json()["models"]]
        require(f"train-{run_id}" in names, f"the preset train-{run_id} on {port}: {names}")
    ok("its status, page and export answer on lab-a, lab-b and through the proxy; it is a preset of both workers")
    # A pruning curve on the run's preset: a job of the queue, computed by the worker service from the run's weights
    # in Redis, the same answer from either lab worker (the second from the job's result in Redis).
    query = f"/api/v1/prune?preset=train-{run_id}&text=ABCABCAB"
    curves = [http(port, query, timeout=300) for port in (a, b, proxy)]
    require(all(r.status == 200 for r in curves), f"the pruning curve: {[r.status for r in curves]}")
    require(all(r.json() == curves[0].json() for r in curves), "the pruning curve differs between workers")
    ok("a pruning curve on its preset, computed by the worker service, answers the same on lab-a, lab-b and the proxy")


def put_state(port: int, code: str, teacher: dict[str, str], query: str) -> int:
    r = http(port, f"/api/v1/rooms/{code}/state", method="PUT", body={"page": "/", "query": query}, headers=teacher)
    require(r.status == 200, f"PUT state {query}: {r.status} {r.body[:200]!r}")
    return int(r.json()["version"])


def answer(port: int, code: str, poll_id: str, student: str, choice: str) -> None:
    body = {"student": student, "answer": choice}
    r = http(port, f"/api/v1/rooms/{code}/polls/{poll_id}/answers", method="POST", body=body)
    require(r.status == 200, f"{student}'s answer on port {port}: {r.status} {r.body[:200]!r}")


def answer_of(port: int, path: str) -> Any:
    """The JSON of a 200, else None (to wait on)."""
    r = http(port, path, timeout=10)
    return r.json() if r.status == 200 else None


def room_back(port: int, code: str) -> Any:
    return answer_of(port, f"/api/v1/rooms/{code}")


if __name__ == "__main__":
    stop_on_sigterm()
    try:
        sys.exit(main())
    except CheckFailed as e:
        say(f"FAILED: {e}")
        sys.exit(1)
