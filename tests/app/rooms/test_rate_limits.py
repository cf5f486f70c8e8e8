"""One rate limit for every worker: under `serve --workers 2 --redis`, the workers count a limit together in Redis
(`limits`' moving window), so fresh connections spread over both get the limit's number of answers, not twice it."""

from __future__ import annotations

import httpx
import pytest

from tests.app.rooms.test_rooms import create
from tests.conftest import ROOM_SETTINGS
from tests.redis_server import available, redis_server
from tests.servers import served

CLOSE = {"Connection": "close"}  # a fresh connection each time, so the kernel spreads them over both workers


def both_workers_answer(base: str) -> bool:
    """Fresh connections reach both workers: a trace computed on one is in its cache alone (/healthz's
    `cached_traces`), so polling /healthz sees an empty cache and a full one."""
    assert httpx.get(f"{base}/api/v1/attention", headers=CLOSE, timeout=60).status_code == 200
    seen = set()
    for _ in range(200):
        seen.add(httpx.get(f"{base}/healthz", headers=CLOSE, timeout=30).json()["cached_traces"] > 0)
        if seen == {True, False}:
            return True
    return False


def test_a_rate_limit_holds_across_two_workers() -> None:
    if not available():
        pytest.skip("redis-server is not installed (apt-get install redis-server; .ci/run does)")
    limit = 5
    settings = ROOM_SETTINGS | {"PRETRAINED": "false", "ROOM_ANSWERS_PER_MINUTE": str(limit)}
    with redis_server() as url, served(settings, "--workers", "2", "--redis", url) as (base, _):
        assert both_workers_answer(base)  # first: a room's view is computed too, on either worker
        code, auth = create(base)
        made = httpx.post(f"{base}/api/v1/rooms/{code}/polls", headers=auth, timeout=30,
                          json={"prompt": "?", "kind": "choice", "options": ["a", "b"]})  # fmt: skip
        answers = f"{base}/api/v1/rooms/{code}/polls/{made.json()['id']}/answers"
        got = [httpx.post(answers, json={"student": "s", "answer": "a"}, headers=CLOSE, timeout=30)
               for _ in range(8 * limit)]  # fmt: skip
        assert [r.status_code for r in got] == [200] * limit + [429] * 7 * limit
        waits = {int(r.headers["retry-after"]) for r in got[limit:]}
        assert min(waits) >= 1 and max(waits) <= 60, waits
        assert all("too many answers from this student; retry in" in r.json()["message"] for r in got[limit:])
        # Another student has a budget of its own, on either worker.
        other = httpx.post(answers, json={"student": "t", "answer": "b"}, headers=CLOSE, timeout=30)
        assert other.status_code == 200
