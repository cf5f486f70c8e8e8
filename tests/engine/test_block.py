"""The whole block against independent implementations given the same weights: a nanoGPT block (LayerNorm +
GELU), a LLaMA-style block (RMSNorm + SwiGLU) and torch's own Post-LN TransformerEncoderLayer."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from engine import make_spec
from engine.block import compute_block, make_block_spec
from engine.sources import load


def traced(tokens, **kw):
    attn_kw = {k: kw.pop(k) for k in list(kw) if k in ("preset", "d_model", "n_heads", "mask", "seed", "scale")}
    spec = make_block_spec(make_spec(tokens, **attn_kw), **kw)
    b = compute_block(spec)
    x, aw = load(spec.attn, torch.device("cpu"), torch.float32)
    return b, x, aw


class NanoBlock(nn.Module):
    """nanoGPT's Block: ln_1, causal attention (c_attn, c_proj), ln_2, MLP (c_fc, GELU, c_proj)."""

    def __init__(self, d: int, h: int) -> None:
        super().__init__()
        self.h = h
        self.ln_1, self.ln_2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.c_attn, self.attn_proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.c_fc, self.mlp_proj = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def attn(self, x: torch.Tensor) -> torch.Tensor:
        n, d = x.shape
        q, k, v = (t.view(n, self.h, d // self.h).transpose(0, 1) for t in self.c_attn(x).split(d, dim=1))
        att = (q @ k.transpose(-2, -1)) / (k.size(-1) ** 0.5)
        att = att.masked_fill(torch.ones(n, n).tril() == 0, float("-inf")).softmax(-1)
        return self.attn_proj((att @ v).transpose(0, 1).reshape(n, d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x))))


