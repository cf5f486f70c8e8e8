"""Numerics a broken engine fails: large logits, float16 and bfloat16 against float64, overflow refused.

Half precision runs on the CPU here (torch computes it; the server offers it on CUDA only), so these paths are
exercised without a GPU. Each comparison names its tolerance: float16 rounds at ~5e-4 and bfloat16 at ~4e-3 per
operation, and a dot product of d_k terms adds up.
"""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch

from engine import SpecError, compute, make_spec
from engine.block import compute_block, make_block_spec
from engine.decode import decode
from engine.sources import load
from tests.conftest import make_client


def reference64(spec, x=None, w=None):
    """Attention in float64 from the definitions: (weights (H, N, N), output (N, d))."""
    if x is None:
        x, w = load(replace(spec, dtype="float32"), torch.device("cpu"), torch.float32)
    x, wq, wk, wv, wo = (t.double() for t in (x, w.w_q, w.w_k, w.w_v, w.w_o))
    h, dk, n = spec.n_heads, spec.d_k, spec.n_tokens
    q = (x @ wq).view(n, h, dk).transpose(0, 1)
    k = (x @ wk).view(n, h, dk).transpose(0, 1)
    v = (x @ wv).view(n, h, dk).transpose(0, 1)
    s = q @ k.transpose(-1, -2) / {"sqrt_dk": math.sqrt(dk), "none": 1.0, "dk": float(dk)}[spec.scale]
    if spec.mask == "causal":
        s = s.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
    a = torch.softmax(s, dim=-1)
    return a, (a @ v).transpose(0, 1).reshape(n, h * dk) @ wo


def test_large_logits_give_finite_weights_equal_to_float64():
    """x = [[100, 0], [0, 100]], identity weights, no scaling: logits of 10,000. Without the row maximum
    subtracted, exp overflows to inf and the weights are NaN."""
    eye = [[1.0, 0.0], [0.0, 1.0]]
    spec = make_spec(["a", "b"], d_model=2, n_heads=1, scale="none", x=[[100.0, 0.0], [0.0, 100.0]],
                     w_q=eye, w_k=eye, w_v=eye, w_o=eye)  # fmt: skip
    t = compute(spec)
    w = t.softmax.weights
    assert bool(torch.isfinite(w).all())
    torch.testing.assert_close(w.sum(-1), torch.ones(1, 2))
    a, _ = reference64(spec, torch.tensor([[100.0, 0.0], [0.0, 100.0]]), t.weights)
    torch.testing.assert_close(w.double(), a, rtol=0, atol=1e-12)


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_inputs_of_ten_thousand_through_the_api(client, sign):
    eye = [[1.0, 0.0], [0.0, 1.0]]
    body = {"tokens": ["a", "b"], "d_model": 2, "n_heads": 1, "scale": "none", "x": [[sign * 1e4, 0.0], [0.0, 1e4]],
            "w_q": eye, "w_k": eye, "w_v": eye, "w_o": eye, "stages": ["softmax"]}  # fmt: skip
    r = client.post("/api/v1/attention", json=body)
    assert r.status_code == 200
    weights = r.json()["stages"][0]["tensors"]["weights"][0]
    assert all(v is not None and math.isfinite(v) for row in weights for v in row)
    assert all(abs(sum(row) - 1.0) < 1e-6 for row in weights)


HALF = [("float16", 2e-2), ("bfloat16", 1e-1)]  # largest |difference| from float64, on values of order 1


@pytest.mark.parametrize(("dtype", "tol"), HALF)
@pytest.mark.parametrize("mask", ["none", "causal"])
def test_half_precision_attention_equals_float64(dtype, tol, mask):
    spec = replace(make_spec(" ".join(f"t{i}" for i in range(48)), preset="gpt2-small", mask=mask, seed=3), dtype=dtype)
    t = compute(spec)
    assert t.softmax.weights.dtype == getattr(torch, dtype)
    a, out = reference64(spec)
    assert float((t.softmax.weights.double() - a).abs().max()) < tol
    assert float((t.weighted_sum.output.double() - out).abs().max()) < tol * max(1.0, float(out.abs().max()))
    assert t.checks.max_abs_diff_vs_sdpa < tol and t.checks.rows_sum_to_one


