"""The lab page `/` (and `/embed`, the same view without the page's chrome): the whole state lives in the URL, so
any view can be shared, bookmarked and reloaded.

One template renders the page; an htmx request (HX-Request) gets only its `stage` block plus the controls as an
out-of-band swap, so the form never disagrees with the panel. Without JavaScript every link and the form do full
page loads of the same URLs.
"""

from __future__ import annotations

import functools
import json
from typing import Annotated, Any
from urllib.parse import urlencode, urlsplit

import numpy as np
from fastapi import APIRouter, Depends, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import HTMLResponse, Response

from engine import PRESETS, STAGES, SpecError
from engine.spec import MAIN_TENSOR, Spec

from ..lab import Lab, get_lab, request_key
from ..render import stages
from ..render.arrays import to_numpy
from ..render.cells import SWATCHES
from ..render.heatmap import data_uri
from ..render.stages import SideSpec
from ..schemas import AttentionRequest, FieldError, head_within
from ..web.page import language, serve
from ..web.share import MAX_QR_CHARS, public_base, qr_svg, unreachable
from ..web.state import DEPENDS, lab_like, url_fields
from .view import (
    ColourBar,
    CompareAsk,
    Compared,
    ComparedCells,
    ComparedMaps,
    Comparison,
    DifferenceBar,
    DifferenceMap,
    HeatSide,
    LabQuery,
    LabView,
    LongView,
    axis_labels,
    axis_tokens,
    colour_ticks,
    difference_ticks,
    heat_mode,
    large_context,
    on_screen,
    sig,
    stage_fields,
    step_links,
)

router = APIRouter(include_in_schema=False)

API_KEYS = url_fields(AttentionRequest)
HIDEABLE = ("controls", "nav", "formula", "explain", "notice", "checks")
SCALE_CYCLE = {"sqrt_dk": "none", "none": "dk", "dk": "sqrt_dk"}
COMPARE_PAIRS: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "mask": ({"mask": "none"}, {"mask": "causal"}),
    "scale": ({"scale": "sqrt_dk"}, {"scale": "none"}),
    "leak": ({"mask": "causal", "segment_ids": []}, {"mask": "document"}),  # boundaries ignored vs blocked
}


async def long_view(
    req: AttentionRequest, state: LabQuery, lab: Lab, progress: str, ctx: dict[str, Any]
) -> LabView | None:
    """A pretrained model's text past a whole trace's length, within MAX_LONG_TOKENS (templates/_long.html): the
    large view of its lazy trace (engine/long.py), which computes what the page shows and no more (the layers below
    once, then one head's matrix, the window's rows), with the stage, head and layer pickers and the model view of
    the same text. None when the whole trace was refused for another reason: its error stands."""
    if req.preset not in lab.models:
        return None
    spec = await lab.spec(req, lab.long_limits)  # past MAX_LONG_TOKENS too: says so
    if spec.n_tokens <= lab.limits.max_tokens:
        return None
    key, head = state.stage, head_within(state.head, spec.n_heads)
    lt, _ = await lab.compute(*lab.long_work(spec), progress=progress)  # the layers below, reported as they run
    a = await run_in_threadpool(lambda: to_numpy(lt.matrix(MAIN_TENSOR[key], head)))
    model = lab.models[spec.preset]
    large = large_context(lt, key, head, state, a)
    r0, r1, c0, c1 = large.tile_range
    model_url = None
    if getattr(model, "one_pass_view", False):  # the model view reads every layer of a long text in one pass
        seq = {"text": state.get("text")} if state.get("text") else {"token_ids": ",".join(map(str, spec.token_ids))}
        model_url = "/model?" + urlencode({"preset": spec.preset, **seq, "lang": ctx["lang"]})
    n_layer = model.info.n_layer
    return LabView(
        **on_screen(spec, key, head),
        **step_links(state, key, spec.n_heads),
        large=large,
        formula=stages.REGISTRY[key].formula(lt),
        explain=str(ctx["t"](stages.REGISTRY[key].explain(lt))),
        # The page's JSON twin: the window's exact numbers, as the table shows them.
        json_url=large.window_api + f"&row={r0}&col={c0}&rows={r1 - r0 + 1}&cols={c1 - c0 + 1}",
        long=LongView(
            max_tokens=lab.limits.max_tokens,
            n_layer=n_layer,
            layer_fields=[(k, v) for k, v in state.params.items() if k not in ("layer", "tile")],
            prev_layer=state.url(layer=spec.layer - 1, tile=None) if spec.layer > 0 else None,
            next_layer=state.url(layer=spec.layer + 1, tile=None) if spec.layer + 1 < n_layer else None,
            model_url=model_url,
        ),
        lesson=ctx["lesson_panel"],
        **switches(state, spec),
    )


