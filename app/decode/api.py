"""GET/POST /api/v1/decode: prefill, then one token at a time against the KV cache, each step checked against a
full recomputation."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, Response

from engine.decode import DecodeTrace
from engine.spec import Spec

from ..lab import Lab
from ..render.arrays import to_numpy
from ..schemas import ERRORS, DecodeRequest
from ..web.answer import answer_document, twins

router = APIRouter(prefix="/api/v1", tags=["kv cache"], responses=ERRORS)
STEP_TENSORS = ("q", "k_new", "v_new", "scores", "weights", "heads", "output")  # each step's, in the answer's order


def document(t: DecodeTrace, decimals: int | None) -> dict[str, Any]:
    per_token = t.bytes_per_token
    return {
        "spec": t.spec.summary() | {"prefill": t.prefill, "decimals": decimals},
        "tokens": list(t.spec.tokens),
        "kv_cache_bytes_per_token": per_token,
        "prefill": {
            "k_cache": to_numpy(t.k_prefill, decimals),
            "v_cache": to_numpy(t.v_prefill, decimals),
            "cache_len": t.prefill,
            "cache_bytes": t.prefill * per_token,
        },
        "steps": [
            {
                "position": s.position,
                "token": t.spec.tokens[s.position],
                **{n: to_numpy(getattr(s, n), decimals) for n in STEP_TENSORS},
                "cache_len": s.position + 1,
                "cache_bytes": (s.position + 1) * per_token,
                "max_abs_diff_vs_full": s.max_abs_diff_vs_full,
                "earlier_change": s.earlier_change,
            }
            for s in t.steps
        ],
        "mask": t.spec.mask,
        "checks": {
            "max_abs_diff_vs_full": t.max_abs_diff_vs_full,
            "earlier_change": max((s.earlier_change for s in t.steps), default=0.0),
        },
    }


def min_numbers(spec: Spec, prefill: int) -> int:
    """A lower bound on the numbers a decode answer holds: each step's scores and weights over the cache it grew."""
    h, kv, dk = spec.n_heads, spec.kv_heads, spec.d_k
    steps = sum(2 * h * (p + 1) + h * dk + spec.d_model for p in range(prefill, spec.n_tokens))
    return 2 * kv * prefill * dk + steps


async def answer(request: Request, req: DecodeRequest, lab: Lab) -> Response:
    """The answer: spec (the computation's settings, with prefill and decimals), tokens, mask,
    kv_cache_bytes_per_token (K and V of one token in this layer: 2 · kv heads · d_k · bytes per number). prefill:
    the K and V cache after the prompt, k_cache and v_cache (H_kv, prefill, d_k), its cache_len and cache_bytes.
    steps[t]: position and token, the new token's q (H, d_k), the k_new and v_new appended to the cache (H_kv, d_k),
    its row of scaled scores and weights over every cached key (H, t+1), the heads (H, d_k) and the output after
    W_O (d,), cache_len and cache_bytes after it, the largest difference from the same row of a full recomputation
    (max_abs_diff_vs_full) and how far the earlier rows' outputs move when the token arrives (earlier_change: 0
    under the causal mask, so the cache stays exact; with mask=none, a bidirectional encoder's, both are large: the
    cached rows go stale and the full row reads later tokens). checks: both, the largest over the steps."""
    spec, prefill = req.to_decode_spec(lab.limits, lab.device, lab.settings.max_decode_tokens)
    return await answer_document(
        request, lab, lab.decode_work(spec, prefill), lambda t: document(t, req.decimals),
        min_numbers(spec, prefill), "tokens", "decode fewer tokens, or a larger prefill",
    )  # fmt: skip


twins(
    router,
    "/decode",
    DecodeRequest,
    answer,
    "decode",
    summary="Decoding with a KV cache, step by step, against recomputing",
)
