"""A class walk (walk 6): a lesson's own page (/lessons/<slug>) offered no "Ask the class", though the lab's lesson
panel does: a teacher who ran a class from the list of steps had to open each step in the lab to ask its question.
Now each step whose prepared question the class can answer there (a choice; a cell question needs the step's matrix,
so it is asked from the step's page) has the button, and pressing it asks that step's question on every phone."""

from __future__ import annotations

import pytest
from playwright.sync_api import Browser, expect

from tests.browser.remote import PHONE, WAIT_MS

pytestmark = pytest.mark.browser


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_lesson_page_asks_each_steps_question(browser: Browser, live_server: str, lang: str) -> None:
    teacher = browser.new_context(viewport={"width": 1280, "height": 720})
    student = browser.new_context(viewport=PHONE, is_mobile=True, has_touch=True)
    try:
        tp, sp = teacher.new_page(), student.new_page()
        for p in (tp, sp):
            p.set_default_timeout(WAIT_MS)
        tp.goto(f"{live_server}/lessons/row-one?lang={lang}")
        tp.click("[data-room-start] button")
        code = tp.locator("[data-room-code-text]").inner_text().strip()
        steps = tp.locator("main.lesson .lesson-step")
        expect(steps.nth(1).locator(".question [data-room-ask]")).to_be_visible()  # step 2: a choice
        expect(steps.nth(0).locator("[data-room-ask]")).to_have_count(0)  # step 1: a cell of the lab's matrix
        sp.goto(f"{live_server}/r/{code}?lang={lang}")
        expect(sp.locator("#room [data-room-role=student]")).to_be_visible()
        expect(sp.locator("main.lesson[data-lesson=row-one]")).to_be_visible()  # the phone follows the lesson page
        steps.nth(1).locator("[data-room-ask]").click()
        question = sp.locator("[data-room-question] [data-room-prompt]")
        expect(question).to_have_text(
            steps.nth(1)
            .locator(".question")
            .evaluate(
                "q => [...q.childNodes].filter(n => !(n.matches && n.matches('strong, button'))).map(n => n.textContent).join('').trim()"
            )
        )
        expect(sp.locator("[data-room-options] button")).to_have_count(4)
        expect(tp.locator("main.lesson [data-room-ask]").first).to_be_hidden()  # one question at a time
    finally:
        teacher.close()
        student.close()