class LlamaBlock(nn.Module):
    """A LLaMA-style block without RoPE: RMSNorm, bias-free attention, SwiGLU."""

    def __init__(self, d: int, h: int, d_ff: int) -> None:
        super().__init__()
        self.h = h
        self.attention_norm, self.ffn_norm = nn.RMSNorm(d, eps=1e-5), nn.RMSNorm(d, eps=1e-5)
        self.wq, self.wk, self.wv, self.wo = (nn.Linear(d, d, bias=False) for _ in range(4))
        self.w1, self.w3 = nn.Linear(d, d_ff, bias=False), nn.Linear(d, d_ff, bias=False)
        self.w2 = nn.Linear(d_ff, d, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n, d = x.shape
        h = self.attention_norm(x)
        q, k, v = (m(h).view(n, self.h, d // self.h).transpose(0, 1) for m in (self.wq, self.wk, self.wv))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.wo(y.transpose(0, 1).reshape(n, d))
        h = self.ffn_norm(x)
        return x + self.w2(F.silu(self.w1(h)) * self.w3(h))


def copy(linear: nn.Linear, w: torch.Tensor, b: torch.Tensor | None = None) -> None:
    linear.weight.copy_(w.T)  # nn.Linear stores (out, in)
    if b is not None:
        linear.bias.copy_(b)


@torch.no_grad()
def test_gpt2_style_block_equals_nanogpt():
    b, x, aw = traced(
        "a quick brown fox jumps over", preset="gpt2-small", d_model=64, n_heads=4, mask="causal", seed=3, gelu="exact"
    )
    w = b.weights
    ref = NanoBlock(64, 4)
    ref.ln_1.weight.copy_(w.ln1_w), ref.ln_1.bias.copy_(w.ln1_b), ref.ln_2.weight.copy_(w.ln2_w)
    ref.ln_2.bias.copy_(w.ln2_b)
    copy(ref.c_attn, torch.cat([aw.w_q, aw.w_k, aw.w_v], 1), torch.cat([aw.b_q, aw.b_k, aw.b_v]))
    copy(ref.attn_proj, aw.w_o, aw.b_o)
    copy(ref.c_fc, w.w_up, w.b_up)
    copy(ref.mlp_proj, w.w_down, w.b_down)
    torch.testing.assert_close(b.stages["output"]["output"], ref(x), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(b.stages["ln1"]["ln1"], ref.ln_1(x))


@torch.no_grad()
def test_llama_style_block_equals_a_llama_block():
    b, x, aw = traced(
        "一 二 三 四 五 六 七", d_model=16, n_heads=4, mask="causal", seed=9, norm="rmsnorm", ffn="swiglu", d_ff=40
    )
    w = b.weights
    ref = LlamaBlock(16, 4, 40)
    ref.attention_norm.weight.copy_(w.ln1_w), ref.ffn_norm.weight.copy_(w.ln2_w)
    for m, t in (
        (ref.wq, aw.w_q),
        (ref.wk, aw.w_k),
        (ref.wv, aw.w_v),
        (ref.wo, aw.w_o),
        (ref.w1, w.w_gate),
        (ref.w3, w.w_up),
        (ref.w2, w.w_down),
    ):
        copy(m, t)
    torch.testing.assert_close(b.stages["output"]["output"], ref(x), rtol=1e-5, atol=1e-5)
    assert b.spec.ff == 40 and b.stages["ffn_hidden"]["gate"].shape == (7, 40)


@torch.no_grad()
def test_post_ln_block_equals_torch_transformer_encoder_layer():
    # The toy's init, not GPT-2's 0.02: attention is far from uniform, so a wrong scale or mask cannot pass.
    options = {
        "d_model": 16,
        "n_heads": 2,
        "mask": "causal",
        "seed": 1,
        "placement": "post",
        "gelu": "exact",
        "d_ff": 24,
    }
    b, x, aw = traced("a b c d e", **options)
    unscaled, _, _ = traced("a b c d e", **options, scale="none")
    assert float((unscaled.stages["output"]["output"] - b.stages["output"]["output"]).abs().max()) > 1e-2
    w = b.weights
    ref = nn.TransformerEncoderLayer(
        16, 2, dim_feedforward=24, dropout=0.0, activation="gelu", batch_first=True, norm_first=False
    )
    ref.eval()
    ref.self_attn.in_proj_weight.copy_(torch.cat([aw.w_q, aw.w_k, aw.w_v], 1).T)
    zero = torch.zeros(16)
    ref.self_attn.in_proj_bias.copy_(torch.cat([b if b is not None else zero for b in (aw.b_q, aw.b_k, aw.b_v)]))
    copy(ref.self_attn.out_proj, aw.w_o, aw.b_o if aw.b_o is not None else zero)
    copy(ref.linear1, w.w_up, w.b_up if w.b_up is not None else torch.zeros(24))
    copy(ref.linear2, w.w_down, w.b_down if w.b_down is not None else zero)
    for norm, g, s in ((ref.norm1, w.ln1_w, w.ln1_b), (ref.norm2, w.ln2_w, w.ln2_b)):
        norm.weight.copy_(g), norm.bias.copy_(s)
    mask = nn.Transformer.generate_square_subsequent_mask(5)
    out = ref(x[None], src_mask=mask, is_causal=True)[0]
    torch.testing.assert_close(b.stages["output"]["output"], out, rtol=1e-5, atol=1e-5)
    assert list(b.order)[:6] == ["projection", "scores", "mask", "softmax", "weighted_sum", "residual1"]


def test_every_variant_matches_the_fused_reference():
    for kw in ({}, {"placement": "post"}, {"norm": "rmsnorm", "ffn": "swiglu"}, {"gelu": "exact"}):
        b, _, _ = traced("x y z w", d_model=8, n_heads=2, mask="causal", **kw)
        assert b.max_abs_diff_vs_reference < 1e-5, kw


def test_block_attention_is_the_attention_api_on_ln1(client):
    block = client.get("/api/v1/block", params={"mask": "causal", "seed": 5}).json()
    stages = {s["key"]: s["tensors"] for s in block["stages"]}
    assert [s["key"] for s in block["stages"]] == [
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
    att = client.post(
        "/api/v1/attention", json={"x": stages["ln1"]["ln1"], "tokens": block["tokens"], "mask": "causal", "seed": 5}
    ).json()
    a = {k: v for s in att["stages"] for k, v in s["tensors"].items()}
    np.testing.assert_allclose(np.array(stages["softmax"]["weights"]), np.array(a["weights"]), rtol=1e-6)
    x = np.array(stages["ln1"]["input"])
    r = np.array(stages["residual1"]["residual1"])
    np.testing.assert_allclose(r, x + np.array(stages["weighted_sum"]["output"]), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(
        np.array(stages["output"]["output"]), r + np.array(stages["ffn_out"]["ffn_out"]), rtol=1e-6, atol=1e-6
    )
    ln1 = np.array(stages["ln1"]["ln1"])
    np.testing.assert_allclose(ln1.mean(-1), 0, atol=1e-6)
    np.testing.assert_allclose(ln1.std(-1), 1, atol=1e-3)
    assert block["checks"]["max_abs_diff_vs_reference"] < 1e-5


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"norm": "batchnorm"}, "norm"),
        ({"ffn": "relu"}, "ffn"),
        ({"placement": "middle"}, "placement"),
        ({"d_ff": "-1"}, "d_ff"),
        ({"stages": "ln3"}, "stages"),
        ({"gelu": "fast"}, "gelu"),
    ],
)
def test_block_errors_name_the_field(client, params, field):
    r = client.get("/api/v1/block", params=params)
    assert r.status_code == 422 and r.json()["detail"][0]["loc"][1] == field


def test_block_npz_and_heatmap(client):
    import io

    z = np.load(io.BytesIO(client.get("/api/v1/block.npz", params={"ffn": "swiglu", "norm": "rmsnorm"}).content))
    assert {"ln1.ln1", "ffn_hidden.gate", "ffn_hidden.up", "output.output", "softmax.weights"} <= set(z.files)
    png = client.get(
        "/api/v1/block/heatmap.png",
        params={"preset": "gpt2-small", "stage": "ffn_hidden", "tensor": "ffn_hidden", "size": 256},
    )
    assert png.status_code == 200 and png.content[:4] == b"\x89PNG"
    assert client.get("/api/v1/block/heatmap.png", params={"stage": "ln2", "tensor": "weights"}).status_code == 422
