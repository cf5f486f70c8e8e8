"""/api/v1/attribution on the lab's built-in presets (#44: "works on the toy block, the GPT-2 block"): the toy of `/`
(d_model 4, one head, attention on x) and the random GPT-2-sized block of /block (768 wide, 12 heads, attention
after the block's first LayerNorm). Neither has an unembedding: no direct logit attribution (a target or contrast is
a 422 naming it), but each head's output norm, the value-weighted norms, rollout (one layer: ½A + ½I), flow and the
score split, each against plain torch from the lab's own generated x and weights (1e-4), and the score split and
weights against the lab's own answer for the same trace (/api/v1/attention, /api/v1/block)."""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from fastapi.testclient import TestClient

from engine import sources
from engine.spec import make_spec
from tests.conftest import make_client

ASK = {"rollout": True, "flow": True, "norms_layer": 0}


@pytest.fixture(scope="module")
def api() -> TestClient:
    return make_client()


def plain(preset: str, tokens: list[str], ln: bool) -> dict[str, torch.Tensor]:
    """The attention of the preset's trace in plain torch from the lab's generated x and weights: q = x W_Q + b_Q
    (after F.layer_norm when `ln`: the block's first norm, gain 1 and shift 0 as generated), softmax(q kᵀ/√d_k +
    causal mask), each head's z = A v, and per head ‖v_j W_O^h‖ and ‖z_p W_O^h‖."""
    spec = make_spec(tokens=tokens, preset=preset)
    x, w = sources.load(spec, torch.device("cpu"), torch.float32)
    x = x.double()
    if ln:
        x = F.layer_norm(x, (x.shape[-1],), eps=1e-5)
    n, d, h = x.shape[0], x.shape[1], spec.n_heads
    dk = d // h

    def proj(m: torch.Tensor, b: torch.Tensor | None) -> torch.Tensor:
        y = x @ m.double() + (0 if b is None else b.double())
        return y.view(n, h, dk).transpose(0, 1)

    q, k, v = proj(w.w_q, w.b_q), proj(w.w_k, w.b_k), proj(w.w_v, w.b_v)
    scores = q @ k.transpose(1, 2) / math.sqrt(dk)
    scores = scores.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
    a = torch.softmax(scores, -1)
    w_o = w.w_o.double().view(h, dk, d)
    moved = torch.linalg.vector_norm(torch.einsum("hnk,hkd->hnd", v, w_o), dim=-1)  # (H, N)
    z = a @ v
    out = torch.linalg.vector_norm(torch.einsum("hnk,hkd->hnd", z, w_o), dim=-1)  # (H, N)
    return {"q": q, "k": k, "scores": scores, "a": a, "moved": moved, "out": out}


def rollout_row(a: torch.Tensor, p: int) -> np.ndarray:
    step = 0.5 * a.mean(0) + 0.5 * torch.eye(a.shape[-1], dtype=a.dtype)
    return (step / step.sum(-1, keepdim=True))[p].numpy()


def stage(doc: dict[str, Any], key: str) -> dict[str, Any]:
    return next(s["tensors"] for s in doc["stages"] if s["key"] == key)


@pytest.mark.parametrize(("preset", "ln", "p"), [("toy", False, 4), ("toy", False, 2), ("gpt2-small", True, 6),
                                                 ("gpt2-small", True, 3)])  # fmt: skip
def test_norms_rollout_and_flow_equal_plain_torch(api: TestClient, preset: str, ln: bool, p: int) -> None:
    r = api.post("/api/v1/attribution", json={"preset": preset, "position": p} | ASK)
    assert r.status_code == 200, r.text
    doc = r.json()
    tokens = doc["tokens"]
    want = plain(preset, tokens, ln)
    span = p + 1  # the causal mask: the position reads the keys up to itself
    assert doc["decoder"] is False and doc["causal"] is True and doc["token_ids"] is None
    assert doc["trace"] == ("block" if ln else "attention") and "no unembedding" in doc["no_dla"]
    assert all(doc[k] is None for k in ("heads", "mlps", "embed", "logit", "total", "target", "contrast", "scale"))
    np.testing.assert_allclose(doc["head_norms"], want["out"][None, :, p].numpy(), rtol=1e-4, atol=1e-4)
    a = want["a"][:, p, :span]
    np.testing.assert_allclose(doc["norms"]["weights"], a.numpy(), rtol=0, atol=1e-4)
    np.testing.assert_allclose(doc["norms"]["value_weighted"], (a * want["moved"][:, :span]).numpy(), rtol=1e-4,
                               atol=1e-4)  # fmt: skip
    row = rollout_row(want["a"], p)[:span]
    np.testing.assert_allclose(doc["rollout"]["layers"], [row], rtol=0, atol=1e-4)
    np.testing.assert_allclose(doc["rollout"]["final"], row, rtol=0, atol=1e-4)  # one layer: the product is Â
    # one layer: the max flow from the query to token j is the one edge's capacity, Â[p, j]
    np.testing.assert_allclose(doc["flow"]["values"], row, rtol=0, atol=1e-4)
    assert doc["flow"]["tokens"] == span and doc["flow"]["edges"] == span * (span + 1) // 2
    # the lab's own answer for the same trace: its weights are these
    lab = api.get(doc["trace_url"]).json()
    np.testing.assert_allclose(doc["norms"]["weights"], np.array(stage(lab, "softmax")["weights"])[:, p, :span],
                               rtol=0, atol=1e-6)  # fmt: skip


