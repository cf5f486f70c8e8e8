"""A class of students on one server, over loopback only, for a bounded time.

    python -m bench.classroom [--students 60] [--seconds 20] [--think 0.5,1.5] [--json]

Starts `attention-lab serve` (one worker) on a free 127.0.0.1 port. Each simulated student opens the lab page,
then steps through the five stages as htmx does (HX-Request fragments), toggles the mask and the scale now and
then, and on large traces also loads the heat-map thumbnails and the zoomed head (each image URL once, as a
browser honours their Cache-Control); between clicks a student thinks for a random time. Two classes run one after
the other: the toy, and gpt2-small with 256 tokens. Before each, the teacher's first clicks open the views
the class toggles between (mask × scale, and the scale left at its default), and the class arrives once the server has drawn their heat maps ahead
(`/healthz` drawing_ahead 0; the seconds it took are reported). Reports requests/s, p50, p99 and errors for each.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import re
import statistics
import time
from typing import Any
from urllib.parse import urlencode

import orjson

from tests.servers import server

TOY = {"mask": "causal"}
GPT2 = {"preset": "gpt2-small", "tokens": " ".join(f"w{i % 61}" for i in range(256)), "mask": "causal"}


async def _get(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, path: str, hx: bool) -> tuple[int, bytes]:
    extra = "HX-Request: true\r\n" if hx else ""
    writer.write(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept-Language: zh-CN\r\n{extra}\r\n".encode())
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    length = next(
        (int(h.split(b":", 1)[1]) for h in head.split(b"\r\n") if h.lower().startswith(b"content-length:")), 0
    )
    return status, await reader.readexactly(length)


async def _class(port: int, params: dict[str, str], students: int, seconds: float, think: tuple[float, float],
                 seed: int) -> dict[str, Any]:  # fmt: skip
    latencies: list[float] = []
    pages: list[float] = []
    errors = 0
    stop = time.perf_counter() + seconds
    rnd = random.Random(seed)

    async def student(k: int) -> None:
        nonlocal errors
        reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=2**24)
        state = dict(params)
        seen: set[bytes] = set()  # the heat maps are sent with Cache-Control: a browser fetches each URL once
        await asyncio.sleep(rnd.uniform(0, think[1]))  # students do not all click at the same instant
        first = True
        try:
            while time.perf_counter() < stop:
                stage = rnd.randint(1, 5)
                if rnd.random() < 0.15:
                    state["mask"] = "none" if state.get("mask") == "causal" else "causal"
                if rnd.random() < 0.1:
                    state["scale"] = rnd.choice(["sqrt_dk", "none", "dk"])
                path = "/?" + urlencode(
                    state | {"stage": stage, "head": rnd.randint(0, 11) if "preset" in state else 0}
                )
                t0 = time.perf_counter()
                status, body = await _get(reader, writer, path, hx=not first)
                latencies.append(time.perf_counter() - t0)
                pages.append(latencies[-1])
                errors += status != 200
                first = False
                for src in re.findall(rb'<img[^>]+src="([^"]+)"', body)[:13]:  # heat maps of a large trace
                    if src in seen:
                        continue
                    seen.add(src)
                    t0 = time.perf_counter()
                    status, _ = await _get(reader, writer, src.decode().replace("&amp;", "&"), hx=False)
                    latencies.append(time.perf_counter() - t0)
                    errors += status != 200
                await asyncio.sleep(rnd.uniform(*think))
        finally:
            writer.close()

    t0 = time.perf_counter()
    await asyncio.gather(*(student(k) for k in range(students)))
    wall = time.perf_counter() - t0
    q = statistics.quantiles(latencies, n=100) if len(latencies) > 1 else [0.0] * 99
    return {
        "bench": "classroom",
        "trace": params.get("preset", "toy") + (f", N={len(params['tokens'].split())}" if "tokens" in params else ""),
        "students": students,
        "seconds": round(wall, 1),
        "requests": len(latencies),
        "requests_per_s": round(len(latencies) / wall, 1),
        "p50_ms": round(q[49] * 1e3, 2),
        "p99_ms": round(q[98] * 1e3, 2),
        "page_p50_ms": round(statistics.median(pages) * 1e3, 2) if pages else None,
        "page_p99_ms": round(statistics.quantiles(pages, n=100)[98] * 1e3, 2) if len(pages) > 1 else None,
        "errors": errors,
    }


async def _warm(port: int, params: dict[str, str]) -> float:
    """The teacher's first clicks compute the traces the class will toggle between (then they are cached) and
    start the server drawing their heat maps ahead; the class arrives once that is done (polled, bounded at
    120 s). Returns the seconds from the first click until then."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=2**24)
    t0 = time.perf_counter()
    try:
        for mask in ("causal", "none"):
            for scale in (None, "sqrt_dk", "none", "dk"):  # None: the URL the class opens, scale left at its default
                view = params | {"mask": mask, "stage": 4} | ({"scale": scale} if scale else {})
                await _get(reader, writer, "/?" + urlencode(view), hx=False)
        while time.perf_counter() - t0 < 120:
            _, body = await _get(reader, writer, "/healthz", hx=False)
            if not orjson.loads(body).get("drawing_ahead"):
                break
            await asyncio.sleep(0.2)
    finally:
        writer.close()
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--students", type=int, default=60)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--think", default="0.5,1.5", help="seconds between a student's clicks: min,max")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    lo, hi = (float(v) for v in args.think.split(","))
    rows = []
    with server({"DEVICE": os.environ.get("ATTENTION_LAB_DEVICE", "auto")}, wait_s=60) as running:
        for params in (TOY, GPT2):
            ready = asyncio.run(_warm(running.port, params))
            rows.append(asyncio.run(_class(running.port, params, args.students, args.seconds, (lo, hi), seed=7)))
            rows[-1]["ready_s"] = round(ready, 1)
    for r in rows:
        if args.json:
            print(orjson.dumps(r).decode())
        else:
            print(
                f"{r['students']} students, {r['trace']}, {r['seconds']} s: {r['requests']} requests, "
                f"{r['requests_per_s']:.0f}/s, p50 {r['p50_ms']:.1f} ms, p99 {r['p99_ms']:.1f} ms, {r['errors']} errors "
                f"(the teacher's first clicks and the heat maps drawn ahead: {r['ready_s']} s before the class)"
            )


if __name__ == "__main__":
    main()
