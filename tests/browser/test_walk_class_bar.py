"""A class walk (stop 52): the class bar along the foot of the page, as a teacher projecting in normal mode and a
student on a phone meet it.

1. At 1280×720 outside presenter mode, with a class started, the bar covered the lesson card's own buttons (Next
   step, Ask the class): 140–345 px of 720. Now every button of the card is on the first screen above the bar, with
   the class started and with its question asked; with the answers revealed (the bar's tallest) each is still
   reachable: scrolled to, it is above the bar and a click lands on it.
2. On a phone a revealed poll's answers ran past the screen's edge (a long option, a formula with no space): now
   nothing of the bar leaves the screen, and the page does not scroll sideways."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import Browser, Page, expect

from tests.browser.remote import PHONE, WAIT_MS

pytestmark = pytest.mark.browser

LESSON = "/?stage=3&mask=causal&lesson=mask-toggle&lesson_step=1"  # the card's question is three lines: the tallest

# Each visible control of the lesson card: its bottom and the bar's top, as the page stands (no scrolling), and
# whether, scrolled to as a browser scrolls to a focused control, it sits above the bar and takes the click there.
CARD = """reach => {
  const room = document.getElementById('room');
  const els = [...document.querySelectorAll('.lesson-panel :is(a, button, summary)')].filter(e => e.checkVisibility());
  return els.map(e => {
    if (reach) e.scrollIntoView({block: 'nearest'});
    const r = e.getBoundingClientRect(), top = room.getBoundingClientRect().top;
    const hit = document.elementFromPoint(r.left + r.width / 2, r.top + r.height / 2);
    return {name: e.textContent.trim(), bottom: r.bottom, bar: top, hit: !!hit && (hit === e || e.contains(hit))};
  });
}"""


def card(page: Page, *, reach: bool = False) -> list[dict[str, Any]]:
    page.evaluate("() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")  # the bar settled
    return page.evaluate(CARD, reach)


def above(controls: list[dict[str, Any]], where: str) -> None:
    assert controls, where
    for c in controls:
        assert c["bottom"] <= c["bar"] + 1 and c["hit"], (where, c, controls)


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_lesson_cards_buttons_stay_above_the_class_bar(browser: Browser, live_server: str, lang: str) -> None:
    ctx = browser.new_context(viewport={"width": 1280, "height": 720})
    try:
        page = ctx.new_page()
        page.set_default_timeout(WAIT_MS)
        page.goto(f"{live_server}{LESSON}&lang={lang}")
        page.click("[data-room-start] button")
        expect(page.locator("#room .room-bar [data-room-end]")).to_be_visible()
        expect(page.locator(".lesson-panel [data-room-ask]")).to_be_visible()
        page.evaluate("scrollTo(0, 0)")
        expect(page.locator(".lesson-panel [data-lesson-step=next]")).to_be_visible()
        above(card(page), f"class started {lang}")  # on the first screen, nothing scrolled
        page.click(".lesson-panel [data-room-ask]")
        expect(page.locator("#room [data-room-prompt]")).to_be_visible()
        page.evaluate("scrollTo(0, 0)")
        above(card(page), f"question asked {lang}")
        page.click("#room [data-room-close]")
        expect(page.locator("#room [data-room-histogram]")).to_be_visible()
        above(card(page, reach=True), f"answers revealed {lang}")  # the bar's tallest: each reachable above it
        page.locator(".lesson-panel [data-lesson-step=next]").click(trial=True)  # nothing in the way of the click
    finally:
        ctx.close()


OVER = """() => {
  const room = document.getElementById('room');
  return {page: document.documentElement.scrollWidth, bar: room.scrollWidth - room.clientWidth,
    off: [...room.querySelectorAll('*')].filter(e => e.checkVisibility() && e.getBoundingClientRect().right > innerWidth + 1)
      .map(e => e.tagName + '.' + e.className)};
}"""
LONG = ["softmax(QKᵀ/√d_k)·V=Σ_j_α_ij·v_j_(the_weighted_average_of_the_values)",
        "Every query is compared with every key, so there are N × N scores in all", "猫"]  # fmt: skip


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_revealed_poll_fits_a_phone(browser: Browser, live_server: str, lang: str) -> None:
    teacher = browser.new_context(viewport={"width": 1280, "height": 720})
    student = browser.new_context(viewport=PHONE, is_mobile=True, has_touch=True)
    try:
        tp, sp = teacher.new_page(), student.new_page()
        for p in (tp, sp):
            p.set_default_timeout(WAIT_MS)
        tp.goto(f"{live_server}/?stage=2&lang={lang}")
        tp.click("[data-room-start] button")
        code = tp.locator("[data-room-code-text]").inner_text().strip()
        sp.goto(f"{live_server}/r/{code}?lang={lang}")
        expect(sp.locator("#room [data-room-role=student]")).to_be_visible()
        poll = {"prompt": "Which_formula_gives_the_output_of_one_attention_head?", "kind": "choice", "options": LONG,
                "answer": LONG[0]}  # fmt: skip
        r = tp.request.post(f"{live_server}/api/v1/rooms/{code}/polls", data=poll, headers={"Origin": live_server})
        assert r.status == 201, r.text()
        expect(sp.locator("[data-room-question]")).to_be_visible()
        sp.locator("[data-room-options] button").first.click()
        expect(tp.locator("[data-room-total]")).to_have_text("1")
        tp.click("#room [data-room-close]")
        expect(sp.locator("[data-room-reveal] ol.histogram")).to_be_visible()
        got = sp.evaluate(OVER)
        assert got["page"] <= PHONE["width"] and got["bar"] <= 0 and not got["off"], got
        # the answers read whole: each label's bar and count beside it on screen
        rows = sp.locator("[data-room-reveal] ol.histogram li").evaluate_all(
            "ls => ls.map(l => [...l.children].map(c => c.getBoundingClientRect().right))"
        )
        assert len(rows) == 3 and all(right <= PHONE["width"] for row in rows for right in row), rows
    finally:
        teacher.close()
        student.close()
