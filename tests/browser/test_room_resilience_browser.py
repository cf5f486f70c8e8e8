"""A student's phone through a Redis restart (#24 item 3), in real Chromium: the page's stream is refused with 503
while Redis is away (where a bare EventSource gives up for good), the page retries with growing pauses, and once
Redis is back it follows the teacher's next step."""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import pytest
from playwright.sync_api import Browser, Response, expect

from tests.app.rooms.test_room_resilience import RESILIENCE, logged_server
from tests.app.rooms.test_rooms import create
from tests.redis_server import PersistentRedis, available

pytestmark = pytest.mark.browser


@pytest.fixture
def redis_lab() -> Iterator[tuple[PersistentRedis, str]]:
    if not available():
        pytest.skip("redis-server is not installed (apt-get install redis-server; .ci/run does)")
    with PersistentRedis() as redis, logged_server(RESILIENCE, "--redis", redis.url) as (base, _, log):
        yield redis, base
        log.assert_no_traceback()


def test_a_students_page_reconnects_after_503s_and_follows_again(browser: Browser,
                                                                 redis_lab: tuple[PersistentRedis, str]) -> None:  # fmt: skip
    redis, base = redis_lab
    code, auth = create(base, "stage=scores")
    student = browser.new_context(viewport={"width": 390, "height": 844}, is_mobile=True, has_touch=True)
    refused: list[int] = []

    def seen(response: Response) -> None:
        if response.url.endswith(f"/api/v1/rooms/{code}/events") and response.status == 503:
            refused.append(response.status)

    try:
        sp = student.new_page()
        sp.on("response", seen)
        sp.goto(f"{base}/r/{code}?lang=en")
        expect(sp.locator("#stage")).to_have_attribute("data-stage", "scores")
        expect(sp.locator("#room [data-room-role=student]")).to_be_visible()

        redis.kill()
        expect(sp.locator("#room")).to_have_attribute("data-room-offline", "", timeout=20_000)
        deadline = time.monotonic() + 30
        while not refused:  # the browser's own reconnect met a 503: a bare EventSource stops here for good
            assert time.monotonic() < deadline, "the page never tried to reconnect"
            sp.wait_for_timeout(200)

        redis.start()
        deadline = time.monotonic() + 30
        while True:
            r = httpx.put(f"{base}/api/v1/rooms/{code}/state", json={"query": "stage=mask"}, headers=auth, timeout=30)
            if r.status_code == 200:
                break
            assert r.status_code == 503 and time.monotonic() < deadline, r.text
            time.sleep(0.3)
        expect(sp.locator("#stage")).to_have_attribute("data-stage", "mask", timeout=45_000)
        expect(sp.locator("#room")).not_to_have_attribute("data-room-offline", "", timeout=10_000)
    finally:
        student.close()
