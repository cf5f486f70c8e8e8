"""The class walk on /train (#42) and /cross: the teacher projects a run while it trains and a student follows on a
phone. The run's Stop button was on the student's page too, and one tap there stopped the run on the projector (the
stop route is the server's, not the teacher's); a following student sees the run redraw live and no Stop, the
projector keeps it. Every wait polls the page for a state."""

from __future__ import annotations

import re

import httpx
import pytest
from playwright.sync_api import Browser, expect

from .remote import PHONE, WAIT_MS

pytestmark = pytest.mark.browser
STEPS = 5000  # 0.02 s a step at least (tests/browser/conftest.py): the run outlives the test, which stops it


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_following_student_watches_the_teachers_run_and_cannot_stop_it(
    browser: Browser, live_server: str, lang: str
) -> None:
    with httpx.Client(base_url=live_server, timeout=30) as client:
        r = client.post("/api/v1/train", json={"steps": STEPS, "eval_every": 50})
        assert r.status_code == 202, r.text
        run_id = r.json()["id"]
    laptop = browser.new_context(viewport={"width": 1280, "height": 720})
    phone = browser.new_context(viewport=PHONE, is_mobile=True, has_touch=True)
    try:
        tp = laptop.new_page()
        tp.goto(f"{live_server}/train?run={run_id}&lang={lang}&present=1")
        tp.click("[data-room-start] button")
        expect(tp.locator("#room [data-room-role=teacher]")).to_be_visible(timeout=WAIT_MS)
        code = tp.locator("[data-room-code-text]").inner_text().strip()
        sp = phone.new_page()
        sp.goto(f"{live_server}/r/{code}?lang={lang}")
        expect(sp.locator("#room [data-room-role=student]")).to_be_attached(timeout=WAIT_MS)
        run = sp.locator(f"#run-{run_id}")
        expect(run).to_have_attribute("data-status", re.compile("^(queued|running)$"), timeout=WAIT_MS)
        expect(tp.locator(f"#run-{run_id} form.train-stop button")).to_be_visible()
        expect(sp.locator("body")).to_have_attribute("data-room-following", "1")
        expect(run.locator("form.train-stop button")).to_be_hidden()
    finally:
        laptop.close()
        phone.close()
        with httpx.Client(base_url=live_server, timeout=30) as client:
            client.post(f"/api/v1/train/{run_id}/stop")
