"""The lab page `/` (and `/embed`, the same view without the page's chrome): the whole state lives in the URL, so
any view can be shared, bookmarked and reloaded.

One template renders the page; an htmx request (HX-Request) gets only its `stage` block plus the controls as an
out-of-band swap, so the form never disagrees with the panel. Without JavaScript every link and the form do full
page loads of the same URLs.
"""

from __future__ import annotations

from typing import Annotated, Any
from urllib.parse import urlencode, urlsplit

from fastapi import APIRouter, Depends, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import HTMLResponse, Response

from engine import PRESETS, STAGES, SpecError

from ..lab import Lab, get_lab
from ..render import page as view
from ..render import stages
from ..schemas import AttentionRequest, FieldError, TilesRequest, from_query
from ..web import lessons
from ..web.page import serve
from ..web.share import MAX_QR_CHARS, is_loopback, public_base, qr_svg
from ..web.state import DEPENDS, lab_state, parse_cell, parse_head, parse_int, parse_stage, parse_tile, url_fields
from .tiles import tiles_document
from .view import large_context, small_context

router = APIRouter(include_in_schema=False)

API_KEYS = url_fields(AttentionRequest)
VIEW_KEYS = ("stage", "head", "compare", "cell", "tile", "color", "present", "hide", "lesson", "step")
HIDEABLE = ("controls", "nav", "formula", "explain", "notice", "checks")
SCALE_CYCLE = {"sqrt_dk": "none", "none": "dk", "dk": "sqrt_dk"}
COMPARE_PAIRS: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "mask": ({"mask": "none"}, {"mask": "causal"}),
    "scale": ({"scale": "sqrt_dk"}, {"scale": "none"}),
    "leak": ({"mask": "causal", "segment_ids": []}, {"mask": "document"}),  # boundaries ignored vs blocked
}


def long_offer(req: AttentionRequest, state: Any, lab: Lab) -> dict[str, Any] | None:
    """For a pretrained model's text past a whole trace's length but within MAX_LONG_TOKENS: links to the views
    that compute only what they show (heat map, window of exact numbers, the model view)."""
    if req.preset not in lab.models:
        return None
    try:
        spec = req.to_spec(lab.long_limits, lab.device, lab.models)
    except (SpecError, FieldError):
        return None
    if spec.n_tokens <= lab.limits.max_tokens:
        return None
    n = spec.n_tokens
    model = None
    if getattr(lab.models[spec.preset], "one_pass_view", False):
        model = "/model?" + urlencode({"preset": spec.preset, "token_ids": ",".join(map(str, spec.token_ids)),
                                       "lang": state.get("lang") or "en"})  # fmt: skip
    return {
        "n": n,
        "heatmap": "/api/v1/attention/heatmap.png?" + state.api_query(stage="softmax", size=1024, color="log"),
        "window": "/api/v1/attention/window?" + state.api_query(stage="softmax", row=max(0, n - 16), col=0, cols=64),
        "model": model,
    }


@router.get("/embed", response_class=HTMLResponse)
async def embed_page(request: Request, lab: Annotated[Lab, Depends(get_lab)]) -> Response:
    """One view without the page's chrome, for course pages: the same parameters, plus `hide=`."""
    return await render_lab(request, lab, embed=True)


@router.get("/", response_class=HTMLResponse)
async def lab_page(request: Request, lab: Annotated[Lab, Depends(get_lab)]) -> Response:
    return await render_lab(request, lab, embed=False)


