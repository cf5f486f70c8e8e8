"""Properties every trace must have, whatever the sizes, seeds and masks (hypothesis)."""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from engine import trace

sizes = st.tuples(st.integers(1, 9), st.sampled_from([(4, 1), (4, 2), (6, 3), (8, 4), (8, 1)]))
seeds = st.integers(0, 2**32)


@settings(max_examples=40, deadline=None)
@given(sizes, seeds, st.sampled_from(["none", "causal"]), st.sampled_from(["sqrt_dk", "none", "dk"]))
def test_rows_sum_to_one(size, seed, mask, scale):
    n, (d, h) = size
    t = trace([f"t{i}" for i in range(n)], d_model=d, n_heads=h, seed=seed, mask=mask, scale=scale)
    sums = t.softmax.weights.sum(-1)
    torch.testing.assert_close(sums, torch.ones_like(sums))
    assert t.checks.rows_sum_to_one
    assert t.checks.max_abs_diff_vs_sdpa < 1e-5
    assert torch.isfinite(t.weighted_sum.output).all()


@settings(max_examples=30, deadline=None)
@given(sizes, seeds)
def test_causal_upper_triangle_is_exactly_zero_and_row_one_is_one(size, seed):
    n, (d, h) = size
    t = trace([f"t{i}" for i in range(n)], d_model=d, n_heads=h, seed=seed, mask="causal")
    w = t.softmax.weights
    upper = torch.ones(n, n, dtype=torch.bool).triu(1)
    assert (w[:, upper] == 0).all()
    assert (w[:, 0, 0] == 1).all()  # the first query can only see itself


@settings(max_examples=30, deadline=None)
@given(st.integers(2, 8), seeds, st.randoms(use_true_random=False))
def test_unmasked_attention_is_permutation_equivariant(n, seed, rnd):
    tokens = [f"w{i}" for i in range(n)]
    perm = list(range(n))
    rnd.shuffle(perm)
    a = trace(tokens, d_model=8, n_heads=2, seed=seed, mask="none")
    b = trace([tokens[i] for i in perm], d_model=8, n_heads=2, seed=seed, mask="none")
    torch.testing.assert_close(b.weighted_sum.output, a.weighted_sum.output[perm], rtol=1e-5, atol=1e-5)


@settings(max_examples=30, deadline=None)
@given(st.integers(2, 9), seeds, st.data())
def test_padding_never_leaks(n, seed, data):
    pads = data.draw(st.lists(st.integers(0, n - 1), max_size=n - 1, unique=True))
    t = trace([f"t{i}" for i in range(n)], seed=seed, mask="padding", pad_positions=pads)
    assert (t.softmax.weights[..., pads] == 0).all()
    # changing what stands at a pad position changes nothing at a real query
    swapped = [("Z" if i in pads else f"t{i}") for i in range(n)]
    u = trace(swapped, seed=seed, mask="padding", pad_positions=pads)
    keep = [i for i in range(n) if i not in pads]
    torch.testing.assert_close(u.weighted_sum.heads[:, keep], t.weighted_sum.heads[:, keep])


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(0, 2), min_size=1, max_size=9), seeds)
def test_documents_never_leak(segments, seed):
    segments = sorted(segments)  # packed documents lie one after another
    n = len(segments)
    t = trace([f"t{i}" for i in range(n)], seed=seed, mask="document", segment_ids=segments)
    w = t.softmax.weights[0]
    for i in range(n):
        for j in range(n):
            if segments[i] != segments[j] or j > i:
                assert w[i, j] == 0
    # the first token of each document sees only itself
    for i in range(n):
        if i == 0 or segments[i - 1] != segments[i]:
            assert w[i, i] == 1
