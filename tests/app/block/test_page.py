"""The block page: the flow of stages, the attention inside it, heat-map strips for large traces."""

from __future__ import annotations

import pytest
from bs4 import BeautifulSoup


def soup(r):
    return BeautifulSoup(r.text, "html.parser")


def test_flow_lists_every_stage_with_the_attention_grouped(client):
    page = soup(client.get("/block?lang=en"))
    keys = [a["data-block-stage"] for a in page.select("ol.flow a[data-block-stage]")]
    assert keys == [
        "ln1",
        "projection",
        "scores",
        "mask",
        "softmax",
        "weighted_sum",
        "residual1",
        "ln2",
        "ffn_hidden",
        "ffn_out",
        "output",
    ]
    group = [a["data-block-stage"] for a in page.select("ol.flow li.group a")]
    assert group == ["projection", "scores", "mask", "softmax", "weighted_sum"]
    stage = page.select_one("#stage")
    assert stage["data-stage"] == "ln1" and stage["data-index"] == "1" and stage["data-view"] == "block"


def test_post_ln_order(client):
    page = soup(client.get("/block?placement=post&lang=en"))
    keys = [a["data-block-stage"] for a in page.select("ol.flow a[data-block-stage]")]
    assert keys[:6] == ["projection", "scores", "mask", "softmax", "weighted_sum", "residual1"]
    assert keys[6] == "ln1"


def test_the_block_numbers_equal_the_block_json(client):
    for stage in ("ln1", "softmax", "ffn_hidden", "output"):
        page = soup(client.get(f"/block?stage={stage}&mask=causal&ffn=swiglu&norm=rmsnorm"))
        body = client.get(page.select_one("a[data-twin=json]")["href"]).json()
        tensors = {s["key"]: s["tensors"] for s in body["stages"]}[stage]
        for table in page.select("#stage .matrices table[data-matrix]"):
            want = tensors[table["data-matrix"]]
            if table.get("data-head") is not None:
                want = want[int(table["data-head"])]
            got = {}
            for td in table.select("td"):
                got.setdefault(int(td["data-row"]), []).append(td["data-value"])
            assert [[float(v) for v in got[r]] for r in sorted(got)] == [
                [float("-inf") if v is None else v for v in row] for row in want
            ]


def test_layernorm_notice_reports_mean_zero_std_one(client):
    page = soup(client.get("/block?stage=ln1&lang=en"))
    assert "mean 0.00 and standard deviation 1.00" in page.select_one(".notice").text
    zh = soup(client.get("/block?stage=ln1&norm=rmsnorm&lang=zh"))
    assert "均方根为 1.00" in zh.select_one(".notice").text


def test_large_block_draws_strips(client):
    r = client.get("/block", params={"preset": "gpt2-small", "stage": "ffn_hidden"})
    page = soup(r)
    imgs = page.select(".strip img")
    assert [i["alt"] for i in imgs] == ["pre_activation", "ffn_hidden"]
    png = client.get(imgs[1]["src"])
    assert png.status_code == 200 and png.content[:4] == b"\x89PNG"


@pytest.mark.parametrize(
    ("url", "field"), [("/block?stage=ln9", "stage"), ("/block?norm=batch", "norm"), ("/block?head=4", "head")]
)
def test_block_page_errors_inline(client, url, field):
    r = client.get(url + "&lang=en")
    assert r.status_code == 422 and f"“{field}”" in soup(r).select_one("#stage .error").text
