"""In a real browser (#44): /attribution on a tiny decoder built here, in both languages. A click on a head of the grid
redraws that head's section (and the grid's mark) by htmx, without a full reload, and the address follows; a click on
a token redraws the page's body for that query position; the grid's numbers are the page's JSON twin's. On a tiny
BERT (an encoder) the page says why there is no logit, and attention flow, asked for by its link, is drawn beside
rollout without a reload; both fit a phone and the projector. A head, a key and a sort chosen by htmx are kept by
every later click (the flow link once dropped the key); the grids' headings stay on one line; the lesson big-weight
is clicked through on SmolLM2 and MiniLM in presenter mode (1280×720, 1920×1080) and on a phone, en and zh."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from tests.browser.navigate import click_to_load
from tests.servers import wait_healthy

pytestmark = pytest.mark.browser
TEXT = "The+cat+sat+on+the+mat.+The+cat"


@pytest.fixture(scope="module")
def tiny_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A server of the tiny decoder and a tiny encoder alone (no SmolLM2 to load): the page's work is milliseconds."""
    pytest.importorskip("transformers")
    from tests.own_models import build

    root_dir = tmp_path_factory.mktemp("attribution-browser")
    path, _ = build("llama", root_dir / "tiny", seed=6)
    bert, _ = build("bert", root_dir / "tinybert", seed=7)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = os.environ | {"ATTENTION_LAB_DEVICE": "cpu", "ATTENTION_LAB_PRETRAINED": "0"}
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.Popen(
        [sys.executable, "-m", "app.cli", "serve", "--host", "127.0.0.1", "--port", str(port), "--model", str(path),
         "--model", str(bert), "--name", "tinybert"],
        cwd=root, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, proc)
        yield url
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.mark.parametrize(("lang", "title"), [("en", "What attention is worth"), ("zh", "注意力的分量")])
def test_choosing_a_head_redraws_its_row_without_a_reload(page: Page, tiny_server: str, lang: str,
                                                          title: str) -> None:  # fmt: skip
    page.set_default_timeout(30_000)
    page.goto(f"{tiny_server}/attribution?preset=tiny&text={TEXT}&lang={lang}")
    expect(page.locator("h2")).to_contain_text(title)
    with urllib.request.urlopen(f"{tiny_server}/attribution.json?preset=tiny&text={TEXT}&lang={lang}") as r:
        twin = json.load(r)
    cells = page.locator("table.attr-grid td[data-head]")
    expect(cells).to_have_count(3 * 4)
    assert [float(x) for x in cells.evaluate_all("els => els.map(e => e.dataset.value)")] == [
        x for row in twin["heads"] for x in row
    ]
    page.evaluate("window.__kept = 1")  # gone if the page reloads
    page.locator('td[data-layer="2"][data-head="3"] button').click()
    expect(page.locator("#head table.attr-row")).to_have_attribute("data-layer", "2")
    expect(page.locator("#head table.attr-row")).to_have_attribute("data-head", "3")
    expect(page.locator("td.chosen")).to_have_attribute("data-layer", "2")  # the grid's mark moved too
    expect(page.locator("td.chosen")).to_have_attribute("data-head", "3")
    assert page.evaluate("window.__kept") == 1 and "head=2.3" in page.url
    expect(page.locator("#head h3")).to_contain_text("2")
    page.locator('td[data-layer="0"][data-head="1"] button').click()
    expect(page.locator("#head table.attr-row")).to_have_attribute("data-layer", "0")
    # a token: the query position, the whole body redrawn for it
    page.locator('.attr-tokens button[value="4"]').click()
    expect(page.locator(".attr-tokens button.current")).to_have_attribute("value", "4")
    expect(page.locator("#head table.attr-row tbody tr")).to_have_count(5)  # sources 0 … 4
    assert page.evaluate("window.__kept") == 1 and "position=4" in page.url


def test_the_page_fits_a_phone_and_the_projector(page: Page, tiny_server: str) -> None:
    """Nothing scrolls sideways but the tables inside their own scroll boxes, on a phone and in presenter mode."""
    for size, extra in (({"width": 390, "height": 844}, "&lang=zh"), ({"width": 1280, "height": 720}, "&present=1")):
        page.set_viewport_size(size)
        page.goto(f"{tiny_server}/attribution?preset=tiny&text={TEXT}{extra}")
        expect(page.locator("#head table.attr-row")).to_be_visible()
        assert page.evaluate("document.documentElement.scrollWidth") <= size["width"]


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_an_encoders_flow_is_asked_for_and_drawn_without_a_reload(page: Page, tiny_server: str, lang: str) -> None:
    page.set_viewport_size({"width": 1280, "height": 900})
    page.goto(f"{tiny_server}/attribution?preset=tinybert&text={TEXT}&position=3&lang={lang}")
    expect(page.locator("[data-no-dla]")).to_be_visible()
    assert ("编码器" if lang == "zh" else "encoder") in page.locator("[data-no-dla]").inner_text()
    page.evaluate("window.__kept = 1")  # gone if the page reloads
    ask = page.locator('#flow a[data-link="flow"]')
    edges = int(page.locator("#flow").get_attribute("data-edges") or 0)
    assert f"{edges:,}" in ask.inner_text()
    ask.click()
    expect(page.locator("table[data-flow]")).to_be_visible()
    assert page.evaluate("window.__kept") == 1 and "flow=true" in page.url
    shown = [float(v) for v in page.locator("table[data-flow] tbody tr").first.locator("td").evaluate_all(
        "tds => tds.map(td => td.dataset.value)")]  # fmt: skip
    twin = json.loads(urllib.request.urlopen(f"{tiny_server}/attribution.json?preset=tinybert&text={TEXT}&position=3"
                                             "&flow=true", timeout=30).read())  # fmt: skip
    assert shown == twin["flow"]["values"] and len(shown) == len(twin["tokens"])