@pytest.mark.parametrize(("dtype", "tol"), HALF)
def test_half_precision_block_equals_float32(dtype, tol):
    base = make_block_spec(make_spec("a b c d e f g h", d_model=64, n_heads=4, mask="causal", seed=9))
    full = compute_block(base)
    half = compute_block(replace(base, attn=replace(base.attn, dtype=dtype)))
    for key in ("ln1", "residual1", "ln2", "output"):
        ref, got = full.stage(key)[key], half.stage(key)[key].float()
        assert float((got - ref).abs().max()) < tol * max(1.0, float(ref.abs().max())), key


def test_half_precision_norms_survive_a_large_residual_stream():
    """SmolLM2's residual stream reaches 22,517: (x − μ)² in float16 would be inf; the norms take their statistics
    in float32."""
    from engine.block import normalise

    x = torch.tensor([[22517.0, -15000.0, 300.0, 7.0]])
    w = torch.ones(4)
    for kind in ("layernorm", "rmsnorm"):
        ref = normalise(x, w, torch.zeros(4) if kind == "layernorm" else None, kind, 1e-5)
        got = normalise(x.half(), w.half(), torch.zeros(4).half() if kind == "layernorm" else None, kind, 1e-5)
        assert bool(torch.isfinite(got).all()), kind
        torch.testing.assert_close(got.float(), ref, rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize(("dtype", "tol"), HALF)
def test_half_precision_decode_equals_its_full_recomputation(dtype, tol):
    spec = replace(make_spec("a b c d e f", d_model=16, n_heads=2, mask="causal", positions="rope"), dtype=dtype)
    t = decode(spec, 2)
    assert t.max_abs_diff_vs_full < tol


def test_float16_overflow_is_refused_naming_the_dtype():
    """x and weights of 10 at d = 4: QKᵀ = 640,000, past float16's 65,504."""
    ten = [[10.0] * 4 for _ in range(4)]
    spec = make_spec(["a", "b"], x=[[10.0] * 4] * 2, w_q=ten, w_k=ten, w_v=ten, w_o=ten, scale="none")
    with pytest.raises(SpecError) as err:
        compute(replace(spec, dtype="float16"))
    assert err.value.field == "dtype" and "float16" in err.value.message
    t = compute(replace(spec, dtype="bfloat16"))  # float32's range: finite, if coarse
    assert bool(torch.isfinite(t.softmax.weights).all())


def test_stable_and_naive_softmax_side_by_side_in_float16():
    """The engine subtracts the row maximum; the naive formula overflows at logits above ~11 in float16."""
    s = torch.tensor([[10.0, 11.0, 12.0]], dtype=torch.float16)
    naive = s.exp() / s.exp().sum(-1, keepdim=True)
    assert not bool(torch.isfinite(naive).all())
    from engine.attention import Mask, softmax

    stable = softmax(Mask(mask=torch.zeros(1, 3, dtype=torch.float16), masked=s[None])).weights[0]
    ref = torch.softmax(s.double(), dim=-1)
    torch.testing.assert_close(stable.double(), ref, rtol=0, atol=1e-3)


def test_the_server_refuses_half_precision_on_the_cpu_with_a_reason():
    with make_client() as c:
        r = c.post("/api/v1/attention", json={"dtype": "float16"})
        assert r.status_code == 422 and r.json()["detail"][0]["loc"][-1] == "dtype"


def test_non_finite_values_render_for_what_they_are():
    import numpy as np

    from app.render.cells import matrix_view

    m = matrix_view("scores", "S", np.array([[1.0, -np.inf], [np.inf, np.nan]]), ["a", "b"], ["a", "b"], "(N, N)")
    assert [[c.text for c in row] for row in m.cells] == [["1.00", "−∞"], ["+∞", "NaN"]]
    assert [[c.value for c in row] for row in m.cells] == [["1.0", "-inf"], ["inf", "nan"]]
    assert m.cells[1][0].cls == m.cells[1][1].cls == "nonfinite" and m.cells[0][1].cls == "neginf"
    seq = matrix_view("weights", "A", np.array([[np.nan, 0.5]]), ["a"], ["a", "b"], "(N, N)", "sequential")
    assert seq.cells[0][0].cls == "nonfinite"
