"""A class on "Why the first row is exactly 1.00", step 1 (#42, findings 2 and 6), on the teacher's laptop and two
following phones (390×844, English and Chinese):

- the hints wait for the answer: "What to notice: The first row is exactly 1.00…" stood right under "Which weight is
  exactly 1.00, and why?" on every screen, a phone's "Show the answer" still locked; now neither the notice nor what
  happens shows before the answer is opened (the teacher's laptop) or released and opened (a phone);
- a cell question names its cells by their tokens ("猫→猫"), never "(0, 0)";
- stepping the class back to the mask's matrices closes the open cell question on every screen: no tap there answers;
- once the class has ended, the lesson panel no longer offers "Ask the class".
"""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, expect

from .remote import PHONE, WAIT_MS, fits_the_phone, until

pytestmark = pytest.mark.browser

STEP = "/?stage=4&mask=causal&lesson=row-one&lesson_step=1"
# The notice's own words (the lesson's title says "the first row is exactly 1.00" too, as a title may).
NOTICE = {
    "en": "can see only itself, so all of its weight lands on itself",
    "zh": "只能看见自己，全部权重都落在自己身上",
}
WHAT = {"en": "Each row becomes a probability distribution", "zh": "每一行变成键上的概率分布"}
ANSWER = {"en": "The first token's weight on itself", "zh": "第一个词元对自己的权重"}
SHOTS = Path("/tmp/shots-lessons")


def shot(page: Page, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"class-{name}.png"))


def cell(page: Page, r: int, c: int) -> str:
    """Cell (r, c) of the weights as this screen names it: its query's token, then its key's ("猫→猫"; a toy's
    example tokens are in the screen's language)."""
    table = page.locator("table[data-matrix=weights]").first
    query = table.locator("tbody tr").nth(r).locator("th").inner_text().strip()
    key = table.locator("thead th[scope=col]").nth(c).inner_text().strip()
    return f"{query}→{key}"


def seen(page: Page) -> str:
    """What the screen shows (innerText leaves out what is not displayed)."""
    return str(page.evaluate("document.body.innerText"))


def nothing_told(page: Page, lang: str) -> None:
    """The question is asked; neither the notice, nor what happens, nor the answer is on the screen."""
    expect(page.locator(".lesson-panel .question")).to_be_visible(timeout=WAIT_MS)
    expect(page.locator(".explain .notice")).to_be_hidden()
    expect(page.locator(".explain p[data-hint]").first).to_be_hidden()
    text = seen(page)
    for held in (NOTICE[lang], WHAT[lang], ANSWER[lang]):
        assert held not in text, (page.url, held)


