"""The KV cache: every decode step equals the full causal recomputation; the cache grows one token per step."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from engine import make_spec
from engine.decode import decode


@settings(max_examples=25, deadline=None)
@given(
    st.integers(2, 8),
    st.data(),
    st.sampled_from([(4, 1, 0), (8, 4, 2), (8, 4, 1), (8, 2, 0)]),
    st.sampled_from(["none", "rope", "sinusoidal", "learned"]),
    st.integers(0, 2**31),
)
def test_decode_equals_full_recomputation(n, data, dims, positions, seed):
    prefill = data.draw(st.integers(1, n))
    d, h, kv = dims
    spec = make_spec(
        [f"t{i}" for i in range(n)],
        d_model=d,
        n_heads=h,
        n_kv_heads=kv or None,
        mask="causal",
        positions=positions,
        seed=seed,
    )
    t = decode(spec, prefill)
    assert len(t.steps) == n - prefill
    assert t.k_prefill.shape == (spec.kv_heads, prefill, d // h)
    for s in t.steps:
        assert s.k_cache.shape[1] == s.position + 1
        torch.testing.assert_close(s.output, t.full.weighted_sum.output[s.position], rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(
            s.weights, t.full.softmax.weights[:, s.position, : s.position + 1], rtol=1e-5, atol=1e-6
        )
    assert t.max_abs_diff_vs_full < 1e-5


def test_cache_bytes_per_token_shrink_with_gqa(client):
    mha = client.get("/api/v1/decode", params={"preset": "gpt2-small", "tokens": "a b c", "prefill": 2}).json()
    assert mha["kv_cache_bytes_per_token"] == 2 * 768 * 4
    gqa = client.get(
        "/api/v1/decode", params={"preset": "gpt2-small", "tokens": "a b c", "prefill": 2, "n_kv_heads": 3}
    ).json()
    assert gqa["kv_cache_bytes_per_token"] == 2 * 3 * 64 * 4
    step = gqa["steps"][0]
    assert step["cache_len"] == 3 and step["cache_bytes"] == 3 * gqa["kv_cache_bytes_per_token"]
    assert len(step["weights"]) == 12 and len(step["weights"][0]) == 3
    assert gqa["checks"]["max_abs_diff_vs_full"] < 1e-5


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"mask": "padding"}, "mask"),
        ({"prefill": 0}, "prefill"),
        ({"prefill": 6}, "prefill"),
        ({"kv_tokens": "a b"}, "kv_tokens"),
    ],
)
def test_decode_errors_name_the_field(client, params, field):
    r = client.get("/api/v1/decode", params=params)
    assert r.status_code == 422 and r.json()["detail"][0]["loc"][1] == field


def test_history_does_not_change_under_the_causal_mask_and_does_without_it(client):
    """The chapter's claim: the KV cache works because a new token changes no earlier row (causal: earlier_change is
    0 exactly, every step equals the full row); without the mask (a bidirectional encoder) each arrival moves the
    earlier rows, by as much as a full recomputation over the longer text says, and the full row reads the future."""
    import torch

    from engine import attention, make_spec, sources

    tokens = ["猫", "坐", "在", "垫子", "上"]
    causal = client.get("/api/v1/decode", params={"tokens": " ".join(tokens)}).json()
    assert causal["mask"] == "causal" and causal["checks"]["earlier_change"] == 0.0
    assert causal["checks"]["max_abs_diff_vs_full"] < 1e-5
    none = client.get("/api/v1/decode", params={"tokens": " ".join(tokens), "mask": "none"}).json()
    assert none["mask"] == "none" and none["checks"]["max_abs_diff_vs_full"] > 0.1
    outs = []
    for n in range(1, len(tokens) + 1):  # the same toy tokens, recomputed whole at every length
        spec = make_spec(tokens=" ".join(tokens[:n]), mask="none")
        outs.append(attention.run(spec, *sources.load(spec, torch.device("cpu"), torch.float32)).weighted_sum.output)
    for step in none["steps"]:
        t = step["position"]
        assert abs(step["earlier_change"] - float((outs[t][:t] - outs[t - 1][:t]).abs().max())) < 1e-5
        assert step["earlier_change"] > 1e-2


def test_the_documented_presets_are_the_ones_decode_takes(client):
    """DecodeRequest's preset was documented as AttentionRequest's ("or a pretrained model this server loaded"),
    but the cache walk runs on the built-in presets alone: a loaded model was a 422. /openapi.json names exactly the
    presets /api/v1/decode takes, and a loaded one is refused naming preset."""
    schema = client.get("/openapi.json").json()["components"]["schemas"]["DecodeRequest"]
    said = schema["properties"]["preset"]["description"]
    presets = client.get("/api/v1/presets").json()["presets"]
    loaded = [name for name, p in presets.items() if p.get("pretrained")]
    assert loaded and "pretrained" not in said and "/api/v1/generate" in schema["description"]
    for name in presets:
        r = client.post(
            "/api/v1/decode", json={"preset": name, "tokens" if name in ("toy", "gpt2-small") else "text": "a b"}
        )
        assert (r.status_code == 200) == (name in said), (name, r.status_code)
        if r.status_code != 200:
            assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "preset"]