@pytest.mark.parametrize(("preset", "ln", "head", "key"), [("toy", False, 0, 1), ("toy", False, 0, 4),
                                                           ("gpt2-small", True, 7, 2)])  # fmt: skip
def test_why_this_score_sums_to_the_labs_own_cell(api: TestClient, preset: str, ln: bool, head: int,
                                                  key: int) -> None:  # fmt: skip
    body = {"preset": preset, "position": 4, "score_layer": 0, "score_head": head, "score_key": key}
    doc = api.post("/api/v1/attribution", json=body).json()
    s = doc["score_split"]
    want = plain(preset, doc["tokens"], ln)
    dk = want["q"].shape[-1]
    assert len(s["terms"]) == dk and s["pairs"] is None and not s["masked"]  # no RoPE: per dimension
    assert math.isclose(sum(s["terms"]), s["score"], abs_tol=1e-5)
    terms = want["q"][head, 4] * want["k"][head, key] / math.sqrt(dk)
    np.testing.assert_allclose(s["terms"], terms.numpy(), rtol=1e-4, atol=1e-4)
    cell = stage(api.get(doc["trace_url"]).json(), "scores")["scaled"][head][4][key]  # the lab's own trace
    assert math.isclose(s["score"], cell, abs_tol=1e-4) and math.isclose(s["cell"], cell, abs_tol=1e-6)
    assert math.isclose(s["score"], float(want["scores"][head, 4, key]), abs_tol=1e-4)


def test_the_toy_is_the_labs_and_the_tokens_and_seed_are_its_own(api: TestClient) -> None:
    doc = api.get("/api/v1/attribution", params={"preset": "toy"}).json()
    assert doc["tokens"] == ["猫", "坐", "在", "垫子", "上"] and doc["position"] == 4 and len(doc["head_norms"]) == 1
    assert doc["trace_url"].startswith("/api/v1/attention?preset=toy")
    same = api.get("/api/v1/attribution", params={"preset": "toy", "text": "猫 坐 在 垫子 上"}).json()
    assert same == doc  # `text` is the tokens split on whitespace
    other = api.post("/api/v1/attribution", json={"preset": "toy", "tokens": ["猫", "坐", "在", "垫子", "上"],
                                                  "seed": 3}).json()  # fmt: skip
    assert other["head_norms"] != doc["head_norms"] and "seed=3" in other["trace_url"]
    block = api.post("/api/v1/attribution", json={"preset": "toy", "block": True}).json()
    assert block["trace"] == "block" and block["head_norms"] != doc["head_norms"]  # attention after LN1
    gpt = api.get("/api/v1/attribution", params={"preset": "gpt2-small", "block": "false"}).json()
    assert gpt["trace"] == "attention" and len(gpt["head_norms"][0]) == 12


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"target": "猫"}, "target"),
        ({"target_id": 3}, "target_id"),
        ({"contrast": "坐"}, "contrast"),
        ({"contrast_id": 1}, "contrast_id"),
        ({"token_ids": [1, 2]}, "token_ids"),
        ({"text": "a b", "tokens": ["a", "b"]}, "tokens"),
        ({"position": 5}, "position"),
        ({"norms_layer": 1}, "norms_layer"),
        ({"score_layer": 1, "score_head": 0, "score_key": 0}, "score_layer"),
        ({"score_layer": 0, "score_head": 1, "score_key": 0}, "score_head"),
        ({"score_layer": 0, "score_head": 0, "score_key": 3, "position": 2}, "score_key"),
        ({"tokens": []}, "tokens"),
        ({"text": " "}, "text"),
        ({"flow": True, "tokens": ["w"] * 30}, "tokens"),
        ({"tokens": ["猫", "\ud800"]}, "tokens"),  # a lone surrogate is not text: no vector can be seeded from it
        ({"text": "猫 \udfff"}, "text"),
    ],
)
def test_the_toys_bad_fields_are_422s_naming_them(api: TestClient, body: dict[str, object], field: str) -> None:
    sent = json.dumps({"preset": "toy"} | body)  # ASCII: a lone surrogate travels as JSON's \ud800
    r = api.post("/api/v1/attribution", content=sent, headers={"content-type": "application/json"})
    assert r.status_code == 422, r.text
    assert r.json()["message"].startswith(field), r.text


@pytest.mark.parametrize("body", [{"tokens": ["a", "b"]}, {"seed": 2}, {"block": True}])
def test_a_models_text_takes_no_builtin_fields(api: TestClient, body: dict[str, object]) -> None:
    r = api.post("/api/v1/attribution", json={"preset": "smollm2", "text": "The cat"} | body)
    assert r.status_code == 422 and r.json()["message"].startswith(next(iter(body))), r.text