async def render_lab(request: Request, lab: Lab, embed: bool) -> Response:
    state = lab_state(request.query_params, "/embed" if embed else "/", API_KEYS, VIEW_KEYS, lab.models)
    present = state.get("present") == "1"
    # Presenter mode shows the students' address: the cache keys by it, never by the raw Host header alone.
    student_base = public_base(str(request.base_url), lab.settings.public_url) if present else None
    hide = {h for h in state.get("hide").split(",") if h in HIDEABLE}
    if present:
        hide |= {"controls"}
    if state.get("mask") == "custom" and not state.get("mask_matrix") and state.get("preset", "toy") in PRESETS:
        # Choosing "custom" in the form starts from a mask that hides nothing, ready to be edited cell by cell.
        n = len(state.get("tokens").split()) or len(PRESETS[state.get("preset", "toy")].tokens)
        state.params["mask_matrix"] = "[" + ",".join(["[" + ",".join(["1"] * n) + "]"] * n) + "]"

    async def build(ctx: dict[str, Any]) -> None:
        t = ctx["t"]
        req = AttentionRequest.model_validate(from_query(state.api_params()))
        try:
            spec = req.to_spec(lab.limits, lab.device, lab.models)
        except SpecError:
            ctx["long_urls"] = long_offer(req, state, lab)  # too long to trace whole: what reads it in parts
            raise
        key = parse_stage(state.get("stage"), STAGES)
        head = parse_head(state.get("head"), spec.n_heads)
        parse_cell(state.get("cell"))  # a malformed cell is the request's error, before any computing
        if state.get("lesson"):  # a lesson beside the lab: its question stays in view while the class looks
            if state.get("lesson") not in lessons.BY_SLUG:
                raise FieldError("lesson", f"no lesson {state.get('lesson')!r}; see /lessons")
            n = len(lessons.BY_SLUG[state.get("lesson")].steps)
            ctx["lesson"] = lessons.panel(
                state.get("lesson"), parse_int("step", state.get("step"), 1, 1, n), ctx["lang"]
            )
        parse_tile(state.get("tile"))
        trace, _ = await lab.trace_async(spec)
        index = STAGES.index(key)
        mask_on = spec.mask == "causal"
        ctx.update(
            trace=trace,
            spec=spec,
            key=key,
            index=index + 1,
            head=head,
            small=view.is_small(trace, key),
            **stages.present(trace, key, t),
            unknown_tokens=sum(tok == "[UNK]" for tok in spec.tokens),
            random_weights=spec.preset in PRESETS,
            real_model_url=state.url(
                preset="smollm2", text=" ".join(spec.tokens), tokens=None, d_model=None, n_heads=None
            )
            if "smollm2" in lab.models
            else None,
            prev_url=state.url(stage=STAGES[index - 1]) if index > 0 else None,
            next_url=state.url(stage=STAGES[index + 1]) if index + 1 < len(STAGES) else None,
            stage_urls=[(s, state.url(stage=s)) for s in STAGES],
            head_urls=[(h, state.url(head=h, cell=None)) for h in range(spec.n_heads)],
            mask_on=mask_on,
            mask_toggle_url=state.url(mask="none" if mask_on else "causal", cell=None),
            scale_toggle_url=state.url(scale=SCALE_CYCLE[spec.scale], cell=None),
            compare_urls={
                k: state.url(compare=k) for k in ("mask", "scale", *(("leak",) if spec.mask == "document" else ()))
            },
            compare_close_url=state.url(compare=None),
            present_url=state.url(present=None if present else "1"),
        )
        if present and student_base is not None:  # students scan the view itself, without presenter mode
            student = student_base + state.url(present=None)
            # A QR code holds ~2,300 bytes at this error level; past a bound, show the address alone.
            ctx.update(qr=qr_svg(student) if len(student) <= MAX_QR_CHARS else None, student_url=student,
                       share_loopback=is_loopback(urlsplit(student).hostname or ""))  # fmt: skip
        if ctx["small"]:
            ctx.update(small_context(trace, key, head, state, t))
        else:
            ctx["large"] = large_context(trace, key, head, state)
        compare = state.get("compare")
        pairs = COMPARE_PAIRS
        if compare in pairs and ctx["small"] and (compare != "leak" or spec.mask == "document"):
            sides = []
            for change in pairs[compare]:
                mask_kind = change.get("mask", spec.mask)
                unused: dict[str, Any] = {
                    k: ([] if k in ("pad_positions", "segment_ids") else None)
                    for k, (field, value) in DEPENDS.items()
                    if field == "mask" and value != mask_kind
                }
                other = req.model_copy(update=unused | change)
                other_trace, _ = await lab.trace_async(other.to_spec(lab.limits, lab.device, lab.models))
                sides.append(view.compare_side(other_trace, head, key))
            changed = view.outline_changes(sides[0]["matrix"], sides[1]["matrix"])
            ctx["compare"] = {"kind": compare, "sides": sides, "changed": changed}

    return await serve(
        request,
        lab,
        "lab.html",
        state,
        build,
        json_url="/api/v1/attention?" + state.api_query(),
        shows=student_base or "",
        npz_url="/api/v1/attention.npz?" + state.api_query(),
        present=present,
        embed=embed,
        hide=hide,
        stages=STAGES,
        presets=[*PRESETS, *lab.models],
        models=lab.models,
        svg_base="/api/v1/attention/heatmap.svg",
    )


TILE_KEYS = url_fields(TilesRequest)


@router.get("/tiles", response_class=HTMLResponse)
async def tiles_page(request: Request, lab: Annotated[Lab, Depends(get_lab)]) -> Response:
    """FlashAttention, walked through: one query block at a time, each key block updating m, l and the accumulator."""
    state = lab_state(request.query_params, "/tiles", TILE_KEYS, ("qb", "kb"), lab.models)

    async def build(ctx: dict[str, Any]) -> None:
        req = TilesRequest.model_validate(from_query(state.api_params(), None, TilesRequest))
        spec = req.to_tiles_spec(lab.limits, lab.device, lab.models)
        if spec.n_tokens > 64:
            raise FieldError("tokens", "the walk-through prints every running value: at most 64 tokens here")
        trace, _ = await lab.trace_async(spec)
        doc = await run_in_threadpool(tiles_document, trace, req)
        blocks = doc["blocks"]
        qb = parse_int("qb", state.get("qb"), 0, 0, len(blocks) - 1)
        steps = blocks[qb]["steps"]
        kb = parse_int("kb", state.get("kb"), len(steps) - 1, 0, len(steps) - 1)
        ctx.update(doc=doc, spec=spec, block=blocks[qb], qb=qb, kb=kb, step=steps[kb], n_steps=len(steps),
                   qb_urls=[(i, state.url(qb=i, kb=None)) for i in range(len(blocks))],
                   kb_urls=[(j, state.url(qb=qb, kb=j), s["skipped"]) for j, s in enumerate(steps)],
                   prev_url=state.url(qb=qb, kb=kb - 1) if kb > 0 else None,
                   next_url=state.url(qb=qb, kb=kb + 1) if kb + 1 < len(steps) else None,
                   tokens=list(spec.tokens), keys=list(spec.kv_tokens) or list(spec.tokens))  # fmt: skip

    return await serve(
        request, lab, "tiles.html", state, build, json_url="/api/v1/attention/tiles?" + state.api_query(), blocks=()
    )
