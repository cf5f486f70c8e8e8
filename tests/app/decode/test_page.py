"""The KV-cache page: prefill, steps, the cache growing, and equality with the full computation."""

from __future__ import annotations

import pytest
from bs4 import BeautifulSoup


def soup(r):
    return BeautifulSoup(r.text, "html.parser")


def test_steps_grow_the_cache_and_match_the_full_computation(client):
    sizes = []
    for step in range(4):
        page = soup(client.get(f"/decode?prefill=2&step={step}&lang=en"))
        size = page.select_one(".cache-size")
        sizes.append(int(size["data-cache-len"]))
        assert int(size["data-cache-bytes"]) == sizes[-1] * 2 * 4 * 4
        if step:
            assert page.select_one(".notice")["data-equal"] == "true"
            weights = page.select("table[data-matrix=weights] td")
            assert len(weights) == sizes[-1]
            assert abs(sum(float(td["data-value"]) for td in weights) - 1) < 1e-5
    assert sizes == [2, 3, 4, 5]


def test_decode_page_numbers_equal_the_api(client):
    page = soup(client.get("/decode?prefill=1&step=3&positions=rope&lang=zh"))
    body = client.get(page.select_one("a[data-twin=json]")["href"]).json()
    step = body["steps"][2]
    got = [float(td["data-value"]) for td in page.select("table[data-matrix=weights] td")]
    assert got == step["weights"][0]


def test_decode_page_errors_inline(client):
    r = client.get("/decode?prefill=9&lang=en")
    assert r.status_code == 422 and "prefill" in soup(r).select_one(".error").text
    r = client.get("/decode?step=7&lang=en")
    assert r.status_code == 422 and "step" in soup(r).select_one(".error").text


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_without_the_mask_the_page_says_the_cache_goes_stale(client, lang):
    """mask=none on /decode: the step's notice gives how far the earlier rows moved (the JSON twin's number) and the
    difference from the full row; with the causal mask the earlier rows move by exactly 0."""
    q = {"tokens": "猫 坐 在 垫子 上", "step": 2, "lang": lang}
    stale = client.get("/decode.json", params=q | {"mask": "none"}).json()
    kept = client.get("/decode.json", params=q).json()
    assert stale["mask"] == "none" and stale["earlier_change"] > 1e-2 and stale["full_equal"] is False
    assert kept["mask"] == "causal" and kept["earlier_change"] == 0.0 and kept["full_equal"] is True
    page = client.get("/decode", params=q | {"mask": "none"}).text
    assert f"{stale['earlier_change']:.2e}" in page and f"{stale['diff']:.2e}" in page
    assert ("stale" if lang == "en" else "过时") in page
    assert '<option value="none" selected>' in page
