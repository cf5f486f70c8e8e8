"""The demonstrations: each computes what the chapter claims, and each input error names its field."""

from __future__ import annotations

import math
from xml.etree import ElementTree

import pytest
from bs4 import BeautifulSoup

from engine import demos


def test_permutation_equivariance_holds_only_without_positions_or_mask():
    r = demos.permutation(["a", "b", "c", "d"], [3, 1, 0, 2])
    assert {c["case"]: c["equivariant"] for c in r["cases"]} == {"plain": True, "sinusoidal": False, "causal": False}


def test_rope_relative_identity():
    r = demos.rope_relative(4, 11, d_k=16, pairing="half")
    assert r["equal"] and r["absolute"] == pytest.approx(r["relative"], abs=1e-9)
    scores = [o["score"] for o in r["offsets"]]
    assert max(scores) - min(scores) < 1e-9


def test_scaling_variance_tracks_dk_and_sqrt_dk_keeps_softmax_steady():
    s = demos.scaling()
    for row in s["rows"]:
        assert row["var"] == pytest.approx(row["d_k"], rel=0.15)
    first, last = s["rows"][0], s["rows"][-1]
    assert last["max_none"] > 0.9 > first["max_none"]  # unscaled: near one-hot at d_k = 1024
    assert abs(last["max_sqrt_dk"] - first["max_sqrt_dk"]) < 0.05  # √d_k: the same at every width
    assert last["entropy_dk"] == pytest.approx(math.log(16), abs=0.05)  # ÷ d_k: nearly uniform


def test_scaling_draws_the_scores_not_the_keys(monkeypatch):
    """The scores q·k_j are drawn as ‖q‖·z_j (the same distribution): 4 million numbers for the defaults, not the
    keys' 65 million (3-4 s of one core, once per process, on every first visit to /demos)."""
    import torch

    drawn = []
    randn = torch.randn

    def counting(*size, **kw):
        out = randn(*size, **kw)
        drawn.append(out.numel())
        return out

    monkeypatch.setattr(torch, "randn", counting)
    demos.scaling.__wrapped__(2000, 16, 0)
    assert sum(drawn) == sum(2000 * (2**e + 16) for e in range(2, 11))  # each q, and one z per key


@pytest.mark.parametrize("d", [4, 64])
def test_scaling_scores_are_distributed_as_the_dot_products_of_drawn_keys(d):
    """Each d_k's statistics agree with the same statistics of q·k for drawn keys, to the sampling error."""
    import torch

    s = next(r for r in demos.scaling()["rows"] if r["d_k"] == d)
    g = torch.Generator().manual_seed(1)
    q = torch.randn(4000, d, generator=g, dtype=torch.float64)
    dots = torch.einsum("sd,snd->sn", q, torch.randn(4000, 16, d, generator=g, dtype=torch.float64))
    assert s["var"] == pytest.approx(float(dots[:, 0].var()), rel=0.25)  # 5 standard errors at d_k = 4
    for name, scale in (("none", 1.0), ("sqrt_dk", math.sqrt(d)), ("dk", float(d))):
        p = torch.softmax(dots / scale, dim=-1)
        peak, entropy = p.max(-1).values, -(p * torch.log(p.clamp_min(1e-300))).sum(-1)
        for shown, drawn in ((s[f"max_{name}"], peak), (s[f"entropy_{name}"], entropy)):
            error = math.sqrt(float(drawn.var()) * (1 / 2000 + 1 / 4000))  # the two means' standard error
            assert abs(shown - float(drawn.mean())) < 5 * error, (name, shown, float(drawn.mean()))


def test_float16_softmax_overflows_without_the_max_subtracted():
    r = demos.softmax_stability([10.0, 11.0, 12.0])
    assert r["naive_exp"][2] is None and not r["naive_ok"]
    assert sum(r["stable"]) == pytest.approx(1, abs=1e-3) and r["stable_max_abs_diff"] < 1e-3
    assert demos.softmax_stability([1.0, 2.0, 3.0])["naive_ok"]


def svg_texts(body: bytes) -> list[str]:
    """Every text an SVG holds (matplotlib keeps text as text: `svg.fonttype = none`)."""
    root = ElementTree.fromstring(body)
    return ["".join(e.itertext()).strip() for e in root.iter("{http://www.w3.org/2000/svg}text")]


