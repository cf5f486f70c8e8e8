"""In a real browser (#47): /cost in both languages. Presenter mode reached by pressing its switch at 1280×720 shows
the crossover and both charts whole; on a 390×844 phone the charts are their narrow drawings, their numbers at least
10 px, nothing wider than the screen; a setting changed in the form brings the new crossover (polled for, no sleeps);
a bad value keeps the form as typed and says why beside the field, naming it by its label."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, expect

from app.cost.flops import SHAPES, crossover
from tests.browser.navigate import click_to_load

pytestmark = pytest.mark.browser
LEAVE = {"en": "Leave presenter mode", "zh": "退出演示模式"}
LABEL = {"en": "Time up to N (n_max)", "zh": "计时到 N（n_max）"}


@pytest.fixture(scope="module")
def server(live_server: str) -> str:
    """The session's server: /cost reads no model (only the shapes and this machine's matmuls), so the models it has
    loaded change nothing here, and a server of this file's own cost a start (7 s on CI) for nothing."""
    return live_server


def crossing(model: str) -> str:
    return str(crossover(SHAPES[model])[0])  # as the page writes it in data-crossover


def overflow(page: Page) -> int:
    """How far the page is wider than the window (0: nothing to scroll sideways)."""
    return int(page.evaluate("document.documentElement.scrollWidth - document.documentElement.clientWidth"))


SWITCH = "header a[data-toggle=present]"  # the presenter switch: the header's, as on every page (its shell's too)


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_presenter_mode_by_its_switch(page: Page, server: str, lang: str) -> None:
    page.set_viewport_size({"width": 1280, "height": 720})
    page.goto(f"{server}/cost?model=toy&n_max=64&lang={lang}")
    expect(page.locator(".cost-crossover")).to_have_attribute("data-crossover", crossing("toy"))
    expect(page.locator("a[data-toggle=present]")).to_have_count(1)
    click_to_load(page, page.locator(SWITCH))  # a plain link: the new page loaded before it is measured
    expect(page.locator("body")).to_have_class(re.compile(r"\bpresent\b"))
    expect(page).to_have_url(re.compile(r"present=1"))
    expect(page.locator("a[data-toggle=present]")).to_have_count(1)
    crossover_line = page.locator(".cost-crossover")
    expect(crossover_line).to_have_attribute("data-crossover", crossing("toy"))
    expect(crossover_line).to_be_visible()
    for name in ("flops", "time"):
        chart = page.locator(f"svg[data-chart='{name}']")
        expect(chart).to_be_visible()
        box = chart.bounding_box()
        assert box is not None and box["width"] <= 1280 and box["x"] >= 0
        expect(page.locator(f"svg[data-chart='{name}-narrow']")).to_be_hidden()
    assert overflow(page) == 0
    expect(page.locator(SWITCH)).to_have_text(LEAVE[lang])


TICKS = """() => Object.fromEntries(['flops', 'time'].map(name => {
  const s = document.querySelector(`svg[data-chart='${name}']`);
  const ticks = [...s.querySelectorAll('text.tick')].map(t => parseFloat(getComputedStyle(t).fontSize) * s.getScreenCTM().a);
  const r = s.getBoundingClientRect();
  return [name, {n: ticks.length, least: Math.min(...ticks), width: r.width, right: r.right}];
}))"""


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_charts_grow_with_the_projector(page: Page, server: str, lang: str) -> None:
    """Presenter mode by its switch at 1920×1080: both charts wider than the page's 560 px, their tick numbers at
    least 21 px on the screen (#47's walk: 560×320, ~11 px), on the screen; at 1280×720 nothing scrolls sideways."""
    page.set_viewport_size({"width": 1920, "height": 1080})
    page.goto(f"{server}/cost?model=toy&n_max=64&lang={lang}")
    expect(page.locator(".cost-crossover")).to_have_attribute("data-crossover", crossing("toy"))
    click_to_load(page, page.locator(SWITCH))  # a plain link: the new page loaded before it is measured
    expect(page.locator("body")).to_have_class(re.compile(r"\bpresent\b"))
    expect(page.locator(".cost-crossover")).to_have_attribute("data-crossover", crossing("toy"))
    for name, c in page.evaluate(TICKS).items():
        assert c["n"] >= 6 and c["least"] >= 21, (name, c)
        assert c["width"] > 560 and c["right"] <= 1920, (name, c)
    assert overflow(page) == 0
    page.set_viewport_size({"width": 1280, "height": 720})
    for name, c in page.evaluate(TICKS).items():
        assert c["least"] >= 13 and c["right"] <= 1280, (name, c)
    assert overflow(page) == 0


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_phone_reads_the_charts(page: Page, server: str, lang: str) -> None:
    page.set_viewport_size({"width": 390, "height": 844})
    page.goto(f"{server}/cost?model=smollm2&n_max=64&lang={lang}")
    expect(page.locator(".cost-crossover")).to_have_attribute("data-crossover", crossing("smollm2"))
    for name in ("flops", "time"):
        expect(page.locator(f"svg[data-chart='{name}']")).to_be_hidden()
        narrow = page.locator(f"svg[data-chart='{name}-narrow']")
        expect(narrow).to_be_visible()
        box = narrow.bounding_box()
        assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= 390
        sizes = narrow.locator("text").evaluate_all(
            "ts => ts.map(t => parseFloat(getComputedStyle(t).fontSize) * t.ownerSVGElement.getScreenCTM().a)"
        )
        assert min(sizes) >= 10, sizes  # the smallest text as drawn on the screen, in CSS pixels
    assert overflow(page) == 0


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_changed_setting_brings_its_crossover(page: Page, server: str, lang: str) -> None:
    page.set_viewport_size({"width": 1280, "height": 720})
    page.goto(f"{server}/cost?model=toy&n_max=64&lang={lang}")
    shown = page.locator(".cost-crossover")
    expect(shown).to_have_attribute("data-crossover", crossing("toy"))
    page.locator("select[name=model]").select_option("gpt2")
    page.locator("form.arch-form button[type=submit]").click()
    expect(shown).to_have_attribute("data-crossover", crossing("gpt2"))  # polled until the new page is in
    expect(shown).to_contain_text("1536")
    expect(page.locator("select[name=model]")).to_have_value("gpt2")
    expect(page.locator("input[name=n_max]")).to_have_value("64")


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_bad_value_keeps_the_form(page: Page, server: str, lang: str) -> None:
    page.set_viewport_size({"width": 390, "height": 844})
    page.goto(f"{server}/cost?model=smollm2&n_max=5000&lang={lang}")
    expect(page.locator(".error[role=alert]")).to_contain_text(LABEL[lang])
    expect(page.locator("select[name=model]")).to_have_value("smollm2")  # not reset to the first choice
    expect(page.locator("input[name=n_max]")).to_have_value("5000")
    beside = page.locator("[data-field-error=n_max]")
    expect(beside).to_be_visible()
    expect(beside).to_contain_text("2048")
    assert overflow(page) == 0
    expect(page.locator("a[data-toggle=present]")).to_have_count(1)  # the header's, not a second one in <main>
    page.goto(f"{server}/cost?model=gpt3&n_max=abc&lang={lang}")  # neither value one the form offers
    expect(page.locator("select[name=model]")).to_have_value("gpt3")  # shown as typed, not GPT-2
    expect(page.locator("input[name=n_max]")).to_have_value("abc")  # a number field would show it empty
