"""What makes the first large trace quick keeps its numbers: one product for Q, K and V, A V without the keys a causal
block never reads, the weights drawn beside the embeddings, and the check against SDPA run for the heads shown."""

from __future__ import annotations

import io

import numpy as np
import torch

from engine import attention, make_spec, sources
from engine.attention import Mask, Softmax, linear, softmax, times_v
from tests.conftest import make_client

CPU = torch.device("cpu")


def test_seeded_q_k_v_weights_are_one_matrix_and_one_product_projects_them():
    spec = make_spec(" ".join(f"t{i}" for i in range(40)), preset="gpt2-small", seed=4)
    x, w = sources.load(spec, CPU, torch.float32)
    qkv = attention.side_by_side(w.w_q, w.w_k, w.w_v)
    assert qkv is not None and qkv.shape == (768, 3 * 768)
    assert attention.side_by_side(w.w_q, w.w_v, w.w_k) is None  # out of order: three products
    assert attention.side_by_side(w.w_q.clone(), w.w_k, w.w_v) is None
    p = attention.project(x, w, spec)
    for got, weight, bias in ((p.q, w.w_q, w.b_q), (p.k, w.w_k, w.b_k), (p.v, w.w_v, w.b_v)):
        alone = linear(x, weight.contiguous(), bias).view(40, 12, 64).transpose(0, 1)
        torch.testing.assert_close(got, alone, rtol=0, atol=1e-6)


def test_the_weights_drawn_on_the_helper_thread_are_the_seeds_own():
    long = make_spec(" ".join(f"w{i % 50}" for i in range(100)), preset="gpt2-small", seed=11)  # drawn beside
    short = make_spec("w1 w2", preset="gpt2-small", seed=11)  # drawn in the caller
    x_long, w_long = sources.load(long, CPU, torch.float32)
    x_short, w_short = sources.load(short, CPU, torch.float32)
    for name in ("w_q", "w_k", "w_v", "w_o"):
        assert torch.equal(getattr(w_long, name), getattr(w_short, name))
    assert torch.equal(x_long[1], x_short[0]) and torch.equal(x_long[51], x_short[0])  # w1: the same vector
    assert torch.equal(x_long[1], sources.token_embedding("w1", 11, 768))


def test_a_causal_weighted_sum_skips_only_keys_it_never_reads():
    n = 2 * attention.AV_ROWS + 37
    g = torch.Generator().manual_seed(0)
    causal = torch.zeros(n, n).masked_fill_(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
    weights = softmax(Mask(causal, torch.randn(3, n, n, generator=g) + causal)).weights
    v = torch.randn(3, n, 8, generator=g)
    torch.testing.assert_close(times_v(weights, v, causal), weights @ v, rtol=0, atol=1e-6)
    everything = torch.zeros(n, n)  # nothing masked: nothing to skip
    dense = Softmax(torch.softmax(torch.randn(3, n, n, generator=g), dim=-1)).weights
    assert torch.equal(times_v(dense, v, everything), dense @ v)


def test_an_answer_checks_the_heads_it_shows_and_a_page_every_head():
    toks = " ".join(f"t{i}" for i in range(300))
    with make_client() as c:
        lab = c.app.state.lab  # type: ignore[attr-defined]
        body = {"preset": "gpt2-small", "tokens": toks, "stages": ["softmax"], "heads": [3], "seed": 21}
        r = c.post("/api/v1/attention.npz", json=body)
        assert r.status_code == 200
        trace = lab.cache.get(make_spec(toks, preset="gpt2-small", seed=21))
        assert trace.checker.has([3]) and not trace.checker.has([0])
        shown = np.load(io.BytesIO(r.content))["weights"]
        np.testing.assert_array_equal(shown, trace.softmax.weights[3:4].numpy())  # one head, as computed
        page = c.get("/api/v1/attention", params={"preset": "gpt2-small", "tokens": toks, "seed": 21, "heads": 0})
        assert page.status_code == 200 and trace.checker.has(range(12))  # JSON states the trace-wide check
        assert page.json()["checks"]["max_abs_diff_vs_sdpa"] < 1e-5 and page.json()["checks"]["rows_sum_to_one"]
    whole = attention.check(trace.spec, trace.projection, trace.softmax, trace.weighted_sum)
    assert trace.checks == whole
    per_head = [trace.verify([h]).max_abs_diff_vs_sdpa for h in range(12)]
    assert whole.max_abs_diff_vs_sdpa == max(per_head)


def test_the_mask_stage_broadcasts_as_numpy_does_without_importing_sympy():
    """torch.broadcast_shapes imports sympy on its first call (about a second of a process's first trace)."""
    import subprocess
    import sys

    for a, b in (((2, 3, 3), (3, 3)), ((1, 5, 5), (4, 1, 5)), ((3,), (2, 1)), ((0, 3), (1, 3)), ((), (2,))):
        assert attention.broadcast(a, b) == np.broadcast_shapes(a, b)
    try:
        attention.broadcast((2, 3), (3, 3))
        raise AssertionError("(2, 3) and (3, 3) broadcast")
    except ValueError as e:
        assert "do not broadcast" in str(e)
    code = (
        "import sys, torch; from engine import trace\n"
        "trace('the cat sat', mask='causal')\n"
        "print('sympy' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