def switches(state: LabQuery, spec: Spec) -> dict[str, Any]:
    """The lab's switches under the step bar, the same for a whole trace and a long text's lazy one: the causal mask
    on or off and the scale cycled (each closes an open cell), hints, presenter mode."""
    mask_on = spec.mask == "causal"
    return {
        "mask_on": mask_on,
        "hints": state.hints,
        "mask_toggle_url": state.url(mask="none" if mask_on else "causal", cell=None),
        "scale_toggle_url": state.url(scale=SCALE_CYCLE[spec.scale], cell=None),
        "present_url": state.url(present=None if state.present else "1"),
        "hints_url": state.url(hints=None if not state.hints else "off"),
    }


def lab_query(request: Request, lab: Annotated[Lab, Depends(get_lab)]) -> LabQuery:
    """The lab's query (the same at /embed): a lab-like page's, its custom mask started (`custom_mask_start`)."""
    path = request.url.path
    state = lab_like(LabQuery.of(request.query_params, path, API_KEYS), lab.models, language(request))
    custom_mask_start(state)  # the query is final before the page is looked up or built
    return state


@router.get("/", response_class=HTMLResponse)
@router.get("/embed", response_class=HTMLResponse, name="embed_page")
async def lab_page(
    request: Request, lab: Annotated[Lab, Depends(get_lab)], state: Annotated[LabQuery, Depends(lab_query)]
) -> Response:
    """The lab; at /embed one view without the page's chrome, for course pages: the same parameters, plus `hide=`."""
    present, embed = state.present, request.url.path.endswith("/embed")
    hide = {h for h in state.get("hide").split(",") if h in HIDEABLE} | ({"controls"} if present else set())
    if not state.hints:  # what to notice and the lesson's answer stay hidden until the teacher shows them
        hide |= {"notice"}
    # Presenter mode shows the students' address: the cache keys by it, never by the raw Host header alone.
    base = public_base(str(request.base_url), lab.settings.public_url) if present else None
    build = functools.partial(lab_view, state, lab, base, request_key(request))
    return await serve(request, "lab.html", state, build, shows=base or "", present=present, embedded=embed,
                       hide=hide, stages=STAGES, presets=[*PRESETS, *lab.models], models=lab.models,
                       svg_base="/api/v1/attention/heatmap.svg")  # fmt: skip


def custom_mask_start(state: LabQuery) -> None:
    """Choosing "custom" in the form starts from a mask that hides nothing, ready to be edited cell by cell."""
    if state.get("mask") == "custom" and not state.get("mask_matrix") and state.get("preset", "toy") in PRESETS:
        n = len(state.get("tokens").split()) or len(PRESETS[state.get("preset", "toy")].tokens)
        state.params["mask_matrix"] = json.dumps([[1] * n] * n, separators=(",", ":"))


async def lab_view(state: LabQuery, lab: Lab, student_base: str | None, progress: str, ctx: dict[str, Any]) -> LabView:
    """What the lab shows for `state`: the page's View (its JSON face is the page's `.json` twin)."""
    t = ctx["t"]
    req = state.request(AttentionRequest)
    try:
        spec = await lab.spec(req)  # a model's tokenizer off the event loop (its first use loads it)
    except SpecError:
        if (long := await long_view(req, state, lab, progress, ctx)) is not None:
            return long  # too long to trace whole: the view that computes only what it shows
        raise
    # A malformed stage, head, cell or tile was the request's error, before any computing (`check`).
    key, head = state.stage, head_within(state.head, spec.n_heads)
    trace, _ = await lab.trace(spec)
    shown = stage_fields(trace, key, head, state, t)
    if not shown["small"] and ctx.get("html") and lab.ahead is not None:
        lab.ahead.schedule(trace, state, key)  # the class's next steps, drawn in the background
    return LabView(
        **shown,
        compare=await compare_view(state, req, spec, lab, head, key),
        ids_text=ids_text(lab, spec) if req.token_ids is not None else None,
        lesson=ctx["lesson_panel"],
        **switches(state, spec),
        **(share(state, student_base, lab) if state.present and student_base is not None else {}),
        json_url="/api/v1/attention?" + state.api_query(),
        npz_url="/api/v1/attention.npz?" + state.api_query(),
        real_model_url=state.url(preset="smollm2", text=" ".join(spec.tokens), tokens=None, d_model=None, n_heads=None)
        if "smollm2" in lab.models
        else None,
        # An open cell belongs to its stage's matrices: another stage's or head's link closes it (keeping it would
        # put arithmetic about numbers no longer on screen under a matrix it is not from).
        **step_links(state, key, spec.n_heads, drop=("cell",)),
        compare_urls={
            k: state.url(compare=k, cell=None)
            for k in ("mask", "scale", *(("leak",) if spec.mask == "document" else ()), "text")
        },
        compare_close_url=state.url(compare=None, compare_text=None),
    )


