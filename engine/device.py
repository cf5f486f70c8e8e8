"""Which torch device and dtype a trace runs on."""

from __future__ import annotations

import torch

# Where seeded numbers are drawn and small host-side tables built: always named, never the default device, so a
# tensor meant for the GPU is never made on the CPU by accident (tests run the engine with the default device set
# to `meta` to prove it).
CPU = torch.device("cpu")

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def resolve(device: str = "auto") -> str:
    """`auto` is CUDA when PyTorch sees a GPU, else the CPU."""
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("--device cuda was asked for, but PyTorch sees no CUDA device")
    if device not in ("cpu", "cuda"):
        raise ValueError(f"unknown device {device!r}; choose auto, cpu or cuda")
    return device


def torch_dtype(name: str) -> torch.dtype:
    return DTYPES[name]


# How far two computations of the same numbers may differ in each dtype, relative to the values' scale: float32
# rounds at ~6e-8, float16 at ~5e-4 and bfloat16 at ~4e-3 per operation, and a dot product of d terms adds up.
TOLERANCE = {"float32": 1e-5, "float16": 2e-2, "bfloat16": 1e-1}


def close(a: torch.Tensor, b: torch.Tensor, dtype: str) -> bool:
    """`a` and `b` agree within the tolerance of `dtype`, scaled by their largest magnitude (at least 1)."""
    scale = max(1.0, float(b.float().abs().max()) if b.numel() else 1.0)
    return bool((a.float() - b.float()).abs().max() <= TOLERANCE[dtype] * scale) if a.numel() else True
