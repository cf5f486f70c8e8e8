"""The math font and the words (issue #20): the math font's stylesheet and file agree, counts are pluralised, indices
are 0-based in the words as in the headers, /docs fits a phone. (The formula and heat maps that go with them:
tests/app/attention/test_formula_and_heat_maps.py.)"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from bs4 import BeautifulSoup
from fastapi.testclient import TestClient

from app.templating import MESSAGES, translator
from tests.conftest import make_client


def soup(text: str) -> BeautifulSoup:
    return BeautifulSoup(text, "html.parser")


def font_url(css: str) -> str | None:
    m = re.search(r'url\("([^"]+)"\)', css)
    return m.group(1) if m else None


def test_the_math_font_stylesheet_names_only_a_font_that_answers(client: TestClient) -> None:
    import app.main as main

    css = client.get("/vendor/math-font.css")
    assert css.status_code == 200
    url = font_url(css.text)
    if (main.MATH_FONT / main.MATH_FONT_FILE).is_file():  # `make` installed it from npm
        assert url is not None and "@font-face" in css.text
        font = client.get(url)
        assert font.status_code == 200 and font.headers["content-type"] == "font/woff2" and len(font.content) > 1000
    else:
        assert url is None and "@font-face" not in css.text


def test_the_stylesheet_and_the_font_agree_whenever_npm_ran(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A server started before `npm install` (the teacher's 404) and one whose font went away: never a stylesheet
    that points at a missing file."""
    import app.main as main

    monkeypatch.setattr(main, "MATH_FONT", tmp_path)
    with make_client() as c:
        css = c.get("/vendor/math-font.css").text
        assert "@font-face" not in css and font_url(css) is None
        assert c.get("/vendor/math-font/" + main.MATH_FONT_FILE).status_code == 404
        real = Path(__file__).resolve().parents[3] / "node_modules/@fontsource/noto-sans-math/files"
        if (real / main.MATH_FONT_FILE).is_file():
            shutil.copy(real / main.MATH_FONT_FILE, tmp_path / main.MATH_FONT_FILE)
        else:
            (tmp_path / main.MATH_FONT_FILE).write_bytes(b"wOF2" + bytes(100))
        url = font_url(c.get("/vendor/math-font.css").text)  # npm ran while the server was up: no restart needed
        assert url is not None and c.get(url).status_code == 200
        (tmp_path / main.MATH_FONT_FILE).unlink()
        assert "@font-face" not in c.get("/vendor/math-font.css").text
    assert c.get("/vendor/math-font/../../app/main.py").status_code == 404  # only the one file is served


def test_counts_are_pluralised_in_english(client: TestClient) -> None:
    en, zh = translator("en"), translator("zh")
    assert en("decode.prefill_title", n=1) == "Prefill: 1 token in one pass"
    assert en("decode.prefill_title", n=3) == "Prefill: 3 tokens in one pass"
    assert "1 token is projected" in en("decode.prefill_text", n=1) and "its key and value" in en(
        "decode.prefill_text", n=1
    )
    assert "2 tokens are projected" in en("decode.prefill_text", n=2)
    assert zh("decode.prefill_title", n=1) == "预填充：一趟算完 1 个词元"
    assert en("sinks.layer", layer=3, last=29, n=1).endswith("1 token.")
    assert en("generate.step_title", i=1, n=4, c=1) == "Token 1 of 4, predicted from 1 token of context:"
    for lang in ("en", "zh"):
        page = client.get(f"/decode?prefill=1&lang={lang}")
        assert page.status_code == 200
        text = soup(page.text).select_one("#stage").get_text(" ")
        assert "1 tokens" not in text and "|" not in text
    assert "Prefill: 1 token in one pass" in client.get("/decode?prefill=1&lang=en").text
    assert "Prefill: 2 tokens in one pass" in client.get("/decode?prefill=2&lang=en").text


# "tokens 1…i", "queries 2…N", "第 1…i 个", "row 1", head₁: counting from 1 where the headers count from 0.
ONE_BASED = re.compile(r"(tokens?|rows?) 1…i|\b1…i\b|\b2…N|第 ?[12] ?…|(row|column|head) 1\b|head ?₁|第 1 行")


def test_the_words_count_indices_from_zero_as_the_headers_do() -> None:
    for lang in ("en", "zh"):
        bad = {k: v for k, v in MESSAGES[lang].items() if ONE_BASED.search(v)}
        assert not bad, bad
    assert "0…i" in MESSAGES["en"]["explain.mask"] and "0…i" in MESSAGES["zh"]["explain.mask"]
    assert "1…N−1" in MESSAGES["en"]["sinks.share"] and "1…N−1" in MESSAGES["zh"]["sinks.share"]


def test_docs_has_a_viewport_for_phones(client: TestClient) -> None:
    page = soup(client.get("/docs").text)
    meta = page.select_one('meta[name="viewport"]')
    assert meta is not None and "width=device-width" in meta["content"]
