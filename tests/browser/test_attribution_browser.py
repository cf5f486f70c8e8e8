"""In a real browser (#44): /attribution on a tiny decoder built here, in both languages. A click on a head of the grid
redraws that head's section (and the grid's mark) by htmx, without a full reload, and the address follows; a click on
a token redraws the page's body for that query position; the grid's numbers are the page's JSON twin's. On a tiny
BERT (an encoder) the page says why there is no logit, and attention flow, asked for by its link, is drawn beside
rollout without a reload; both fit a phone and the projector."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

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
