"""Positions, RoPE, GQA, the extra masks and cross-attention: values, properties and errors."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from engine import make_spec, trace
from engine.positions import rotate, sinusoidal
from engine.spec import SpecError

seeds = st.integers(0, 2**31)


def test_sinusoidal_table_by_the_formula():
    pe = sinusoidal(6, 4)
    for p in range(6):
        for i in range(2):
            assert pe[p, 2 * i].item() == pytest.approx(math.sin(p / 10000 ** (2 * i / 4)), abs=1e-6)
            assert pe[p, 2 * i + 1].item() == pytest.approx(math.cos(p / 10000 ** (2 * i / 4)), abs=1e-6)


def test_absolute_positions_are_added_to_x():
    t = trace(positions="sinusoidal")
    p = t.projection
    torch.testing.assert_close(p.x, p.embedding + p.positions)
    torch.testing.assert_close(p.positions, sinusoidal(5, 4))


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 40), st.integers(0, 40), st.sampled_from(["adjacent", "half"]), seeds)
def test_rope_is_relative(m, n, pairing, seed):
    g = torch.Generator().manual_seed(seed)
    q, k = torch.randn(1, 8, dtype=torch.float64, generator=g), torch.randn(1, 8, dtype=torch.float64, generator=g)

    def at(t, pos):
        return rotate(t, torch.tensor([pos]), 10000.0, pairing)

    left = (at(q, m) * at(k, n)).sum()
    right = (q * at(k, n - m)).sum() if n >= m else (at(q, m - n) * k).sum()
    assert left.item() == pytest.approx(right.item(), abs=1e-9)
    shifted = (at(q, m + 10) * at(k, n + 10)).sum()  # the same offset anywhere scores the same
    assert left.item() == pytest.approx(shifted.item(), abs=1e-9)


def test_rope_half_pairing_matches_hugging_face_llama():
    def rotate_half(x):
        x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2 :]
        return torch.cat((-x2, x1), dim=-1)

    d, n = 8, 6
    q = torch.randn(2, n, d, dtype=torch.float64)
    inv_freq = 1.0 / (10000 ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
    freqs = torch.outer(torch.arange(n, dtype=torch.float64), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    expected = q * emb.cos() + rotate_half(q) * emb.sin()  # transformers' apply_rotary_pos_emb
    torch.testing.assert_close(rotate(q, torch.arange(n), 10000.0, "half"), expected)


def test_rope_pairings_differ_only_by_a_permutation_of_dimensions():
    d = 8
    q = torch.randn(1, 5, d, dtype=torch.float64)
    perm = torch.tensor([0, 2, 4, 6, 1, 3, 5, 7])  # adjacent pair (2i, 2i+1) -> half pair (i, i + d/2)
    adj = rotate(q, torch.arange(5), 10000.0, "adjacent")
    half = rotate(q[..., perm], torch.arange(5), 10000.0, "half")
    torch.testing.assert_close(adj[..., perm], half)


def test_rope_trace_rotates_q_and_k_and_scores_use_them():
    t = trace("a b c d", d_model=8, n_heads=2, positions="rope", rope_base=100.0)
    p = t.projection
    assert p.q_rot is not None and p.k_rot is not None
    torch.testing.assert_close(p.q_rot[:, 0], p.q[:, 0])  # position 0 is not rotated
    torch.testing.assert_close(t.scores.raw, p.q_rot @ p.k_rot.transpose(-2, -1))
    assert t.checks.max_abs_diff_vs_sdpa < 1e-5


@settings(max_examples=25, deadline=None)
@given(st.integers(2, 7), seeds, st.randoms(use_true_random=False), st.sampled_from(["sinusoidal", "learned", "rope"]))
def test_positions_break_permutation_equivariance(n, seed, rnd, positions):
    tokens = [f"w{i}" for i in range(n)]
    perm = list(range(n))
    rnd.shuffle(perm)
    if perm == sorted(perm):
        perm = perm[1:] + perm[:1]
    a = trace(tokens, d_model=8, n_heads=2, seed=seed, positions=positions)
    b = trace([tokens[i] for i in perm], d_model=8, n_heads=2, seed=seed, positions=positions)
    assert not torch.allclose(b.weighted_sum.output, a.weighted_sum.output[perm], atol=1e-4)


def test_learned_positions_stop_at_n_ctx():
    with pytest.raises(SpecError) as err:
        make_spec("a b c d", positions="learned", n_ctx=3)
    assert err.value.field == "tokens" and "n_ctx = 3" in err.value.message
    assert make_spec("a b c", positions="learned", n_ctx=3).n_ctx == 3


@settings(max_examples=20, deadline=None)
@given(st.sampled_from([(8, 4, 2), (8, 4, 1), (12, 6, 3), (8, 2, 2)]), st.integers(1, 6), seeds)
def test_gqa_equals_mha_with_each_kv_head_repeated(dims, n, seed):
    d, h, kv = dims
    tokens = [f"t{i}" for i in range(n)]
    g = trace(tokens, d_model=d, n_heads=h, n_kv_heads=kv, seed=seed, mask="causal")
    assert g.projection.k.shape == (kv, n, d // h)
    # The same computation as plain MHA whose W_K, W_V repeat each shared head for its group.
    w = g.weights
    dk, group = d // h, h // kv
    cols = torch.cat([torch.arange(j * dk, (j + 1) * dk) for j in range(kv) for _ in range(group)])
    mha = trace(
        tokens,
        d_model=d,
        n_heads=h,
        mask="causal",
        x=g.projection.x.tolist(),
        w_q=w.w_q.tolist(),
        w_k=w.w_k[:, cols].tolist(),
        w_v=w.w_v[:, cols].tolist(),
        w_o=w.w_o.tolist(),
    )
    torch.testing.assert_close(g.weighted_sum.output, mha.weighted_sum.output, rtol=1e-5, atol=1e-5)
    assert g.checks.max_abs_diff_vs_sdpa < 1e-5
    assert g.spec.summary()["kv_cache_bytes_per_token"] == 2 * kv * dk * 4


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 9), st.integers(1, 5), seeds)
def test_sliding_window_reads_only_the_last_window_tokens(n, window, seed):
    t = trace([f"t{i}" for i in range(n)], seed=seed, mask="sliding_window", window=window)
    w = t.softmax.weights[0]
    for i in range(n):
        for j in range(n):
            if j > i or i - j >= window:
                assert w[i, j] == 0
    assert torch.allclose(w.sum(-1), torch.ones(n))


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 9), st.data(), seeds)
def test_prefix_lm_reads_the_prefix_both_ways_and_the_rest_causally(n, data, seed):
    prefix = data.draw(st.integers(0, n))
    t = trace([f"t{i}" for i in range(n)], seed=seed, mask="prefix_lm", prefix=prefix)
    visible = torch.isfinite(t.mask.mask)
    for i in range(n):
        for j in range(n):
            assert bool(visible[i, j]) == (j < prefix or j <= i)


def test_custom_mask_and_its_errors():
    m = [[1, 0, 0], [0, 1, 1], [0, 0, 0]]
    t = trace("a b c", mask="custom", mask_matrix=m)
    assert t.softmax.weights[0, 0].tolist() == [1.0, 0.0, 0.0]
    assert t.softmax.weights[0, 2].tolist() == [0.0, 0.0, 0.0]  # a row with nothing to read: zeros
    for bad, field in (([[1, 0]], "mask_matrix"), ([[2, 0, 0]] * 3, "mask_matrix")):
        with pytest.raises(SpecError) as err:
            make_spec("a b c", mask="custom", mask_matrix=bad)
        assert err.value.field == field


def test_cross_attention_reads_keys_and_values_from_the_source():
    t = trace("je suis", kv_tokens="I am a student", d_model=8, n_heads=2, mask="padding", pad_positions=[3])
    p = t.projection
    assert p.q.shape == (2, 2, 4) and p.k.shape == (2, 4, 4) and p.source.shape == (4, 8)
    assert t.scores.raw.shape == (2, 2, 4)
    assert (t.softmax.weights[..., 3] == 0).all()
    w = t.weights
    ref = F.scaled_dot_product_attention(
        (p.x @ w.w_q).view(2, 2, 4).transpose(0, 1),
        (p.source @ w.w_k).view(4, 2, 4).transpose(0, 1),
        (p.source @ w.w_v).view(4, 2, 4).transpose(0, 1),
        attn_mask=t.mask.mask,
    )
    torch.testing.assert_close(t.weighted_sum.heads, ref, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"positions": "spiral"}, "positions"),
        ({"positions": "rope", "d_model": 6, "n_heads": 2}, "positions"),
        ({"positions": "rope", "rope_pairing": "diagonal"}, "rope_pairing"),
        ({"positions": "rope", "rope_base": 1.0}, "rope_base"),
        ({"d_model": 8, "n_heads": 4, "n_kv_heads": 3}, "n_kv_heads"),
        ({"mask": "sliding_window"}, "window"),
        ({"window": 2}, "window"),
        ({"mask": "prefix_lm", "prefix": 9}, "prefix"),
        ({"kv_tokens": "a b", "mask": "causal"}, "mask"),
        ({"kv_tokens": "a b", "positions": "rope"}, "positions"),
        ({"mask": "padding", "kv_tokens": "a b", "pad_positions": [4]}, "pad_positions"),
    ],
)
def test_option_errors_name_the_field(kwargs, field):
    with pytest.raises(SpecError) as err:
        make_spec(**kwargs)
    assert err.value.field == field


def test_api_twins_carry_the_new_options(client):
    r = client.get(
        "/api/v1/attention",
        params={
            "positions": "rope",
            "rope_pairing": "half",
            "d_model": 8,
            "n_heads": 4,
            "n_kv_heads": 2,
            "mask": "sliding_window",
            "window": 2,
            "stages": "projection,mask",
        },
    )
    assert r.status_code == 200, r.text
    body = r.json()
    tensors = body["stages"][0]["tensors"]
    assert set(tensors) == {"x", "q", "k", "v", "q_rot", "k_rot"}
    assert len(tensors["k"]) == 2 and body["spec"]["n_kv_heads"] == 2 and body["spec"]["window"] == 2
    mask = body["stages"][1]["tensors"]["mask"]
    assert mask[4] == [None, None, None, 0.0, 0.0]
    custom = client.get(
        "/api/v1/attention", params={"tokens": "a b", "mask": "custom", "mask_matrix": "[[1, 1], [0, 1]]"}
    )
    assert custom.json()["stages"][3]["tensors"]["weights"][0][1][0] == 0.0
