"""No tensor is made on the wrong device: every trace kind runs with PyTorch's default device set to `meta`.

A factory call without `device=` (the RoPE θ bug: fine on the CPU, a device mismatch on CUDA) then makes a meta
tensor, and the first operation that mixes it with the trace's real tensors fails. The engine names the device of
every tensor it makes: the trace's own, or the CPU for seeded numbers.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

from engine import compute, make_spec
from engine.block import compute_block, make_block_spec
from engine.decode import decode


@pytest.fixture
def meta_default() -> Iterator[None]:
    torch.set_default_device("meta")
    try:
        yield
    finally:
        torch.set_default_device(None)


ATTENTION = [
    {},
    {"mask": "causal", "positions": "rope"},
    {"mask": "causal", "positions": "rope", "rope_pairing": "half", "n_heads": 2, "n_kv_heads": 1, "d_model": 8},
    {"positions": "sinusoidal", "mask": "padding", "pad_positions": [1]},
    {"positions": "learned", "mask": "document", "segment_ids": [0, 0, 1, 1, 1]},
    {"mask": "sliding_window", "window": 2},
    {"mask": "prefix_lm", "prefix": 2},
    {"mask": "custom", "mask_matrix": [[1, 0, 1, 0, 1]] * 5},
    {"kv_tokens": "x y z"},
    {"preset": "gpt2-small", "tokens": "a b c", "mask": "causal"},
]


def test_the_meta_default_really_catches_a_stray_factory(meta_default: None) -> None:
    x = torch.ones(3, device="cpu")
    with pytest.raises((RuntimeError, NotImplementedError)):
        float((x * torch.arange(3)).sum())  # arange without device= lands on meta


@pytest.mark.parametrize("options", ATTENTION, ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()) or "toy")
def test_attention_makes_every_tensor_on_its_device(meta_default: None, options: dict) -> None:
    t = compute(make_spec(**options))
    for key in t.order:
        for name, tensor in t.stage(key).items():
            assert tensor.device.type == "cpu", (key, name)
    assert t.checks.max_abs_diff_vs_sdpa < 1e-4


@pytest.mark.parametrize(
    "options", [{}, {"ffn": "swiglu", "norm": "rmsnorm"}, {"placement": "post"}], ids=["gelu", "swiglu", "post"]
)
def test_block_makes_every_tensor_on_its_device(meta_default: None, options: dict) -> None:
    spec = make_block_spec(make_spec(mask="causal", positions="rope"), **options)
    t = compute_block(spec)
    assert all(v.device.type == "cpu" for s in t.stages.values() for v in s.values())


def test_decode_makes_every_tensor_on_its_device(meta_default: None) -> None:
    t = decode(make_spec(mask="causal", positions="rope"), 2)
    assert t.max_abs_diff_vs_full < 1e-5


@pytest.mark.parametrize("name", ["minilm", "smollm2"])
def test_pretrained_models_make_every_tensor_on_their_device(meta_default: None, name: str) -> None:
    from engine.pretrained import MiniLM, SmolLM2

    torch.set_default_device(None)  # finding and loading the model's files is not the engine's arithmetic
    model = (MiniLM if name == "minilm" else SmolLM2).find()
    if model is None:
        pytest.skip(f"{name}'s package is not installed")
    model.tensors()
    spec = make_spec(text="猫坐在垫子上", preset=name, models={name: model})
    torch.set_default_device("meta")
    t = compute(spec, model)
    assert t.checks.max_abs_diff_vs_sdpa < 1e-3
