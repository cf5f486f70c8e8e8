"""A page that is one card (the lessons, the demonstrations, the parameter counts) keeps the lab's margins at a
laptop's and a phone's width: a class saw /lessons drawn edge to edge, unlike the lab (issue #42, item 6)."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page

pytestmark = pytest.mark.browser


@pytest.mark.parametrize("path", ["/lessons", "/demos", "/params"])
@pytest.mark.parametrize("size", [(1280, 720), (390, 844)])
@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_one_card_page_is_never_edge_to_edge(
    page: Page, live_server: str, path: str, size: tuple[int, int], lang: str
) -> None:
    page.set_viewport_size({"width": size[0], "height": size[1]})
    page.goto(f"{live_server}{path}?lang={lang}")
    box = page.locator("main").bounding_box()
    assert box is not None
    width = page.evaluate("document.documentElement.clientWidth")
    gap = 8 if size[0] < 700 else 16
    assert box["x"] >= gap and box["x"] + box["width"] <= width - gap, (box, width)