def test_the_encoders_page_fits_a_phone_and_the_projector(page: Page, tiny_server: str) -> None:
    for size, extra in (({"width": 390, "height": 844}, "&lang=zh"), ({"width": 1280, "height": 720}, "&present=1")):
        page.set_viewport_size(size)
        page.goto(f"{tiny_server}/attribution?preset=tinybert&text={TEXT}&flow=true{extra}")
        expect(page.locator("table[data-flow]")).to_be_attached()
        expect(page.locator("#head table.attr-row")).to_be_visible()
        assert page.evaluate("document.documentElement.scrollWidth") <= size["width"]


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_head_and_key_chosen_by_htmx_are_kept_by_every_later_click(page: Page, tiny_server: str, lang: str) -> None:
    """A new user's walk (#44): a head from the grid, a key from "Why this score", then "Compute attention flow" — the
    flow link, outside the swapped section, once dropped the key. Every later click keeps what the swaps chose."""
    page.goto(f"{tiny_server}/attribution?preset=tiny&text={TEXT}&lang={lang}")
    page.evaluate("window.__kept = 1")  # gone if the page reloads
    page.locator('td[data-layer="1"][data-head="2"] button').click()
    expect(page.locator("#head table.attr-row")).to_have_attribute("data-head", "2")
    page.locator("#why select[name=key]").select_option("1")
    page.locator("#why button[type=submit]").click()
    expect(page.locator("#why")).to_have_attribute("data-key", "1")
    ask = page.locator('#flow a[data-link="flow"]')
    expect(ask).to_have_attribute("href", re.compile(r"(?=.*head=1\.2)(?=.*key=1\b)"))
    ask.click()
    expect(page.locator("table[data-flow]")).to_be_visible()
    expect(page.locator("#why")).to_have_attribute("data-key", "1")  # the key the user chose, not the default
    expect(page.locator("#head table.attr-row")).to_have_attribute("data-head", "2")
    page.locator("#dla-top a[data-sort=neg]").click()
    expect(page.locator("#dla-top a[data-sort=neg]")).to_have_attribute("aria-current", "true")
    expect(page.locator('a[data-twin="json"]')).to_have_attribute("href", re.compile(r"sort=neg"))
    page.locator('td[data-layer="0"][data-head="1"] button').click()  # the grid's fields now carry flow and sort
    expect(page.locator("#head table.attr-row")).to_have_attribute("data-layer", "0")
    expect(page.locator("table[data-flow]")).to_be_visible()
    expect(page.locator("#dla-top a[data-sort=neg]")).to_have_attribute("aria-current", "true")
    assert page.evaluate("window.__kept") == 1
    assert all(s in page.url for s in ("head=0.1", "sort=neg", "flow=true", "key=1"))


LINES = """() => [...document.querySelectorAll(`table.attr-grid thead th:first-child, table.attr-grid tfoot th,
  table.attr-rollout thead th:first-child`)].map(th => {
    const r = document.createRange(); r.selectNodeContents(th);
    return [th.textContent.trim(), new Set([...r.getClientRects()].map(x => Math.round(x.top))).size]; })"""


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_grids_headings_stay_on_one_line(page: Page, tiny_server: str, lang: str) -> None:
    """The corner cell ("层 \\ 头") once broke into a column of characters on a phone, the embedding's row name too."""
    for size, present in (((390, 844), False), ((1280, 720), True), ((1920, 1080), True)):
        page.set_viewport_size({"width": size[0], "height": size[1]})
        page.goto(f"{tiny_server}/attribution?preset=tiny&text={TEXT}&lang={lang}")
        if present:  # reached as a teacher does: the page's own button
            click_to_load(page, page.locator("a[data-toggle=present]:visible").first)  # measured once loaded
            expect(page.locator("body")).to_have_class(re.compile(r"\bpresent\b"))
        expect(page.locator("table.attr-grid").first).to_be_visible()
        got = page.evaluate(LINES)
        assert got and all(lines == 1 for _, lines in got), (size, got)
        assert page.evaluate("document.documentElement.scrollWidth") <= size[0]


