"""The lab page `/`: the whole state lives in the URL, so any view can be shared, bookmarked and reloaded.

One template renders the page; an HTMX request (HX-Request) gets only its `stage` block plus the controls as an
out-of-band swap, so the form never disagrees with the panel. Without JavaScript every link and the form do full
page loads of the same URLs.
"""

from __future__ import annotations

from typing import Annotated, Any
from urllib.parse import urlencode

import numpy as np
from fastapi import APIRouter, Depends, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import HTMLResponse, Response

from engine import PRESETS, STAGES
from engine.attention import Trace
from engine.spec import MAIN_TENSOR

from ..i18n import negotiate, translator
from ..lab import Lab, cached_page, get_lab, page_key
from ..render import page as view
from ..render.arrays import to_numpy
from ..render.cells import matrix_view, row_stats
from ..schemas import AttentionRequest, from_query
from ..web.share import public_base
from ..web.state import parse_cell, parse_head, parse_stage, parse_tile
from .common import base_context, inline_errors, render

router = APIRouter(include_in_schema=False)

API_KEYS = ("tokens", "text", "token_ids", "preset", "layer", "d_model", "n_heads", "n_kv_heads", "kv_tokens",
            "positions", "rope_pairing", "rope_base", "n_ctx", "mask", "pad_positions", "segment_ids", "window",
            "prefix", "mask_matrix", "scale", "seed")  # fmt: skip
# A field that only one choice of another field uses; left over from another choice, the page drops it.
DEPENDS = {
    "pad_positions": ("mask", "padding"),
    "segment_ids": ("mask", "document"),
    "window": ("mask", "sliding_window"),
    "prefix": ("mask", "prefix_lm"),
    "mask_matrix": ("mask", "custom"),
    "rope_pairing": ("positions", "rope"),
    "rope_base": ("positions", "rope"),
    "n_ctx": ("positions", "learned"),
}


def drop_unused(p: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in p.items() if k not in DEPENDS or p.get(DEPENDS[k][0]) == DEPENDS[k][1]}


PAGE_KEYS = (*API_KEYS, "stage", "head", "compare", "cell", "tile", "present", "hide", "lang")
HIDEABLE = ("controls", "nav", "formula", "explain", "notice", "checks")
SCALE_CYCLE = {"sqrt_dk": "none", "none": "dk", "dk": "sqrt_dk"}
TILE = 16


class PageState:
    """The page's query parameters, normalised, and URLs for every change of them."""

    path = "/"
    api_keys: tuple[str, ...] = API_KEYS
    page_keys: tuple[str, ...] = PAGE_KEYS

    def __init__(self, params: dict[str, str]) -> None:
        self.params = drop_unused(params)

    @classmethod
    def from_request(cls, request: Request, models: dict[str, Any] | None = None) -> PageState:
        q = request.query_params
        params = {k: q[k].strip() for k in cls.page_keys if k in q and q[k].strip() != ""}
        # The form keeps its fields when the preset changes: carry the sequence across instead of failing.
        if params.get("preset") in (models or {}):
            if "tokens" in params and "text" not in params and "token_ids" not in params:
                params["text"] = params.pop("tokens")
            params.pop("tokens", None)
            params.pop("d_model", None)
            params.pop("n_heads", None)
        else:
            params.pop("layer", None)
            params.pop("token_ids", None)
            if "text" in params and "tokens" not in params:
                params["tokens"] = params.pop("text")
            params.pop("text", None)
        return cls(params)

    def get(self, key: str, default: str = "") -> str:
        return self.params.get(key, default)

    def url(self, **changes: object) -> str:
        p = dict(self.params)
        for k, v in changes.items():
            if v is None:
                p.pop(k, None)
            else:
                p[k] = str(v)
        p = drop_unused(p)
        ordered = [(k, p[k]) for k in self.page_keys if k in p]
        return f"{self.path}?{urlencode(ordered)}" if ordered else self.path

    def api_query(self, **extra: object) -> str:
        items = [(k, self.params[k]) for k in self.api_keys if k in self.params]
        items += [(k, str(v)) for k, v in extra.items() if v is not None]
        return urlencode(items)


