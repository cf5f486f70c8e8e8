"""/cross: cross-attention's five stages on a held-out pair, every number parsed back from the page and checked
against its own definition (scores = QKᵀ/√d_k, the pad columns −∞, softmax rows summing to 1, the weighted sum
= weights · V); the untrained model when no run is chosen; a run's snapshots as step links; en and zh; bad input
a 422 naming the field; the form starting a run."""

from __future__ import annotations

import math

import numpy as np
import pytest
from bs4 import BeautifulSoup
from fastapi.testclient import TestClient

from app.main import create_app
from app.settings import Settings
from tests.app.train.test_encdec import TINY, events_until_end


@pytest.fixture(scope="module")
def client():
    app = create_app(Settings(pretrained=False, train_max_steps=3000))
    with TestClient(app) as c:
        yield c


def matrix(table) -> np.ndarray:
    rows = [
        [math.inf * -1 if td.text == "−∞" else float(td.text) for td in tr.select("td")]
        for tr in table.select("tbody tr")
    ]
    return np.array(rows)


def check_stages(soup: BeautifulSoup) -> tuple[int, int]:
    ids = [li["id"] for li in soup.select(".cross-stages > li")]
    assert ids == ["stage-projection", "stage-scores", "stage-mask", "stage-softmax", "stage-weighted_sum"]
    q, k, v = (matrix(t) for t in soup.select("#stage-projection table"))
    scores = matrix(soup.select_one("#stage-scores table"))
    masked = matrix(soup.select_one("#stage-mask table.masked"))
    weights = matrix(soup.select_one("#stage-softmax table"))
    out = matrix(soup.select_one("#stage-weighted_sum table"))
    n_dec, n_enc = scores.shape
    assert q.shape[0] == n_dec and k.shape[0] == v.shape[0] == n_enc
    assert np.allclose(scores, q @ k.T / math.sqrt(q.shape[1]), atol=0.02)  # printed to 3 decimals
    pads = [i for i, th in enumerate(soup.select("#stage-scores thead th")[1:]) if "pad" in (th.get("class") or [])]
    assert pads and np.isneginf(masked[:, pads]).all()
    assert np.isfinite(np.delete(masked, pads, axis=1)).all()  # no causal mask: every real source column is read
    assert np.allclose(weights.sum(1), 1, atol=0.01) and (weights[:, pads] == 0).all()
    assert np.allclose(out, weights @ v, atol=0.02)
    assert soup.select_one(".cross-nocausal")
    return n_dec, n_enc


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_untrained_model_through_five_stages(client: TestClient, lang: str) -> None:
    r = client.get(f"/cross?lang={lang}")
    assert r.status_code == 200
    soup = BeautifulSoup(r.text, "html.parser")
    assert check_stages(soup) == (6, 8)  # <bos> and 5 symbols; 5 symbols and 3 pads: not square
    assert soup.select_one("#cross-run")["data-status"] == "untrained"
    if lang == "zh":
        assert "交叉注意力不加因果掩码" in soup.select_one(".cross-nocausal").text
    twin = client.get(f"/cross.json?lang={lang}").json()
    assert twin["view"] == "cross" and len(twin["stages"]["weights"]) == 6 and twin["stages"]["mask"][-1] is None


def test_a_trained_run_shows_its_snapshots(client: TestClient) -> None:
    run_id = client.post("/api/v1/train", json=TINY).json()["id"]
    assert events_until_end(client, run_id)[-1][1]["status"] == "done"
    soup = BeautifulSoup(client.get(f"/cross?run={run_id}").text, "html.parser")
    assert soup.select_one("#cross-run")["data-status"] == "done"
    snaps = soup.select(".cross-snaps li")
    assert len(snaps) == 3 and snaps[-1].get("aria-current") == "true" and snaps[0].select_one("svg")
    first = BeautifulSoup(client.get(f"/cross?run={run_id}&snap=0&head=1").text, "html.parser")
    assert first.select(".cross-snaps li")[0].get("aria-current") == "true"
    assert check_stages(first) == (5, 5)  # TINY: 4 symbols and <eos> … over 5 source slots
    assert soup.select_one("svg[data-chart='loss']")
    assert run_id in [a.text.split(" · ")[0] for a in soup.select(".cross-runs a")]


@pytest.mark.parametrize(("query", "field"), [("run=nope", "run"), ("head=9", "head"), ("snap=-1", "snap")])
def test_bad_input_is_422_naming_the_field(client: TestClient, query: str, field: str) -> None:
    r = client.get(f"/cross?{query}")
    assert r.status_code == 422 and field in r.headers.get("X-Lab-Error", "")


def test_the_form_starts_a_run(client: TestClient) -> None:
    form = {"arch": "encoder-decoder", "task": "reverse", "steps": "3", "seed": "1", "lang": "zh", "causal": "1"}
    r = client.post("/train", data=form, follow_redirects=False, headers={"Sec-Fetch-Site": "same-origin"})
    assert r.status_code == 303 and r.headers["location"].startswith("/cross?run=")
    run_id = r.headers["location"].split("run=")[1].split("&")[0]
    assert events_until_end(client, run_id)[-1][1]["status"] == "done"
    state = client.get(f"/api/v1/train/{run_id}").json()
    assert state["config"]["steps"] == 3 and state["config"]["seed"] == 1
    bad = client.post("/train", data=form | {"steps": "0"}, follow_redirects=False)
    assert bad.status_code == 422
