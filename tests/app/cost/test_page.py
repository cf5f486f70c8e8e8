"""/cost: each stage's FLOPs as the page counts them from the shapes, against torch's own FlopCounterMode counting
the same stages run as real matmuls (Q, K, V and W_O as linear layers, grouped-query K and V repeated per head, the
scores and the weighted sum per head, the FFN gated or not); the crossover where attention's N² terms meet the
projections; the timed grid; en and zh; bad input a 422 naming the field."""

from __future__ import annotations

import itertools
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


def lines(svg) -> dict[str, list[tuple[float, float]]]:  # type: ignore[no-untyped-def]
    """Each polyline of a drawn chart, by its series' label: its points in the drawing's units."""
    return {p["data-series"]: [tuple(map(float, xy.split(","))) for xy in p["points"].split()]
            for p in svg.select("polyline")}  # fmt: skip


def y_at(points: list[tuple[float, float]], x: float) -> float:
    for (x0, y0), (x1, y1) in itertools.pairwise(points):
        if x0 <= x <= x1:
            return y0 + (x - x0) / (x1 - x0) * (y1 - y0)
    raise AssertionError(f"x = {x} is off the line")


@pytest.mark.parametrize("model", list(SHAPES))
@pytest.mark.parametrize("chart", ["flops", "flops-narrow"])
def test_the_crossover_is_seen_where_the_lines_meet(client: TestClient, model: str, chart: str) -> None:
    """Both axes log: the toy's projections (0.008 MFLOPs a token) are not flattened onto the floor under attention's
    2 MFLOPs at N = 16384; the crossover's vertical line stands where attention's line meets the projections', well
    clear of the plot's edges, and the projections' line stands clear of the floor (a linear axis put the toy's
    within a pixel of it)."""
    soup = BeautifulSoup(client.get(f"/cost?model={model}&n_max=64").text, "html.parser")
    svg = soup.select_one(f"svg[data-chart='{chart}']")
    drawn = lines(svg)
    attention, projections = drawn["attention (QKᵀ + PV)"], drawn["projections (Q, K, V, W_O)"]
    n1 = round(crossover(SHAPES[model])[0])
    (x, low), (_, high) = drawn[f"crossover, N = {n1}"]  # from the lowest number drawn to the highest
    assert abs(y_at(attention, x) - y_at(projections, x)) < 1.0  # the lines meet on the marker
    left, right = attention[0][0], attention[-1][0]
    assert left + 0.05 * (right - left) < x < right - 0.05 * (right - left)
    floor = max(y for _, y in attention)  # N = 16: attention's per-token cost is the lowest number drawn
    assert floor - projections[0][1] > 0.1 * (low - high)  # (SVG's y grows downwards)


def test_phone_and_page_drawings(client: TestClient) -> None:
    soup = BeautifulSoup(client.get("/cost?model=toy&n_max=64").text, "html.parser")
    for name in ("flops", "time"):
        wide, narrow = (soup.select_one(f"svg[data-chart='{c}']") for c in (name, name + "-narrow"))
        assert wide["viewbox"].split()[2] == "560" and narrow["viewbox"].split()[2] == "340"
        assert narrow.select_one("text.tick")["font-size"] == wide.select_one("text.tick")["font-size"]


@pytest.mark.parametrize(("lang", "query", "label", "typed"), [
    ("en", "model=toy&n_max=5000", "Time up to N (n_max)", {"n_max": "5000", "model": "toy"}),
    ("zh", "model=smollm2&n_max=5000", "计时到 N（n_max）", {"n_max": "5000", "model": "smollm2"}),
    ("en", "model=bert&n_max=128", "Shapes (model)", {"n_max": "128", "model": "bert"}),
    ("zh", "model=toy&n_max=x", "计时到 N（n_max）", {"n_max": "x", "model": "toy"}),
])  # fmt: skip
def test_a_bad_value_keeps_the_form_and_says_its_label(client: TestClient, lang: str, query: str, label: str,
                                                      typed: dict[str, str]) -> None:  # fmt: skip
    """The form stays as typed (not reset to its defaults: a model the menu lacks is its own chosen option, not
    GPT-2; an n_max that is no number is in a text field, which a browser shows, not a number field, which it shows
    empty), the refused field says why beside itself, and the error names the field by the label the user sees and
    by its URL key, in the page's language. One presenter switch, the header's."""
    r = client.get(f"/cost?{query}&lang={lang}")
    assert r.status_code == 422
    soup = BeautifulSoup(r.text, "html.parser")
    assert label in soup.select_one("[role=alert]").text
    n_max = soup.select_one("input[name=n_max]")
    assert n_max["value"] == typed["n_max"]
    assert soup.select_one("select[name=model] option[selected]")["value"] == typed["model"]
    key = label.split("(")[-1].split("（")[-1].strip(")）")
    assert (n_max["type"] == "number") == (key != "n_max")  # a refused n_max in a text field: shown as typed
    beside = soup.select_one(f"[data-field-error='{key}']")
    assert beside is not None and beside.find_parent("label").select_one(f"[name={key}]")["aria-invalid"] == "true"
    if lang == "zh":
        assert "2048" in beside.text or "整数" in beside.text  # the message in Chinese too
    assert len(soup.select("[data-field-error]")) == 1
    (switch,) = soup.select("a[data-toggle=present]")
    assert switch.find_parent("header") is not None


@pytest.mark.parametrize("page", ["/cost?model=bert", "/block?norm=bogus", "/?mask=bogus", "/params?preset=bogus"])
def test_a_value_outside_the_menu_is_refused_in_chinese_words(client: TestClient, page: str) -> None:
    """A value that is none of a field's choices (pydantic's literal_error, "Input should be 'a', 'b' or 'c'") names
    the choices in the page's language: on a Chinese page no English "or" joins them (the class walk found "应为
    'toy', 'gpt2' or 'smollm2'" on /cost); the API keeps its English."""
    r = client.get(f"{page}&lang=zh")
    assert r.status_code == 422
    said = BeautifulSoup(r.text, "html.parser").select_one(".error[role=alert]").text
    assert "应为以下之一：" in said and " or " not in said and "、" in said, said
    assert " or " in client.get(f"{page}&lang=en").text  # the English page (and the API) as before