def edit_url(state: PageState, allow: np.ndarray, r: int, c: int) -> str:
    """The lab URL with cell (r, c) of the mask flipped: the mask becomes custom."""
    flipped = allow.copy()
    flipped[r, c] = 1 - flipped[r, c]
    matrix = "[" + ",".join("[" + ",".join(str(int(v)) for v in row) + "]" for row in flipped) + "]"
    return state.url(mask="custom", mask_matrix=matrix, cell=None)


def small_context(trace: Trace, key: str, head: int, state: PageState, t: Any) -> dict[str, Any]:
    ctx: dict[str, Any] = {
        "matrices": view.stage_matrices(trace, key, head),
        "weight_matrices": view.weight_matrices(trace, key),
    }
    if key in ("softmax", "weighted_sum"):
        w = to_numpy(trace.softmax.weights[head])
        ctx["stats"] = row_stats(w, list(trace.spec.kv_tokens or trace.spec.tokens))
    if key == "mask" and not trace.spec.token_ids:  # the toy's mask can be edited cell by cell
        allow = np.isfinite(to_numpy(trace.mask.mask)).astype(int)
        for m in ctx["matrices"]:
            if m.name == "mask":
                m.cell_urls = [
                    [edit_url(state, allow, r, c) for c in range(allow.shape[1])] for r in range(allow.shape[0])
                ]
    cell = parse_cell(state.get("cell"))
    if cell:
        ctx["arithmetic"] = view.arithmetic(trace, cell.tensor, cell.head, cell.row, cell.col, t)
        ctx["selected"] = cell.as_tuple()
    return ctx


def large_context(trace: Trace, key: str, head: int, state: PageState) -> dict[str, Any]:
    spec = trace.spec
    tensor = MAIN_TENSOR[key]
    full = getattr(getattr(trace, key), tensor)[head]  # (N, N) or (N, d_k)
    a = to_numpy(full)
    n_rows, n_cols = a.shape
    r0, c0 = parse_tile(state.get("tile"))
    row0 = min(r0, max(0, n_rows - TILE))
    col0 = min(c0, max(0, n_cols - TILE))
    tok = list(spec.tokens)
    keys = list(spec.kv_tokens) or tok
    col_labels = keys if tensor in ("scaled", "masked", "weights", "raw") else [f"{j}" for j in range(n_cols)]
    window = a[row0 : row0 + TILE, col0 : col0 + TILE]
    scale = "sequential" if tensor == "weights" else "diverging"
    tile = matrix_view(
        tensor,
        tensor,
        window,
        [f"{row0 + i}: {tok[row0 + i]}" for i in range(window.shape[0])],
        col_labels[col0 : col0 + TILE],
        "window",
        scale,
        head,
    )
    tile.links = False
    tile.extra = {"row0": str(row0), "col0": str(col0)}
    moves = {
        "up": state.url(tile=f"{max(0, row0 - TILE)},{col0}") if row0 > 0 else None,
        "down": state.url(tile=f"{row0 + TILE},{col0}") if row0 + TILE < n_rows else None,
        "left": state.url(tile=f"{row0},{max(0, col0 - TILE)}") if col0 > 0 else None,
        "right": state.url(tile=f"{row0},{col0 + TILE}") if col0 + TILE < n_cols else None,
    }
    stats = None
    if tensor == "weights":
        rows = row_stats(a[row0 : row0 + TILE], keys)
        stats = [(f"{row0 + i}: {tok[row0 + i]}", s) for i, s in enumerate(rows)]
    size = min(768, max(256, n_rows))
    return {
        "tensor": tensor,
        "thumbs": [
            (h, "/api/v1/attention/heatmap.png?" + state.api_query(stage=key, head=h, size=96), state.url(head=h))
            for h in range(spec.n_heads)
        ],
        "zoom_src": "/api/v1/attention/heatmap.png?" + state.api_query(stage=key, head=head, size=size),
        "window_api": "/api/v1/attention/window?" + state.api_query(stage=key, tensor=tensor, head=head),
        "n_rows": n_rows,
        "n_cols": n_cols,
        "col_labels": col_labels,
        "tile": tile,
        "tile_range": (row0, row0 + window.shape[0] - 1, col0, col0 + window.shape[1] - 1),
        "moves": moves,
        "tile_stats": stats,
        "scale_kind": scale,
    }


class EmbedState(PageState):
    path = "/embed"


MAX_QR_CHARS = 1200  # beyond this a phone camera struggles anyway


