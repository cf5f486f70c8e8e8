"""The engine against independent implementations given the same weights: nanoGPT-style attention and SDPA."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from engine import compute, make_spec
from engine.sources import load


class NanoAttention(nn.Module):
    """Causal self-attention as nanoGPT writes it: one fused c_attn, heads split, softmax, c_proj."""

    def __init__(self, d: int, h: int) -> None:
        super().__init__()
        self.h = h
        self.c_attn = nn.Linear(d, 3 * d)
        self.c_proj = nn.Linear(d, d)

    def forward(self, x: torch.Tensor, causal: bool = True) -> torch.Tensor:
        n, d = x.shape
        q, k, v = self.c_attn(x).split(d, dim=1)
        q, k, v = (t.view(n, self.h, d // self.h).transpose(0, 1) for t in (q, k, v))  # (H, N, d_k)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        if causal:
            att = att.masked_fill(torch.ones(n, n).tril() == 0, float("-inf"))
        y = F.softmax(att, dim=-1) @ v
        return self.c_proj(y.transpose(0, 1).reshape(n, d))


def nano_from(spec_kwargs: dict, causal: bool):
    spec = make_spec(**spec_kwargs)
    x, w = load(spec, torch.device("cpu"), torch.float32)
    m = NanoAttention(spec.d_model, spec.n_heads)
    with torch.no_grad():  # nn.Linear stores (out, in): the transpose of our row-vector W
        m.c_attn.weight.copy_(torch.cat([w.w_q, w.w_k, w.w_v], dim=1).T)
        m.c_attn.bias.copy_(torch.cat([w.b_q, w.b_k, w.b_v]))
        m.c_proj.weight.copy_(w.w_o.T)
        m.c_proj.bias.copy_(w.b_o)
        return compute(spec), m(x, causal=causal)


def test_gpt2_small_matches_nanogpt_attention():
    t, ref = nano_from(
        {"tokens": "the cat sat on the mat and looked at the dog", "preset": "gpt2-small", "mask": "causal", "seed": 4},
        causal=True,
    )
    torch.testing.assert_close(t.weighted_sum.output, ref, rtol=1e-5, atol=1e-6)


def test_bidirectional_matches_nanogpt_without_mask():
    rnd = torch.Generator().manual_seed(2)
    b = (torch.randn(8, generator=rnd) * 0.1).tolist()
    kwargs = {
        "tokens": "a b c d e f",
        "d_model": 8,
        "n_heads": 2,
        "mask": "none",
        "b_q": b,
        "b_k": b,
        "b_v": b,
        "b_o": b,
    }
    t, ref = nano_from(kwargs, causal=False)
    torch.testing.assert_close(t.weighted_sum.output, ref, rtol=1e-5, atol=1e-6)


def test_every_head_matches_sdpa_with_each_mask_and_scale():
    cases = [
        {"mask": "causal", "scale": "none"},
        {"mask": "padding", "pad_positions": [1, 4], "scale": "dk"},
        {"mask": "document", "segment_ids": [0, 0, 1, 1, 1, 2]},
    ]
    for extra in cases:
        spec = make_spec("a b c d e f", d_model=12, n_heads=3, seed=5, **extra)
        t = compute(spec)
        p = t.projection
        ref = F.scaled_dot_product_attention(p.q, p.k, p.v, attn_mask=t.mask.mask, scale=1 / spec.scale_value)
        torch.testing.assert_close(t.weighted_sum.heads, ref, rtol=1e-5, atol=1e-6)


MASK_CASES = [
    {"mask": "none"},
    {"mask": "causal"},
    {"mask": "padding", "pad_positions": [1, 4]},
    {"mask": "document", "segment_ids": [0, 0, 1, 1, 1, 2]},
    {"mask": "sliding_window", "window": 2},
    {"mask": "prefix_lm", "prefix": 2},
    {"mask": "custom", "mask_matrix": [[1, 0, 0, 0, 0, 1]] * 3 + [[0] * 6] + [[1] * 6] * 2},
]


@pytest.mark.parametrize("extra", MASK_CASES, ids=lambda e: e["mask"])
@pytest.mark.parametrize("scale", ["sqrt_dk", "none", "dk"])
def test_the_traces_own_check_passes_for_a_correct_engine(extra, scale):
    t = compute(make_spec("a b c d e f", d_model=12, n_heads=3, seed=5, scale=scale, **extra))
    assert t.checks.max_abs_diff_vs_sdpa < 1e-5
    assert t.checks.rows_sum_to_one


@pytest.mark.parametrize("extra", [e for e in MASK_CASES if e["mask"] != "none"], ids=lambda e: e["mask"])
def test_the_traces_own_check_catches_a_wrong_mask(monkeypatch, extra):
    """The check builds its mask from the Spec by other code: an off-by-one in the engine's mask is caught."""
    from engine import masks

    real = masks.allowed
    monkeypatch.setattr(masks, "allowed", lambda *a, **k: real(*a, **k).roll(1, dims=1))
    t = compute(make_spec("a b c d e f", d_model=12, n_heads=3, seed=5, **extra))
    assert t.checks.max_abs_diff_vs_sdpa > 1e-3


@pytest.mark.parametrize("scale", ["sqrt_dk", "none", "dk"])
def test_the_traces_own_check_catches_a_wrong_scale(monkeypatch, scale):
    """The check uses SDPA's own scale for √d_k (and 1 or 1/d_k by definition): dividing by the wrong number in
    stage 2 is caught."""
    from engine import attention

    real = attention.scores
    monkeypatch.setattr(attention, "scores", lambda p, s: real(p, s * 1.7))
    t = compute(make_spec("a b c d e f", d_model=12, n_heads=3, seed=5, scale=scale, mask="causal"))
    assert t.checks.max_abs_diff_vs_sdpa > 1e-3
