"""The page /attribution (#44) on a tiny decoder built here: its numbers are the API's and the engine's for the same
request (the grid, the sum, the rollout, a head's norms, the weight against effect, the sink head), in both
languages and on its JSON twin; a bad field is an inline 422 naming it; a head chosen by htmx swaps its section. A tiny
BERT (an encoder: no next-token logit) gets head norms, rows, rollout and flow over every token, the page saying why
there is no direct logit attribution; attention flow is asked for with its cost stated, and bounded."""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from typing import Any

import pytest
from bs4 import BeautifulSoup
from fastapi.testclient import TestClient

from app.render.cells import colour
from engine import attribution as A
from tests.conftest import make_client

TEXT = "The cat sat on the mat. The cat"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    pytest.importorskip("transformers")
    from tests.own_models import build

    root = tmp_path_factory.mktemp("attribution-page")
    path, _ = build("llama", root / "tiny", seed=6)
    bert, _ = build("bert", root / "tinybert", seed=7)
    with make_client(models=f"tiny={path}{os.pathsep}tinybert={bert}", pretrained=False) as c:
        yield c


def twin(c: TestClient, **params: str) -> dict[str, Any]:
    r = c.get("/attribution.json", params={"preset": "tiny", "text": TEXT} | params)
    assert r.status_code == 200, r.text
    return r.json()  # type: ignore[no-any-return]


def page(c: TestClient, status: int = 200, **params: str) -> BeautifulSoup:
    r = c.get("/attribution", params={"preset": "tiny", "text": TEXT} | params)
    assert r.status_code == status, r.headers.get("x-lab-error")
    return BeautifulSoup(r.text, "html.parser")


def close(a: Any, b: Any, tol: float = 1e-6) -> bool:
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(close(x, y, tol) for x, y in zip(a, b, strict=True))
    return math.isclose(float(a), float(b), abs_tol=tol)


@pytest.mark.parametrize("params", [{}, {"position": "5", "target": "t", "contrast": "c"}])
def test_the_numbers_are_the_apis(tiny: TestClient, params: dict[str, str]) -> None:
    v = twin(tiny, **params)
    api = tiny.get("/api/v1/attribution", params={"preset": "tiny", "text": TEXT, "rollout": "true"} | params).json()
    assert v["view"] == "attribution" and v["token_ids"] == api["token_ids"] and v["position"] == api["position"]
    for key in ("heads", "mlps", "attn_bias", "embed", "total", "logit", "remainder", "norm_bias", "scale"):
        assert close(v[key], api[key]), key
    assert v["target"] == api["target"] and v["contrast"] == api["contrast"]
    assert close(v["total"] + v["remainder"], v["logit"])  # the sum beside the real value
    assert close(v["rollout"]["steps"], api["rollout"]["layers"], 1e-6)
    assert close(v["rollout"]["product"][-1], api["rollout"]["final"], 1e-6)
    assert all(math.isclose(sum(row), 1.0, abs_tol=1e-5) for row in v["rollout"]["product"])
    # the chosen head (the largest |attribution| by default): its row is the API's norms of that layer
    layer, head = v["chosen"]["layer"], v["chosen"]["head"]
    flat = [abs(x) for row in api["heads"] for x in row]
    assert flat.index(max(flat)) == layer * len(api["heads"][0]) + head
    norms = tiny.get("/api/v1/attribution", params={"preset": "tiny", "text": TEXT, "norms_layer": str(layer)}
                     | params).json()["norms"]  # fmt: skip
    shown = v["chosen"]["sources"]
    assert close([s["weight"] for s in shown], norms["weights"][head])
    assert close([s["norm"] for s in shown], norms["value_weighted"][head])


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_weight_against_effect_and_the_sink_are_the_engines(tiny: TestClient, lang: str) -> None:
    model = tiny.app.state.lab.models["tiny"]  # type: ignore[attr-defined]
    for h in (2, 0):  # two heads of one layer, one after the other: the layer's runs are computed once
        v = twin(tiny, head=f"1.{h}", lang=lang)
        ids, p = v["token_ids"], v["position"]
        target = v["target"]["token_id"]
        e = A.weight_effect(model, ids, 1, h, p, target)
        row = v["chosen"]
        assert (row["layer"], row["head"], row["metric"]) == (1, h, "loss") and close(row["clean"], e.clean)
        assert close([s["effect"] for s in row["sources"]], e.effects.tolist(), 1e-5)
        assert close([s["weight"] for s in row["sources"]], e.weights.tolist(), 1e-5)
        assert close(row["spearman_weight"], e.spearman_weight) and close(row["spearman_norm"], e.spearman_norm)
    every = A.weight_effects(model, ids, 1, None, p, target)
    assert close([row["layer_weight"], row["layer_norm"]], list(A.pooled(every)))
    s = A.sink_contrast(model, ids)
    sink = v["sink"]
    assert (sink["layer"], sink["head"]) == (s.layer, s.head)
    assert close(sink["weight_share"], float(s.weight_share[s.layer, s.head]))
    assert close(sink["value_ratio"], float(s.value_ratio[s.layer, s.head]))
    gone = A.weight_effect(model, ids, s.layer, s.head, p, target)
    assert close([x["effect"] for x in sink["row"]["sources"]], gone.effects.tolist(), 1e-5)
    r = A.rollout(model, ids[: p + 1])
    assert close(v["rollout"]["product"], r.cumulative[:, p, : p + 1].tolist())