def test_hints_wait_for_the_answer_cells_say_their_tokens_and_a_class_closes_behind_it(
    browser: Browser, live_server: str
) -> None:
    laptop = browser.new_context(viewport={"width": 1280, "height": 720})
    en = browser.new_context(viewport=PHONE, is_mobile=True, has_touch=True)
    zh = browser.new_context(viewport=PHONE, is_mobile=True, has_touch=True, locale="zh-CN")
    try:
        # ---- the teacher's laptop: the step asks, "Show the answer" tells (and so does hints' own text) ----------
        tp = laptop.new_page()
        tp.goto(f"{live_server}{STEP}&lang=en")
        nothing_told(tp, "en")
        shot(tp, "laptop-asks-en")
        tp.click(".lesson-panel details.answer summary")
        expect(tp.locator(".explain .notice")).to_be_visible()
        expect(tp.locator(".explain .notice")).to_contain_text(NOTICE["en"])
        assert ANSWER["en"] in seen(tp) and WHAT["en"] in seen(tp)
        shot(tp, "laptop-told-en")
        tp.click(".lesson-panel details.answer summary")  # shut again for the class
        nothing_told(tp, "en")

        # ---- a class: two phones follow the step; nothing told on them either -----------------------------------
        tp.click("[data-room-start] button")
        expect(tp.locator("#room [data-room-role=teacher]")).to_be_visible(timeout=WAIT_MS)
        code = tp.locator("[data-room-code-text]").inner_text().strip()
        se, sz = en.new_page(), zh.new_page()
        se.goto(f"{live_server}/r/{code}?lang=en")
        sz.goto(f"{live_server}/r/{code}?lang=zh")
        phones = {"en": se, "zh": sz}
        for lang, sp in phones.items():
            expect(sp.locator(".lesson-panel[data-lesson=row-one][data-step='1']")).to_be_attached(timeout=WAIT_MS)
            expect(sp.locator("#room [data-room-role=student]")).to_be_attached(timeout=WAIT_MS)
            expect(sp.locator(".lesson-panel [data-answer-held]")).to_be_visible(timeout=WAIT_MS)
            nothing_told(sp, lang)
            fits_the_phone(sp)
            shot(sp, f"phone-asks-{lang}")

        # ---- the lesson's cell question: each phone's answer and the key by their tokens ------------------------
        ask = tp.locator(".lesson-panel [data-room-ask]")
        expect(ask).to_be_visible(timeout=WAIT_MS)
        ask.click()
        for sp in phones.values():
            expect(sp.locator("[data-room-cell-hint]")).to_be_visible(timeout=WAIT_MS)
        se.locator("table[data-matrix=weights] td[data-row='0'][data-col='0']").tap()
        sz.locator("table[data-matrix=weights] td[data-row='3'][data-col='1']").tap()
        expect(se.locator("[data-room-mine-value]")).to_have_text(cell(se, 0, 0), timeout=WAIT_MS)
        expect(sz.locator("[data-room-mine-value]")).to_have_text(cell(sz, 3, 1), timeout=WAIT_MS)
        expect(tp.locator("#room [data-room-total]")).to_have_text("2", timeout=WAIT_MS)
        for lang, sp in phones.items():
            nothing_told(sp, lang)  # while the class votes, still nothing told
        tp.click("#room [data-room-close]")  # close and reveal
        expect(tp.locator("#room [data-room-prompt]")).to_contain_text("→ " + cell(tp, 0, 0), timeout=WAIT_MS)
        expect(tp.locator("#room [data-room-histogram] li.key .label")).to_have_text(cell(tp, 0, 0))
        for lang, sp in phones.items():
            expect(sp.locator("[data-room-key]")).to_have_text(cell(sp, 0, 0), timeout=WAIT_MS)
            assert "(0, 0)" not in seen(sp)
            # Revealed: the answer opens for the students, and with it the hints, not before it is opened.
            answer = sp.locator(".lesson-panel details.answer")
            expect(answer).to_be_visible(timeout=WAIT_MS)
            expect(sp.locator(".explain .notice")).to_be_hidden()
            shot(sp, f"phone-revealed-{lang}")
            answer.locator("summary").tap()
            expect(sp.locator(".explain .notice")).to_be_visible()
            expect(sp.locator(".explain .notice")).to_contain_text(NOTICE[lang])
            assert ANSWER[lang] in seen(sp)
            fits_the_phone(sp)
            shot(sp, f"phone-told-{lang}")

        # ---- a second cell question, then the teacher steps back to the mask: it closes on every screen ---------
        tp.locator("#room [data-room-clear]").click()
        expect(tp.locator(".lesson-panel [data-room-ask]")).to_be_visible(timeout=WAIT_MS)
        tp.locator(".lesson-panel [data-room-ask]").click()
        for sp in phones.values():
            expect(sp.locator("[data-room-cell-hint]")).to_be_visible(timeout=WAIT_MS)
        pid = tp.evaluate(f"fetch('/api/v1/rooms/{code}').then(r => r.json()).then(r => r.poll)")
        assert pid
        tp.click("a[data-action=prev]")  # stage 3: the mask's matrices
        expect(tp.locator("#stage")).to_have_attribute("data-stage", "mask", timeout=WAIT_MS)
        for sp in phones.values():
            expect(sp.locator("#stage")).to_have_attribute("data-stage", "mask", timeout=WAIT_MS)
            expect(sp.locator("[data-room-question]")).to_be_hidden(timeout=WAIT_MS)
            expect(sp.locator("td.pollable")).to_have_count(0)
        expect(tp.locator("#room [data-room-results]")).to_be_hidden(timeout=WAIT_MS)
        se.locator("table[data-matrix=masked] td[data-row='1'][data-col='0']").tap()  # a tap here answers nothing
        shot(se, "phone-stepped-back-en")
        results = tp.evaluate(f"fetch('/api/v1/rooms/{code}/polls/{pid}').then(r => r.json())")
        assert results["status"] == "closed" and results["counts"] == {}, results

        # ---- the class ends: nobody is left to ask -------------------------------------------------------------
        expect(tp.locator(".lesson-panel [data-room-ask]")).to_be_visible()
        tp.once("dialog", lambda d: d.accept())
        tp.click("#room [data-room-end]")
        expect(tp.locator("#room [data-room-ended]")).to_be_visible(timeout=WAIT_MS)
        expect(tp.locator("[data-room-ask]")).to_have_count(0)
        tp.click("a[data-action=next]")  # the lab stepped after the end: its new panel offers no question either
        expect(tp.locator("#stage")).to_have_attribute("data-stage", "softmax", timeout=WAIT_MS)
        until(lambda: tp.locator(".lesson-panel").count() == 1, lambda: "the lesson panel is gone")
        expect(tp.locator("[data-room-ask]")).to_have_count(0)
        shot(tp, "laptop-ended-en")
    finally:
        for context in (laptop, en, zh):
            context.close()


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_projector_makes_room_for_the_hints_when_the_answer_opens(
    browser: Browser, live_server: str, lang: str
) -> None:
    """Presenter mode sizes its words' column to what it shows: the step's explanations, held at first, come with
    "Show the answer" and the column is fitted again (static/lab.js), so at 1920×1080 what to notice ends on screen
    instead of under it."""
    ctx = browser.new_context(viewport={"width": 1920, "height": 1080})
    try:
        page = ctx.new_page()
        page.goto(f"{live_server}{STEP}&present=1&lang={lang}")
        page.wait_for_selector("#stage[data-fit]", state="attached")
        nothing_told(page, lang)
        page.click(".lesson-panel details.answer summary")
        notice = page.locator(".explain .notice")
        expect(notice).to_be_visible()
        until(lambda: notice.bounding_box()["y"] + notice.bounding_box()["height"] <= 1080,  # type: ignore[index]
              lambda: f"what to notice ends at {notice.bounding_box()}, under the screen")  # fmt: skip
        shot(page, f"projector-told-{lang}")
    finally:
        ctx.close()