@pytest.mark.parametrize(("preset", "lang"), [("toy", "en"), ("toy", "zh"), ("gpt2-small", "en")])
def test_the_page_shows_the_toy_and_the_block_without_a_logit(api: TestClient, preset: str, lang: str) -> None:
    from bs4 import BeautifulSoup

    r = api.get("/attribution", params={"preset": preset, "lang": lang})
    assert r.status_code == 200, r.headers.get("x-lab-error")
    soup = BeautifulSoup(r.text, "html.parser")
    v = api.get("/attribution.json", params={"preset": preset, "lang": lang}).json()
    doc = api.get("/api/v1/attribution", params={"preset": preset}).json()
    assert v["decoder"] is False and v["trace"] == doc["trace"] and v["head_norms"] == doc["head_norms"]
    note = soup.select_one("[data-no-dla]")
    assert note is not None and note.text.strip() == v["no_dla"]
    assert ("反嵌入" in note.text) if lang == "zh" else ("no unembedding" in note.text)
    intro = soup.select_one(".model-intro").text  # generated weights: neither "reads both sides" nor a real logit
    assert ("种子生成" in intro) if lang == "zh" else ("generated from a seed" in intro and "both sides" not in intro)
    assert soup.select_one("input[name=target]") is None and soup.select_one(".attr-sum") is None
    assert soup.select_one("textarea[name=text]").text == " ".join(doc["tokens"])  # the preset's own tokens
    cells = soup.select("table.attr-grid td[data-head]")
    assert [float(c["data-value"]) for c in cells] == doc["head_norms"][0]
    lab = api.get(doc["trace_url"]).json()
    p, head = v["position"], v["chosen"]["head"]
    weights = np.array(stage(lab, "softmax")["weights"])[head, p, : p + 1]
    np.testing.assert_allclose([s["weight"] for s in v["chosen"]["sources"]], weights, rtol=0, atol=1e-6)
    why = v["why"]
    cell = stage(lab, "scores")["scaled"][head][p][why["key"]]
    assert math.isclose(why["score"], cell, abs_tol=1e-4) and math.isclose(why["cell"], cell, abs_tol=1e-6)
    assert len(v["rollout"]["product"]) == 1 and math.isclose(sum(v["rollout"]["product"][0]), 1.0, abs_tol=1e-5)
    link = soup.select_one('#head a[data-link="pattern"]')["href"]
    assert link.startswith("/block?" if preset == "gpt2-small" else "/?") and f"head={head}" in link
    assert api.get(link).status_code == 200
    bad = api.get("/attribution", params={"preset": preset, "head": "1.0"})
    assert bad.status_code == 422


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_sink_sentence_says_small_vector_only_when_it_is_small(api: TestClient, lang: str) -> None:
    """The strongest sink head's sentence follows its own ratio: "a big weight on a small vector" only below 1."""
    from bs4 import BeautifulSoup

    seen = set()
    for preset in ("toy", "gpt2-small", "smollm2"):
        v = api.get("/attribution.json", params={"preset": preset, "lang": lang}).json()
        if not v.get("sink"):
            continue
        soup = BeautifulSoup(api.get("/attribution", params={"preset": preset, "lang": lang}).text, "html.parser")
        said = soup.select_one(".attr-sink").text
        small = v["sink"]["value_ratio"] < 1
        seen.add(small)
        assert (("很小的向量" in said) if lang == "zh" else ("a small vector" in said)) == small, (preset, said)
    assert seen, "no preset has a sink head"


@pytest.mark.parametrize("preset", ["toy", "gpt2-small", "minilm"])
def test_changing_the_forms_model_drops_the_old_models_head_key_and_position(api: TestClient, preset: str) -> None:
    """A head, key and position chosen on SmolLM2 (layer 23, position 13) name nothing in the toy: the form says which
    model it was drawn for, and a changed model opens on its own defaults instead of a 422. A URL that names a head
    the model lacks, without the form, is still a 422 naming `head`."""
    from bs4 import BeautifulSoup

    page = api.get("/attribution", params={"preset": "smollm2", "head": "23.4", "key": "4", "position": "13"})
    form = BeautifulSoup(page.text, "html.parser").select_one("form#attr-form")
    sent = {i["name"]: i.get("value", "") for i in form.select("input[name]")}
    sent |= {t["name"]: t.text for t in form.select("textarea[name]")}
    assert sent["was"] == "smollm2" and sent["head"] == "23.4"
    sent["preset"] = preset  # the model menu changed, the rest of the form as it was
    r = api.get("/attribution", params=sent)
    assert r.status_code == 200, r.headers.get("x-lab-error")
    v = api.get("/attribution.json", params=sent).json()
    assert v["chosen"]["layer"] < (6 if preset == "minilm" else 1)
    bad = api.get("/attribution", params={"preset": preset, "head": "23.4"})
    assert bad.status_code == 422 and "head" in bad.headers["x-lab-error"]
