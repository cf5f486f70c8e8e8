"""A following student after the second review (#32): a lesson's own page (/lessons/<slug>) holds each step's answer
as the lab's lesson panel does (until the teacher revealed that step's question or moved on from it); the panel's
own "Next step" / "Previous step" are the teacher's, not shown to a follower (an explorer gets them back); a cell
question leaves every screen when the class moves to a page without that matrix (/sinks)."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Browser, Page, expect

from .remote import PHONE, WAIT_MS, fits_the_phone, no_poll_on, reaches, until

pytestmark = pytest.mark.browser


def ask_cell(tp: Page, code: str) -> str:
    """The teacher's own cell question, asked from the projector's page (its teacher cookie, same origin)."""
    return str(
        tp.evaluate(
            """code => fetch('/api/v1/rooms/' + code + '/polls', {method: 'POST', credentials: 'same-origin',
             headers: {'Content-Type': 'application/json'},
             body: JSON.stringify({prompt: 'Which cell is largest?', kind: 'cell', rows: 5, cols: 5})})
           .then(r => r.json()).then(b => b.id)""",
            code,
        )
    )


def at(*screens: Page, path: str) -> None:
    """Every screen has followed the class to `path` (asked of the page itself)."""
    until(lambda: all(s.evaluate("location.pathname") == path for s in screens),
          lambda: f"not all on {path}: {[s.evaluate('location.href') for s in screens]}")  # fmt: skip


def test_a_follower_gets_no_answers_early_no_dead_buttons_and_no_cell_question_off_its_page(
    browser: Browser, live_server: str
) -> None:
    laptop = browser.new_context(viewport={"width": 1280, "height": 720})
    en = browser.new_context(viewport=PHONE, is_mobile=True, has_touch=True)
    zh = browser.new_context(viewport=PHONE, is_mobile=True, has_touch=True, locale="zh-CN")
    try:
        tp = laptop.new_page()
        tp.goto(f"{live_server}/?lang=en")
        tp.click("[data-room-start] button")
        expect(tp.locator("#room [data-room-role=teacher]")).to_be_visible(timeout=WAIT_MS)
        code = tp.locator("[data-room-code-text]").inner_text().strip()
        se, sz = en.new_page(), zh.new_page()
        se.goto(f"{live_server}/r/{code}?lang=en")
        sz.goto(f"{live_server}/r/{code}?lang=zh")
        for s in (se, sz):
            expect(s.locator("#room [data-room-role=student]")).to_be_attached(timeout=WAIT_MS)

        # ---- the lesson's own page: every step's answer held for the students, not for the teacher -------------
        tp.goto(f"{live_server}/lessons/mask-toggle?lang=en")
        at(se, sz, path="/lessons/mask-toggle")
        for s in (se, sz):
            steps = s.locator("main.lesson .lesson-step")
            expect(steps).to_have_count(2, timeout=WAIT_MS)
            for k in range(2):
                expect(steps.nth(k).locator("details.answer")).to_be_hidden()
                expect(steps.nth(k).locator("[data-answer-held]")).to_be_visible(timeout=WAIT_MS)
            fits_the_phone(s)
        expect(se.locator("[data-answer-held]").first).to_contain_text("revealed")
        expect(sz.locator("[data-answer-held]").first).to_contain_text("老师")
        expect(tp.locator("main.lesson .lesson-step details.answer")).to_have_count(2)
        expect(tp.locator("main.lesson .lesson-step details.answer").first).to_be_visible()

        # ---- step 1 in the lab: no "Next step" for a follower; the projector keeps it ---------------------------
        tp.locator("main.lesson .lesson-step[data-step='1'] a[data-open=lab]").click()
        reaches(live_server, code, "lesson_step", "1")
        for s in (se, sz):
            panel = s.locator(".lesson-panel[data-lesson=mask-toggle][data-step='1']")
            expect(panel).to_be_attached(timeout=WAIT_MS)
            expect(panel.locator(".lesson-nav")).to_be_hidden()
            expect(panel.locator("[data-lesson-step=next]")).to_be_hidden()
        expect(tp.locator(".lesson-panel [data-lesson-step=next]")).to_be_visible()

        # ---- a cell question, then the class moves to /sinks: it closes and leaves every screen -----------------
        pid = ask_cell(tp, code)
        for s in (se, sz):
            expect(s.locator("[data-room-cell-hint]")).to_be_visible(timeout=WAIT_MS)
        se.locator("td[data-row='2'][data-col='1']").first.click()
        expect(se.locator("[data-room-mine]")).to_be_visible(timeout=WAIT_MS)
        tp.goto(f"{live_server}/sinks?lang=en")
        at(se, sz, path="/sinks")
        no_poll_on(tp, (se, sz))
        for s in (se, sz):
            expect(s.locator("[data-room-cell-hint]")).to_be_hidden()
        results = tp.evaluate(f"fetch('/api/v1/rooms/{code}/polls/{pid}').then(r => r.json())")
        assert results["status"] == "closed" and results["counts"] == {"2,1": 1}  # its answers kept

        # ---- back on the lesson's page: step 1 (the class moved on from it) opens, step 2 stays held -------------
        tp.goto(f"{live_server}/lessons/mask-toggle?lang=en")
        at(se, path="/lessons/mask-toggle")
        one, two = (se.locator(f"main.lesson .lesson-step[data-step='{k}']") for k in (1, 2))
        expect(one.locator("details.answer")).to_be_visible(timeout=WAIT_MS)
        expect(one.locator("[data-answer-held]")).to_be_hidden()
        expect(two.locator("details.answer")).to_be_hidden()

        # ---- exploring on their own: the lesson panel's own steps come back --------------------------------------
        se.click("[data-room-explore]")
        se.goto(f"{live_server}/?stage=4&mask=causal&lesson=mask-toggle&lesson_step=2&lang=en")
        expect(se.locator("#room [data-room-role=student]")).to_be_attached(timeout=WAIT_MS)
        expect(se.locator(".lesson-panel [data-lesson-step=prev]")).to_be_visible(timeout=WAIT_MS)
        expect(se.locator(".lesson-panel details.answer")).to_be_hidden()  # still held: step 2 was never asked
        assert re.search(r"lesson_step=2", se.url)
    finally:
        for context in (laptop, en, zh):
            context.close()