# -- the lesson "Is a big attention weight an important one?", clicked through on SmolLM2 and MiniLM ---------------

SCREENS = [("en", (1280, 720), True), ("zh", (1920, 1080), True), ("en", (390, 844), False), ("zh", (390, 844), False)]


@pytest.mark.parametrize(("lang", "size", "present"), SCREENS)
def test_the_lesson_clicked_through(page: Page, live_server: str, lang: str, size: tuple[int, int],
                                    present: bool) -> None:  # fmt: skip
    """Every step of big-weight, by its own "next" button: the panel's question on screen, the step's section drawn,
    nothing scrolling sideways, the answer revealed by its button; presenter mode reached by pressing the page's
    switch, and kept by every step's link."""
    from app.web.lessons import BY_SLUG

    steps = BY_SLUG["big-weight"].steps
    page.set_viewport_size({"width": size[0], "height": size[1]})
    page.goto(f"{live_server}{steps[0].url}&lesson=big-weight&lesson_step=1&lang={lang}")
    if present:
        click_to_load(page, page.locator("a[data-toggle=present]:visible").first)  # measured once loaded
        expect(page.locator("body")).to_have_class(re.compile(r"\bpresent\b"))
    for k, step in enumerate(steps, start=1):
        panel = page.locator(".lesson-panel")
        expect(panel).to_have_attribute("data-step", str(k), timeout=180_000)  # SmolLM2's first page is computed
        expect(panel.locator(".question")).to_contain_text(step.text(lang).question[:12])
        if present:
            expect(page.locator("body")).to_have_class(re.compile(r"\bpresent\b"))
        anchor = step.url.partition("#")[2]
        if step.url.startswith("/attribution"):
            expect(page.locator("#attribution-body")).to_be_visible()
            if anchor:
                expect(page.locator(f"#{anchor}")).to_be_attached()
        if "flow=true" in step.url:
            expect(page.locator("table[data-flow]")).to_be_visible()
        if "preset=minilm" in step.url:
            expect(page.locator("[data-no-dla]")).to_contain_text("MiniLM-L6")
            expect(page.locator(".model-intro[data-intro=encoder]")).to_be_attached()
        assert page.evaluate("document.documentElement.scrollWidth") <= size[0], (k, lang, size)
        panel.locator("details.answer summary").click()
        expect(panel.locator("details.answer p")).to_be_visible()
        if k < len(steps):
            panel.locator("a[data-lesson-step=next]").click()
    expect(page.locator(".lesson-panel a[data-lesson-step=next]")).to_have_count(0)


FOCUSED = "() => { const e = document.activeElement; return e && e !== document.body ? e.id : null; }"


def focus_on(page: Page, element_id: str) -> None:
    """Wait until the focus is on the element of that id (the swap that redraws it is htmx's, after the click)."""
    page.wait_for_function("id => document.activeElement && document.activeElement.id === id", arg=element_id)


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_keyboard_keeps_its_place_through_each_swap(page: Page, tiny_server: str, lang: str) -> None:
    """A class walk with the keyboard: Enter on a head of the grid, on a token, on a sort and on "Why this score"'s
    button redraws by htmx, and the focus stays on the control pressed (it fell to the page's body, and the next Tab
    started again at the top of the page); the next Tab goes on to the control after it."""
    page.goto(f"{tiny_server}/attribution?preset=tiny&text={TEXT}&lang={lang}&present=1")
    page.evaluate("window.__kept = 1")  # gone if the page reloads
    page.locator('td[data-layer="1"][data-head="2"] button').focus()
    page.keyboard.press("Enter")
    expect(page.locator("#head table.attr-row")).to_have_attribute("data-head", "2")
    expect(page.locator("td.chosen")).to_have_attribute("data-layer", "1")
    focus_on(page, "attr-h1-2")
    page.keyboard.press("Tab")
    assert page.evaluate(FOCUSED) == "attr-h1-3"
    page.locator('.attr-tokens button[value="4"]').focus()
    page.keyboard.press("Enter")
    expect(page.locator(".attr-tokens button.current")).to_have_attribute("value", "4")
    focus_on(page, "attr-pos-4")
    page.locator("[data-sort]").nth(1).focus()
    sort = page.locator("[data-sort]").nth(1).get_attribute("data-sort")
    page.keyboard.press("Enter")
    expect(page.locator(f'[data-sort="{sort}"]')).to_have_attribute("aria-current", "true")
    focus_on(page, f"attr-sort-{sort}")
    page.locator("#why select[name=key]").select_option("1")
    page.locator("#why button[type=submit]").focus()
    page.keyboard.press("Enter")
    expect(page.locator("#why")).to_have_attribute("data-key", "1")
    focus_on(page, "attr-key-show")
    assert page.evaluate("window.__kept") == 1
