"""The KV-cache page `/decode`: prefill, then one step per token, each against the cache it grew."""

from __future__ import annotations

from typing import Annotated, Any

import torch
from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse, Response

from engine.device import close

from ..lab import Lab, get_lab
from ..render.arrays import to_numpy
from ..render.cells import MatrixView, dims, matrix_view
from ..render.page import SMALL_DIMS, SMALL_TOKENS, kv_head
from ..schemas import DecodeRequest, from_query
from ..web.page import serve
from ..web.state import ViewState, parse_head, parse_int, url_fields

router = APIRouter(include_in_schema=False)
# A decode is causal self-attention over built-in presets: the mask family, cross-attention and pretrained inputs
# have no meaning here.
API_KEYS = url_fields(DecodeRequest, drop=("mask", "pad_positions", "segment_ids", "window", "prefix", "mask_matrix",
                                           "kv_tokens", "text", "token_ids", "layer"))  # fmt: skip


def _fixed(m: MatrixView) -> MatrixView:
    m.links = False
    return m


@router.get("/decode", response_class=HTMLResponse)
async def decode_page(request: Request, lab: Annotated[Lab, Depends(get_lab)]) -> Response:
    state = ViewState.of(request.query_params, "/decode", API_KEYS, ("step", "head"))

    async def build(ctx: dict[str, Any]) -> None:
        req = DecodeRequest.model_validate(from_query(state.api_params(), None, DecodeRequest))
        spec, prefill = req.to_decode_spec(lab.limits, lab.device, lab.settings.max_decode_tokens)
        trace, _ = await lab.decode_async(spec, prefill)
        n_steps = len(trace.steps)
        step = parse_int("step", state.get("step"), 0, 0, n_steps)
        head = parse_head(state.get("head"), spec.n_heads)
        g = kv_head(spec, head)
        tok = list(spec.tokens)
        dk = dims(spec.d_k)
        small = spec.d_model <= SMALL_DIMS and spec.n_tokens <= SMALL_TOKENS
        per_token = trace.bytes_per_token
        ctx.update(spec=spec, trace=trace, step=step, n_steps=n_steps, head=head, small=small, prefill=prefill,
                   per_token=per_token)  # fmt: skip
        if step == 0:
            k, v = to_numpy(trace.k_prefill[g]), to_numpy(trace.v_prefill[g])
            cache_len, cur = prefill, None
        else:
            s = trace.steps[step - 1]
            k, v = to_numpy(s.k_cache[g]), to_numpy(s.v_cache[g])
            cache_len, cur = s.position + 1, s
        rows = tok[:cache_len]
        if small:
            ctx["cache"] = [
                _fixed(matrix_view("k_cache", "K cache", k, rows, dk, "(t + 1, d_k)", "diverging", g)),
                _fixed(matrix_view("v_cache", "V cache", v, rows, dk, "(t + 1, d_k)", "diverging", g)),
            ]
        if cur is not None:
            q_tok = [tok[cur.position]]
            ctx["row"] = [
                _fixed(matrix_view("q", "q_t", to_numpy(cur.q[head])[None], q_tok, dk, "(1, d_k)", "diverging", head)),
                _fixed(
                    matrix_view(
                        "scores",
                        "q_t Kᵀ / s",
                        to_numpy(cur.scores[head])[None],
                        q_tok,
                        rows,
                        "(1, t + 1)",
                        "diverging",
                        head,
                    )
                ),
                _fixed(
                    matrix_view(
                        "weights",
                        "a_t",
                        to_numpy(cur.weights[head])[None],
                        q_tok,
                        rows,
                        "(1, t + 1)",
                        "sequential",
                        head,
                    )
                ),
            ]
            if small:
                out = to_numpy(cur.output)[None]
                ctx["row"].append(_fixed(matrix_view("output", "o_t", out, q_tok, dims(spec.d_model), "(1, d)")))
            ctx["diff"] = cur.max_abs_diff_vs_full
            full_row = to_numpy(trace.full.weighted_sum.output[cur.position])
            ctx["full_equal"] = close(torch.from_numpy(to_numpy(cur.output)), torch.from_numpy(full_row), spec.dtype)
        ctx.update(
            cache_len=cache_len,
            cache_bytes=cache_len * per_token,
            gpt2_bytes=2 * 768 * 2 * 12,
            prev_url=state.url(step=step - 1) if step > 0 else None,
            next_url=state.url(step=step + 1) if step < n_steps else None,
            step_urls=[(i, state.url(step=i)) for i in range(n_steps + 1)],
            head_urls=[(h, state.url(head=h)) for h in range(spec.n_heads)],
        )

    return await serve(
        request,
        lab,
        "decode.html",
        state,
        build,
        json_url="/api/v1/decode?" + state.api_query(),
        presets=["toy", "gpt2-small"],
    )
