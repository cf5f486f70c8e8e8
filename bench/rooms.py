"""A live class at scale: one teacher, hundreds of students on server-sent events, two workers sharing rooms
through a real Redis — all on loopback.

    python -m bench.rooms [--students 300] [--steps 20] [--workers 2] [--no-redis] [--json]

Starts a throwaway `redis-server` and `attention-lab serve --workers N --redis …` on free 127.0.0.1 ports. Each
student opens the room's event stream (a plain asyncio socket reading the chunked stream, so the clients cost
little next to the server) and must receive the current state on connect. The teacher then steps `--steps` times
(PUT /state, 150 ms apart); for every step the time from just before the teacher's PUT to each student's receipt
of that version is recorded (p50, p99, max over steps × students). Then every student answers a poll once and a
tenth of them change their answer; the counts must be exact. Reports the server's RSS (all its processes) before
and with the students connected, per follower.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import orjson

from tests.redis_server import redis_server
from tests.servers import served

ROOT = Path(__file__).resolve().parent.parent


def _rss_mb(pid: int) -> float:
    """Resident memory of the server and every process under it (uvicorn's workers), in MB."""
    pids = [pid]
    out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True).stdout
    pids += [int(p) for p in out.split()]
    total = 0
    for p in pids:
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            pass
    return total / 1024


