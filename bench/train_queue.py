"""A class working at once through the job queue: every student starts a small training run and asks for a pruning
curve on a tiny decoder, across two web workers and N queue workers sharing one Redis, all on loopback.

    python -m bench.train_queue [--students 30] [--queue-workers 2] [--steps 200] [--no-prune] [--json]

Starts a throwaway `redis-server`, `attention-lab serve --workers 2 --redis …` and `--queue-workers` processes of
`attention-lab worker --redis …`, all serving a tiny Llama built here (tests/own_models.py: 3 layers of 4 heads) as
the preset `tiny`. Each student POSTs a run (a fresh connection each time); a 503 must carry Retry-After, and the
student tries again after it (scaled down to --retry-s, so the bench ends in minutes). Every run admitted is followed
to its end as the page does (its event stream, on a fresh connection, resumed with Last-Event-ID if cut), then its
status asked for: every one must end `done`; none may vanish (404). Beside it the student asks for the pruning
curve of a sentence of its own (`GET /api/v1/prune`: a job of the queue, computed by a queue worker), retrying
after a refusal's Retry-After as for its run; it must answer 200 with the curve. The students share one loopback
address, so MAX_HEAVY_PER_CLIENT is off here (0): a class behind one NAT address shares one heavy request at a
time, which tests/app/lab/test_fair_share.py covers. Meanwhile a probe asks for the toy lab's page (a fresh query
each time, so no answer is cached) every 0.1 s and records its latency. Reports runs and curves finished per minute
(throughput), refusals, and the probe's p50/p99.

Run it with --queue-workers 1 and 2 to compare; on a 2-core machine a second queue worker adds a core's worth of
training at most, and takes it from the web workers.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import orjson

from tests.redis_server import redis_server
from tests.servers import served

ROOT = Path(__file__).resolve().parent.parent
RUN = {"n_layer": 1, "n_heads": 2, "d_model": 32, "n_repeat": 4, "vocab": 8, "batch": 8, "eval_every": 50,
       "n_snapshots": 3}  # fmt: skip


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def _fresh(method: str, url: str, **kw: Any) -> httpx.Response:
    async with httpx.AsyncClient(timeout=60) as c:  # a connection of its own: either web worker may answer
        return await c.request(method, url, **kw)


async def _follow(base: str, run_id: str) -> None:
    """The run's event stream to its `end`, each time on a fresh connection (either web worker)."""
    last = ""
    while True:
        headers = {"Last-Event-ID": last} if last else {}
        try:
            async with httpx.AsyncClient(timeout=120) as c, c.stream("GET", f"{base}/api/v1/train/{run_id}/events",
                                                                      headers=headers) as r:  # fmt: skip
                if r.status_code != 200:
                    return
                async for line in r.aiter_lines():
                    if line.startswith("id: "):
                        last = line[4:]
                    elif line == "event: end":
                        return
        except httpx.HTTPError:
            await asyncio.sleep(0.5)


async def _curve(base: str, k: int, retry_s: float, deadline: float, out: dict[str, Any]) -> None:
    """A pruning curve of the student's own sentence, retried after each refusal's Retry-After (scaled down)."""
    params = {"preset": "tiny", "text": f"Student {k} saw the cat sit on the mat, then the dog sat on the log."}
    while time.monotonic() < deadline:
        r = await _fresh("GET", base + "/api/v1/prune", params=params)
        if r.status_code == 200 and r.json()["order"]:
            out["curves"].append(time.monotonic())
            return
        if r.status_code in (429, 503) and int(r.headers.get("Retry-After", "0")) > 0:
            out["curve_refused"] += 1
            await asyncio.sleep(retry_s * random.uniform(0.5, 1.5))
            continue
        out["errors"].append((r.status_code, r.text[:200]))
        return


async def _student(base: str, body: dict[str, Any], retry_s: float, deadline: float, out: dict[str, Any],
                   prune: bool) -> None:  # fmt: skip
    if prune:
        await asyncio.gather(_run(base, body, retry_s, deadline, out), _curve(base, body["seed"], retry_s, deadline,
                                                                              out))  # fmt: skip
    else:
        await _run(base, body, retry_s, deadline, out)


async def _run(base: str, body: dict[str, Any], retry_s: float, deadline: float, out: dict[str, Any]) -> None:
    while time.monotonic() < deadline:
        r = await _fresh("POST", base + "/api/v1/train", json=body)
        if r.status_code == 202:
            run_id = r.json()["id"]
            out["admitted"].append(run_id)
            await _follow(base, run_id)  # as the page does: its event stream, resumed with Last-Event-ID if cut
            s = await _fresh("GET", f"{base}/api/v1/train/{run_id}")
            if s.status_code != 200:
                out["lost"].append((run_id, s.status_code))
            else:
                out["ended"].append((run_id, s.json()["status"], time.monotonic()))
            return
        if r.status_code == 503 and int(r.headers.get("Retry-After", "0")) > 0:
            out["refused"] += 1
            await asyncio.sleep(retry_s * random.uniform(0.5, 1.5))
            continue
        out["errors"].append((r.status_code, r.text[:200]))
        return


