"""The KV-cache page `/decode`: prefill, then one step per token, each against the cache it grew."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from ..lab import Lab
from ..render.arrays import to_numpy
from ..render.stages import SMALL_DIMS, SMALL_TOKENS, kv_head
from ..schemas import DecodeRequest, head_within, request_fields
from ..web.page import language, page_route
from ..web.state import DEPENDS, Digits, PageQuery, lab_like, url_fields, within
from .view import GPT2_BYTES, DecodeView, cache_matrices, equals_full, row_matrices

router = APIRouter(include_in_schema=False)


class DecodeQuery(PageQuery):
    """/decode's view: the decoding step on screen (0 is the prefill) and the head (each checked once known)."""

    step: Digits(None) = 0  # type: ignore[valid-type]
    head: Digits(None) = 0  # type: ignore[valid-type]


# A decode is self-attention over built-in presets, causal (or none, to see the cache go stale): the fields that
# depend on the mask, cross-attention and pretrained inputs have no meaning here (named by the request's metadata).
API_KEYS = url_fields(
    DecodeRequest,
    drop=(
        "kv_tokens",
        *(n for n, f in request_fields(DecodeRequest).items() if f.only == "pretrained"),
        *(n for n, (on, _) in DEPENDS.items() if on == "mask"),
    ),
)


def api_url(state: DecodeQuery) -> str:
    """The API's answer for the page's request."""
    return "/api/v1/decode?" + state.api_query()


async def decode_view(state: DecodeQuery, lab: Lab, progress: str, ctx: dict[str, Any]) -> DecodeView:
    """What /decode shows for `state`: the page's View (its JSON face is the page's `.json` twin)."""
    t = ctx["t"]
    req = state.request(DecodeRequest)
    spec, prefill = req.to_decode_spec(lab.limits, lab.device, lab.settings.max_decode_tokens)
    trace, _ = await lab.compute(*lab.decode_work(spec, prefill))
    n_steps = len(trace.steps)
    step = within("step", state.step, 0, n_steps)
    head = head_within(state.head, spec.n_heads)
    g = kv_head(spec, head)
    small = spec.d_model <= SMALL_DIMS and spec.n_tokens <= SMALL_TOKENS
    per_token = trace.bytes_per_token
    cur = trace.steps[step - 1] if step > 0 else None
    k, v = (trace.k_prefill, trace.v_prefill) if cur is None else (cur.k_cache, cur.v_cache)
    cache_len = prefill if cur is None else cur.position + 1
    cached = list(spec.tokens[:cache_len])  # the cache's rows, the step's columns
    if cur is None:
        told = {"title": t("decode.prefill_title", n=prefill), "explain": t("decode.prefill_text", n=prefill)}
    else:
        token, diff, moved = spec.tokens[prefill + step - 1], cur.max_abs_diff_vs_full, cur.earlier_change
        pos = prefill + step - 1
        if spec.mask == "none":
            last = pos == spec.n_tokens - 1  # the full row reads nothing more than the step: they agree
            said = t("decode.stale_last" if last else "decode.stale", diff=f"{diff:.2e}", moved=f"{moved:.2e}", pos=pos)
        else:
            gap = "" if ctx["lang"] == "zh" else " "  # Chinese sentences follow one another without a space
            said = t("decode.equal", diff=f"{diff:.2e}") + gap + t("decode.history", moved=f"{moved:.2e}")
        told = {
            "title": t("decode.step_title", i=step, token=token, pos=pos),
            "explain": t("decode.step_text"),
            "notice": said,
            "earlier_change": moved,
            "diff": diff,
            "full_equal": equals_full(trace, cur),
        }
    return DecodeView(
        spec=spec,
        summary=spec.summary(),
        mask=spec.mask,
        tokens=spec.tokens,
        step=step,
        n_steps=n_steps,
        prefill=prefill,
        head=head,
        small=small,
        **told,
        cache_len=cache_len,
        per_token=per_token,
        cache_bytes=cache_len * per_token,
        size=t(
            "decode.size",
            len=cache_len,
            per=per_token,
            total=cache_len * per_token,
            kv=spec.kv_heads,
            dk=spec.d_k,
            gpt2=GPT2_BYTES,
        ),
        row=None if cur is None else row_matrices(cur, spec, head, cached, small),
        cache=cache_matrices(to_numpy(k[g]), to_numpy(v[g]), cached, spec.d_k, g, t) if small else None,
        json_url=api_url(state),
        prev_url=state.url(step=step - 1) if step > 0 else None,
        next_url=state.url(step=step + 1) if step < n_steps else None,
        step_urls=[(i, state.url(step=i)) for i in range(n_steps + 1)],
        head_urls=[(h, state.url(head=h)) for h in range(spec.n_heads)],
    )


def form(lab: Lab, state: DecodeQuery, lang: str) -> dict[str, Any]:
    """What /decode draws whatever its View says: the presets its form offers, the API's answer for its request."""
    return {"presets": ["toy", "gpt2-small"], "json_url": api_url(state)}


def decode_query(request: Request, path: str, keys: tuple[str, ...], query: type[DecodeQuery]) -> DecodeQuery:
    """/decode's query: a lab-like page's (the toy with no tokens shows its language's example)."""
    return lab_like(query.of(request.query_params, path, keys), None, language(request))


page_route(router, "/decode", "decode.html", API_KEYS, DecodeQuery, decode_view, form, DecodeView.blocks, decode_query)
