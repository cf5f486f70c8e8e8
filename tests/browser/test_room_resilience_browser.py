"""A student's phone through a Redis restart (#24 item 3), in real Chromium: the page's stream is refused with 503
while Redis is away (where a bare EventSource gives up for good), the page retries with growing pauses, and once
Redis is back it follows the teacher's next step."""

from __future__ import annotations

from collections.abc import Iterator
from urllib.parse import urlsplit

import httpx
import pytest
from playwright.sync_api import Browser, Response, expect

from tests.app.rooms.test_room_resilience import RESILIENCE, logged_server
from tests.app.rooms.test_rooms import create
from tests.redis_server import PersistentRedis, available
from tests.wait import wait_until

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

    def refused(response: Response) -> bool:
        # The lab's screens ask for their poll box too (?lang=…): the stream's path is what counts.
        return urlsplit(response.url).path == f"/api/v1/rooms/{code}/events" and response.status == 503

    try:
        sp = student.new_page()
        sp.goto(f"{base}/r/{code}?lang=en")
        expect(sp.locator("#stage")).to_have_attribute("data-stage", "scores")
        expect(sp.locator("#room [data-room-role=student]")).to_be_visible()

        # The browser's own reconnect meets a 503: a bare EventSource stops here for good.
        with sp.expect_response(refused, timeout=60_000):
            redis.kill()
            expect(sp.locator("#room")).to_have_attribute("data-room-offline", "")

        redis.start()

        def stepped() -> bool:  # the teacher's next step, once the store is back (503 until then)
            r = httpx.put(f"{base}/api/v1/rooms/{code}/state", json={"query": "stage=mask"}, headers=auth, timeout=30)
            assert r.status_code in (200, 503), r.text
            return r.status_code == 200

        wait_until(stepped, 60, "the room store is back", interval=0.3)
        expect(sp.locator("#stage")).to_have_attribute("data-stage", "mask")
        expect(sp.locator("#room")).not_to_have_attribute("data-room-offline", "")
    finally:
        student.close()
