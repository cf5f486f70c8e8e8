"""/cross in a real browser (#47, from a new-user walk): each step of the lesson "How a translator reads its source"
lands on its stage with the lesson's question and Next still in view (the step's #fragment is ~3,700 px below the
panel: the panel stays at the top of the screen and the stage stops under it), and the nonlinearity panel's tables
are readable (every printed column in view at 1280×720 and in presenter mode at 1920×1080; on a 390×844 phone a
wider table scrolls sideways with the site's fade), en and zh.

Every wait polls the page for a state; none sleeps for a time."""

from __future__ import annotations

import pytest
from playwright.sync_api import Browser

from app.web.lessons import BY_SLUG, step_url

pytestmark = pytest.mark.browser
SLUG = "translator-reads"
SCREENS = ((1280, 720, False), (1920, 1080, True), (390, 844, False))
BOX = """sel => { const e = document.querySelector(sel); if (!e) return null;
  const r = e.getBoundingClientRect(); return {top: r.top, bottom: r.bottom}; }"""
# Each nonlinearity table: its width, its scroll box's inner width, and whether that box fades at its right edge.
TABLES = """() => [...document.querySelectorAll('#cross-nonlinear table')].map(t => {
  const s = t.closest('.scroll');
  return {cls: t.className, width: t.scrollWidth, room: s.clientWidth, scrolls: s.scrollWidth > s.clientWidth,
          fade: getComputedStyle(s).maskImage || getComputedStyle(s).webkitMaskImage || ''}; })"""


@pytest.mark.parametrize(("width", "height", "present"), SCREENS)
def test_every_step_lands_with_its_question_in_view(browser: Browser, live_server: str, width: int, height: int,
                                                    present: bool) -> None:  # fmt: skip
    lesson = BY_SLUG[SLUG]
    page = browser.new_page(viewport={"width": width, "height": height})
    try:
        for k, step in enumerate(lesson.steps, start=1):
            anchor = step.url.partition("#")[2]
            for lang in ("en", "zh"):
                url = step_url(lesson, k, lang, {"present": "1"} if present else None)
                page.goto(live_server + url)
                page.wait_for_function("() => document.readyState === 'complete'")
                page.wait_for_function("id => document.getElementById(id).getBoundingClientRect().top < innerHeight",
                                       arg=anchor)  # fmt: skip
                question = page.evaluate(BOX, ".lesson-panel .question")
                nav = page.evaluate(BOX, ".lesson-panel .lesson-nav")
                beside = page.evaluate(BOX, ".lesson-beside")
                place = page.evaluate(BOX, f"#{anchor}")
                where = (k, lang, width, question, nav, place)
                if anchor.startswith("stage-"):  # the step jumped far down to its stage …
                    assert page.evaluate("scrollY") > 1500, where
                assert question["top"] >= 0 and question["bottom"] <= height, where  # … its question in view
                assert nav["top"] >= 0 and nav["bottom"] <= min(height, beside["bottom"] + 1), where  # and Next
                assert beside["bottom"] - 2 <= place["top"] < height - 100, where  # the stage just under the panel
    finally:
        page.close()


@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize(("width", "height", "present"), SCREENS)
def test_the_nonlinearity_tables_are_readable(browser: Browser, live_server: str, width: int, height: int,
                                              present: bool, lang: str) -> None:  # fmt: skip
    page = browser.new_page(viewport={"width": width, "height": height})
    try:
        page.goto(f"{live_server}/cross?lang={lang}" + ("&present=1" if present else ""))
        page.wait_for_function("() => document.querySelectorAll('#cross-nonlinear table').length === 4")
        tables = page.evaluate(TABLES)
        for t in tables:
            if width >= 1280:  # a laptop and the projector: both comparisons side by side, every column in view
                assert not t["scrolls"], (width, t)
            elif t["scrolls"]:  # a phone: what is wider scrolls, and its right edge says so
                assert "gradient" in t["fade"], (width, t)
        first = page.locator("#nl-sum table.nl-out thead th").last
        box, panel = first.bounding_box(), page.locator("#cross-nonlinear").bounding_box()
        if width >= 1280:  # the last printed column of the right-hand table (the … mark) is inside the panel
            assert box is not None and panel is not None and box["x"] + box["width"] <= panel["x"] + panel["width"]
    finally:
        page.close()
