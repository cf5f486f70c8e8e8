"""The sampling settings on /api/v1/generate (#45): the same tokens as transformers' generate(do_sample=True) with the
same seed, every filter's distribution in the answer, several continuations counted, a branch kept, and every bound a
422 naming its field."""

from __future__ import annotations

import math

import pytest
import torch
from fastapi.testclient import TestClient

from tests.conftest import make_client

PROMPT = "Once upon a time, a small cat"


@pytest.fixture(scope="module")
def api(smollm2) -> TestClient:  # type: ignore[no-untyped-def]
    return make_client()


def test_sampled_tokens_and_filters_equal_transformers(api: TestClient, smollm2, llama) -> None:  # type: ignore[no-untyped-def]
    body = {"text": PROMPT, "max_new_tokens": 6, "do_sample": True, "temperature": 0.9, "top_k": 40, "top_p": 0.9,
            "min_p": 0.02, "seed": 11}  # fmt: skip
    r = api.post("/api/v1/generate", json=body)
    assert r.status_code == 200, r.text
    doc = r.json()
    ids = smollm2.tokenize(PROMPT)
    torch.manual_seed(11)
    with torch.no_grad():
        out = llama.generate(torch.tensor([ids]), max_new_tokens=6, do_sample=True, temperature=0.9, top_k=40,
                             top_p=0.9, min_p=0.02, output_scores=True, return_dict_in_generate=True)  # fmt: skip
    theirs = out.sequences[0, len(ids) :].tolist()
    assert [s["token_id"] for s in doc["generated"]] == theirs
    assert doc["sampling"]["filters"] == ["temperature", "top_k", "top_p", "min_p"]
    for step, scores in zip(doc["generated"], out.scores, strict=False):
        last = step["filters"][-1]
        assert last["name"] == "min_p"
        probs = torch.softmax(scores[0].double(), -1)
        shown = [float(probs[c["token_id"]]) for c in step["candidates"]]
        assert all(math.isclose(a, b, abs_tol=1e-4) for a, b in zip(last["probs"], shown, strict=True))
        assert last["kept"] == int(torch.isfinite(scores[0]).sum())
        assert math.isclose(step["p"], float(probs[step["token_id"]]), abs_tol=1e-4)
    assert math.isclose(doc["logprob"], sum(s["logp"] for s in doc["generated"]), rel_tol=1e-9)
    same = api.get(
        "/api/v1/generate", params={k: str(v).lower() if isinstance(v, bool) else v for k, v in body.items()}
    )
    assert [s["token_id"] for s in same.json()["generated"]] == theirs  # GET and POST alike


def test_several_samples_are_counted_and_seeded(api: TestClient) -> None:
    body = {"text": PROMPT, "max_new_tokens": 4, "do_sample": True, "temperature": 1.5, "seed": 3, "samples": 3}
    doc = api.post("/api/v1/generate", json=body).json()
    assert [s["seed"] for s in doc["samples"]] == [3, 4, 5]
    assert doc["samples"][0]["token_ids"] == [s["token_id"] for s in doc["generated"]]
    alone = api.post("/api/v1/generate", json=body | {"seed": 4, "samples": 1}).json()
    assert alone["samples"][0]["token_ids"] == doc["samples"][1]["token_ids"]  # sample i is seed + i alone
    assert doc["distinct"] == len({tuple(s["token_ids"]) for s in doc["samples"]})
    cold = api.post("/api/v1/generate", json=body | {"temperature": 0.01}).json()
    assert cold["distinct"] == 1  # a temperature near 0 is greedy in effect: every sample the same
    greedy = api.post("/api/v1/generate", json={"text": PROMPT, "max_new_tokens": 4}).json()
    assert cold["samples"][0]["token_ids"] == [s["token_id"] for s in greedy["generated"]]


@pytest.mark.parametrize("temperature", [1e-38, 1e-300])
def test_a_temperature_past_float32s_range_is_greedy_not_a_500(api: TestClient, temperature: float) -> None:
    """SmolLM2's logits (~20) over 1e-38 overflow float32: the softmax was NaN and the draw a 500. The limit T → 0
    is the most likely token, drawn with probability 1, in JSON and in the archive alike."""
    body = {"text": PROMPT, "max_new_tokens": 4, "do_sample": True, "temperature": temperature, "top_k": 5, "seed": 1}
    r = api.post("/api/v1/generate", json=body)
    assert r.status_code == 200, r.text[:300]
    greedy = api.post("/api/v1/generate", json={"text": PROMPT, "max_new_tokens": 4}).json()
    doc = r.json()
    assert [s["token_id"] for s in doc["generated"]] == [s["token_id"] for s in greedy["generated"]]
    assert all(s["p"] == 1.0 and s["filters"][1]["kept"] == s["filters"][0]["kept"] for s in doc["generated"])
    assert all(s["filters"][2]["kept"] == 5 for s in doc["generated"])  # top-k still cuts 5 (no ties made)
    assert api.post("/api/v1/generate.npz", json=body).status_code == 200


