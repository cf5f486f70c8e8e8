"""/cost: each stage's FLOPs as the page counts them from the shapes, against torch's own FlopCounterMode counting
the same stages run as real matmuls (Q, K, V and W_O as linear layers, grouped-query K and V repeated per head, the
scores and the weighted sum per head, the FFN gated or not); the crossover where attention's N² terms meet the
projections; the timed grid; en and zh; bad input a 422 naming the field."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from bs4 import BeautifulSoup
from fastapi.testclient import TestClient
from torch.utils.flop_counter import FlopCounterMode

from app.cost.flops import SHAPES, Shape, crossover, flops, grid, measured_crossover
from app.main import create_app
from app.settings import Settings


@pytest.fixture(scope="module")
def client():
    with TestClient(create_app(Settings(pretrained=False))) as c:
        yield c


def counted_by_torch(s: Shape, n: int) -> dict[str, int]:
    """One block's stages run on random tensors, each under its own FlopCounterMode."""
    x = torch.randn(1, n, s.d)
    wq, wk, wv = torch.randn(s.d, s.d), torch.randn(s.d_kv, s.d), torch.randn(s.d_kv, s.d)
    out: dict[str, int] = {}

    def count(name: str, f) -> torch.Tensor:  # type: ignore[no-untyped-def]
        with FlopCounterMode(display=False) as m:
            r = f()
        out[name] = m.get_total_flops()
        return r

    q, k, v = count("projections", lambda: (F.linear(x, wq), F.linear(x, wk), F.linear(x, wv)))
    q = q.view(1, n, s.heads, s.d_k).transpose(1, 2)
    k, v = (t.view(1, n, s.kv_heads, s.d_k).transpose(1, 2).repeat_interleave(s.heads // s.kv_heads, 1)
            for t in (k, v))  # fmt: skip
    scores = count("scores", lambda: q @ k.transpose(-2, -1))
    p = torch.softmax(scores / math.sqrt(s.d_k), -1)
    heads = count("weighted_sum", lambda: p @ v)
    y = count("output", lambda: F.linear(heads.transpose(1, 2).reshape(1, n, s.d), torch.randn(s.d, s.d)))
    up = [torch.randn(s.d_ff, s.d) for _ in range(2 if s.gated else 1)]
    down = torch.randn(s.d, s.d_ff)
    if s.gated:
        count("ffn", lambda: F.linear(F.silu(F.linear(y, up[0])) * F.linear(y, up[1]), down))
    else:
        count("ffn", lambda: F.linear(F.gelu(F.linear(y, up[0])), down))
    return out


@pytest.mark.parametrize("name", list(SHAPES))
@pytest.mark.parametrize("n", [1, 7, 100])
def test_the_counts_equal_torchs_flop_counter(name: str, n: int) -> None:
    assert flops(SHAPES[name], n) == counted_by_torch(SHAPES[name], n)


def test_the_crossover() -> None:
    for s in SHAPES.values():
        n1, n2 = crossover(s)
        for n, others in ((n1, ("projections", "output")), (n2, ("projections", "output", "ffn"))):
            lo, hi = (flops(s, m) for m in (math.floor(n) - 1, math.ceil(n) + 1))
            assert lo["scores"] + lo["weighted_sum"] < sum(lo[k] for k in others)
            assert hi["scores"] + hi["weighted_sum"] > sum(hi[k] for k in others)
    assert crossover(SHAPES["gpt2"]) == (2 * 768, 6 * 768)  # multi-head attention: N* = 2d; with d_ff = 4d, 6d
    g = SHAPES["gpt2"]
    at = counted_by_torch(g, 1536)  # at N = 2d, torch's own counts are equal
    assert at["scores"] + at["weighted_sum"] == at["projections"] + at["output"]


def test_the_measured_crossover_interpolates() -> None:
    assert grid(100) == [16, 32, 64, 100] and grid(64) == [16, 32, 64]
    halfway = 10 * math.sqrt(10)  # the differences −1 and +1: half-way between 10 and 100 on log N
    assert measured_crossover([10, 100], [1.0, 4.0], [2.0, 3.0]) == pytest.approx(halfway)
    assert measured_crossover([10, 100], [1.0, 2.0], [2.0, 3.0]) is None


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_page_counts_and_times(client: TestClient, lang: str) -> None:
    r = client.get(f"/cost?model=smollm2&n_max=64&lang={lang}")
    assert r.status_code == 200
    soup = BeautifulSoup(r.text, "html.parser")
    assert soup.select_one("svg[data-chart='flops']") and soup.select_one("svg[data-chart='time']")
    assert float(soup.select_one(".cost-crossover")["data-crossover"]) == crossover(SHAPES["smollm2"])[0]
    if lang == "zh":
        assert "交叉点" in soup.text
    v = client.get(f"/cost.json?model=smollm2&n_max=64&lang={lang}").json()
    assert v["view"] == "cost" and (v["d"], v["heads"], v["kv_heads"], v["d_ff"]) == (576, 9, 3, 1536)
    rows = {row["n"]: row for row in v["rows"]}
    assert [n for n, row in rows.items() if row["seconds"]] == [16, 32, 64]
    assert all(t > 0 for row in rows.values() if row["seconds"] for t in row["seconds"].values())
    assert max(rows) == 16384 and rows[1024]["flops"] == flops(SHAPES["smollm2"], 1024)
    over = [n for n, row in rows.items() if row["attention"] >= row["projections"]]
    assert min(over) == 1024 > 768 == crossover(SHAPES["smollm2"])[0] and 512 not in over


@pytest.mark.parametrize(("query", "field"), [("model=bert", "model"), ("n_max=5000", "n_max"), ("n_max=x", "n_max")])
def test_bad_input_is_422_naming_the_field(client: TestClient, query: str, field: str) -> None:
    r = client.get(f"/cost?{query}")
    assert r.status_code == 422 and field in r.headers.get("X-Lab-Error", "")
    assert client.get(f"/cost.json?{query}").status_code == 422
