"""In a real browser (#47): /architectures on real weights, in both languages. A browser's navigation gets the page's
shell at once and the page by htmx (SmolLM2's first use takes seconds); MiniLM's real pattern fills every row, SmolLM2's
is exactly 0 above the diagonal; a head chosen in the form is the one drawn (polled for, no sleeps); with no finished
encoder–decoder run the page says how to start one, and once a run has finished its cross-attention is drawn beside
its mask. Presenter mode by its switch at 1280×720, and a 390×844 phone with nothing wider than the screen."""

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

from tests.app.train.test_encdec import TINY
from tests.browser.navigate import click_to_load
from tests.servers import wait_healthy

pytestmark = pytest.mark.browser
LEAVE = {"en": "Leave presenter mode", "zh": "退出演示模式"}
NO_RUN = {"en": "No finished encoder–decoder run yet", "zh": "还没有训练完成的编码器–解码器"}


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    """A server of its own (the pretrained models loaded as `serve` loads them): the encoder–decoder run this module
    trains is nobody else's newest."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = os.environ | {"ATTENTION_LAB_DEVICE": "cpu"}
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.Popen([sys.executable, "-m", "app.cli", "serve", "--host", "127.0.0.1", "--port", str(port)],
                            cwd=root, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, proc)
        yield url
    finally:
        proc.terminate()
        proc.wait(10)


def overflow(page: Page) -> int:
    return int(page.evaluate("document.documentElement.scrollWidth - document.documentElement.clientWidth"))


def real(page: Page, name: str, model: str | None = None) -> object:
    return page.locator(f"[data-real='{name}']" + (f"[data-model='{model}']" if model else ""))


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_real_patterns_beside_their_masks(page: Page, server: str, lang: str) -> None:
    page.set_viewport_size({"width": 1280, "height": 720})
    page.goto(f"{server}/architectures?lang={lang}")
    encoder, decoder = real(page, "encoder", "minilm"), real(page, "decoder", "smollm2")
    expect(decoder.locator("svg")).to_be_visible()  # the shell's htmx brought the page
    expect(encoder.locator("svg")).to_be_visible()
    assert float(decoder.get_attribute("data-above")) == 0  # causal: exactly 0 above the diagonal
    assert float(encoder.get_attribute("data-above")) > 0.01  # bidirectional: later tokens read too
    expect(decoder.locator(".arch-zeros")).to_be_visible()
    expect(page.locator("#family-encoder_decoder [data-missing]")).to_contain_text(NO_RUN[lang])
    expect(page.locator("#family-encoder_decoder [data-mask='cross'] svg")).to_be_visible()
    page.locator("input[name=smollm2]").fill("3.5")
    page.locator("form.arch-form button[type=submit]").click()
    expect(decoder).to_have_attribute("data-layer", "3")  # polled until the new page is in
    expect(decoder).to_have_attribute("data-head", "5")
    expect(page.locator("input[name=smollm2]")).to_have_value("3.5")
    page.locator("input[name=minilm]").fill("9.0")  # MiniLM has 6 layers: refused, named, the form kept
    page.locator("form.arch-form button[type=submit]").click()
    expect(page.locator(".error[role=alert]")).to_contain_text("minilm")
    expect(page.locator("input[name=minilm]")).to_have_value("9.0")


SWITCH = "header a[data-toggle=present]"  # the presenter switch: the header's, as on every page (its shell's too)


# Each matrix's labels as drawn on the screen (CSS pixels), and its width: [[smallest label, width], …]
LABELS = """() => [...document.querySelectorAll('.arch-pair svg')].map(s => [
  Math.min(...[...s.querySelectorAll('text')].filter(t => t.textContent.trim())
    .map(t => parseFloat(getComputedStyle(t).fontSize) * s.getScreenCTM().a)),
  s.getBoundingClientRect().width])"""


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_presenter_mode_and_a_phone(page: Page, server: str, lang: str) -> None:
    """By its switch at 1920×1080 the matrices grow with the screen, their labels ≥ 20 px (#47's walk: 340 px wide,
    labels ~11 px); at 1280×720 smaller, nothing to scroll sideways; a phone's fit its screen."""
    page.set_viewport_size({"width": 1920, "height": 1080})
    page.goto(f"{server}/architectures?lang={lang}")
    expect(real(page, "decoder", "smollm2").locator("svg")).to_be_visible()
    normal = page.evaluate(LABELS)
    expect(page.locator("a[data-toggle=present]")).to_have_count(1)
    click_to_load(page, page.locator(SWITCH))  # a plain link: the new page loaded before it is measured
    expect(page.locator("body")).to_have_class(re.compile(r"\bpresent\b"))
    expect(page.locator(SWITCH)).to_have_text(LEAVE[lang])
    expect(real(page, "decoder", "smollm2").locator("svg")).to_be_visible()
    big = page.evaluate(LABELS)
    expect(page.locator("a[data-toggle=present]")).to_have_count(1)  # the shell's header switch, none in <main>
    assert len(big) == len(normal) >= 7, big  # 5 masks, MiniLM's and SmolLM2's patterns at least
    assert min(px for px, _ in big) >= 20, big  # every matrix's labels, read from the back of the room
    assert all(w > w0 for (_, w), (_, w0) in zip(big, normal, strict=True)), (big, normal)  # the figures grew
    assert overflow(page) == 0
    page.set_viewport_size({"width": 1280, "height": 720})
    small = page.evaluate(LABELS)
    assert all(w < w1 for (_, w), (_, w1) in zip(small, big, strict=True)), (small, big)  # with the screen
    assert min(px for px, _ in small) >= 15.9, small  # 16 px: a laptop in presenter mode
    assert overflow(page) == 0
    page.set_viewport_size({"width": 390, "height": 844})
    page.goto(f"{server}/architectures?lang={lang}")
    for name in ("encoder", "decoder"):
        svg = real(page, name).locator("svg")
        expect(svg).to_be_visible()
        box = svg.bounding_box()
        assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= 390
    assert overflow(page) == 0


