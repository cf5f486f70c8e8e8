"""A class walk (stop 52): on a phone the wide tables of /generate (the filters), /lens and /models scrolled sideways
with no sign that they did. Now the right edge of a table that goes on fades out, drawn over its coloured cells,
and the fade is gone once the table is scrolled to its end; a table that fits has none (CSS alone)."""

from __future__ import annotations

import pytest
from playwright.sync_api import Browser, expect

from tests.browser.remote import PHONE

pytestmark = pytest.mark.browser

PAGES = {
    "/generate?text=The+capital+of+France+is&max_new_tokens=3&do_sample=true&seed=0&temperature=0.7&top_k=20&top_p=0.9&"
    "min_p=0.01": ".filters-scroll",
    "/lens?text=The+cat+sat+on+the+mat.": ".scroll.lens-scroll",
    # the table of the lab's models (a second, of encoder–decoders, follows once a run has trained in this server)
    "/models": "main.models-page > .scroll:has(> table.models)",
}
# the box's overflow and its fade: the right edge's alpha under the mask (read from the computed --more-right)
CUE = """sel => { const box = document.querySelector(sel); const s = getComputedStyle(box);
  return {over: box.scrollWidth - box.clientWidth, fade: parseFloat(s.getPropertyValue('--more-right')) || 0,
          mask: s.maskImage}; }"""
FRAME = "() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))"


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_wide_table_on_a_phone_shows_that_it_scrolls(browser: Browser, live_server: str, lang: str) -> None:
    ctx = browser.new_context(viewport=PHONE, is_mobile=True, has_touch=True)
    try:
        page = ctx.new_page()
        page.set_default_timeout(180_000)
        for path, sel in PAGES.items():
            page.goto(f"{live_server}{path}{'&' if '?' in path else '?'}lang={lang}")
            expect(page.locator(sel)).to_be_visible()
            page.evaluate(FRAME)
            got = page.evaluate(CUE, sel)
            assert got["over"] > 0 and got["fade"] >= 30 and "gradient" in got["mask"], (path, lang, got)
            page.locator(sel).evaluate("b => { b.scrollLeft = b.scrollWidth; }")
            page.evaluate(FRAME)
            end = page.evaluate(CUE, sel)
            assert end["fade"] == 0, (path, lang, end)  # at its end: nothing more to the right
        page.set_viewport_size({"width": 1280, "height": 720})  # a short sentence fits a laptop: no cue
        page.goto(f"{live_server}/lens?text=The+cat+sat.&lang={lang}")
        page.evaluate(FRAME)
        fits = page.evaluate(CUE, ".scroll.lens-scroll")
        assert fits["over"] <= 0 and fits["fade"] == 0, fits
    finally:
        ctx.close()
