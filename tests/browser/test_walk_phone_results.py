"""A class walk (walk 6): a revealed poll on a student's 390×844 phone. The bar (capped at a third of the screen)
held the question, the options again (disabled), the answer, the key, the histogram and Dismiss below them: the
results ran below the screen's edge inside the bar and Dismiss was off screen, reachable only by scrolling a bar a
phone shows no scrollbar for (and, answered and still open, "Your answer" ran 15 px under the edge). Now the
revealed results read whole on the first screen of the bar (no option twice:
the histogram names each), and Dismiss is on screen and takes the tap where it is."""

from __future__ import annotations

import pytest
from playwright.sync_api import Browser, expect

from tests.browser.remote import PHONE, WAIT_MS

pytestmark = pytest.mark.browser

LESSON = "/?stage=3&mask=causal&lesson=mask-toggle&lesson_step=1"  # three long options, the question two lines

SEEN = """() => {
  const room = document.getElementById('room'), box = room.getBoundingClientRect();
  const d = room.querySelector('[data-room-dismiss]').getBoundingClientRect();
  const hit = document.elementFromPoint(d.left + d.width / 2, d.top + d.height / 2);
  const rows = [...room.querySelectorAll('[data-room-reveal] ol.histogram li')].map(l => l.getBoundingClientRect().bottom);
  return {scroll: room.scrollHeight - room.clientHeight, top: box.top, bottom: Math.min(box.bottom, innerHeight),
          dismiss: [d.top, d.bottom], hit: !!hit && !!hit.closest('[data-room-dismiss]'), rows: rows};
}"""


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_revealed_poll_reads_whole_on_a_phone_and_dismisses_there(browser: Browser, live_server: str,
                                                                    lang: str) -> None:  # fmt: skip
    teacher = browser.new_context(viewport={"width": 1280, "height": 720})
    student = browser.new_context(viewport=PHONE, is_mobile=True, has_touch=True)
    try:
        tp, sp = teacher.new_page(), student.new_page()
        for p in (tp, sp):
            p.set_default_timeout(WAIT_MS)
        tp.goto(f"{live_server}{LESSON}&lang={lang}")
        tp.click("[data-room-start] button")
        code = tp.locator("[data-room-code-text]").inner_text().strip()
        sp.goto(f"{live_server}/r/{code}?lang={lang}")
        expect(sp.locator("#room [data-room-role=student]")).to_be_visible()
        tp.click(".lesson-panel [data-room-ask]")
        expect(sp.locator("[data-room-question] [data-room-options] button").first).to_be_visible()
        sp.locator("[data-room-options] button").first.tap()
        expect(tp.locator("[data-room-total]")).to_have_text("1")
        expect(sp.locator("[data-room-options] button[aria-pressed=true]")).to_be_visible()
        sp.evaluate("() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")
        answered = sp.evaluate(
            "() => { const r = document.getElementById('room'); return r.scrollHeight - r.clientHeight; }"
        )
        assert answered <= 1, answered  # answered, still open: the question, the options (theirs marked) whole
        tp.click("#room [data-room-close]")
        expect(sp.locator("[data-room-reveal] ol.histogram")).to_be_visible()
        sp.evaluate("() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")  # laid out
        got = sp.evaluate(SEEN)
        assert got["scroll"] <= 1, got  # nothing of the results below the bar's edge
        assert len(got["rows"]) == 3 and all(b <= got["bottom"] + 1 for b in got["rows"]), got
        assert got["top"] <= got["dismiss"][0] and got["dismiss"][1] <= got["bottom"] + 1 and got["hit"], got
        box = sp.locator("[data-room-dismiss]").bounding_box()
        assert box is not None
        sp.touchscreen.tap(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)  # where it is, no scrolling
        expect(sp.locator("[data-room-question]")).to_be_hidden()
    finally:
        teacher.close()
        student.close()
