"""FlashAttention's schedule: the online softmax over key blocks equals the staged stage 5, step by step."""

from __future__ import annotations

import math

import pytest
import torch

from engine.flash import tiled_attention


@pytest.mark.parametrize(("block_q", "block_k"), [(1, 1), (2, 2), (2, 3), (5, 5), (4, 1)])
@pytest.mark.parametrize("mask", ["none", "causal", "sliding_window"])
def test_the_schedule_equals_stage_five(client, block_q, block_k, mask):
    params = {"mask": mask, "block_q": block_q, "block_k": block_k, "seed": 3}
    if mask == "sliding_window":
        params["window"] = 2
    r = client.get("/api/v1/attention/tiles", params=params)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["max_abs_diff_vs_staged"] < 1e-5
    staged = client.get("/api/v1/attention", params={**params, "stages": "weighted_sum"}).json()
    heads = staged["stages"][0]["tensors"]["heads"][0]
    for got, want in zip(body["output"], heads, strict=True):
        assert max(abs(a - b) for a, b in zip(got, want, strict=True)) < 1e-5
    assert len(body["blocks"]) == math.ceil(5 / block_q)
    assert all(len(b["steps"]) == math.ceil(5 / block_k) for b in body["blocks"])


def test_blocks_above_the_causal_diagonal_are_skipped_and_the_running_values_follow_the_formula(client):
    body = client.get("/api/v1/attention/tiles", params={"mask": "causal", "block_q": 2, "block_k": 2}).json()
    first = body["blocks"][0]  # queries 0-1
    assert [s["skipped"] for s in first["steps"]] == [False, True, True]
    last = body["blocks"][-1]  # query 4 reads every key block
    assert not any(s["skipped"] for s in last["steps"])
    # l after the last step, times the output, gives the accumulator back: O = acc / l
    for b in body["blocks"]:
        final = b["steps"][-1]
        for row, (acc, total) in enumerate(zip(final["acc"], final["l"], strict=True)):
            assert all(abs(a / total - o) < 1e-6 for a, o in zip(acc, b["output"][row], strict=True))
    assert body["memory_bytes"]["tiled"] < body["memory_bytes"]["staged"]


def test_a_row_with_no_readable_key_is_zero():
    q = k = v = torch.eye(3)
    allow = torch.tensor([[False, False, False], [True, False, False], [True, True, False]])
    t = tiled_attention(q, k, v, allow, 1.0, 2, 2)
    assert t.output[0].abs().max() == 0
    torch.testing.assert_close(t.output[1], torch.tensor([1.0, 0, 0], dtype=torch.float64))


def test_a_long_sequence_schedule_on_gpt2_small_equals_stage_five(client):
    toks = " ".join(f"w{i}" for i in range(96))
    params = {"preset": "gpt2-small", "tokens": toks, "mask": "causal", "block_q": 32, "block_k": 32, "head": 5}
    body = client.get("/api/v1/attention/tiles", params=params).json()
    assert body["max_abs_diff_vs_staged"] < 1e-5 and body["head"] == 5
    assert [s["skipped"] for s in body["blocks"][0]["steps"]] == [False, True, True]
    assert body["memory_bytes"]["tiled"] < body["memory_bytes"]["staged"]


@pytest.mark.parametrize(
    ("params", "field", "status"),
    [({"head": 3}, "head", 422), ({"block_q": 0}, "block_q", 422), ({"block_k": "x"}, "block_k", 422)],
)
def test_bad_tiles_requests_name_the_field(client, params, field, status):
    r = client.get("/api/v1/attention/tiles", params=params)
    assert r.status_code == status and r.json()["detail"][0]["loc"][-1] == field


def test_a_schedule_too_large_for_json_is_refused_before_computing():
    from tests.conftest import make_client

    with make_client(json_limit_mb=0.01) as c:
        r = c.get("/api/v1/attention/tiles", params={"preset": "gpt2-small", "tokens": " ".join("abcdefghij" * 10),
                                                     "block_k": 1})  # fmt: skip
        assert r.status_code == 413 and r.json()["detail"][0]["loc"][-1] == "block_k"
