"""The served API under load, on loopback only: throughput of the toy request, and first versus repeated requests.

    python -m bench.serve [--seconds 5] [--clients 32] [--json]

Starts `attention-lab serve` (one worker, uvicorn with httptools and uvloop) on a free 127.0.0.1 port, then:
- `toy_load`: 32 keep-alive clients send the toy trace's GET for a bounded time; requests/s, p50, p99, errors;
- `first_vs_repeat`: gpt2-small at N = 1024 (softmax of one head), the first request against the median of repeats.
The load generator is a minimal asyncio HTTP/1.1 client in this process, so the server has one core and the client
the other. Every request goes to 127.0.0.1 and the run stops by itself.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
from typing import Any
from urllib.parse import urlencode

import orjson

from tests.servers import server

TOY = "/api/v1/attention?" + urlencode({"tokens": "猫 坐 在 垫子 上", "mask": "causal"})
LARGE = "/api/v1/attention?" + urlencode(
    {"preset": "gpt2-small", "tokens": " ".join(f"w{i % 97}" for i in range(1024)), "mask": "causal",
     "stages": "softmax", "heads": "0"}
)  # fmt: skip


async def _request(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, path: str) -> tuple[int, bytes]:
    writer.write(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":", 1)[1])
    return status, await reader.readexactly(length)


async def _load(port: int, path: str, clients: int, seconds: float) -> dict[str, Any]:
    latencies: list[float] = []
    errors = 0
    stop = time.perf_counter() + seconds

    async def client() -> None:
        nonlocal errors
        reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=2**24)
        try:
            while time.perf_counter() < stop:
                t0 = time.perf_counter()
                status, _ = await _request(reader, writer, path)
                latencies.append(time.perf_counter() - t0)
                errors += status != 200
        finally:
            writer.close()

    t0 = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(clients)))
    wall = time.perf_counter() - t0
    q = statistics.quantiles(latencies, n=100)
    return {
        "bench": "toy_load",
        "clients": clients,
        "seconds": round(wall, 2),
        "requests": len(latencies),
        "requests_per_s": round(len(latencies) / wall, 1),
        "p50_ms": round(q[49] * 1e3, 3),
        "p99_ms": round(q[98] * 1e3, 3),
        "errors": errors,
    }


async def _first_vs_repeat(port: int, path: str, repeats: int) -> dict[str, Any]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=2**26)
    try:
        t0 = time.perf_counter()
        status, body = await _request(reader, writer, path)
        first = time.perf_counter() - t0
        assert status == 200, body[:300]
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            await _request(reader, writer, path)
            times.append(time.perf_counter() - t0)
    finally:
        writer.close()
    repeat = statistics.median(times)
    return {
        "bench": "first_vs_repeat",
        "request": "gpt2-small, N=1024, causal, softmax of head 0",
        "first_ms": round(first * 1e3, 2),
        "repeat_ms": round(repeat * 1e3, 3),
        "ratio": round(first / repeat, 1),
        "body_bytes": len(body),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--json", action="store_true", help="one JSON object per measurement")
    args = ap.parse_args()
    with server({"DEVICE": os.environ.get("ATTENTION_LAB_DEVICE", "auto")}, wait_s=60) as running:
        port = running.port
        asyncio.run(_load(port, TOY, 4, 1.0))  # warm-up: imports, first trace, caches
        rows = [
            asyncio.run(_load(port, TOY, args.clients, args.seconds)),
            asyncio.run(_first_vs_repeat(port, LARGE, 20)),
        ]
    if args.json:
        for r in rows:
            print(orjson.dumps(r).decode())
        return
    load, fr = rows
    print(
        f"toy request, {load['clients']} clients, {load['seconds']} s: {load['requests_per_s']:.0f} requests/s, "
        f"p50 {load['p50_ms']:.2f} ms, p99 {load['p99_ms']:.2f} ms, {load['errors']} errors"
    )
    print(
        f"{fr['request']}: first {fr['first_ms']:.0f} ms, repeated {fr['repeat_ms']:.2f} ms "
        f"({fr['ratio']:.0f}× faster), {fr['body_bytes'] / 2**20:.1f} MiB"
    )


if __name__ == "__main__":
    main()
