"""A class walk (walk 6): the projector at 1280×720 (presenter mode, reached by its button) with a class on a loopback
server. The warning that phones cannot reach the server was on the wall twice (under the class's QR code, three
lines, and on the bar), and with a lesson step's question revealed the bar rose over the words' column (the lesson
panel and the stage's heading under it). Now the warning is the bar's alone, and the words end above the bar with
the question open and revealed."""

from __future__ import annotations

import pytest
from playwright.sync_api import Browser, Page, expect

from tests.browser.remote import WAIT_MS

pytestmark = pytest.mark.browser

LESSON = "/?stage=3&mask=causal&lesson=mask-toggle&lesson_step=1"

# The lowest visible thing of the words' column (its leaves) and the bar's top, once the fitters have run.
WORDS = """() => {
  const bar = document.getElementById('room').getBoundingClientRect().top;
  const leaves = [...document.querySelectorAll('#stage .stage-text *')]
    .filter(e => !e.children.length && e.checkVisibility() && e.getBoundingClientRect().height > 0);
  return {bar: bar, words: Math.max(...leaves.map(e => e.getBoundingClientRect().bottom))};
}"""


def words_above_the_bar(page: Page, where: str) -> None:
    def settled() -> dict[str, float]:
        page.evaluate("() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")
        return page.evaluate(WORDS)

    got = settled()
    assert got["words"] <= got["bar"] + 1, (where, got)


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_projector_warns_once_and_keeps_its_words_above_a_poll(browser: Browser, live_server: str,
                                                                     lang: str) -> None:  # fmt: skip
    ctx = browser.new_context(viewport={"width": 1280, "height": 720})
    try:
        page = ctx.new_page()
        page.set_default_timeout(WAIT_MS)
        page.goto(f"{live_server}{LESSON}&lang={lang}")
        page.locator("a[data-toggle=present]").first.click()
        expect(page.locator("body.present")).to_be_attached()
        page.click("[data-room-start] button")
        expect(page.locator("aside.qr[data-room-join]")).to_be_visible()
        expect(page.locator(".lesson-panel [data-room-ask]")).to_be_visible()
        shown = page.locator("[data-warning=loopback]").evaluate_all("ws => ws.filter(w => w.checkVisibility()).length")
        assert shown == 1, shown  # the test's server listens on 127.0.0.1: said once, on the bar
        expect(page.locator("#room [data-warning=loopback]")).to_be_visible()
        words_above_the_bar(page, "class started")
        page.click(".lesson-panel [data-room-ask]")
        expect(page.locator("#room [data-room-prompt]")).to_be_visible()
        words_above_the_bar(page, "question asked")
        page.click("#room [data-room-close]")
        expect(page.locator("#room [data-room-histogram]")).to_be_visible()
        words_above_the_bar(page, "answers revealed")
    finally:
        ctx.close()
