"""A real server with two worker processes: one scrape of /metrics counts the requests of both."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from tests.app.test_api import samples
from tests.servers import served


@pytest.fixture(scope="module")
def two_workers() -> Iterator[str]:
    with served({"PRETRAINED": "false"}, "--workers", "2") as (base, _):
        yield base


def test_one_scrape_counts_every_worker(two_workers: str) -> None:
    n = 80
    with httpx.Client(base_url=two_workers, timeout=30) as c:
        # Fresh connections spread the requests over both workers.
        for i in range(n):
            assert httpx.get(f"{two_workers}/api/v1/presets", headers={"connection": "close"}).status_code == 200, i
        for _ in range(3):  # whichever worker answers the scrape, it reports the sum
            got = samples(c.get("/metrics").text)
            key = ("attention_lab_requests_total",
                   frozenset({("route", "/api/v1/presets"), ("method", "GET"), ("status", "200")}))  # fmt: skip
            assert got[key] == n