def qr_svg(url: str) -> str:
    """The URL as a QR code, SVG with presentation attributes only (no inline style)."""
    import io

    import segno

    buf = io.BytesIO()
    segno.make(url, error="m").save(buf, kind="svg", scale=5, border=2, xmldecl=False, svgns=True, nl=False)
    return buf.getvalue().decode()


@router.get("/embed", response_class=HTMLResponse)
async def embed_page(request: Request, lab: Annotated[Lab, Depends(get_lab)]) -> Response:
    """One view without the page's chrome, for course pages: the same parameters, plus `hide=`."""
    return await render_lab(request, lab, embed=True)


@router.get("/", response_class=HTMLResponse)
async def lab_page(request: Request, lab: Annotated[Lab, Depends(get_lab)]) -> Response:
    return await render_lab(request, lab, embed=False)


async def render_lab(request: Request, lab: Lab, embed: bool) -> Response:
    lang = negotiate(request.query_params.get("lang"), request.headers.get("accept-language"))
    t = translator(lang)
    cache_key = page_key(request, lang)
    student_base = None
    if request.query_params.get("present") == "1":
        # The page shows the students' address: key the cached page by it, never by the raw Host header alone.
        student_base = public_base(str(request.base_url), lab.settings.public_url)
        cache_key = (f"{cache_key[0]}@{student_base}", cache_key[1])
    if (hit := cached_page(lab, cache_key)) is not None:
        return hit
    state = (EmbedState if embed else PageState).from_request(request, lab.models)
    present = state.get("present") == "1"
    hide = {h for h in state.get("hide").split(",") if h in HIDEABLE}
    if present:
        hide |= {"controls"}
    if state.get("mask") == "custom" and not state.get("mask_matrix") and state.get("preset", "toy") in PRESETS:
        # Choosing "custom" in the form starts from a mask that hides nothing, ready to be edited cell by cell.
        n = len(state.get("tokens").split()) or len(PRESETS[state.get("preset", "toy")].tokens)
        state.params["mask_matrix"] = "[" + ",".join(["[" + ",".join(["1"] * n) + "]"] * n) + "]"
    ctx = base_context(
        request,
        "lab",
        lang,
        t,
        state,
        present=present,
        embed=embed,
        hide=hide,
        stages=STAGES,
        presets=[*PRESETS, *lab.models],
        models=lab.models,
        json_url="/api/v1/attention?" + state.api_query(),
        npz_url="/api/v1/attention.npz?" + state.api_query(),
    )
    with inline_errors(ctx, t):
        req = AttentionRequest.model_validate(from_query({k: state.params[k] for k in API_KEYS if k in state.params}))
        spec = req.to_spec(lab.limits, lab.device, lab.models)
        key = parse_stage(state.get("stage"), STAGES)
        head = parse_head(state.get("head"), spec.n_heads)
        parse_cell(state.get("cell"))  # a malformed cell is the request's error, before any computing
        parse_tile(state.get("tile"))
        trace, _ = await run_in_threadpool(lab.trace, spec)
        index = STAGES.index(key)
        mask_on = spec.mask == "causal"
        ctx.update(
            trace=trace,
            spec=spec,
            key=key,
            index=index + 1,
            head=head,
            small=view.is_small(trace),
            formula=view.formula(trace, key),
            notice=view.notice(trace, key, t),
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
            ctx.update(qr=qr_svg(student) if len(student) <= MAX_QR_CHARS else None, student_url=student)
        if ctx["small"]:
            ctx.update(small_context(trace, key, head, state, t))
        else:
            ctx["large"] = large_context(trace, key, head, state)
        compare = state.get("compare")
        pairs: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
            "mask": ({"mask": "none"}, {"mask": "causal"}),
            "scale": ({"scale": "sqrt_dk"}, {"scale": "none"}),
            "leak": ({"mask": "causal", "segment_ids": []}, {"mask": "document"}),  # boundaries ignored vs blocked
        }
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
                other_trace, _ = await run_in_threadpool(lab.trace, other.to_spec(lab.limits, lab.device, lab.models))
                sides.append(view.compare_side(other_trace, head))
            ctx["compare"] = {"kind": compare, "sides": sides}
    return render(request, lab, "lab.html", ctx, cache_key)
