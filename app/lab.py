"""The server's one stateful object: the resolved device, the limits and the trace cache.

It keeps no per-user state; any number of workers or machines serve the same URLs with the same answers.
"""

from __future__ import annotations

from typing import Any

from fastapi import Request

from engine import Limits, Spec, TraceCache, compute
from engine.attention import Trace
from engine.block import BlockSpec, BlockTrace, compute_block
from engine.device import resolve

from .settings import Settings


class Lab:
    def __init__(self, settings: Settings) -> None:
        import torch

        if settings.threads:
            torch.set_num_threads(settings.threads)
        self.settings = settings
        self.device = resolve(settings.device)
        self.limits: Limits = settings.limits()
        self.cache: TraceCache[Spec | BlockSpec, Trace | BlockTrace] = TraceCache(int(settings.cache_mb * 2**20))
        self.models: dict[str, Any] = {}
        if settings.checkpoint:
            from engine.checkpoint import GPT2Checkpoint

            self.models["checkpoint"] = GPT2Checkpoint(settings.checkpoint, "checkpoint", self.device)

    def trace(self, spec: Spec) -> tuple[Trace, bool]:
        """The trace for `spec` and whether it came from the cache."""
        return self.cache.get_or_compute(spec, lambda s: compute(s, self.models.get(s.preset)))

    def block(self, spec: BlockSpec) -> tuple[BlockTrace, bool]:
        """The block trace for `spec` and whether it came from the cache."""
        return self.cache.get_or_compute(spec, lambda s: compute_block(s, self.models.get(s.attn.preset)))

    @property
    def json_limit(self) -> int:
        return int(self.settings.json_limit_mb * 2**20)


def get_lab(request: Request) -> Lab:
    lab: Lab = request.app.state.lab
    return lab
