"""A class walk (walk 6): the class summary, opened from the remote once the class had ended, asked for the ended
class's bar (static/room.js runs on every page of a browser in a class): a 404 in the console of the teacher's
phone. The summary is the teacher's own page, as the remote is: it asks for no bar."""

from __future__ import annotations

import pytest
from playwright.sync_api import Browser, expect

from tests.browser.remote import PHONE, WAIT_MS, pair_phone

pytestmark = pytest.mark.browser


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_summary_after_the_class_asks_for_no_bar(browser: Browser, live_server: str, lang: str) -> None:
    laptop = browser.new_context(viewport={"width": 1280, "height": 720})
    phone = browser.new_context(viewport=PHONE, is_mobile=True, has_touch=True)
    try:
        tp = laptop.new_page()
        tp.set_default_timeout(WAIT_MS)
        tp.goto(f"{live_server}/?stage=scores&lang={lang}")
        tp.click("[data-room-start] button")
        code = tp.locator("[data-room-code-text]").inner_text().strip()
        remote = pair_phone(laptop, phone, live_server, code)  # the teacher's phone
        remote.set_default_timeout(WAIT_MS)
        tp.once("dialog", lambda d: d.accept())
        tp.click("#room [data-room-end]")  # ended on the projector
        expect(remote.locator("[data-ended]")).to_be_visible()
        failed: list[str] = []
        remote.on("response", lambda r: r.status >= 400 and failed.append(f"{r.status} {r.url}"))
        remote.on("console", lambda m: m.type == "error" and failed.append(m.text))
        remote.click("[data-summary-link] a")
        expect(remote.locator("main[data-summary][data-ended=true]")).to_be_visible()
        remote.wait_for_load_state("networkidle")
        assert not failed, failed
    finally:
        laptop.close()
        phone.close()
