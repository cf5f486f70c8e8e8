"""A finished run served as a preset of the running server: the lab's pages and APIs take it with the same
per-position losses the run reported; /train links to the lab on it; a dropped run's preset is gone (422 naming
`preset`), its kept answers with it."""

from __future__ import annotations

import re

import pytest
import torch
from bs4 import BeautifulSoup
from fastapi.testclient import TestClient

from app.main import create_app
from app.settings import Settings
from engine.train import make_config, make_data, seed_of

from .test_api import TINY, events_until_end


@pytest.fixture(scope="module")
def client():
    app = create_app(Settings(pretrained=False, train_max_kept=1))  # one finished run kept: the next drops it
    with TestClient(app) as c:
        yield c


def finished(client: TestClient, body: dict) -> dict:
    run_id = client.post("/api/v1/train", json=body).json()["id"]
    assert events_until_end(client, run_id)[-1][1]["status"] == "done"
    return client.get(f"/api/v1/train/{run_id}").json()  # `end` is told once the preset is served


def test_a_finished_run_is_a_preset_with_the_losses_it_reported(client: TestClient) -> None:
    assert client.get("/?lang=en").status_code == 200  # the lab's page, kept before the run ends
    state = finished(client, TINY | {"n_layer": 2})
    preset = state["preset"]
    offered = BeautifulSoup(client.get("/?lang=en").text, "html.parser")  # not the page kept: it offers the run
    assert offered.select_one(f"select[name='preset'] option[value='{preset}']") is not None
    assert preset == f"train-{state['id']}"
    assert preset in [m["name"] for m in client.get("/api/v1/models").json()["models"]]
    # The held-out set the run reported its last losses on (its seed's), teacher-forced through the served preset.
    c = make_config(**state["config"])
    held = make_data(c).batch(torch.Generator().manual_seed(seed_of("train-held", c.seed)), 64, held=True)
    per = []
    for ids in held.tolist():
        r = client.post("/api/v1/predict", json={"preset": preset, "token_ids": ids})
        assert r.status_code == 200, r.text
        per.append([p["loss"] for p in r.json()["positions"]])
    losses = torch.tensor(per, dtype=torch.float64)  # (64, 2n - 1): per sequence and position
    n = c.n_repeat
    assert losses.mean().item() == pytest.approx(state["eval_loss"][-1], abs=1e-4)
    assert losses[:, :n].mean().item() == pytest.approx(state["eval_first"][-1], abs=1e-4)
    assert losses[:, n:].mean().item() == pytest.approx(state["eval_second"][-1], abs=1e-4)
    # The lab's attention endpoint answers on it: the probe's tokens, every head's weights rows summing to 1.
    probe = "".join(state["labels"][i] for i in state["probe"])
    r = client.get("/api/v1/attention", params={"preset": preset, "text": probe, "layer": "1"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["tokens"] == list(probe)
    tensors = {k: v for stage in body["stages"] for k, v in stage["tensors"].items()}
    weights = torch.tensor(tensors["weights"], dtype=torch.float64)
    assert weights.shape == (2, len(probe), len(probe))
    assert torch.allclose(weights.sum(-1), torch.ones(2, len(probe), dtype=torch.float64), atol=1e-5)
    # /train links to the lab on it, at the probe and its best induction head; the link opens.
    page = BeautifulSoup(client.get(f"/train?run={state['id']}").text, "html.parser")
    link = page.select_one(f"a[data-preset='{preset}']")["href"]
    assert f"preset={preset}" in link and "stage=softmax" in link
    assert client.get(link).status_code == 200
    # Prompts of characters outside the run's small vocabulary give no tokens: a 422 naming the prompt, not a 500.
    for page_or_api in ("/patch", "/api/v1/patch"):
        r = client.get(page_or_api, params={"preset": preset, "clean": "abcd", "corrupted": "abce"})
        assert r.status_code == 422 and "no tokens" in r.text, (page_or_api, r.status_code, r.text[:300])


def test_a_dropped_run_takes_its_preset_with_it(client: TestClient) -> None:
    first = finished(client, TINY)
    old = first["preset"]
    url = f"/api/v1/attention?preset={old}&text=ABCA"
    assert client.get(url).status_code == 200  # answered, and kept in the response store
    second = finished(client, TINY | {"seed": 1})  # TRAIN_MAX_KEPT = 1: the first run is dropped
    assert client.get(f"/api/v1/train/{first['id']}").status_code == 404
    names = [m["name"] for m in client.get("/api/v1/models").json()["models"]]
    assert old not in names and second["preset"] in names
    r = client.get(url)  # not the kept answer: refused, naming the field
    assert r.status_code == 422 and "x-cache" not in r.headers
    assert any("preset" in d["loc"] for d in r.json()["detail"]), r.json()
    assert re.search(re.escape(old), r.text) and client.get(f"/?preset={old}").status_code == 422
    assert client.app.state.lab.budget.share == client.app.state.lab.models[second["preset"]].nbytes