@pytest.mark.parametrize(("lang", "title"), [("en", "What attention is worth"), ("zh", "注意力的分量")])
def test_the_page_draws_the_numbers_in_both_languages(tiny: TestClient, lang: str, title: str) -> None:
    v = twin(tiny, lang=lang)
    soup = page(tiny, lang=lang)
    assert soup.h2.text.startswith(title)
    cells = soup.select("table.attr-grid td[data-head]")
    assert len(cells) == v["layers"] * v["n_heads"] == 3 * 4
    assert [float(c["data-value"]) for c in cells] == [x for row in v["heads"] for x in row]
    assert [float(c["data-value"]) for c in soup.select("td[data-mlp]")] == v["mlps"]
    # one colour scale for every part: a head and an MLP of the same value are the same shade
    bound = max(abs(x) for x in (*(x for row in v["heads"] for x in row), *v["mlps"], v["embed"]))
    for cell in [*cells, *soup.select("td[data-mlp]")]:
        assert colour(float(cell["data-value"]), "diverging", bound) in cell["class"], cell
    assert colour(v["embed"], "diverging", bound) in soup.select_one("td[data-embed]")["class"]
    said = soup.select_one(".attr-sum")
    assert float(said["data-total"]) == v["total"] and float(said["data-logit"]) == v["logit"]
    assert f"{v['logit']:.3f}" in said.text and soup.select_one("[data-frozen]").text.strip()
    top = soup.select("ol.attr-top li")
    assert [float(li["data-value"]) for li in top] == sorted(
        (x for row in v["heads"] for x in row), key=abs, reverse=True)[:10]  # fmt: skip
    first = top[0]
    layer, head = first["data-head"].split(".")
    assert f"layer={layer}" in first.select_one('a[data-link="pattern"]')["href"]
    assert f"head={head}" in first.select_one('a[data-link="pattern"]')["href"]
    assert "ablate=L" in first.select_one('a[data-link="knock"]')["href"]
    assert len(soup.select("#head table.attr-row tbody tr")) == v["position"] + 1
    assert soup.select_one("#sink table.attr-row") is not None
    assert len(soup.select("#rollout table[data-rollout=product] tbody tr")) == 3
    other = BeautifulSoup(tiny.get("/attribution", params={"preset": "tiny", "text": TEXT,
                                                           "lang": "zh" if lang == "en" else "en"}).text,
                          "html.parser")  # fmt: skip
    assert other.select_one("[data-frozen]").text != soup.select_one("[data-frozen]").text


def test_the_list_sorts_and_the_knock_out_opens(tiny: TestClient) -> None:
    v = twin(tiny, sort="neg")
    assert [h["value"] for h in v["top"]] == sorted(x for row in v["heads"] for x in row)[:10]
    pos = twin(tiny, sort="pos")
    assert [h["value"] for h in pos["top"]] == sorted((x for row in v["heads"] for x in row), reverse=True)[:10]
    knock = v["top"][0]["knock_url"]
    assert tiny.get(knock).status_code == 200 and tiny.get(v["top"][0]["lab_url"]).status_code == 200


