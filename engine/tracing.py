"""The engine's front door: a Spec in, a Trace out."""

from __future__ import annotations

from typing import Any

import torch

from . import attention, sources
from .device import torch_dtype
from .spec import Spec, make_spec


@torch.inference_mode()
def compute(spec: Spec, model: Any = None) -> attention.Trace:
    """Run the five stages for a validated spec; `model` is the pretrained model behind a model preset."""
    device, dtype = torch.device(spec.device), torch_dtype(spec.dtype)
    if model is not None:
        x, w = model.attention_input(spec.token_ids, spec.layer)
        return attention.run(spec, x.to(device, dtype), sources.cast(w, device, dtype))
    x, w = sources.load(spec, device, dtype)
    return attention.run(spec, x, w, sources.source(spec, device, dtype))


def trace(tokens: list[str] | str | None = None, **options: object) -> attention.Trace:
    """Notebook convenience: `trace("猫 坐 在 垫子 上", mask="causal")` validates, then computes."""
    return compute(make_spec(tokens, **options))  # type: ignore[arg-type]