def test_a_branch_forces_a_surviving_token(api: TestClient) -> None:
    base = {"text": PROMPT, "max_new_tokens": 5, "do_sample": True, "top_k": 5, "seed": 2}
    doc = api.post("/api/v1/generate", json=base).json()
    step = doc["generated"][1]
    other = next(c["token_id"] for c in step["candidates"] if c["token_id"] != step["token_id"])
    b = api.post("/api/v1/generate", json=base | {"branch": f"1:{other}"}).json()
    assert b["generated"][0]["token_id"] == doc["generated"][0]["token_id"]
    assert b["generated"][1]["token_id"] == other and b["generated"][1]["forced"] is True
    assert not b["generated"][0]["forced"]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"temperature": 0}, "temperature"),
        ({"top_p": 1.5}, "top_p"),
        ({"min_p": -0.1}, "min_p"),
        ({"top_k": 5000, "do_sample": True}, "top_k"),
        ({"samples": 9, "do_sample": True}, "samples"),
        ({"samples": 2}, "samples"),
        ({"branch": "1-3"}, "branch"),
        ({"branch": "99:5"}, "branch"),
        ({"branch": "0:99999999"}, "branch"),
        ({"branch": "0:5,2:7,0:6"}, "step 0 forces one token, not both 5 and 6"),
        ({"seed": -1}, "seed"),
    ],
)
def test_bounds_are_422s_naming_the_field(api: TestClient, body: dict[str, object], field: str) -> None:
    r = api.post("/api/v1/generate", json={"text": PROMPT, "max_new_tokens": 4} | body)
    assert r.status_code == 422, r.text
    assert field in r.text


def test_a_step_given_twice_with_one_token_is_one_branch(api: TestClient) -> None:
    body = {"text": PROMPT, "max_new_tokens": 3}
    twice = api.post("/api/v1/generate", json=body | {"branch": "1:5,1:5"}).json()
    assert [s["token_id"] for s in twice["generated"]][1] == 5
    assert twice["generated"] == api.post("/api/v1/generate", json=body | {"branch": "1:5"}).json()["generated"]


def test_every_field_of_the_answer_is_named_in_its_documentation(api: TestClient) -> None:
    """/openapi.json's description of /api/v1/generate told greedy decoding only and named none of the sampling
    fields the answer carries (p, logp, forced, candidates, filters, sampling, samples, distinct, logprob…)."""
    import re

    body = {"text": PROMPT, "max_new_tokens": 2, "do_sample": True, "top_p": 0.9, "samples": 2, "branch": "1:5"}
    doc = api.post("/api/v1/generate", json=body).json()
    said = api.get("/openapi.json").json()["paths"]["/api/v1/generate"]["post"]["description"]
    step = doc["generated"][0]
    keys = {*doc, *step, *step["candidates"][0], *step["filters"][0], *doc["samples"][0], "filters"} - {"provenance"}
    missing = sorted(k for k in keys if not re.search(rf"(?<![\w.]){k}(?!\w)", said))
    assert missing == []


@pytest.mark.parametrize(
    ("setting", "field", "schema"), [("max_samples", "samples", 64), ("max_new_tokens", "max_new_tokens", 4096)]
)
def test_a_configured_limit_past_the_requests_own_bound_is_refused_at_start_up(
    setting: str, field: str, schema: int
) -> None:
    """MAX_SAMPLES and MAX_NEW_TOKENS are the limits a request meets: one the request's schema could never reach
    (samples ≤ 64, max_new_tokens ≤ 4096: a 422 at the schema's bound, not the configured one) is refused when the
    server starts, naming the setting; up to the schema's bound it is taken, and a request at it is let through."""
    from pydantic import ValidationError

    from app.generate.view import GenerateRequest
    from app.settings import Settings

    assert getattr(Settings(**{setting: schema}), setting) == schema
    GenerateRequest(**{field: schema})  # the schema takes what the setting may allow
    with pytest.raises(ValidationError, match=setting):
        Settings(**{setting: schema + 1})