def test_demo_api_and_svg(client):
    assert client.get("/api/v1/demo/permutation", params={"perm": "4,3,2,1,0"}).json()["cases"][0]["equivariant"]
    assert client.get("/api/v1/demo/rope", params={"m": 2, "n": 9}).json()["equal"]


@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize("chart", ["variance", "max", "entropy"])
def test_the_scaling_svg_is_matplotlibs_with_the_pages_title_and_labels(client, chart, lang):
    """/api/v1/demo/scaling.svg is drawn by matplotlib from the page's own chart (the same data and words): its
    title, axis titles and legend are the inline chart's, in the page's language."""
    from app.demos.view import scaling_specs
    from app.templating import translator

    svg = client.get("/api/v1/demo/scaling.svg", params={"chart": chart, "lang": lang})
    assert svg.status_code == 200 and svg.headers["content-type"].startswith("image/svg+xml")
    assert b"Attention Lab (matplotlib)" in svg.content and b"<polyline" not in svg.content  # not hand-drawn
    spec = scaling_specs(demos.scaling(), translator(lang))[chart]
    texts = svg_texts(svg.content)
    assert spec.title in texts and spec.x_label in texts and spec.y_label in texts
    assert {"16", "256"} <= set(texts)  # d_k's ticks as plain numbers, as text
    if len(spec.series) > 1:
        assert {s.label for s in spec.series} <= set(texts)
    if chart == "entropy" and lang == "zh":
        assert any("熵" in t for t in texts)


def test_a_scaling_chart_is_drawn_once_and_kept(client, monkeypatch):
    """The chart's data and words are fixed: the second request for it (here with a parameter the route ignores)
    is the SVG kept, not drawn again; the other language is its own chart."""
    from app.demos import api

    draws: list[str] = []
    chart_figure = api.chart_figure

    def counting(spec, fmt, caption, lang):  # type: ignore[no-untyped-def]
        draws.append(lang)
        return chart_figure(spec, fmt, caption, lang)

    monkeypatch.setattr(api, "chart_figure", counting)
    api.scaling_chart.cache_clear()
    first = client.get("/api/v1/demo/scaling.svg", params={"chart": "max"})
    again = client.get("/api/v1/demo/scaling.svg", params={"chart": "max", "unknown": "1"})
    zh = client.get("/api/v1/demo/scaling.svg", params={"chart": "max", "lang": "zh"})
    assert first.status_code == again.status_code == zh.status_code == 200
    assert again.content == first.content != zh.content and draws == ["en", "zh"]
    api.scaling_chart.cache_clear()  # none drawn by the counting wrapper kept for another test


@pytest.mark.parametrize(("path", "params", "field"), [
    ("/api/v1/demo/permutation", {"perm": "0,0,1,2,3"}, "perm"),
    ("/api/v1/demo/permutation", {"perm": "x"}, "perm"),
    ("/api/v1/demo/rope", {"d_k": 7}, "d_k"),
    ("/api/v1/demo/softmax", {"logits": "1,nan"}, "logits"),
    ("/api/v1/demo/softmax", {"dtype": "int8"}, "dtype"),
])  # fmt: skip
def test_demo_errors_name_the_field(client, path, params, field):
    r = client.get(path, params=params)
    assert r.status_code == 422 and r.json()["detail"][0]["loc"][1] == field


def test_demos_page_in_both_languages(client):
    page = BeautifulSoup(client.get("/demos?lang=en").text, "html.parser")
    cases = {tr["data-case"]: tr["data-equivariant"] for tr in page.select("#permutation tr[data-case]")}
    assert cases == {"plain": "true", "sinusoidal": "false", "causal": "false"}
    assert len(page.select("#scaling svg.chart")) == 3
    assert page.select_one("#softmax table")["data-naive-ok"] == "false"
    zh = BeautifulSoup(client.get("/demos?lang=zh&perm=1,0").text, "html.parser")
    assert "为什么除以 √d_k" in zh.text and "“perm” 有误" in zh.select_one("#permutation .error").text