@pytest.mark.parametrize(
    ("params", "field"),
    [({"head": "9.0"}, "head"), ({"head": "x"}, "head"), ({"position": "99"}, "position"),
     ({"sort": "up"}, "sort"), ({"preset": "nope"}, "preset"),
     ({"text": "x" * 9000}, "text")],
)  # fmt: skip
@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_bad_field_is_an_inline_422_naming_it(tiny: TestClient, params: dict[str, str], field: str,
                                                lang: str) -> None:  # fmt: skip
    r = tiny.get("/attribution", params={"preset": "tiny", "text": TEXT, "lang": lang} | params)
    assert r.status_code == 422
    soup = BeautifulSoup(r.text, "html.parser")
    said = soup.select_one(".error[role=alert]").text
    assert field in said and ("错误" in said or "有误" in said or "问题" in said) == (lang == "zh"), said
    assert soup.select_one("#attribution-body form") is not None  # the form stays, to correct the field
    assert tiny.get("/attribution.json", params={"preset": "tiny", "text": TEXT} | params).status_code == 422


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_head_out_of_range_says_whether_its_layer_or_its_head_is(tiny: TestClient, lang: str) -> None:
    """`head` is layer.head: a layer past the model's says the model's layers (it said "must be between 0 and N"
    under `head`, which read as the head's range), a head past the layer's says its heads; both name `head`, the
    field the user typed."""
    v = twin(tiny)
    layers, heads = v["layers"], v["n_heads"]
    for typed, words in ((f"{layers}.0", {"en": f"has layers 0..{layers - 1}, not {layers}",
                                          "zh": f"的层编号是 0..{layers - 1}，没有 {layers}"}),
                         (f"0.{heads}", {"en": f"head {heads} does not exist: this trace has heads 0..{heads - 1}",
                                         "zh": f"头 {heads} 不存在：这次计算只有头 0..{heads - 1}"})):  # fmt: skip
        r = tiny.get("/attribution", params={"preset": "tiny", "text": TEXT, "lang": lang, "head": typed})
        assert r.status_code == 422
        said = BeautifulSoup(r.text, "html.parser").select_one(".error[role=alert]").text
        assert "head" in said and words[lang] in said, said
        (switch,) = BeautifulSoup(r.text, "html.parser").select("a[data-toggle=present]")  # the header's alone
        assert switch.find_parent("header") is not None
        api = tiny.get("/attribution.json", params={"preset": "tiny", "text": TEXT, "head": typed})
        assert api.status_code == 422 and api.json()["detail"][0]["loc"][-1] == "head", api.text
        assert words["en"] in api.json()["message"], api.text


def test_a_head_chosen_by_htmx_swaps_its_section(tiny: TestClient) -> None:
    soup = page(tiny)
    form = soup.select_one('form[hx-target="#head"]')
    assert form["hx-select"] == "#head" and form.select('button[name="head"]')
    sent = {i["name"]: i["value"] for i in form.select("input[type=hidden]")}
    r = tiny.get("/attribution", params=sent | {"head": "2.3"}, headers={"HX-Request": "true"})
    assert r.status_code == 200 and "<body" not in r.text
    part = BeautifulSoup(r.text, "html.parser")
    head = part.select_one("#head")
    row = head.select_one("table.attr-row")
    assert (row["data-layer"], row["data-head"]) == ("2", "3")
    assert part.select_one("td.chosen")["data-layer"] == "2" and part.select_one("#dla-grid") is not None