def ids_text(lab: Lab, spec: Spec) -> str:
    """What a view's token ids spell, for the text box beside them (the form says the ids are what is shown)."""
    model = lab.models[spec.preset]
    return str(model.tokenizer().decode(list(spec.token_ids))) if model.has_tokenizer else ""


def share(state: LabQuery, student_base: str, lab: Lab) -> dict[str, Any]:
    """Presenter mode's address for students: the view itself, without presenter mode. A QR code holds ~2,300
    bytes at this error level; past a bound the screen shows the address alone. Under the code the screen prints
    the server's short address (the whole view is in the QR, not on the wall)."""
    student = student_base + state.pinned(present=None)  # its tokens named: a phone in another language, same numbers
    host = urlsplit(student).hostname or ""
    return {
        "qr": qr_svg(student) if len(student) <= MAX_QR_CHARS else None,
        "student_url": student,
        "student_host": urlsplit(student).netloc,
        "share_loopback": unreachable(host, lab.settings.bind_host, lab.settings.public_url),
    }


async def compare_view(
    state: LabQuery, req: AttentionRequest, spec: Any, lab: Lab, head: int, key: str
) -> Comparison | None:
    """Compare: one trace under two settings (mask, scale, document boundaries), or two prompts under the same
    settings (`compare=text`, the second in `compare_text`), side by side with the cells that differ outlined. A
    short text compares cell by cell; a longer one as two heat maps and a map of where they differ."""
    kind = state.compare
    if kind not in (*COMPARE_PAIRS, "text") or (kind == "leak" and spec.mask != "document"):
        return None
    if kind == "text":
        other_text = state.compare_text
        if not other_text:
            return CompareAsk(kind)  # the page asks for the second prompt
        sequence = "text" if req.preset in lab.models else "tokens"
        changes: tuple[dict[str, Any], ...] = ({}, {sequence: other_text, "token_ids": None})
    elif kind == "mask" and spec.mask not in ("none", "causal"):  # none against the mask chosen, not the causal one
        changes = ({"mask": "none"}, {"mask": spec.mask})
    else:
        changes = COMPARE_PAIRS[kind]
    traces, queries = [], []
    for change in changes:
        mask_kind = change.get("mask", spec.mask)
        unused: dict[str, Any] = {
            k: ([] if k in ("pad_positions", "segment_ids") else None)
            for k, (field, value) in DEPENDS.items()
            if field == "mask" and value != mask_kind
        }
        other = req.model_copy(update=unused | change)
        try:
            other_spec = await lab.spec(other)
        except SpecError as e:  # the second prompt's fault is the second prompt's field
            if kind != "text" or not change:
                raise
            raise FieldError("compare_text", e.message) from None
        traces.append((await lab.trace(other_spec))[0])
        url_change = {k: (None if v in ([], None) else v) for k, v in (unused | change).items()}
        queries.append(state.api_query(**url_change))
    return await run_in_threadpool(compared_view, kind, traces, queries, head, key, state.color)


AXIS_LABELS = 16  # labels along each axis of a comparison's heat maps, at most (they are 384 px or less)
MARKS = 3  # where two prompts' tokens start to differ: labelled on the maps' axes, the first so many
COMPARE_TOL = 1e-5  # |Δ| below this (times the scores' scale) is float rounding between two computations


