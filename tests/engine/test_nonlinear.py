"""Attention is nonlinear on SmolLM2 (engine/nonlinear.py), every number against an independent computation:
transformers' LLaMA read from SmolLM2's own GGUF, eager attention, its layer's attention module called on X, 2X, Y and
X+Y (X caught by a hook on the module's input, after the layer's RMSNorm; its RoPE and mask taken from the model's own
call), each head's output caught by a hook before o_proj."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from engine import nonlinear as NL
from engine.errors import SpecError

pytest.importorskip("transformers")

TEXT = "The cat sat on the mat, and the dog sat on the log."


def reference(llama: Any, ids: list[int], layer: int, head: int) -> dict[str, Any]:
    """transformers' own attention of `layer` on X, 2X, Y (X reversed) and X+Y: head `head`'s output (N, d_k) and
    weights (N, N) for each, with hooks (X from the attention's input, the heads from o_proj's input)."""
    attn = llama.model.layers[layer].self_attn
    seen: dict[str, Any] = {}
    hook = attn.register_forward_pre_hook(lambda m, a, kw: seen.update(kw=kw), with_kwargs=True)
    with torch.no_grad():
        llama(torch.tensor([ids]))
    hook.remove()
    kw = seen["kw"]
    x = kw["hidden_states"]
    dk = llama.config.hidden_size // llama.config.num_attention_heads
    heads: list[torch.Tensor] = []
    hook = attn.o_proj.register_forward_pre_hook(lambda m, a: heads.append(a[0][0, :, head * dk : (head + 1) * dk]))
    out = {}
    try:
        for name, h in (("x", x), ("2x", 2 * x), ("y", x.flip(1)), ("x+y", x + x.flip(1))):
            with torch.no_grad():
                _, w = attn(hidden_states=h, position_embeddings=kw["position_embeddings"],
                            attention_mask=kw["attention_mask"])  # fmt: skip
            out[name] = (heads[-1].double(), w[0, head].double())
    finally:
        hook.remove()
    return out


@pytest.mark.parametrize(("layer", "head"), [(3, 4), (15, 7)])
def test_smollm2_nonlinearity_equals_transformers_with_hooks(smollm2, llama, layer: int, head: int) -> None:
    ids = smollm2.tokenize(TEXT)
    got = NL.nonlinearity(smollm2, ids, layer, head)
    ref = reference(llama, ids, layer, head)
    ax, a2x, ay, axy = (ref[k][0] for k in ("x", "2x", "y", "x+y"))
    t = got["tensors"]
    for ours, theirs in ((t["ax"], ax), (t["a2x"], a2x), (t["ay"], ay), (t["axy"], axy)):
        torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-4)
    s, a = got["scale"], got["sum"]
    torch.testing.assert_close(torch.tensor(s["a2x"]).double(), a2x[-1], rtol=0, atol=1e-4)
    torch.testing.assert_close(torch.tensor(s["two_ax"]).double(), 2 * ax[-1], rtol=0, atol=1e-4)
    torch.testing.assert_close(torch.tensor(a["axy"]).double(), axy[-1], rtol=0, atol=1e-4)
    torch.testing.assert_close(torch.tensor(a["ax_ay"]).double(), (ax + ay)[-1], rtol=0, atol=1e-4)
    assert s["diff"] == pytest.approx(float((a2x - 2 * ax).norm() / (2 * ax).norm()), abs=1e-4)
    assert a["diff"] == pytest.approx(float((axy - ax - ay).norm() / (ax + ay).norm()), abs=1e-4)
    for name, key in (("x", "wx"), ("2x", "w2x")):
        torch.testing.assert_close(torch.tensor(s[key]).double(), ref[name][1][-1], rtol=0, atol=1e-4)
    for name, key in (("x", "wx"), ("y", "wy"), ("x+y", "wxy")):
        torch.testing.assert_close(torch.tensor(a[key]).double(), ref[name][1][-1], rtol=0, atol=1e-4)
    # a linear map would meet both; with the softmax's weights held it does: the difference is the softmax's
    assert s["diff"] > 1e-3 and a["diff"] > 1e-3 and s["held_diff"] < 1e-9 and a["held_diff"] < 1e-9
    assert s["share"] == pytest.approx(1.0) and a["share"] == pytest.approx(1.0)
    assert got["kv"] == head // 3  # 9 query heads share 3 K/V heads


def test_sizes_are_bounded_and_named(smollm2) -> None:
    ids = smollm2.tokenize(TEXT)
    for args, field in (((ids[:1], 0, 0), "text"), ((ids * 5, 0, 0), "text"), ((ids, 30, 0), "layer"),
                        ((ids, -1, 0), "layer"), ((ids, 0, 9), "head")):  # fmt: skip
        with pytest.raises(SpecError) as e:
            NL.nonlinearity(smollm2, *args)
        assert e.value.field == field
