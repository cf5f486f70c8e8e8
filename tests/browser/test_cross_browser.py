"""/cross in a real browser (#47, from a new-user walk): each step of the lesson "How a translator reads its source"
lands on its stage with the lesson's question and Next still in view (the step's #fragment is ~3,700 px below the
panel: the panel stays at the top of the screen and the stage stops under it), and the nonlinearity panel's tables
are readable (every printed column in view at 1280×720 and in presenter mode at 1920×1080; on a 390×844 phone a
wider table scrolls sideways with the site's fade), en and zh. From a second walk: the runs line follows a live run
as its card does (both redrawn on the run's events by htmx, no reload); in presenter mode (pressed, not asked in the URL) the
Q/K/V tables fit the card at 1280×720 and 1920×1080, the snapshots grow with the screen and the loss chart's numbers
read from the back at 1920×1080 (18 px, as /train's); the form offers a
direction for number words alone, with a script and without.

Every wait polls the page for a state; none sleeps for a time."""

from __future__ import annotations

import pytest
from playwright.sync_api import Browser, Page, expect

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


def trained(page: Page, live_server: str, body: dict) -> str:
    """A run started through the API and polled until done; its id."""
    run_id = page.request.post(f"{live_server}/api/v1/train", data=body).json()["id"]
    page.goto(f"{live_server}/cross?run={run_id}")
    expect(page.locator("#cross-run")).to_have_attribute("data-status", "done")  # redrawn on the run's events, polled
    return run_id


def test_the_runs_line_follows_the_run_as_its_card_does(browser: Browser, live_server: str) -> None:
    page = browser.new_page(viewport={"width": 1280, "height": 720})
    try:
        page.goto(f"{live_server}/cross")
        page.fill("input[name=steps]", "60")
        page.click(".train-form button[type=submit]")  # the form's run, followed on the page it lands on
        page.wait_for_url("**/cross?run=*")
        expect(page.locator("#cross-run")).to_have_attribute("data-status", "done")
        run_id = page.url.split("run=")[1].split("&")[0]
        assert page.locator("#cross-run").inner_text().startswith(f"Run {run_id} · reverse a sequence · step 60 of 60")
        done = f"{run_id} · reverse a sequence · 60/60 · done"
        expect(page.locator(".cross-runs a[aria-current]")).to_have_text(done)  # redrawn with the card, no reload
    finally:
        page.close()


# Each of the five stages' tables: its width, its .scroll box's, and the stage card's inner right edge.
STAGE_TABLES = """() => [...document.querySelectorAll('.cross-stages table.cross-matrix')].map(t => {
  const s = t.closest('.scroll'), card = t.closest('li.stage'), c = card.getBoundingClientRect();
  return {stage: card.id, width: t.scrollWidth, room: s.clientWidth, scrolls: s.scrollWidth > s.clientWidth,
          right: t.getBoundingClientRect().right, card: c.right - parseFloat(getComputedStyle(card).paddingRight),
          fade: getComputedStyle(s).maskImage || getComputedStyle(s).webkitMaskImage || '',
          font: parseFloat(getComputedStyle(t.querySelector('td')).fontSize)}; })"""
SNAPS = "() => [...document.querySelectorAll('.cross-snaps svg')].map(s => s.getBoundingClientRect().width)"
# The loss chart's tick numbers as drawn on screen (their size in the drawing's units × the drawing's scale), px.
TICKS = """() => [...document.querySelectorAll('.cross-chart svg text.tick')]
  .map(t => parseFloat(getComputedStyle(t).fontSize) * t.getScreenCTM().a)"""


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_presenter_mode_fits_the_tables_and_grows_the_snapshots(browser: Browser, live_server: str, lang: str) -> None:
    body = {"arch": "encoder-decoder", "task": "reverse", "steps": 20, "length": 5, "batch": 16, "eval_every": 10,
            "n_snapshots": 3}  # fmt: skip
    widths: dict[int, list[float]] = {}
    run_id = ""
    for width, height in ((1280, 720), (1920, 1080)):
        page = browser.new_page(viewport={"width": width, "height": height})  # a fresh one: presenter mode off
        try:
            run_id = run_id or trained(page, live_server, body)
            page.goto(f"{live_server}/cross?run={run_id}&lang={lang}")
            page.click("a.present-toggle")  # presenter mode as a teacher reaches it
            page.wait_for_selector("body.present")  # the link navigates: a predicate on document.body can meet no body
            page.wait_for_load_state("load")
            tables = page.evaluate(STAGE_TABLES)
            assert [t["stage"] for t in tables][:3] == ["stage-projection"] * 3  # Q, K, V: d_k = 16 columns
            for t in tables:  # every column in view, at the projector's size of number (26 px at 1080p)
                assert not t["scrolls"] and t["right"] <= t["card"] + 1, (width, t)
                assert t["font"] >= (24 if width == 1920 else 14), (width, t)
            expect(page.locator('#cross-run a[href$="/export"]')).to_be_hidden()  # the teacher's, as /train's
            widths[width] = page.evaluate(SNAPS)
            assert len(widths[width]) == 3
            if width == 1920:  # the loss chart's tick numbers read from the back, as /train's (18 px or more)
                ticks = page.evaluate(TICKS)
                assert ticks and min(ticks) >= 18, ticks
        finally:
            page.close()
    assert min(widths[1920]) >= 1.15 * max(widths[1280]) and min(widths[1920]) >= 240, widths


@pytest.mark.parametrize("script", [True, False])
@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_direction_is_offered_for_number_words_alone(browser: Browser, live_server: str, lang: str,
                                                         script: bool) -> None:  # fmt: skip
    context = browser.new_context(viewport={"width": 1280, "height": 720}, java_script_enabled=script)
    page = context.new_page()
    try:
        page.goto(f"{live_server}/cross?lang={lang}")
        direction = page.locator(".train-form select[name=direction]")
        expect(direction).to_be_hidden()  # reversing a sequence, chosen by default: no direction
        page.select_option(".train-form select[name=task]", "numbers")
        expect(direction).to_be_visible()
        page.select_option(".train-form select[name=task]", "reverse")
        expect(direction).to_be_hidden()
    finally:
        context.close()
