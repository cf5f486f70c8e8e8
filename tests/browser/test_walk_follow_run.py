"""The class walk on /train (#42) and /cross: the teacher projects a run while it trains and a student follows on a
phone. The run's Stop button was on the student's page too, and one tap there stopped the run on the projector (the
stop route is the server's, not the teacher's); a following student sees the run redraw live and no Stop, the
projector keeps it. Every wait polls the page for a state."""

from __future__ import annotations

import re

import httpx
import pytest
from playwright.sync_api import Browser, expect

from tests.wait import wait_until

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
        run_id, token = r.json()["id"], r.json()["stop_token"]
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
            client.post(f"/api/v1/train/{run_id}/stop", json={"stop_token": token})


def test_only_the_browser_that_started_the_run_stops_it(browser: Browser, live_server: str) -> None:
    """The Stop button was hidden from a following student by CSS only: anyone who had the run's id (it is on the
    projector and in every link) could stop the teacher's run. Now the browser whose form started the run holds its
    stop token (a cookie for that run's API paths): another browser's Stop stops nothing and says why beside the
    button, in the page's language, and the words stay while the run's block redraws; the run trains on, and the
    starter's Stop ends it. (Before, another browser's click was a 403 that htmx swapped nowhere: nothing showed.)"""
    laptop = browser.new_context(viewport={"width": 1280, "height": 720})
    other = browser.new_context(viewport={"width": 1280, "height": 720})
    run_id = ""
    try:
        tp = laptop.new_page()
        tp.goto(f"{live_server}/train?lang=en")
        form = tp.locator(".train-form form")
        form.locator("input[name=steps]").fill(str(STEPS))
        form.get_by_role("button", name="Train").click()
        tp.wait_for_url(re.compile(r"/train\?run=[\w-]+"), timeout=WAIT_MS)
        run_id = re.search(r"run=([\w-]+)", tp.url).group(1)  # type: ignore[union-attr]
        with httpx.Client(base_url=live_server, timeout=30) as client:

            def step() -> int:
                state = client.get(f"/api/v1/train/{run_id}").json()
                return int(state["step"]) if state["status"] == "running" else -1

            first = wait_until(step, WAIT_MS / 1000, f"run {run_id} training")
            for lang, reason in (("en", "Only the browser that started this run can stop it"),
                                 ("zh", "只有启动这次训练的浏览器才能停止它")):  # fmt: skip
                op = other.new_page()
                op.goto(f"{live_server}/train?run={run_id}&lang={lang}")
                panel = op.locator(f"#run-{run_id}")
                said = panel.locator(".train-stop-said")
                expect(said).to_be_hidden()  # nothing said before a click
                panel.locator("form.train-stop button").click()
                expect(said).to_have_text(reason)
                expect(said).to_be_visible()
                shown = panel.locator(".train-status").inner_text()
                expect(panel.locator(".train-status")).not_to_have_text(shown)  # the live block was redrawn
                expect(said).to_have_text(reason)
                expect(said).to_be_visible()
                op.close()
            assert other.request.post(f"{live_server}/api/v1/train/{run_id}/stop").status == 403  # the API's own
            wait_until(lambda: step() > first, WAIT_MS / 1000, f"run {run_id} training on after a refused stop")
            tp.locator(f"#run-{run_id} form.train-stop button").click()
            expect(tp.locator(f"#run-{run_id}")).to_have_attribute("data-status", "cancelled", timeout=WAIT_MS)
            expect(tp.locator(f"#run-{run_id} .train-stop-said")).to_have_count(0)  # no Stop, nothing said
    finally:
        if run_id:  # the starter's browser stops it whatever happened (its cookie), as the suite needs no run left
            laptop.request.post(f"{live_server}/api/v1/train/{run_id}/stop")
        laptop.close()
        other.close()
