"""Heads with jobs (issue #33), the API: /api/v1/head_roles, /api/v1/prune and /api/v1/patch on a tiny decoder
built here, each answer the engine's numbers (engine/heads.py, itself held to transformers in
tests/engine/test_heads.py), GET and POST alike, every bad field a 422 naming it, sizes bounded by the settings."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from engine import heads as E
from engine import predict as P
from engine.models import load
from tests.conftest import make_client

TEXT = "The cat sat on the mat. The dog sat on the log."


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[TestClient, Any]]:
    pytest.importorskip("transformers")
    from tests.own_models import build

    path, _ = build("llama", tmp_path_factory.mktemp("heads-api") / "tiny", seed=5)
    with make_client(models=f"tiny={path}", pretrained=False, max_prune_tokens=24, max_patch_tokens=12,
                     max_probe_n=40) as c:  # fmt: skip
        yield c, load(path)


def get(c: TestClient, path: str, **params: Any) -> dict[str, Any]:
    r = c.get(path, params=params)
    assert r.status_code == 200, r.text
    return r.json()


def test_head_roles_are_the_engines_get_and_post(tiny) -> None:
    c, model = tiny
    doc = get(c, "/api/v1/head_roles", preset="tiny", text=TEXT, probe_n=16, seed=7, top=3)
    ids = P.sequence(model, model.tokenize(TEXT), True, False)
    roles = E.head_roles(model, ids, 16, 7)
    assert doc["token_ids"] == ids and doc["probe"]["token_ids"] == list(roles.probe)
    assert doc["probe"]["n"] == 16 and doc["probe"]["seed"] == 7
    assert set(doc["roles"]) == set(E.ROLES) and len(doc["roles"]["induction"]) == 3
    for role in E.ROLES:
        assert doc["roles"][role] == roles.scores[role].tolist()
        assert [[t["layer"], t["head"], t["score"]] for t in doc["top"][role]] == [list(x) for x in roles.top(role, 3)]
    assert doc["probe_loss"] == {"first": roles.loss.first, "second": roles.loss.second,
                                 "positions": list(roles.loss.positions)}  # fmt: skip
    assert doc["ablated"] is None
    post = c.post("/api/v1/head_roles", json={"preset": "tiny", "text": TEXT, "probe_n": 16, "seed": 7, "top": 3})
    assert post.status_code == 200 and post.json() == doc
    knocked = c.post("/api/v1/head_roles", json={"preset": "tiny", "text": TEXT, "probe_n": 16, "seed": 7,
                                                 "ablate": [[1, 2], [2, 0]], "ablate_mode": "mean"}).json()  # fmt: skip
    theirs = E.head_roles(model, ids, 16, 7, P.Intervention(ablate=((1, 2), (2, 0)), mean=True))
    assert knocked["ablated"]["probe_loss"]["second"] == theirs.ablated_loss.second  # type: ignore[union-attr]
    assert knocked["ablated"]["ablate"] == [[1, 2], [2, 0]] and knocked["roles"] == doc["roles"]


def test_heads_knocked_out_reuse_the_plain_roles(tiny, monkeypatch) -> None:
    """/heads draws the plain roles, then (knock=k) the same text with heads knocked out: that second request runs
    only the knocked pass of the probe (the scores and the plain loss are the first's), whatever the mode."""
    c, model = tiny
    text = "A text these roles are read on once."
    passes = []
    diagonals = E._diagonals
    monkeypatch.setattr(E, "_diagonals", lambda *a, **k: passes.append(1) or diagonals(*a, **k))
    plain = get(c, "/api/v1/head_roles", preset="tiny", text=text, probe_n=8)
    assert len(passes) == 2
    for mode in ("zero", "mean"):
        r = c.post("/api/v1/head_roles", json={"preset": "tiny", "text": text, "probe_n": 8, "ablate": [[1, 2], [2, 0]],
                                               "ablate_mode": mode})  # fmt: skip
        assert r.status_code == 200, r.text
        knocked = r.json()
        ids = P.sequence(model, model.tokenize(text), True, False)
        theirs = E.head_roles(model, ids, 8, 0, P.Intervention(ablate=((1, 2), (2, 0)), mean=mode == "mean"))
        assert knocked["roles"] == plain["roles"] and knocked["probe_loss"] == plain["probe_loss"]
        assert knocked["ablated"]["probe_loss"]["positions"] == list(theirs.ablated_loss.positions)  # type: ignore[union-attr]
    assert len(passes) == 2 + 2 * 1 + 2 * 3  # one knocked pass per request (the two whole computations: 3 each)


def test_the_pruning_curve_is_the_engines(tiny) -> None:
    c, model = tiny
    doc = get(c, "/api/v1/prune", preset="tiny", text="The cat sat on the mat.", ablate_mode="mean", rise=0.1)
    seq = P.sequence(model, model.tokenize("The cat sat on the mat."), True, True)
    pr = E.prune(model, seq[:-1], seq[1:], 0, True)
    assert doc["order"] == [list(h) for h in pr.order] and doc["mean_loss"] == list(pr.mean_loss)
    assert len(doc["mean_loss"]) == 3 * 4 + 1 and doc["ablate_mode"] == "mean" and doc["clean_loss"] == pr.clean
    assert doc["can_go"] == pr.can_go(0.1) and doc["fraction"] == pr.can_go(0.1) / 12
    assert doc["single"] == pr.single.tolist()


def test_patching_is_the_engines_and_refuses_prompts_of_different_lengths(tiny) -> None:
    c, model = tiny
    clean, corrupted = "The cat sat on the mat.", "The dog sat on the log."
    doc = get(c, "/api/v1/patch", preset="tiny", clean=clean, corrupted=corrupted)
    a = P.sequence(model, model.tokenize(clean), True, False)
    b = P.sequence(model, model.tokenize(corrupted), True, False)
    pt = E.patch(model, a, b)
    assert doc["clean_ids"] == a and doc["corrupted_ids"] == b and doc["metric"] == "logit_diff"
    assert doc["clean_value"] == pt.clean_value and doc["corrupted_value"] == pt.corrupted_value
    assert doc["answer"]["token_id"] == pt.answer and doc["wrong"]["token_id"] == pt.wrong
    for kind in ("resid_pre", "attn_out", "mlp_out", "head"):
        assert doc["grids"][kind] == pt.grids[kind].tolist()
    assert len(doc["grids"]["resid_pre"]) == 3 and len(doc["grids"]["resid_pre"][0]) == len(a)
    assert len(doc["grids"]["head"][0]) == 4
    prob = c.post("/api/v1/patch", json={"preset": "tiny", "clean": clean, "corrupted": corrupted,
                                         "metric": "prob", "answer": 5}).json()  # fmt: skip
    assert prob["metric"] == "prob" and prob["answer"]["token_id"] == 5 and prob["wrong"] is None
    r = c.get("/api/v1/patch", params={"preset": "tiny", "clean": clean, "corrupted": "The dog sat."})
    assert r.status_code == 422
    err = r.json()
    text = str(err)
    assert (
        "same number of tokens" in text
        and f"clean has {len(a)}" in text
        and "corrupted has 6" in text
        and "dog" in text
    )


@pytest.mark.parametrize(
    ("path", "params", "field"),
    [
        ("/api/v1/head_roles", {"text": TEXT, "probe_n": "41"}, "probe_n"),
        ("/api/v1/head_roles", {"text": TEXT, "probe_n": "1"}, "probe_n"),
        ("/api/v1/head_roles", {"text": TEXT, "seed": "-1"}, "seed"),
        ("/api/v1/head_roles", {"text": TEXT, "ablate": "[[9, 0]]"}, "ablate"),
        ("/api/v1/head_roles", {"text": TEXT, "top": "0"}, "top"),
        ("/api/v1/prune", {"text": TEXT * 3}, "text"),
        ("/api/v1/prune", {"text": TEXT, "ablate_mode": "half"}, "ablate_mode"),
        ("/api/v1/prune", {"text": TEXT, "rise": "-1"}, "rise"),
        ("/api/v1/prune", {"text": "The cat", "loss_from": "50"}, "loss_from"),
        ("/api/v1/patch", {"clean": TEXT, "corrupted": TEXT}, "clean"),
        ("/api/v1/patch", {"metric": "kl"}, "metric"),
        ("/api/v1/patch", {"clean": "a b", "corrupted": "a c", "answer": "999999"}, "answer"),
        ("/api/v1/patch", {"clean": "a b", "corrupted": "a c", "answer": "3", "wrong": "3"}, "wrong"),
        ("/api/v1/head_roles", {"text": TEXT, "preset": "nope"}, "preset"),
    ],
)
def test_bad_fields_are_named(tiny, path: str, params: dict[str, str], field: str) -> None:
    c, _ = tiny
    r = c.get(path, params={"preset": "tiny", **params})
    assert r.status_code == 422, r.text
    assert field in r.text


def test_the_operations_are_documented(tiny) -> None:
    c, _ = tiny
    spec = c.get("/openapi.json").json()
    for path in ("/api/v1/head_roles", "/api/v1/prune", "/api/v1/patch"):
        assert {"get", "post"} <= set(spec["paths"][path])
