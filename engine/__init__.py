"""Attention Lab's engine: the five stages of scaled dot-product attention, every intermediate kept.

    >>> from engine import trace
    >>> t = trace("猫 坐 在 垫子 上", mask="causal")
    >>> t.softmax.weights[0, 0]          # row 1 under the causal mask: only the first token is visible
    tensor([1., 0., 0., 0., 0.])

The engine imports no web code; the API, the lab page and the CLI are thin layers over `make_spec` and `compute`.
Names that need torch are imported on first use, so `engine.spec` (and a CLI's --help) stays fast.
"""

from typing import Any

from .spec import MASKS, PRESETS, SCALES, STAGE_TENSORS, STAGES, Limits, Spec, SpecError, make_spec

_LAZY = {"Trace": "attention", "TraceCache": "cache", "compute": "tracing", "trace": "tracing"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module 'engine' has no attribute {name!r}")


__all__ = [
    "MASKS",
    "PRESETS",
    "SCALES",
    "STAGES",
    "STAGE_TENSORS",
    "Limits",
    "Spec",
    "SpecError",
    "Trace",
    "TraceCache",
    "compute",
    "make_spec",
    "trace",
]
