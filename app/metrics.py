"""Prometheus metrics and a structured access log, kept in this process (each worker reports its own).

Counters and histograms are plain dictionaries under a lock; `/metrics` renders them in the Prometheus text format.
The access log is one JSON object per request on the `attention_lab.access` logger.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import defaultdict
from typing import Any

import orjson
from fastapi import APIRouter, Request
from fastapi.responses import PlainTextResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
ACCESS = logging.getLogger("attention_lab.access")


class Histogram:
    def __init__(self) -> None:
        self.counts = [0] * len(BUCKETS)
        self.total = 0.0
        self.n = 0

    def observe(self, v: float) -> None:
        for i, b in enumerate(BUCKETS):
            if v <= b:
                self.counts[i] += 1
        self.total += v
        self.n += 1


class Metrics:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.requests: dict[tuple[str, str, int], int] = defaultdict(int)
        self.latency: dict[str, Histogram] = defaultdict(Histogram)
        self.stages: dict[str, Histogram] = defaultdict(Histogram)

    def request(self, route: str, method: str, status: int, seconds: float) -> None:
        with self._lock:
            self.requests[(route, method, status)] += 1
            self.latency[route].observe(seconds)

    def stage(self, name: str, seconds: float) -> None:
        with self._lock:
            self.stages[name].observe(seconds)

    def render(self, lab: Any) -> str:
        out = [
            "# HELP attention_lab_requests_total Requests by route, method and status.",
            "# TYPE attention_lab_requests_total counter",
        ]
        with self._lock:
            for (route, method, status), n in sorted(self.requests.items()):
                out.append(f'attention_lab_requests_total{{route="{route}",method="{method}",status="{status}"}} {n}')
            out += _histogram("attention_lab_request_seconds", "Request latency by route.", "route", self.latency)
            out += _histogram("attention_lab_stage_seconds", "Compute time of each stage.", "stage", self.stages)
        cache, responses = lab.cache, lab.responses
        out += [
            "# HELP attention_lab_cache_hits_total Computations served from the trace cache.",
            "# TYPE attention_lab_cache_hits_total counter",
            f'attention_lab_cache_hits_total{{cache="trace"}} {cache.hits}',
            f'attention_lab_cache_hits_total{{cache="response"}} {responses.hits}',
            "# HELP attention_lab_cache_misses_total Computations that ran.",
            "# TYPE attention_lab_cache_misses_total counter",
            f'attention_lab_cache_misses_total{{cache="trace"}} {cache.misses}',
            "# HELP attention_lab_cache_bytes Bytes held by each cache.",
            "# TYPE attention_lab_cache_bytes gauge",
            f'attention_lab_cache_bytes{{cache="trace"}} {cache.nbytes}',
            f'attention_lab_cache_bytes{{cache="response"}} {responses.nbytes}',
            "# HELP attention_lab_memory_budget_in_use_bytes Estimated bytes of computations in flight.",
            "# TYPE attention_lab_memory_budget_in_use_bytes gauge",
            f"attention_lab_memory_budget_in_use_bytes {lab.budget.in_use}",
        ]
        return "\n".join(out) + "\n"


def _histogram(name: str, help_: str, label: str, series: dict[str, Histogram]) -> list[str]:
    out = [f"# HELP {name} {help_}", f"# TYPE {name} histogram"]
    for key, h in sorted(series.items()):
        for b, c in zip(BUCKETS, h.counts, strict=True):
            out.append(f'{name}_bucket{{{label}="{key}",le="{b}"}} {c}')
        out.append(f'{name}_bucket{{{label}="{key}",le="+Inf"}} {h.n}')
        out.append(f'{name}_sum{{{label}="{key}"}} {h.total:.6f}')
        out.append(f'{name}_count{{{label}="{key}"}} {h.n}')
    return out


class Observe:
    """ASGI middleware: count and time every request by its route template, and write the access log."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = [500]
        cache = [""]

        async def seen(message: Message) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
                cache[0] = dict(message.get("headers", [])).get(b"x-cache", b"").decode()
            await send(message)

        try:
            await self.app(scope, receive, seen)
        finally:
            seconds = time.perf_counter() - start
            route = getattr(scope.get("route"), "path", None) or (scope["path"] if cache[0] else "unmatched")
            self.metrics.request(route, scope["method"], status[0], seconds)
            if ACCESS.isEnabledFor(logging.INFO):
                client = scope.get("client") or ("", 0)
                ACCESS.info(orjson.dumps({
                    "ts": round(time.time(), 3), "client": client[0], "method": scope["method"],
                    "path": scope["path"], "query_bytes": len(scope.get("query_string", b"")),
                    "status": status[0], "ms": round(seconds * 1e3, 3), "cache": cache[0] or None,
                }).decode())  # fmt: skip


router = APIRouter(include_in_schema=False)


@router.get("/metrics", response_class=PlainTextResponse)
def metrics(request: Request) -> PlainTextResponse:
    m: Metrics = request.app.state.metrics
    return PlainTextResponse(m.render(request.app.state.lab), media_type="text/plain; version=0.0.4")