def test_the_chinese_page_holds_no_english_ui_strings(tiny: TestClient) -> None:
    """As tests/app/web/test_kernel.py holds the other pages: past the model's own tokens, the names of people and
    the terms Chinese ML writing keeps in Latin letters (MLP, logit, rms, rollout, sink, Spearman), no English."""
    import re

    from tests.app.web.test_kernel import LATIN_OK

    v = twin(tiny, lang="zh")
    soup = page(tiny, lang="zh", head="1.2")
    for el in soup.select("script, style, code, textarea"):  # the text the model reads
        el.decompose()
    words = set(re.findall(r"[A-Za-z][A-Za-z_0-9]{2,}", soup.get_text(" ")))
    tokens = {w for tok in v["tokens"] for w in re.findall(r"[A-Za-z][A-Za-z_0-9]{2,}", tok)}
    kept = {"Abnar", "Zuidema", "Kobayashi", "Spearman", "MLP", "logit", "rms", "rollout", "sink", "R_l", "tiny",
            "tinybert", "MAX_FLOW_TOKENS"}  # fmt: skip
    left = {w for w in words - LATIN_OK - tokens - kept if not re.fullmatch(r"[LR]\d+", w)}
    assert not left, sorted(left)


def test_presenter_mode_is_kept_by_every_link_and_form(tiny: TestClient) -> None:
    soup = page(tiny, present="1", hints="off", lesson="big-weight", lesson_step="2", lang="en")
    assert "present" in soup.body["class"] and len(soup.select("a[data-toggle=present]")) == 1
    leave = soup.select_one("a[data-toggle=present]")["href"]
    assert "present=" not in leave and "lesson_step=2" in leave
    for a in soup.select("main a[href]"):
        href = a["href"]
        if href.startswith(("/attribution?", "/?", "/predict?")) and not a.has_attr("data-toggle"):
            assert "present=1" in href, href
    forms = soup.select("main form[method=get]")
    assert forms
    for form in forms:
        fields = {i.get("name"): i.get("value") for i in form.select("input[type=hidden]")}
        assert fields.get("present") == "1" and fields.get("hints") == "off" and fields.get("lesson_step") == "2"


def test_a_server_without_smollm2_shows_its_own_decoder(tiny: TestClient) -> None:
    r = tiny.get("/attribution.json")
    assert r.status_code == 200, r.text
    assert r.json()["preset"] == "tiny"


# -- an encoder, and attention flow ---------------------------------------------------------------------------------


def enc_twin(c: TestClient, **params: str) -> dict[str, Any]:
    return twin(c, preset="tinybert", **params)


@pytest.mark.parametrize("position", ["3", None])
def test_an_encoder_gets_norms_and_rollout_over_every_token(tiny: TestClient, position: str | None) -> None:
    model = tiny.app.state.lab.models["tinybert"]  # type: ignore[attr-defined]
    v = enc_twin(tiny, **({"position": position} if position else {}))
    ids, p, n = v["token_ids"], v["position"], len(v["token_ids"])
    assert v["decoder"] is False and v["span"] == n and "no next-token logit" in v["no_dla"]
    assert v["heads"] == [] and v["logit"] is None and v["target"] is None and v["scale"] is None
    api = tiny.get("/api/v1/attribution", params={"preset": "tinybert", "text": TEXT}
                   | ({"position": position} if position else {})).json()  # fmt: skip
    assert close(v["head_norms"], api["head_norms"]) and api["heads"] is None
    assert close(v["head_norms"], A.head_output_norms(model, ids, p).tolist())
    layer, head = v["chosen"]["layer"], v["chosen"]["head"]  # the head that writes the most, by default
    flat = [x for row in v["head_norms"] for x in row]
    assert flat.index(max(flat)) == layer * v["n_heads"] + head
    norms = A.value_weighted_norms(model, ids, layer)
    shown = v["chosen"]["sources"]
    assert len(shown) == n and all(s["effect"] is None for s in shown)  # later tokens too; no effect to measure
    assert close([s["weight"] for s in shown], norms.weights[head, p].tolist())
    assert close([s["norm"] for s in shown], norms.norms[head, p].tolist())
    r = A.rollout(model, ids)
    assert close(v["rollout"]["product"], r.cumulative[:, p].tolist()) and len(v["rollout"]["product"][0]) == n
    s = A.sink_contrast(model, ids)
    assert (v["sink"]["layer"], v["sink"]["head"]) == (s.layer, s.head)


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_encoders_page_says_why_there_is_no_logit(tiny: TestClient, lang: str) -> None:
    v = enc_twin(tiny, lang=lang, position="2")
    soup = page(tiny, preset="tinybert", lang=lang, position="2")
    note = soup.select_one("[data-no-dla]")
    assert note is not None and note.text.strip() == v["no_dla"]
    assert ("编码器" in note.text and "logit" in note.text) if lang == "zh" else "encoder" in note.text
    assert soup.select_one(".attr-sum") is None and soup.select_one("td[data-mlp]") is None
    assert soup.select_one("input[name=target]") is None and soup.select_one('a[data-link="knock"]') is None
    cells = soup.select("table.attr-grid td[data-head]")
    assert [float(c["data-value"]) for c in cells] == [x for row in v["head_norms"] for x in row]
    assert not soup.select(".attr-tokens button.after")  # an encoder reads the tokens after the position too
    assert len(soup.select("#head table.attr-row tbody tr")) == len(v["tokens"])
    assert soup.select_one("#head table.attr-row").select("thead th")[-1].text.startswith("‖")  # no effect column
    other = page(tiny, preset="tinybert", lang="en" if lang == "zh" else "zh")
    assert other.select_one("[data-no-dla]").text != note.text
    switched = page(tiny, preset="tinybert", lang=lang, target=" cat", contrast=" dog")  # a form left them typed
    assert switched.select_one("[data-no-dla]") is not None


