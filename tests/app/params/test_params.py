"""Parameter counts: exact for published models, explicit shapes, GQA, errors, and the page."""

from __future__ import annotations

import pytest
from bs4 import BeautifulSoup

from engine.params import count, shape_from


@pytest.mark.parametrize(
    ("preset", "total"),
    [
        ("gpt2-small", 124_439_808),
        ("gpt2-medium", 354_823_168),
        ("gpt2-large", 774_030_080),
        ("gpt2-xl", 1_557_611_200),
        ("llama-2-7b", 6_738_415_616),
    ],
)
def test_published_totals(preset, total):
    assert count(shape_from(preset))["total"] == total


def test_one_gpt2_block_is_7087872():
    c = count(shape_from("gpt2-small"))
    assert c["block"]["total"] == 7_087_872
    assert c["block"]["attention"]["w_q"] == 768 * 768 + 768
    assert c["estimate_12ld2"] == 12 * 12 * 768**2
    assert c["lm_head"] == 0  # tied to the token embedding


def test_the_block_count_equals_a_torch_block():
    from torch import nn

    d = 64
    block = nn.ModuleList(
        [
            nn.LayerNorm(d),
            nn.Linear(d, 3 * d),
            nn.Linear(d, d),
            nn.LayerNorm(d),
            nn.Linear(d, 4 * d),
            nn.Linear(4 * d, d),
        ]
    )
    n = sum(p.numel() for p in block.parameters())
    c = count(shape_from(None, n_layer=1, d_model=d, n_heads=4, vocab=10))
    assert c["block"]["total"] == n


def test_gqa_shrinks_k_and_v():
    mha = count(shape_from("llama-2-7b"))
    gqa = count(shape_from("llama-2-7b", n_kv_heads=8))
    assert mha["block"]["attention"]["w_k"] == 4096 * 4096
    assert gqa["block"]["attention"]["w_k"] == 4096 * 1024
    assert gqa["kv_cache_bytes_per_token_fp16"] * 4 == mha["kv_cache_bytes_per_token_fp16"]


def test_api_presets_and_explicit(client):
    assert client.get("/api/v1/params", params={"preset": "gpt2-small"}).json()["total"] == 124_439_808
    explicit = client.get(
        "/api/v1/params", params={"n_layer": 12, "d_model": 768, "n_heads": 12, "vocab": 50257, "n_ctx": 1024}
    ).json()
    assert explicit["total"] == 124_439_808
    llama = client.get(
        "/api/v1/params",
        params={
            "n_layer": 32,
            "d_model": 4096,
            "n_heads": 32,
            "vocab": 32000,
            "ffn": "swiglu",
            "d_ff": 11008,
            "tied_embeddings": "false",
            "bias": "false",
            "norm": "rmsnorm",
        },
    ).json()
    assert llama["total"] == 6_738_415_616


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"d_model": 768}, "n_layer"),
        ({"preset": "gpt2-small", "n_heads": 7}, "n_heads"),
        ({"preset": "gpt3"}, "preset"),
        ({"preset": "llama-2-7b", "n_kv_heads": 5}, "n_kv_heads"),
        ({"preset": "gpt2-small", "d_model": "big"}, "d_model"),
        ({"preset": "gpt2-small", "ffn": "relu"}, "ffn"),
    ],
)
def test_api_errors_name_the_field(client, params, field):
    r = client.get("/api/v1/params", params=params)
    assert r.status_code == 422
    assert r.json()["detail"][0]["loc"][1] == field


def test_params_page_shows_the_breakdown_in_both_languages(client):
    page = BeautifulSoup(client.get("/params?preset=gpt2-small&lang=en").text, "html.parser")
    assert page.select_one("[data-part=block]").text == "7,087,872"
    assert page.select_one("[data-part=total]").text == "124,439,808"
    assert page.select_one("[data-part=estimate]").text == "84,934,656"
    zh = BeautifulSoup(client.get("/params?preset=llama-2-7b&lang=zh").text, "html.parser")
    assert zh.select_one("[data-part=total]").text == "6,738,415,616"
    assert "差在哪里" in zh.text
    bad = client.get("/params?preset=custom&d_model=64&lang=en")
    assert bad.status_code == 422 and "n_layer" in bad.text
