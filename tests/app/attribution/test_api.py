"""/api/v1/attribution (#44): the parts of a logit sum to it (up to the final norm's shift), the real logit is
transformers' own, the target defaults to the text's next token, rollout rows are distributions, and every bad
field is a 422 naming it."""

from __future__ import annotations

import math

import pytest
import torch
from fastapi.testclient import TestClient

from tests.conftest import make_client

TEXT = "The cat sat on the mat. The cat"


@pytest.fixture(scope="module")
def api(smollm2) -> TestClient:  # type: ignore[no-untyped-def]
    return make_client()


def test_the_parts_sum_to_transformers_logit(api: TestClient, smollm2, llama) -> None:  # type: ignore[no-untyped-def]
    doc = api.post("/api/v1/attribution", json={"text": TEXT, "position": 4, "rollout": True, "norms_layer": 2}).json()
    ids = doc["token_ids"]
    assert doc["text_start"] == 1 and doc["tokens"][0] == "<|im_start|>"
    assert doc["target"]["token_id"] == ids[5]  # the text's next token
    parts = sum(map(sum, doc["heads"])) + sum(doc["mlps"]) + sum(doc["attn_bias"]) + doc["embed"]
    assert math.isclose(parts, doc["total"], abs_tol=1e-3)
    assert math.isclose(doc["total"] + doc["remainder"], doc["logit"], abs_tol=1e-6)
    assert abs(doc["remainder"] - doc["norm_bias"]) < 1e-3  # RMSNorm: no shift, the parts are the whole logit
    with torch.no_grad():
        theirs = llama(torch.tensor([ids[:5]])).logits[0, 4, ids[5]]
    assert math.isclose(doc["logit"], float(theirs), abs_tol=1e-3)
    assert len(doc["heads"]) == 30 and len(doc["heads"][0]) == 9
    assert all(math.isclose(sum(row), 1.0, abs_tol=1e-4) for row in doc["rollout"]["layers"])
    assert math.isclose(sum(doc["rollout"]["final"]), 1.0, abs_tol=1e-4) and len(doc["rollout"]["final"]) == 5
    norms = doc["norms"]
    assert len(norms["weights"]) == 9 and all(math.isclose(sum(w), 1.0, abs_tol=1e-4) for w in norms["weights"])


def test_a_contrast_splits_the_difference_and_get_equals_post(api: TestClient) -> None:
    body = {"text": TEXT, "target": " cat", "contrast": " dog"}
    post = api.post("/api/v1/attribution", json=body).json()
    get = api.get("/api/v1/attribution", params=body).json()
    assert post == get
    single = api.post("/api/v1/attribution", json={"text": TEXT, "target": " cat"}).json()
    other = api.post("/api/v1/attribution", json={"text": TEXT, "target": " dog"}).json()
    assert math.isclose(post["logit"], single["logit"] - other["logit"], abs_tol=1e-4)
    assert post["contrast"]["token"] == " dog"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"position": 99}, "position"),
        ({"target": "a", "target_id": 3}, "target"),
        ({"target_id": 10**9}, "target_id"),
        ({"norms_layer": 99}, "norms_layer"),
        ({"preset": "minilm"}, "preset"),
        ({"bogus": 1}, "bogus"),
        ({"decimals": 9}, "decimals"),
    ],
)
def test_bad_fields_are_422s_naming_them(api: TestClient, body: dict[str, object], field: str) -> None:
    r = api.post("/api/v1/attribution", json={"text": TEXT} | body)
    assert r.status_code == 422, r.text
    assert r.json()["message"].startswith(field), r.text
