"""A class's screen that finds the server busy when the teacher steps (a 429 while this address's computation runs,
a 503 while the queue is full) asks again after Retry-After and shows the step, never the refusal's JSON as the
page (#32: a class run from the teacher's phone on SmolLM2's pages, every screen on one address)."""

from __future__ import annotations

import json

import pytest
from playwright.sync_api import Browser, Route, expect

from .remote import PHONE, WAIT_MS

pytestmark = pytest.mark.browser


@pytest.mark.parametrize("status", [429, 503])
def test_a_busy_step_is_asked_again_never_shown(browser: Browser, live_server: str, status: int) -> None:
    teacher = browser.new_context(viewport={"width": 1280, "height": 720})
    student = browser.new_context(viewport=PHONE, is_mobile=True, has_touch=True)
    try:
        tp = teacher.new_page()
        tp.goto(f"{live_server}/?lang=en&stage=scores")
        tp.click("[data-room-start] button")
        expect(tp.locator("#room [data-room-role=teacher]")).to_be_visible(timeout=WAIT_MS)
        code = tp.locator("[data-room-code-text]").inner_text().strip()
        sp = student.new_page()
        sp.goto(f"{live_server}/r/{code}?lang=zh")
        expect(sp.locator("#stage")).to_have_attribute("data-stage", "scores", timeout=WAIT_MS)

        asked: list[int] = []

        def busy_once(route: Route) -> None:  # the step's page: refused the first time, served the next
            asked.append(1)
            if len(asked) == 1:
                body = {"message": "request: busy", "detail": [{"loc": ["request"], "msg": "busy", "type": "busy"}]}
                route.fulfill(status=status, headers={"Retry-After": "1", "Content-Type": "application/json"},
                              body=json.dumps(body))  # fmt: skip
            else:
                route.continue_()

        sp.route(lambda url: "stage=softmax" in url, busy_once)
        put = tp.request.put(f"{live_server}/api/v1/rooms/{code}/state", data={"page": "/", "query": "stage=softmax"})
        assert put.ok, put.text()
        expect(sp.locator("#stage")).to_have_attribute("data-stage", "softmax", timeout=WAIT_MS)
        assert len(asked) >= 2  # refused once, asked again
        assert "request: busy" not in sp.locator("body").inner_text()
        expect(sp.locator("#room [data-room-role=student]")).to_be_visible()  # still in the class, following
    finally:
        teacher.close()
        student.close()