# Each matrix's framed row: its data-row, and the row label the frame lies across (found by where both are drawn)
FRAMED = """() => [...document.querySelectorAll('.arch-pair svg')].map(s => {
  const frame = s.querySelector('rect.chosen-row');
  if (!frame) return {label: s.getAttribute('aria-label')};
  const f = frame.getBoundingClientRect();
  const across = [...s.querySelectorAll('text[text-anchor=end]')].filter(t => {
    const r = t.getBoundingClientRect(), y = (r.top + r.bottom) / 2;
    return f.top < y && y < f.bottom && r.right <= f.left + 2; });
  return {row: frame.dataset.row, labels: across.map(t => t.textContent), bold: across.map(t => getComputedStyle(t).fontWeight),
          rows: s.querySelectorAll('text[text-anchor=end]').length, label: s.getAttribute('aria-label')};
})"""


@pytest.mark.parametrize(("lang", "pos"), [("en", 3), ("zh", 11)])
def test_the_chosen_row_is_framed(page: Page, server: str, lang: str, pos: int) -> None:
    """In every mask and every real pattern the chosen position's row is framed in the picture itself, its label in
    bold (a position past a matrix's rows: its last row, as the caption reads); each picture is named (#47's walk:
    aria-label="" and an empty title leaving a blank band above every matrix)."""
    page.set_viewport_size({"width": 1280, "height": 720})
    page.goto(f"{server}/architectures?pos={pos}&lang={lang}")
    expect(real(page, "decoder", "smollm2").locator("svg")).to_be_visible()
    framed = page.evaluate(FRAMED)
    assert len(framed) >= 7, framed
    for f in framed:
        chosen = min(pos, f["rows"] - 1)
        assert f["row"] == str(chosen), f
        assert f["labels"] == [f["labels"][0]] and f["labels"][0].startswith(f"{chosen}:"), f  # one row, that one
        assert int(f["bold"][0]) >= 700, f
        assert f["label"] and f["labels"][0] in f["label"], f  # named, the framed row said
    expect(page.locator(".arch-pair svg > text").filter(has_text=re.compile(r"^$"))).to_have_count(0)
    captions = page.locator(".arch-mask figcaption")  # the caption's row is the framed one
    expect(captions.first).to_contain_text(framed[0]["labels"][0])


def test_a_finished_run_is_drawn(page: Page, server: str) -> None:
    body = json.dumps(TINY | {"steps": 60}).encode()
    ask = urllib.request.Request(f"{server}/api/v1/train", body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(ask) as r:
        run_id = json.load(r)["id"]
    with urllib.request.urlopen(f"{server}/api/v1/train/{run_id}/events", timeout=180) as events:
        for line in events:  # the run's own event stream, read until it ends (no polling, no sleeping)
            if line.startswith(b"event: end"):
                break
    with urllib.request.urlopen(f"{server}/api/v1/train/{run_id}") as r:
        assert json.load(r)["status"] == "done"
    page.set_viewport_size({"width": 1280, "height": 720})
    page.goto(f"{server}/architectures?text=A+B+C+D")
    cross = real(page, "cross")
    expect(cross.locator("svg")).to_be_visible()
    expect(page.locator("#family-encoder_decoder .arch-note")).to_contain_text(run_id)
    expect(page.locator("#family-encoder_decoder [data-missing]")).to_have_count(0)
    assert float(real(page, "decoder").nth(1).get_attribute("data-above")) == 0  # its decoder: causal
