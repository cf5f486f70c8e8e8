"""A class walk (stop 52): in presenter mode at 1920×1080 a page's own controls stayed at laptop size (14–18 px)
while the rest was scaled for the back of the room. Now every visible control of a page's form (its labels, fields,
buttons; a folded form's summary) is at least 20 px there, as the lesson's controls are, in both languages; the page
still fits the screen's width. A grid whose cells are buttons (the attribution's heads) keeps its numbers' size."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Browser, expect

pytestmark = pytest.mark.browser

# Pages whose form shows on the projector (a stepping page's form gives way there), as a class opens them.
PAGES = [
    "/lens?text=The+cat+sat+on+the+mat.",
    "/generate?max_new_tokens=2&do_sample=true&seed=0",
    "/sinks",
    "/tiles",
    "/demos",
    "/params",
    "/train",
    "/cross",
    "/architectures",
    "/attribution",
]
CONTROLS = """() => {
  const shown = e => { const r = e.getBoundingClientRect(); return r.width > 0 && r.height > 0 && e.checkVisibility(); };
  const els = [...document.querySelectorAll('main form :is(label, input:not([type=hidden]), select, button, textarea, legend),'
    + ' main details.form-box > summary')].filter(e => shown(e) && !e.closest('table'));
  const px = e => parseFloat(getComputedStyle(e).fontSize);
  return {n: els.length, small: els.filter(e => px(e) < 20).map(e => [e.outerHTML.slice(0, 60), px(e)]),
          width: document.documentElement.scrollWidth};
}"""


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_pages_controls_are_read_from_the_back(browser: Browser, live_server: str, lang: str) -> None:
    ctx = browser.new_context(viewport={"width": 1920, "height": 1080})
    try:
        page = ctx.new_page()
        page.set_default_timeout(180_000)  # a real model's first answer on a cold, shared machine
        for path in PAGES:
            page.goto(f"{live_server}{path}{'&' if '?' in path else '?'}present=1&lang={lang}")
            expect(page.locator("body")).to_have_class(re.compile(r"\bpresent\b"))
            expect(page.locator("main[data-deferred]")).to_have_count(0)  # a deferred page's shell: its page came
            got = page.evaluate(CONTROLS)
            assert got["n"] > 0 and not got["small"], (path, lang, got)
            assert got["width"] <= 1920, (path, lang, got)
    finally:
        ctx.close()
