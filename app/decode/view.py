"""The KV-cache page's View: one step of a decode (or its prefill), the query row it attends with, the cache it
grew, and whether its output equals the full causal computation's row. `DecodeView` is what /decode shows; its JSON
face is the page's `.json` twin."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from pydantic import Field, InstanceOf

from engine.decode import DecodeStep, DecodeTrace
from engine.device import close
from engine.spec import Spec

from ..render.arrays import to_numpy
from ..render.cells import MatrixView, dims, matrix_view
from ..web.view import View

GPT2_BYTES = 2 * 768 * 2 * 12  # K and V of one token across GPT-2 small's 12 layers in fp16: the page's comparison


class DecodeView(View):
    """Step `step` of a decode (0 is the prefill): what it does (`title`, `explain`), whether its output row equals
    the full computation's (`notice`, `full_equal`, `diff`; steps only), the cache's size (`size` says it in words),
    the query row's matrices (`row`) and, for a small decode, the cache itself (`cache`)."""

    template = "decode.html"
    kind = "decode"

    spec: InstanceOf[Spec] | None = Field(None, exclude=True)  # the form's; the JSON face has its `summary`
    summary: dict[str, Any] | None = None
    tokens: tuple[str, ...] = ()
    step: int = 0
    n_steps: int = 0
    prefill: int = 0
    head: int = 0
    small: bool = False
    title: str = ""
    explain: str = ""
    notice: str | None = None  # a step's: its output row against the full computation's
    full_equal: bool | None = None
    diff: float | None = None
    earlier_change: float | None = None  # how far the earlier rows' outputs moved when this step's token arrived
    mask: str = "causal"  # causal, or none (the cache goes stale)
    cache_len: int = 0
    per_token: int = 0  # bytes of K and V per token in this layer
    cache_bytes: int = 0
    gpt2_bytes: int = GPT2_BYTES
    size: str = ""
    row: list[MatrixView] | None = None
    cache: list[MatrixView] | None = None
    # Links.
    json_url: str | None = None
    prev_url: str | None = None
    next_url: str | None = None
    step_urls: list[tuple[int, str]] | None = None
    head_urls: list[tuple[int, str]] | None = None


def cache_matrices(
    k: np.ndarray, v: np.ndarray, rows: list[str], d_k: int, g: int, t: Callable[..., str]
) -> list[MatrixView]:
    """The K and V cache of K/V head `g`, one row per cached token, titled in the page's language: numbers only, no
    cell links into the lab (as every matrix of the page)."""
    cache = (("k_cache", t("decode.k_cache"), k), ("v_cache", t("decode.v_cache"), v))
    return [
        matrix_view(n, label, a, rows, dims(d_k), "(t + 1, d_k)", "diverging", g, links=False) for n, label, a in cache
    ]


def row_matrices(cur: DecodeStep, spec: Spec, head: int, cached: list[str], small: bool) -> list[MatrixView]:
    """A step's single query row: q_t, its scores and weights against the `cached` tokens (the columns), and
    (small) its output."""
    rows = [spec.tokens[cur.position]]  # one row: the step's token
    q, scores, weights = (to_numpy(a[head])[None] for a in (cur.q, cur.scores, cur.weights))  # the head's, (1, …)
    out = [
        matrix_view("q", "q_t", q, rows, dims(spec.d_k), "(1, d_k)", head=head, links=False),
        matrix_view("scores", "q_t Kᵀ / s", scores, rows, cached, "(1, t + 1)", head=head, links=False),
        matrix_view("weights", "a_t", weights, rows, cached, "(1, t + 1)", "sequential", head=head, links=False),
    ]
    if small:
        o = to_numpy(cur.output)[None]
        out.append(matrix_view("output", "o_t", o, rows, dims(spec.d_model), "(1, d)", links=False))
    return out


def equals_full(trace: DecodeTrace, cur: DecodeStep) -> bool:
    """Whether a step's output row equals the same row of the full causal computation, within the dtype's
    tolerance."""
    full_row = to_numpy(trace.full.weighted_sum.output[cur.position])
    return close(torch.from_numpy(to_numpy(cur.output)), torch.from_numpy(full_row), trace.spec.dtype)
