"""A class walk (stop 52): on SmolLM2's pages about Chinese text, a predicted token that is a byte piece (⟨e7⟩: the
first byte of a character the model would finish at the next positions) showed as bare hex with nothing to say what
it is. The text's own pieces read as characters (我₁ 我₂: engine/models/labels.py); a piece that names no character
now says what it is in the reader's language, on every page that shows one (one function in static/lab.js): a
dotted underline and a tooltip, or a sentence added to a tooltip that already names it (the lens's cells)."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Browser, expect

pytestmark = pytest.mark.browser

SAYS = {"en": "a byte piece, in hex", "zh": "字节片段（十六进制）"}
PIECE = re.compile(r"⟨[0-9a-f]{2}⟩")
SHOWN = """() => {
  const own = e => [...e.childNodes].filter(n => n.nodeType === 3).map(n => n.nodeValue).join('');
  const re = /⟨[0-9a-f]{2}⟩/;
  const texts = [...document.querySelectorAll('main *')].filter(e => re.test(own(e)) && e.checkVisibility())
    .map(e => ({text: own(e), title: e.getAttribute('title') || '', piece: e.getAttribute('data-piece'),
                line: getComputedStyle(e).textDecorationStyle}));
  const titles = [...document.querySelectorAll('main [title]')].filter(e => re.test(e.getAttribute('title')))
    .map(e => ({title: e.getAttribute('title'), piece: e.getAttribute('data-piece')}));
  return {texts, titles, inputs: [...document.querySelectorAll('table[data-train] tr.inputs td')].map(e => e.textContent)};
}"""


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_byte_piece_says_what_it_is(browser: Browser, live_server: str, lang: str) -> None:
    ctx = browser.new_context(viewport={"width": 1280, "height": 720})
    try:
        page = ctx.new_page()
        page.set_default_timeout(180_000)  # SmolLM2's first answer on a cold, shared machine
        page.goto(f"{live_server}/predict?text=我喜欢苹果&lang={lang}")
        expect(page.locator("table[data-train]")).to_be_visible()
        expect(page.locator("main [data-piece]").first).to_be_attached()
        got = page.evaluate(SHOWN)
        assert got["inputs"] and not any(PIECE.search(t) for t in got["inputs"]), got  # the text reads as characters
        assert got["texts"], got  # the candidates after 果 hold byte pieces (⟨ef⟩⟨bc⟩: the start of "，")
        for t in got["texts"]:
            assert t["piece"] and t["piece"] in t["text"] and SAYS[lang] in t["title"] and t["line"] == "dotted", t
        page.goto(f"{live_server}/lens?text=我喜欢吃苹果。&lang={lang}")
        expect(page.locator("table[data-lens]")).to_be_visible()
        expect(page.locator("table[data-lens] [data-piece]").first).to_be_attached()
        got = page.evaluate(SHOWN)
        assert got["titles"], got  # a layer's guess at a position: p(⟨e9⟩) in the cell's tooltip
        for t in got["titles"]:  # said once, after what the tooltip said before
            assert t["piece"] and t["title"].count(SAYS[lang]) == 1, t
        cell = page.locator("table[data-lens] td[data-piece]").first.get_attribute("title") or ""
        assert cell.startswith(("layer", "第")) and "\n" in cell, cell
    finally:
        ctx.close()
