"""What a user would run instead, timed in the same process as the lab's own numbers: transformers' LLaMA read
from SmolLM2's own GGUF file (float32, SDPA attention, no attentions kept).

    forward_s(ref, ids, layers)   one forward pass through the first `layers` layers (no output head)
    generate_rate(ref, ids, new)  greedy tokens per second of `generate(do_sample=False)`
"""

from __future__ import annotations

import time
from typing import Any

import torch


def smollm2_reference(model: Any) -> Any:
    """transformers' LlamaForCausalLM with SmolLM2's weights (dequantised from the same GGUF as the lab's)."""
    import transformers

    ref = transformers.AutoModelForCausalLM.from_pretrained(
        str(model.path.parent), gguf_file=model.path.name, attn_implementation="sdpa", dtype=torch.float32
    )
    return ref.eval()


@torch.inference_mode()
def forward_s(ref: Any, ids: list[int], layers: int) -> float:
    """Seconds for one forward pass of `ids` through layers 0 … layers − 1 (the rest of the stack set aside)."""
    stack = ref.model.layers
    ref.model.layers = stack[:layers]
    try:
        t0 = time.perf_counter()
        ref.model(torch.tensor([ids]), use_cache=False)
        return time.perf_counter() - t0
    finally:
        ref.model.layers = stack


@torch.inference_mode()
def generate_rate(ref: Any, ids: list[int] | tuple[int, ...], new: int) -> float:
    """Greedy tokens per second, prompt included in the time (as the lab's own figure)."""
    t0 = time.perf_counter()
    out = ref.generate(torch.tensor([list(ids)]), max_new_tokens=new, min_new_tokens=new, do_sample=False)
    return (out.shape[1] - len(ids)) / (time.perf_counter() - t0)
