"""Prometheus metrics (prometheus-client) and a structured access log.

One scrape of `/metrics` counts every worker: `attention-lab serve --workers N` points PROMETHEUS_MULTIPROC_DIR at
a fresh directory, where each worker process writes its samples, and a scrape (answered by any worker) merges
them. With one process, the samples live in this app's own registry. The caches and the memory budget are
per-process state, published as gauges after each request and summed over live workers.

The access log is one JSON object per request on the `attention_lab.access` logger (no user text in it), written by
`Metrics.observe` as app/limits.py `Edge` sees each request end.
"""

from __future__ import annotations

import logging
import os
import time
from typing import TYPE_CHECKING, Any

import orjson
from fastapi import APIRouter, Request
from fastapi.responses import Response
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.multiprocess import MultiProcessCollector
from starlette.types import Scope

if TYPE_CHECKING:
    from .lab import Lab

BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
ACCESS = logging.getLogger("attention_lab.access")
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
disable_created_metrics()  # no *_created series: a scrape is what Prometheus needs, nothing more


def multiprocess() -> bool:
    return bool(os.environ.get(MULTIPROC_ENV))


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        shared = multiprocess()
        # In multiprocess mode the samples go to files (registry=None) and the collector reads them all back.
        reg = None if shared else self.registry
        if shared:
            MultiProcessCollector(self.registry)
        self.requests = Counter(
            "attention_lab_requests", "Requests by route, method and status.", ["route", "method", "status"],
            registry=reg,
        )  # fmt: skip
        self.latency = Histogram(
            "attention_lab_request_seconds", "Request latency by route.", ["route"], buckets=BUCKETS, registry=reg
        )
        self.stages = Histogram(
            "attention_lab_stage_seconds", "Compute time of each stage.", ["stage"], buckets=BUCKETS, registry=reg
        )
        gauge: dict[str, Any] = {"registry": reg, "multiprocess_mode": "livesum"}
        self.cache_hits = Gauge("attention_lab_cache_hits_total", "Answers served from a cache.", ["cache"], **gauge)
        self.cache_misses = Gauge("attention_lab_cache_misses_total", "Computations that ran.", ["cache"], **gauge)
        self.cache_bytes = Gauge("attention_lab_cache_bytes", "Bytes held by each cache.", ["cache"], **gauge)
        self.budget = Gauge(
            "attention_lab_memory_budget_in_use_bytes", "Estimated bytes of computations in flight.", **gauge
        )

    def stage(self, name: str, seconds: float) -> None:
        self.stages.labels(name).observe(seconds)

    def publish(self, lab: Lab) -> None:
        """This process's caches and budget, as gauges (summed over live workers in multiprocess mode)."""
        cache, responses = lab.cache, lab.responses
        self.cache_hits.labels("trace").set(cache.hits)
        self.cache_misses.labels("trace").set(cache.misses)
        self.cache_bytes.labels("trace").set(cache.nbytes)
        if responses is not None:  # the kernel's store, which create_app gives the lab
            self.cache_hits.labels("response").set(responses.hits)
            self.cache_bytes.labels("response").set(responses.nbytes)
        self.budget.set(lab.budget.in_use)

    def observe(self, scope: Scope, status: int, cache: str, seconds: float, lab: Lab | None = None) -> None:
        """One request answered (app/limits.py `Edge`): counted and timed by its route template (a stored answer,
        `cache` its X-Cache, by its path; anything else no route matched, "unmatched"), and the access log's line."""
        route = getattr(scope.get("route"), "path", None) or (scope["path"] if cache else "unmatched")
        self.requests.labels(route, scope["method"], str(status)).inc()
        self.latency.labels(route).observe(seconds)
        if lab is not None and multiprocess():  # other workers' scrapes read this process's gauges
            self.publish(lab)
        if ACCESS.isEnabledFor(logging.INFO):
            client = scope.get("client") or ("", 0)
            ACCESS.info(orjson.dumps({
                "ts": round(time.time(), 3), "client": client[0], "method": scope["method"], "path": scope["path"],
                "query_bytes": len(scope.get("query_string", b"")), "status": status, "ms": round(seconds * 1e3, 3),
                "cache": cache or None,
            }).decode())  # fmt: skip


router = APIRouter(include_in_schema=False)


@router.get("/metrics")
def metrics(request: Request) -> Response:
    m: Metrics = request.app.state.metrics
    m.publish(request.app.state.lab)
    return Response(generate_latest(m.registry), media_type=CONTENT_TYPE_LATEST)