def compared_view(kind: str, traces: list[Any], queries: list[str], head: int, key: str,
                  color: str = "") -> ComparedCells | ComparedMaps:  # fmt: skip
    """The two sides and where they differ: a short text cell by cell (the cells outlined), a longer one as two heat
    maps and the map of where they differ (a data: PNG), each with its axes (queries down, keys across, labelled
    sparsely) and its colour bar (ticks from the matrix it shows); the counts, and for two prompts the tokens they
    share first (under the causal mask, rows of the shared prefix read the same keys). `color` is the page's colour
    mode for heat maps (log for weights and linear for S′ by default)."""
    name, a = stages.compared(traces[0], head, key)
    _, b = stages.compared(traces[1], head, key)
    finite = np.concatenate([a[np.isfinite(a)].ravel(), b[np.isfinite(b)].ravel()])
    bound = float(np.abs(finite).max()) if finite.size else 0.0
    tol = COMPARE_TOL * (max(1.0, bound) if name == "masked" else 1.0)
    # Where the two sides differ, over the cells both have: the cells past the tolerance and their query rows (under
    # a causal mask, two prompts sharing a prefix agree on every row of it).
    d = stages.difference(a, b)
    hit = d > tol
    rows_hit = np.flatnonzero(hit.any(axis=1))
    first = int(rows_hit[0]) if rows_hit.size else None
    ta, tb = (t.spec.token_ids or t.spec.tokens for t in traces)
    apart = {i for i, (x, y) in enumerate(zip(ta, tb, strict=False)) if x != y}  # where two prompts' tokens differ
    shared = min(apart, default=min(len(ta), len(tb)))
    counts = Compared(
        kind=kind,
        tensor=name,
        tol=tol,
        tol_text=sig(tol),
        shared=shared,
        sizes=(traces[0].spec.n_tokens, traces[1].spec.n_tokens),
        first_changed_token=None if first is None else traces[1].spec.tokens[first],
        changed=int(hit.sum()),
        max_abs_diff=float(d[np.isfinite(d)].max(initial=0.0)),
        masked_differently=int(np.isinf(d).sum()),
        first_changed_row=first,
        rows_changed=int(rows_hit.size),
        overlap=(d.shape[0], d.shape[1]),
    )
    if all(t.spec.n_tokens <= stages.SMALL_TOKENS for t in traces):
        cells = []
        for t in traces:  # the outline at each side's own size (two prompts may differ in length)
            n_keys = len(t.spec.kv_tokens) or t.spec.n_tokens
            mine = np.zeros((t.spec.n_tokens, n_keys), dtype=bool)
            mine[: hit.shape[0], : hit.shape[1]] = hit
            cells.append(stages.compare_side(t, head, key, mine))
        return ComparedCells(**vars(counts), sides=(cells[0], cells[1]))
    mode = heat_mode(color, name)
    scale = "sequential" if name == "weights" else "diverging"
    stage = "softmax" if name == "weights" else "mask"  # the tensor compared, whatever the stage on screen
    # Labelled on every map's axes whatever the k-th labels: for two prompts where their tokens start to differ
    # (each run of differing tokens, the first few), otherwise the first query row that differs.
    if kind == "text":
        row_marks = col_marks = sorted(i for i in apart if i - 1 not in apart)[:MARKS]
    else:
        row_marks, col_marks = ([] if first is None else [first]), []
    maps = []
    for t, q, m in zip(traces, queries, (a, b), strict=True):
        finite = m[np.isfinite(m)]
        keys = list(t.spec.kv_tokens) or list(t.spec.tokens)
        maps.append(HeatSide(
            spec=SideSpec.of(t),
            n_tokens=t.spec.n_tokens,
            heatmap=f"/api/v1/attention/heatmap.png?{q}&"
            + urlencode({"stage": stage, "head": head, "size": 384, "color": mode}),
            row_axis=axis_labels(axis_tokens(t.spec.tokens), AXIS_LABELS, row_marks),
            col_axis=axis_labels(axis_tokens(keys), AXIS_LABELS, col_marks),
            row_marks=row_marks,
            col_marks=col_marks,
            colorbar=ColourBar(scale, mode, SWATCHES[scale],
                               colour_ticks(scale, mode, float(np.abs(finite).max()) if finite.size else 0.0)),
        ))  # fmt: skip
    top = stages.difference_top(d, tol)
    r, c = d.shape

    def both(sides: list[list[str]], n: int) -> list[str]:
        """One label per position of the overlap: "cat", or "cat/dog" where the two runs differ."""
        pairs = zip(sides[0][:n], sides[1][:n], strict=True)
        return [x if x == y else f"{x.strip() or x}/{y.strip() or y}" for x, y in pairs]

    rows = both([list(t.spec.tokens) for t in traces], r)
    cols = both([list(t.spec.kv_tokens) or list(t.spec.tokens) for t in traces], c)
    difference_map = DifferenceMap(
        row_axis=axis_labels(axis_tokens(rows), AXIS_LABELS, row_marks),
        col_axis=axis_labels(axis_tokens(cols), AXIS_LABELS, col_marks),
        row_marks=row_marks,
        col_marks=col_marks,
        colorbar=DifferenceBar("sequential", "log", SWATCHES["sequential"], difference_ticks(top, tol),
                               max=top or 0.0,
                               floor_is_tol=top is not None and stages.difference_floor(top, tol) == tol),
    )  # fmt: skip
    png = stages.difference_png(d, tol, 384)
    return ComparedMaps(**vars(counts), sides=(maps[0], maps[1]), difference=difference_map, diff_src=data_uri(png))