class Student:
    """One event stream over a raw socket: HTTP/1.1, chunked transfer, `id:`/`event:`/`data:` lines."""

    def __init__(self) -> None:
        self.received: dict[int, float] = {}  # version -> perf_counter when it arrived
        self.first: dict[str, Any] | None = None
        self.connected = asyncio.Event()

    async def run(self, port: int, code: str) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(f"GET /api/v1/rooms/{code}/events HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream"
                     "\r\n\r\n".encode())  # fmt: skip
        head = await reader.readuntil(b"\r\n\r\n")
        if not head.startswith(b"HTTP/1.1 200"):
            raise RuntimeError(head.decode(errors="replace")[:200])
        buffer = b""
        try:
            while True:
                size = int((await reader.readuntil(b"\r\n")).strip(), 16)
                chunk = await reader.readexactly(size + 2)
                if size == 0:
                    return
                buffer += chunk[:-2]
                while b"\n\n" in buffer:
                    block, buffer = buffer.split(b"\n\n", 1)
                    self._event(block)
        finally:
            writer.close()

    def _event(self, block: bytes) -> None:
        now = time.perf_counter()
        fields = dict(
            line.split(b": ", 1) for line in block.split(b"\n") if b": " in line and not line.startswith(b":")
        )
        if fields.get(b"event") != b"state":
            return
        data = orjson.loads(fields[b"data"])
        if self.first is None:
            self.first = data
            self.connected.set()
        self.received[int(data["version"])] = now


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def _class(base: str, port: int, pid: int, students: int, steps: int) -> dict[str, Any]:
    async with httpx.AsyncClient(base_url=base, timeout=60, limits=httpx.Limits(max_connections=64)) as client:
        room = (await client.post("/api/v1/rooms", json={"query": "stage=projection"})).json()
        code, auth = room["code"], {"Authorization": f"Bearer {room['teacher_token']}"}
        rss_before = _rss_mb(pid)
        class_ = [Student() for _ in range(students)]
        tasks = [asyncio.create_task(s.run(port, code)) for s in class_]
        connect_start = time.perf_counter()
        await asyncio.wait_for(asyncio.gather(*(s.connected.wait() for s in class_)), 120)
        connect_s = time.perf_counter() - connect_start
        assert all(s.first and s.first["version"] == 1 for s in class_), "a student missed the state on connect"
        await asyncio.sleep(1.0)
        rss_with = _rss_mb(pid)
        followers = (await client.get(f"/api/v1/rooms/{code}")).json()["followers"]
        sent: dict[int, float] = {}
        stages = ["scores", "mask", "softmax", "weighted_sum", "projection"]
        for i in range(steps):
            query = f"stage={stages[i % 5]}&seed={i // 5}"
            t0 = time.perf_counter()
            r = await client.put(f"/api/v1/rooms/{code}/state", json={"query": query}, headers=auth)
            r.raise_for_status()
            sent[r.json()["version"]] = t0
            await asyncio.sleep(0.15)
        last = max(sent)
        deadline = time.monotonic() + 30
        while any(last not in s.received for s in class_) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        latencies = [(s.received[v] - t0) * 1e3 for s in class_ for v, t0 in sent.items() if v in s.received]
        missing = students * steps - len(latencies)
        # A poll: every student answers once, a tenth change their minds; the counts must be exact.
        options = ["A", "B", "C", "D"]
        poll = (await client.post(f"/api/v1/rooms/{code}/polls", headers=auth,
                                  json={"prompt": "?", "kind": "choice", "options": options})).json()  # fmt: skip
        url = f"/api/v1/rooms/{code}/polls/{poll['id']}/answers"
        gate = asyncio.Semaphore(32)

        async def answer(k: int, value: str) -> None:
            async with gate:
                (await client.post(url, json={"student": f"s{k}", "answer": value})).raise_for_status()

        t_poll = time.perf_counter()
        await asyncio.gather(*(answer(k, options[k % 4]) for k in range(students)))
        await asyncio.gather(*(answer(k, "A") for k in range(0, students, 10)))
        answers_s = time.perf_counter() - t_poll
        expected: dict[str, int] = {o: 0 for o in options}
        for k in range(students):
            expected["A" if k % 10 == 0 else options[k % 4]] += 1
        # Open counts are the teacher's alone.
        counts = (await client.get(f"/api/v1/rooms/{code}/polls/{poll['id']}", headers=auth)).json()["counts"]
        exact = counts == {k: v for k, v in expected.items() if v}
        await client.delete(f"/api/v1/rooms/{code}", headers=auth)
        await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 30)
    return {
        "students": students, "steps": steps, "followers_counted": followers, "connect_s": round(connect_s, 2),
        "p50_ms": round(statistics.median(latencies), 1), "p99_ms": round(_percentile(latencies, 0.99), 1),
        "max_ms": round(max(latencies), 1), "missing_events": missing, "poll_exact": exact,
        "answers_per_s": round(students * 1.1 / answers_s), "rss_before_mb": round(rss_before),
        "rss_with_mb": round(rss_with), "rss_per_follower_kb": round((rss_with - rss_before) * 1024 / students, 1),
    }  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--students", type=int, default=300)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--no-redis", action="store_true", help="rooms in memory (needs --workers 1)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    # Every simulated student shares this machine's one address: lift the per-address caps a real class never meets.
    settings = {"ROOM_JOINS_PER_MINUTE": str(10 * args.students), "DEVICE": os.environ.get("ATTENTION_LAB_DEVICE",
                "cpu"), "ROOM_ANSWERS_PER_ADDRESS_PER_POLL": str(10 * args.students),
                "ROOM_ANSWERS_PER_ADDRESS_PER_MINUTE": str(100 * args.students)}  # fmt: skip
    with ExitStack() as stack:
        extra = ["--workers", str(args.workers)]
        if not args.no_redis:
            extra += ["--redis", stack.enter_context(redis_server())]
        base, pid = stack.enter_context(served(settings, *extra))
        port = int(base.rsplit(":", 1)[1])
        result = asyncio.run(_class(base, port, pid, args.students, args.steps))
    result |= {"workers": args.workers, "store": "memory" if args.no_redis else "redis", "cpus": os.cpu_count()}
    if args.json:
        print(orjson.dumps(result).decode())
        return
    print(f"{result['students']} students, {result['workers']} workers, rooms in {result['store']}, "
          f"{result['cpus']} CPUs")  # fmt: skip
    print(f"  all connected in {result['connect_s']} s, each got the state on connect; followers counted: "
          f"{result['followers_counted']}")  # fmt: skip
    print(f"  teacher's PUT -> student's event over {result['steps']} steps: p50 {result['p50_ms']} ms, "
          f"p99 {result['p99_ms']} ms, max {result['max_ms']} ms, missing {result['missing_events']}")  # fmt: skip
    print(f"  poll: {result['students']} answers + {result['students'] // 10} changed, counted exactly: "
          f"{result['poll_exact']} ({result['answers_per_s']} answers/s)")  # fmt: skip
    print(f"  server RSS {result['rss_before_mb']} MB -> {result['rss_with_mb']} MB with the class: "
          f"{result['rss_per_follower_kb']} KB per follower")  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
