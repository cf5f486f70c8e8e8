"""Accessibility in a real browser: the keyboard focus ring shows on a dark cell, and a tap on the heat map (a
phone has no hover) shows the readout, also after the tile it opens has been swapped in."""

from __future__ import annotations

import pytest
from playwright.sync_api import Browser, Page, expect

from app.render.stages import SMALL_TOKENS

pytestmark = pytest.mark.browser

RING = """a => { const s = getComputedStyle(a), td = getComputedStyle(a.closest('td'));
  return {focusVisible: a.matches(':focus-visible'), outlineStyle: s.outlineStyle, outlineWidth: s.outlineWidth,
          outlineColor: s.outlineColor, boxShadow: s.boxShadow, cell: td.backgroundColor}; }"""


def test_the_focus_ring_shows_on_a_dark_cell(page: Page, live_server: str):
    page.goto(f"{live_server}/?stage=2&lang=en")
    # the score with the largest |value| takes an end of RdBu: the darkest blue or red
    link = page.locator("table[data-matrix=scaled] td.dv-m5 a, table[data-matrix=scaled] td.dv-p5 a").first
    page.keyboard.press("Tab")  # the last input was the keyboard: focus() is then :focus-visible, as a Tab would be
    link.focus()
    ring = link.evaluate(RING)
    assert ring["focusVisible"], ring
    assert ring["cell"] in ("rgb(5, 48, 97)", "rgb(103, 0, 31)"), ring  # dv-m5 / dv-p5
    assert ring["outlineStyle"] == "solid" and ring["outlineWidth"] == "3px", ring
    assert "rgb(255, 255, 255)" in ring["boxShadow"], ring  # the white inner ring is what shows on a dark cell


def test_a_tap_on_the_heat_map_shows_the_readout(browser: Browser, live_server: str):
    context = browser.new_context(viewport={"width": 390, "height": 844}, has_touch=True, is_mobile=True)
    try:
        page = context.new_page()
        toks = "+".join(f"w{i}" for i in range(SMALL_TOKENS + 16))  # 40 tokens: a heat map
        page.goto(f"{live_server}/?stage=4&lang=zh&tokens={toks}")
        img = page.locator("#zoom")
        img.scroll_into_view_if_needed()
        expect(page.locator("figure.zoom figcaption")).to_contain_text("点按")
        box = img.bounding_box()
        assert box is not None
        n = SMALL_TOKENS + 16
        page.touchscreen.tap(box["x"] + box["width"] * 36.5 / n, box["y"] + box["height"] * 36.5 / n)  # cell (36, 36)
        expect(page.locator("table[data-matrix=weights] td").first).to_have_attribute("data-row", "24")  # tile opened
        readout = page.locator("#hover-readout")
        expect(readout).to_contain_text("= ")  # the value arrived, in the swapped-in panel
        assert readout.inner_text().startswith("(36: w36, 36: w36)")
        inside = readout.evaluate(
            "o => { const p = o.parentElement.getBoundingClientRect(), r = o.getBoundingClientRect();"
            " return r.left >= p.left - 1 && r.right <= p.right + 1; }"
        )
        assert inside  # kept inside the map on a narrow screen
    finally:
        context.close()
