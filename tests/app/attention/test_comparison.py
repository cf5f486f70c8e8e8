"""What a reader needs to read the lab's comparison of two large runs: each heat map's axes and colour bar, every
tick computed from the matrix it shows. (Presenter mode on the model view: tests/app/model/test_presenter.py.)"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from bs4 import BeautifulSoup
from fastapi.testclient import TestClient

from app.render.heatmap import png
from app.templating import translator

A = "The cat sat on the mat."
TOKENS = " ".join(f"w{i}" for i in range(40))  # past 24 tokens: the comparison draws heat maps


def soup(r: Any) -> BeautifulSoup:
    assert r.status_code == 200, r.text[:500]
    return BeautifulSoup(r.text, "html.parser")


def number(text: str) -> float:
    """A tick as a number: 0.981, −1.07, 9.81×10⁻⁵, ≤ 9.81×10⁻⁵."""
    text = text.removeprefix("≤").strip().replace("−", "-")
    mantissa, _, exp = text.partition("×10")
    power = exp.translate(str.maketrans("⁻⁰¹²³⁴⁵⁶⁷⁸⁹", "-0123456789"))
    return float(mantissa) * (10 ** int(power) if power else 1)


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
    assert [li.get_text() for li in b_side.select("ol.axis.rows li")][24] == "24: x24"
    rows = [li.get_text() for li in diff.select("ol.axis.rows li")]
    assert rows[15] == "15: w15" and rows[24] == "24: w24/x24"  # shared tokens once, different ones both ways
    # Where they start to differ is labelled (in bold) though 20 is no multiple of 3; 18 and 21, nearer it than the
    # labels' spacing, are left out so that no two labels crowd each other.
    assert rows[20] == "20: w20/x20" and rows[18] == rows[21] == ""
    assert [li.get_text() for li in diff.select("ol.axis li.mark")] == ["20: w20/x20"] * 2


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


# -- what a teacher needs on the projector: the changed token named, the second prompt at hand, the scale's floor -------

CAT = " ".join("cat" if i == 2 else f"w{i}" for i in range(40))  # one token changed, at position 2


@pytest.mark.parametrize("stage", ["projection", "softmax"])
def test_the_changed_token_is_labelled_on_every_maps_axes(client: TestClient, stage: str) -> None:
    params = {"preset": "gpt2-small", "tokens": TOKENS, "stage": stage, "compare": "text", "compare_text": CAT}
    twin = client.get("/.json", params=params).json()["compare"]
    assert twin["shared"] == 2 and twin["first_changed_row"] == 2  # the bright row and column of the third map
    for side, token in zip(figures(soup(client.get("/", params=params))), ("w2", "cat", "w2/cat"), strict=True):
        for axis in ("rows", "cols"):
            items = side.select(f"ol.axis.{axis} li")
            labels = [li.get_text() for li in items]
            assert labels[2] == f"2: {token}" and "mark" in items[2]["class"]  # not only the every-3rd labels
            assert labels[1] == labels[3] == "" and labels[6] == "6: w6"  # no label crowds it; the rest stay
            assert [li.get_text() for li in side.select(f"ol.axis.{axis} li.mark")] == [f"2: {token}"]


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_second_prompt_can_be_changed_in_presenter_mode(client: TestClient, lang: str) -> None:
    t = translator(lang)
    params = {"preset": "gpt2-small", "tokens": TOKENS, "stage": "projection", "compare": "text",
              "compare_text": CAT, "lang": lang}  # fmt: skip
    plain = soup(client.get("/", params=params)).select_one("section.compare-view")
    assert plain.select_one("details.compare-text-box") is None and plain.select_one("form.compare-text")
    page = soup(client.get("/", params={**params, "present": "1"}))
    assert "present" in page.body["class"]
    box = page.select_one("section.compare-view details.compare-text-box")
    assert box is not None and not box.has_attr("open")  # folded under its summary, which opens it
    assert box.summary.get_text().startswith(t("compare.text.label")) and "w1 cat w3" in box.summary.get_text()
    form = box.select_one("form.compare-text")
    assert form.select_one("input[name=compare_text]")["value"] == CAT
    sent = {i["name"]: i["value"] for i in form.select("input[type=hidden]")}
    assert sent["present"] == "1" and sent["compare"] == "text" and sent["tokens"] == TOKENS  # stays on the projector
    # Submitting it (another second prompt) draws the new comparison, still in presenter mode.
    other = CAT.replace("w7", "dog")
    again = soup(client.get(form["action"], params={**sent, "compare_text": other}))
    assert "present" in again.body["class"] and "w6 dog w8" in again.select_one("details.compare-text-box summary").text
    # No rule of the stylesheet hides the form any more in presenter mode.
    css = (Path(__file__).parents[3] / "static" / "lab.css").read_text(encoding="utf-8")
    assert not re.search(r"form\.compare-text\s*\{[^}]*display:\s*none", css)


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_comparison_names_the_tensor_it_compares(client: TestClient, lang: str) -> None:
    t = translator(lang)
    base = {"preset": "gpt2-small", "tokens": TOKENS, "compare": "text", "compare_text": CAT, "lang": lang}
    for stage, tensor, symbol in (("projection", "masked", "S′"), ("softmax", "weights", "A")):
        view = soup(client.get("/", params={**base, "stage": stage})).select_one("section.compare-view")
        line = view.select_one("p.compare-tensor")
        assert line["data-tensor"] == tensor and symbol in line.text
        assert line.get_text() == t(f"compare.tensor.{tensor}")
        caption = f"{symbol} {t(f'compare.tensor.short.{tensor}')}"
        for side in view.select(".large-sides > .side:not(.diff)"):
            assert side.select_one(".bar-label").get_text().startswith(caption)


def test_the_difference_bar_starts_at_the_tolerance_where_that_is_larger(client: TestClient) -> None:
    other = " ".join("cat" if i == 20 else f"w{i}" for i in range(40))
    params = {"preset": "gpt2-small", "tokens": TOKENS, "stage": "softmax", "compare": "text", "compare_text": other,
              "lang": "en"}  # fmt: skip
    top = float(np.abs(weights(client) - weights(client, tokens=other)).max())
    twin = client.get("/.json", params=params).json()["compare"]
    tol = twin["tol"]
    assert top * 1e-4 < tol < top  # 10⁻⁴ of the largest is below what is counted: the bar starts at the tolerance
    page = soup(client.get("/", params=params))
    diff = figures(page)[2]
    ticks = [s.get_text() for s in diff.select("[data-colorbar=difference] .ticks span")]
    assert [number(x) for x in ticks] == pytest.approx([tol, math.sqrt(tol * top), top], rel=5e-3)
    # The note's tolerance and the bar's low end are the same number, written the same way.
    assert ticks[0] == "≤ " + twin["tol_text"] and twin["tol_text"] in page.select_one(".compare-note small").text
    floor = translator("en")("compare.diff.floor", tol=twin["tol_text"])
    assert diff.select_one(".bar-label [data-floor=tol]").get_text() == floor


def test_the_difference_map_draws_its_scale_from_the_tolerance() -> None:
    from io import BytesIO

    from PIL import Image

    from app.attention.view import difference_ticks
    from app.render.stages import difference_png

    top, tol = 0.01, 1e-5  # 10⁻⁴ of the largest (10⁻⁶) is below the tolerance
    d = np.zeros((4, 4))
    d[0, :] = top
    d[1, :] = math.sqrt(tol * top)  # the bar's middle tick
    d[2, :] = tol * 1.0001  # just counted: the darkest end's colour
    d[3, :] = tol / 2  # not counted: the darkest colour
    img = np.asarray(Image.open(BytesIO(difference_png(d, tol, 4))).convert("RGB")).astype(int)
    bar = np.asarray(Image.open(BytesIO(png(np.array([[1.0, 1e-2, 1e-4, 0.0]], dtype=np.float32), "sequential", 4,
                                            "log"))).convert("RGB")).astype(int)  # fmt: skip
    for row in range(4):
        assert np.abs(img[row, 0] - bar[0, row]).max() <= 6, row
    assert [number(x) for x in difference_ticks(top, tol)] == pytest.approx([tol, math.sqrt(tol * top), top], rel=5e-3)
    assert [number(x) for x in difference_ticks(1.0, tol)] == pytest.approx([1e-4, 1e-2, 1.0], rel=5e-3)


def test_a_dimension_axis_is_labelled_by_its_number_and_a_phone_shows_every_other_label(client: TestClient) -> None:
    from app.attention.view import axis_labels

    dims = [str(j) for j in range(64)]
    assert axis_labels(dims)[:5] == ["0", "", "2", "", "4"]  # not "2: 2"
    # Every 2nd labelled, and 1 marked: 0 and 2, nearer it than 2, are left out.
    assert axis_labels(["a", "b", "c", "d", "e", "f"], 3, marks=[1]) == ["", "1: b", "", "", "4: e", ""]
    params = {"preset": "gpt2-small", "tokens": TOKENS, "stage": "projection", "lang": "en"}
    zoom = soup(client.get("/", params=params)).select_one("figure.zoom .heat")
    cols = zoom.select("ol.axis.cols li")
    assert len(cols) == 64 and [li.get_text() for li in cols[:5]] == ["0", "", "2", "", "4"]
    # Every other label is "minor" (left out on a narrow screen by the stylesheet): 0, 4, 8 … stay.
    assert [li.get_text() for li in zoom.select("ol.axis.cols li.minor")][:3] == ["2", "6", "10"]
    assert [li.get_text() for li in zoom.select("ol.axis.rows li:not(.minor) span") if li.get_text()][:3] == [
        "0: w0", "4: w4", "8: w8"]  # fmt: skip


def test_a_mask_comparison_says_which_cells_are_minus_infinity_on_one_side_only() -> None:
    from urllib.parse import urlencode

    from tests.conftest import make_client

    q = {"preset": "gpt2-small", "tokens": " ".join(f"w{i}" for i in range(30)), "mask": "causal", "stage": "3",
         "compare": "mask", "lang": "en"}  # fmt: skip
    with make_client() as client:
        face = client.get("/index.json?" + urlencode(q)).json()
        n = face["compare"]["masked_differently"]
        assert n == 30 * 29 // 2  # the upper triangle: −∞ with the mask, a number without it
        page = client.get("/?" + urlencode(q)).text
        assert f"{n} more cells are −∞ on one side only" in page
        zh = client.get("/?" + urlencode(q | {"lang": "zh"})).text
        assert f"另有 {n} 个格子只在一边是 −∞" in zh
