"""/api/v1/generate.npz (#45): the generation of /api/v1/generate as a NumPy archive, loaded with numpy and compared
with the JSON answer for the same request; every filter's whole distribution, which JSON leaves out, holds the JSON's
candidates and sums to one; documented in OpenAPI; a bad field is the same 422."""

from __future__ import annotations

import io

import numpy as np
import pytest
from fastapi.testclient import TestClient

from tests.conftest import make_client

BODY = {"text": "Once upon a time, a small cat", "max_new_tokens": 5, "layer": 3, "do_sample": True,
        "temperature": 0.9, "top_k": 40, "top_p": 0.9, "min_p": 0.02, "seed": 5, "samples": 3}  # fmt: skip


@pytest.fixture(scope="module")
def api(smollm2) -> TestClient:  # type: ignore[no-untyped-def]
    return make_client()


def load(api: TestClient, body: dict[str, object]) -> dict[str, np.ndarray]:
    r = api.post("/api/v1/generate.npz", json=body)
    assert r.status_code == 200, r.text[:300]
    assert r.headers["content-type"] == "application/x-npz"
    with np.load(io.BytesIO(r.content)) as z:  # no pickles: every array is plain
        return {k: z[k] for k in z.files}


@pytest.mark.parametrize("body", [BODY, {"text": "The cat sat", "max_new_tokens": 4}], ids=["sampled", "greedy"])
def test_the_archive_is_the_json_answer_with_whole_distributions(api: TestClient, body: dict[str, object]) -> None:
    z = load(api, body)
    doc = api.post("/api/v1/generate", json=body).json()
    steps = doc["generated"]
    assert z["token_ids"].tolist() == [s["token_id"] for s in steps]
    assert z["tokens"].tolist() == [s["token"] for s in steps]
    assert z["prompt_ids"].tolist() == doc["token_ids"] and z["prompt_tokens"].tolist() == doc["tokens"]
    assert int(z["text_start"]) == doc["text_start"]
    assert z["filters"].tolist() == ["logits", *doc["sampling"]["filters"]]
    assert z["candidates"].tolist() == [[c["token_id"] for c in s["candidates"]] for s in steps]
    want = np.array([[f["probs"] for f in s["filters"]] for s in steps])
    np.testing.assert_allclose(z["candidate_probs"], want, rtol=0, atol=1e-15)
    assert z["kept"].tolist() == [[f["kept"] for f in s["filters"]] for s in steps]
    np.testing.assert_allclose(z["p"], [s["p"] for s in steps], rtol=1e-12)
    np.testing.assert_allclose(z["logp"], [s["logp"] for s in steps], rtol=1e-12)
    assert z["forced"].tolist() == [s["forced"] for s in steps]
    assert float(z["logprob"]) == pytest.approx(doc["logprob"], rel=1e-12)
    assert z["top_ids"].shape == (len(steps), 5) and z["context"].tolist() == [s["context"] for s in steps]
    np.testing.assert_allclose(z["top_probs"], [[p for _, p in s["top"]] for s in steps], rtol=1e-12)
    # The whole vocabulary after each filter: the JSON's twelve are its columns there, each row sums to one, and
    # a filter's survivors are the tokens it keeps (T = steps, F = filters, V = the vocabulary).
    probs = z["probs"]
    t, f, v = probs.shape
    assert (t, f) == want.shape[:2] and v == 49152 and probs.dtype == np.float32
    np.testing.assert_allclose(np.take_along_axis(probs, z["candidates"][:, None, :], axis=2), want, atol=1e-6)
    np.testing.assert_allclose(probs.sum(axis=-1), 1.0, atol=1e-4)
    assert np.all((probs > 0).sum(axis=-1) <= z["kept"])
    drawn = probs[np.arange(t), -1, z["token_ids"]]
    np.testing.assert_allclose(drawn, z["p"], rtol=1e-5)  # each token, under the distribution it was drawn from
    # The attention row that predicted each token, NaN past its context.
    for a, s in zip(z["attention"], steps, strict=True):
        np.testing.assert_allclose(a[:, : s["context"]], np.array(s["attention"]), atol=1e-7)
        assert np.isnan(a[:, s["context"] :]).all()
    assert z["samples_seed"].tolist() == [s["seed"] for s in doc["samples"]]
    np.testing.assert_allclose(z["samples_logprob"], [s["logprob"] for s in doc["samples"]], rtol=1e-12)
    for row, s in zip(z["samples_token_ids"], doc["samples"], strict=True):
        assert row[: len(s["token_ids"])].tolist() == s["token_ids"] and np.all(row[len(s["token_ids"]) :] == -1)
    assert int(z["distinct"]) == doc["distinct"]


def test_get_and_post_give_the_same_archive(api: TestClient) -> None:
    query = {k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in BODY.items()}
    r = api.get("/api/v1/generate.npz", params=query)
    assert r.status_code == 200 and "generate.npz" in r.headers["content-disposition"]
    with np.load(io.BytesIO(r.content)) as z:
        assert z["token_ids"].tolist() == load(api, BODY)["token_ids"].tolist()


def test_a_bad_field_is_the_jsons_422(api: TestClient) -> None:
    r = api.post("/api/v1/generate.npz", json=BODY | {"samples": 9})
    assert r.status_code == 422 and "samples" in r.text


def test_the_archive_is_documented_in_openapi(api: TestClient) -> None:
    paths = api.get("/openapi.json").json()["paths"]
    for method in ("get", "post"):
        op = paths["/api/v1/generate.npz"][method]
        assert "application/x-npz" in op["responses"]["200"]["content"]
        assert "probs (T, F, V)" in op["description"]
    names = {p["name"] for p in paths["/api/v1/generate.npz"]["get"]["parameters"]}
    assert {"do_sample", "temperature", "top_k", "top_p", "min_p", "seed", "samples", "branch"} <= names