def test_the_chinese_encoder_page_holds_no_english_ui_strings(tiny: TestClient) -> None:
    import re

    from tests.app.web.test_kernel import LATIN_OK

    v = enc_twin(tiny, lang="zh")
    soup = page(tiny, preset="tinybert", lang="zh", flow="true")
    for el in soup.select("script, style, code, textarea"):
        el.decompose()
    words = set(re.findall(r"[A-Za-z][A-Za-z_0-9]{2,}", soup.get_text(" ")))
    tokens = {w for tok in v["tokens"] for w in re.findall(r"[A-Za-z][A-Za-z_0-9]{2,}", tok)}
    kept = {"Abnar", "Zuidema", "Kobayashi", "MLP", "logit", "rollout", "sink", "R_l", "tiny", "tinybert",
            "MAX_FLOW_TOKENS"}  # fmt: skip
    left = {w for w in words - LATIN_OK - tokens - kept if not re.fullmatch(r"[LR]\d+", w)}
    assert not left, sorted(left)


@pytest.mark.parametrize("preset", ["tiny", "tinybert"])
def test_attention_flow_is_asked_for_with_its_cost_and_is_the_engines(tiny: TestClient, preset: str) -> None:
    model = tiny.app.state.lab.models[preset]  # type: ignore[attr-defined]
    soup = page(tiny, preset=preset, position="5")
    ask = soup.select_one('#flow a[data-link="flow"]')
    v = twin(tiny, preset=preset, position="5")
    span, layers = v["span"], v["layers"]
    edges = layers * (span * (span + 1) // 2 if v["decoder"] else span * span)
    assert v["flow"] is None and v["flow_edges"] == edges and f"{edges:,}" in ask.text and str(span) in ask.text
    assert "flow=true" in ask["href"] and ask["hx-get"]
    got = twin(tiny, preset=preset, position="5", flow="true")
    ids = got["token_ids"] if not got["decoder"] else got["token_ids"][:6]
    want = A.attention_flow(model, ids, 5)
    assert close(got["flow"]["values"], want.tolist(), 1e-5) and got["flow"]["edges"] == edges
    drawn = page(tiny, preset=preset, position="5", flow="true")
    assert [float(td["data-value"]) for td in drawn.select("table[data-flow] tbody tr")[0].select("td")] == \
        got["flow"]["values"]  # fmt: skip
    assert drawn.select_one('#flow a[data-link="flow"]') is None


def test_attention_flow_past_its_bound_is_said_and_refused(tiny: TestClient) -> None:
    long = " ".join(["the cat sat on the mat"] * 6)
    soup = page(tiny, text=long)
    assert soup.select_one("#flow [data-too-long]") is not None and soup.select_one('#flow a[data-link="flow"]') is None
    r = tiny.get("/attribution", params={"preset": "tiny", "text": long, "flow": "true"})
    said = BeautifulSoup(r.text, "html.parser").select_one(".error[role=alert]").text
    assert r.status_code == 422 and "text" in said and "MAX_FLOW_TOKENS" in said, said


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_why_this_score_splits_the_chosen_heads_cell(tiny: TestClient, lang: str) -> None:
    model = tiny.app.state.lab.models["tiny"]  # type: ignore[attr-defined]
    v = twin(tiny, head="1.2", lang=lang)
    w, p, ids = v["why"], v["position"], v["token_ids"]
    weights = [s["weight"] for s in v["chosen"]["sources"]]
    besides = [x if j != p else -1.0 for j, x in enumerate(weights)]  # the query itself: offset 0, no rotation
    assert (w["layer"], w["head"], w["query"]) == (1, 2, p) and w["key"] == besides.index(max(besides))
    s = A.score_split(model, ids[: p + 1], 1, 2, p, w["key"])
    assert w["by"] == "pair" and w["count"] == model.arch.d_k // 2 and len(w["terms"]) == min(8, w["count"])
    assert math.isclose(sum(t["value"] for t in w["terms"]) + w["rest"], w["score"], abs_tol=1e-9)
    assert math.isclose(w["score"], s.score, abs_tol=1e-9) and math.isclose(w["cell"], s.score, abs_tol=1e-4)
    sizes = [abs(t["value"]) for t in w["terms"]]
    assert sizes == sorted(sizes, reverse=True) and math.isclose(w["weight"], max(besides), abs_tol=1e-9)
    other = twin(tiny, head="1.2", key="1")["why"]
    assert other["key"] == 1 and math.isclose(other["score"], A.score_split(model, ids[: p + 1], 1, 2, p, 1).score,
                                              abs_tol=1e-9)  # fmt: skip
    soup = page(tiny, head="1.2", key="1", lang=lang)
    table = soup.select_one("#head #why")
    assert table is not None and table["data-key"] == "1" and table.select_one("select[name=key] option[selected]")
    assert table.select_one("[data-total]").text == f"{other['score']:+.4f}"


def test_an_encoders_score_splits_per_dimension(tiny: TestClient) -> None:
    model = tiny.app.state.lab.models["tinybert"]  # type: ignore[attr-defined]
    v = twin(tiny, preset="tinybert", position="2", key="6")
    w, ids = v["why"], v["token_ids"]
    assert w["by"] == "dim" and w["count"] == model.arch.d_k and w["key"] == 6  # a key after the query: both ways
    s = A.score_split(model, ids, w["layer"], w["head"], 2, 6)
    assert math.isclose(w["score"], s.score, abs_tol=1e-9) and math.isclose(w["cell"], s.score, abs_tol=1e-4)
    assert all(t["theta"] is None for t in w["terms"])


@pytest.mark.parametrize("key", ["99", "x", "8"])
def test_a_bad_key_is_a_422_naming_it(tiny: TestClient, key: str) -> None:
    r = tiny.get("/attribution.json", params={"preset": "tiny", "text": TEXT, "position": "7", "key": key})
    assert r.status_code == 422 and "key" in r.text, r.text
    soup = page(tiny, 422, position="7", key=key)
    assert "key" in soup.select_one(".error[role=alert]").text


def test_the_page_keeps_the_sites_header_whatever_its_numbers(tiny: TestClient) -> None:
    """A View's field named like a kernel switch (the embedding's share of the logit, `embed`) once turned the page
    into the header-less embed mode: the decoder's page keeps its menu, language switch and footer."""
    soup = page(tiny)
    assert soup.select_one("[data-embed]") is not None  # the embedding's row is drawn, with a non-zero value
    assert "embed" not in soup.body.get("class", [])
    assert soup.select_one("header nav") is not None and soup.select_one("footer") is not None


def test_the_first_positions_score_splits_its_only_key(tiny: TestClient) -> None:
    """A decoder's first position reads only itself: the split's default key is 0, never a later (masked) one."""
    w = twin(tiny, position="0")["why"]
    assert w["query"] == 0 and w["key"] == 0 and math.isclose(w["weight"], 1.0, abs_tol=1e-6)