async def _probe(base: str, stop: asyncio.Event, latencies: list[float]) -> None:
    i = 0
    while not stop.is_set():
        i += 1
        t0 = time.perf_counter()
        r = await _fresh("GET", f"{base}/?preset=toy&seed={i}&lang=en")
        if r.status_code == 200:
            latencies.append((time.perf_counter() - t0) * 1e3)
        await asyncio.sleep(0.1)


async def _class(base: str, students: int, steps: int, retry_s: float, limit_s: float,
                 prune: bool) -> dict[str, Any]:  # fmt: skip
    out: dict[str, Any] = {"admitted": [], "ended": [], "lost": [], "refused": 0, "errors": [], "curves": [],
                           "curve_refused": 0}  # fmt: skip
    latencies: list[float] = []
    stop = asyncio.Event()
    for i in range(20):  # warm: the first pages draw their templates and kernels
        await _fresh("GET", f"{base}/?preset=toy&seed={10_000 + i}&lang=en")
    probe = asyncio.create_task(_probe(base, stop, latencies))
    await asyncio.sleep(3)  # the probe's baseline, before the class starts
    idle = list(latencies)
    t0 = time.monotonic()
    deadline = t0 + limit_s
    await asyncio.gather(*(_student(base, RUN | {"steps": steps, "seed": k}, retry_s, deadline, out, prune)
                           for k in range(students)))  # fmt: skip
    wall = time.monotonic() - t0
    stop.set()
    await probe
    busy = latencies[len(idle) :]
    done = [e for e in out["ended"] if e[1] == "done"]
    return {
        "students": students, "steps": steps, "admitted": len(out["admitted"]), "done": len(done),
        "other_ends": sorted({e[1] for e in out["ended"]} - {"done"}), "lost": out["lost"], "errors": out["errors"],
        "refused_503": out["refused"], "unfinished": students - len(out["ended"]) - len(out["lost"]),
        "wall_s": round(wall, 1), "runs_per_min": round(len(done) / wall * 60, 1),
        "curves": len(out["curves"]), "curve_refused": out["curve_refused"],
        "jobs_per_min": round((len(done) + len(out["curves"])) / wall * 60, 1),
        "probe_idle_p50_ms": round(statistics.median(idle), 1) if idle else None,
        "probe_p50_ms": round(statistics.median(busy), 1), "probe_p99_ms": round(_percentile(busy, 0.99), 1),
        "probe_n": len(busy),
    }  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--students", type=int, default=30)
    ap.add_argument("--queue-workers", type=int, default=2)
    ap.add_argument("--steps", type=int, default=200, help="steps of each student's run")
    ap.add_argument("--retry-s", type=float, default=1.0, help="a refused student's wait (Retry-After, scaled down)")
    ap.add_argument("--limit-s", type=float, default=600, help="students stop trying after this long")
    ap.add_argument("--no-prune", action="store_true", help="training runs only (no pruning curves)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    with ExitStack() as stack:
        from tests.own_models import build

        tiny, _ = build("llama", Path(stack.enter_context(tempfile.TemporaryDirectory())) / "tiny", seed=5)
        settings = {"DEVICE": "cpu", "PRETRAINED": "false", "TRAIN_MAX_RUNNING": str(args.queue_workers),
                    "TRAIN_MAX_QUEUED": "4", "TRAIN_MAX_KEPT": str(args.students + 8), "MODELS": f"tiny={tiny}",
                    "MAX_HEAVY_PER_CLIENT": "0"}  # fmt: skip
        env = os.environ | {f"ATTENTION_LAB_{k}": v for k, v in settings.items()} | {"PYTHONPATH": str(ROOT)}
        url = stack.enter_context(redis_server())
        workers = [subprocess.Popen([sys.executable, "-m", "app.cli", "worker", "--redis", url], cwd=ROOT, env=env,
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                   for _ in range(args.queue_workers)]  # fmt: skip
        for w in workers:
            stack.callback(w.wait, 30)
            stack.callback(w.terminate)
        base, _ = stack.enter_context(served(settings, "--workers", "2", "--redis", url))
        result = asyncio.run(_class(base, args.students, args.steps, args.retry_s, args.limit_s, not args.no_prune))
    result |= {"web_workers": 2, "queue_workers": args.queue_workers, "cpus": os.cpu_count()}
    if args.json:
        print(orjson.dumps(result).decode())
        return
    print(f"{result['students']} students, 2 web workers, {result['queue_workers']} queue workers, "
          f"{result['cpus']} CPUs; runs of {result['steps']} steps")  # fmt: skip
    print(f"  admitted {result['admitted']}, done {result['done']}, other ends {result['other_ends']}, lost "
          f"{result['lost']}, unfinished {result['unfinished']}, errors {result['errors']}")  # fmt: skip
    print(f"  refused with 503 + Retry-After {result['refused_503']} times (each student retried)")
    print(f"  {result['runs_per_min']} runs/min ({result['done']} in {result['wall_s']} s)")
    print(f"  pruning curves {result['curves']} / {result['students']}, refused {result['curve_refused']} times; "
          f"{result['jobs_per_min']} jobs/min (runs and curves)")  # fmt: skip
    print(f"  toy lab page meanwhile: p50 {result['probe_p50_ms']} ms, p99 {result['probe_p99_ms']} ms "
          f"({result['probe_n']} requests; idle p50 {result['probe_idle_p50_ms']} ms)")  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
