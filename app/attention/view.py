"""The lab page's View of one trace: small traces cell by cell (with the arithmetic of one cell and the editable
mask), large ones as heat maps with a tile inspector, a long pretrained text as its lazy trace's heat map and window;
presenter mode's QR code. `LabView` is what the page shows; its JSON face is the page's `.json` twin."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import astuple, dataclass
from typing import Annotated, Any, Self

import numpy as np
from pydantic import AliasChoices, Discriminator, Field, InstanceOf, Tag

from engine.attention import Trace
from engine.long import LongTrace
from engine.spec import MAIN_TENSOR, PRESETS, STAGES, Spec

from ..render import stages
from ..render.arrays import to_numpy
from ..render.cells import SWATCHES, MatrixView, RowStats, matrix_view, row_stats, short
from ..render.heatmap import COLOR_MODES
from ..render.stages import Arithmetic, CellSide, Checks, SideSpec
from ..web.lessons import Panel
from ..web.share import QR
from ..web.state import CellField, Digits, PageQuery, Stage, TileField
from ..web.tensors import KEY_AXIS, Colour
from ..web.view import HIDDEN, StageView

TILE = 16

# The view parameters of the attention pages (the lab and /embed, /sinks, /tiles): what each page's URL carries
# besides the request's fields, typed and read once (app/web/state.py `PageQuery`).


class LabQuery(PageQuery):
    """The lab's view: the stage on screen, the head, an open cell (`tensor.head.row.col`), the large view's tile
    (`row,col`), a comparison (`compare=mask|scale|leak|text`, the second prompt in `compare_text`), the heat
    maps' colour mode and the parts of an embedded view to hide. `step` is an older spelling of `lesson_step`."""

    stage: Stage(STAGES) = STAGES[0]  # type: ignore[valid-type]
    head: Digits(None) = 0  # type: ignore[valid-type]  # checked against the trace's heads once it is known
    compare: str = ""
    compare_text: str = ""
    cell: CellField = None
    tile: TileField = (0, 0)
    color: Colour = ""
    hide: str = ""
    lesson_step: Digits(1) | None = Field(None, validation_alias=AliasChoices("lesson_step", "step"))  # type: ignore[valid-type]


class SinksQuery(PageQuery):
    """/sinks: the head whose sink share is drawn."""

    head: Digits(None) = 0  # type: ignore[valid-type]


class TilesQuery(PageQuery):
    """/tiles: the query block and the key block of the walk-through (the key block's default is the first that
    does something, known once the schedule is computed)."""

    qb: Digits(None) = 0  # type: ignore[valid-type]
    kb: Digits(None) | None = None  # type: ignore[valid-type]


@dataclass(frozen=True)
class ColourBar:
    """A heat map's colour bar (templates/_heat.html `colorbar`): its scale, colour mode, swatches and ticks."""

    scale: str
    mode: str
    swatches: list[str]
    ticks: list[str]


@dataclass(frozen=True)
class DifferenceBar(ColourBar):
    """The difference map's colour bar: also the |Δ| its brightest end stands for (`max`) and whether its darkest
    end is the tolerance (`floor_is_tol`)."""

    max: float
    floor_is_tol: bool


@dataclass(frozen=True)
class HeatSide:
    """One side of a longer comparison: its heat map's URL between labelled axes (the positions where the two runs
    differ marked), and its colour bar."""

    spec: SideSpec
    n_tokens: int
    heatmap: str
    row_axis: list[str]
    col_axis: list[str]
    row_marks: list[int]
    col_marks: list[int]
    colorbar: ColourBar


@dataclass(frozen=True)
class DifferenceMap:
    """The map of where a longer comparison's two sides differ (the picture is ComparedMaps' `diff_src`): its
    axes over the cells both sides have and its colour bar."""

    row_axis: list[str]
    col_axis: list[str]
    row_marks: list[int]
    col_marks: list[int]
    colorbar: DifferenceBar


@dataclass(frozen=True)
class CompareAsk:
    """A comparison of two prompts before the second is given: the page asks for it."""

    kind: str
    sides: tuple[()] = ()
    changed: int = 0
    ask: bool = True


@dataclass(frozen=True)
class Compared:
    """What two sides of a comparison share (app/attention/page.py `compared_view`): the tensor compared ("masked"
    or "weights"), the tolerance, the tokens the two prompts share first, each side's size, and where they differ
    over the cells both have (`overlap`, rows and columns; render/stages.py `difference`): the cells past the tolerance
    (a cell masked on one side only among them), the largest |Δ| of the rest, the first query row that changes and
    its token, and how many rows change."""

    kind: str
    tensor: str
    tol: float
    tol_text: str
    shared: int
    sizes: tuple[int, int]
    first_changed_token: str | None
    changed: int
    max_abs_diff: float
    masked_differently: int
    first_changed_row: int | None
    rows_changed: int
    overlap: tuple[int, int]


@dataclass(frozen=True)
class ComparedCells(Compared):
    """A short comparison: each side cell by cell."""

    sides: tuple[CellSide, CellSide]


@dataclass(frozen=True)
class ComparedMaps(Compared):
    """A longer comparison: each side's heat map and the map of where they differ (a data: PNG, on the page only)."""

    sides: tuple[HeatSide, HeatSide]
    difference: DifferenceMap
    large: bool = True
    diff_src: Annotated[str, HIDDEN] = ""


def comparison_kind(data: Any) -> str:
    """Which comparison `data` is (read from its JSON face, or as it is): asking for the second prompt, as heat maps,
    or cell by cell."""
    if isinstance(data, dict):
        return "ask" if data.get("ask") else "maps" if data.get("large") else "cells"
    return "ask" if isinstance(data, CompareAsk) else "maps" if isinstance(data, ComparedMaps) else "cells"


Comparison = Annotated[
    Annotated[CompareAsk, Tag("ask")] | Annotated[ComparedCells, Tag("cells")] | Annotated[ComparedMaps, Tag("maps")],
    Discriminator(comparison_kind),
]


@dataclass(frozen=True)
class LargeView:
    """The heat map of one head's matrix and a 16 × 16 window of it (`large_context`, templates/_heat.html): every
    head's thumbnail (head, picture, link), the zoomed map's picture, colour mode and bar, axes and size, the
    window's exact numbers, its place (`tile_range`: first and last row, first and last column), its moves and,
    for the weights, its rows' statistics."""

    tensor: str
    thumbs: list[tuple[int, str, str]]
    zoom_src: str
    color: str
    color_urls: list[tuple[str, str]]
    ticks: list[str]
    swatches: list[str]
    row_axis: list[str]
    col_axis: list[str]
    tall: bool
    width: int
    height: int
    tile_url: str
    window_api: str
    n_rows: int
    n_cols: int
    col_labels: list[str]
    tile: MatrixView
    tile_range: tuple[int, int, int, int]
    moves: dict[str, str | None]
    tile_stats: list[tuple[str, RowStats]] | None
    scale_kind: str


@dataclass(frozen=True)
class LongView:
    """A long text's own part of the lab (templates/_long.html): the whole-trace limit it is past, the layer
    pickers (the form's other fields, the neighbouring layers' links) and the model view of the same text."""

    max_tokens: int
    n_layer: int
    layer_fields: list[tuple[str, str]]
    prev_layer: str | None
    next_layer: str | None
    model_url: str | None


class LabView(StageView):
    """One stage of one trace, as the lab shows it. Small traces carry their matrices cell by cell (`matrices`,
    `weight_matrices`, `stats`, `arithmetic`, `compare`); large ones a heat map with a window (`large`); a long
    pretrained text adds its layer pickers (`long`). Links are URLs of the same page with one thing changed."""

    template = "lab.html"
    kind = "lab"
    own_present_toggle = True

    spec: InstanceOf[Spec] | None = Field(None, exclude=True)  # the template's; the JSON face has its `summary`
    formula: str = ""  # MathML
    explain: str = ""
    notice: str = ""
    checks: Checks | None = None
    unknown_tokens: int = 0
    ids_text: str | None = None  # a view given token ids (a head opened from /model): the text they spell
    random_weights: bool = False
    matrices: list[MatrixView] | None = None
    weight_matrices: list[MatrixView] | None = None
    stats: list[RowStats] | None = None
    arithmetic: Arithmetic | None = None
    selected: tuple[str, int, int, int] | None = None
    compare: Comparison | None = None
    large: LargeView | None = None
    long: LongView | None = None
    lesson: Panel | None = None
    hints: bool = True
    mask_on: bool = False
    # Presenter mode: the address students open (its QR code is drawn from it).
    student_url: str | None = None
    student_host: str | None = None
    share_loopback: bool = False
    qr: InstanceOf[QR] | None = Field(None, exclude=True)
    # Links.
    json_url: str | None = None
    npz_url: str | None = None
    real_model_url: str | None = None
    prev_url: str | None = None
    next_url: str | None = None
    stage_urls: list[tuple[str, str]] | None = None
    head_urls: list[tuple[int, str]] | None = None
    mask_toggle_url: str | None = None
    scale_toggle_url: str | None = None
    compare_urls: dict[str, str] | None = None
    compare_close_url: str | None = None
    present_url: str | None = None
    hints_url: str | None = None

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Self:
        """The View again from the page's JSON face (`attention_lab.Client`), its large window drawable as on the
        page (its links and place, as large_context makes them)."""
        view = super().from_json(data)
        if view.large is not None:
            window_tile(view.large.tile, view.large.tile_range)
        return view


def edit_url(state: LabQuery, allow: np.ndarray, r: int, c: int) -> str:
    """The lab URL with cell (r, c) of the mask flipped: the mask becomes custom."""
    flipped = allow.copy()
    flipped[r, c] = 1 - flipped[r, c]
    return state.url(mask="custom", mask_matrix=json.dumps(flipped.tolist(), separators=(",", ":")), cell=None)


def small_context(trace: Trace, key: str, head: int, state: LabQuery, t: Any) -> dict[str, Any]:
    ctx: dict[str, Any] = {
        "matrices": stages.matrices(trace, key, head),
        "weight_matrices": stages.weight_matrices(trace, key),
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
    cell = state.cell
    if cell:
        ctx["arithmetic"] = stages.arithmetic(trace, cell.tensor, cell.head, cell.row, cell.col, t)
        ctx["selected"] = astuple(cell)
    return ctx


def stage_fields(trace: Trace, key: str, head: int, state: LabQuery, t: Any) -> dict[str, Any]:
    """What one stage of a whole trace shows, links aside: the LabView's fields that come from the numbers. The
    page adds its links and switches; a notebook (`attention_lab.trace`) shows these alone."""
    spec = trace.spec
    small = stages.is_small(trace, key)
    shown = small_context(trace, key, head, state, t) if small else {"large": large_context(trace, key, head, state)}
    return (
        shown
        | stages.present(trace, key, t)
        | on_screen(spec, key, head)
        | {
            "small": small,
            "checks": trace.check_values(),
            "unknown_tokens": sum(tok == "[UNK]" for tok in spec.tokens),
            "random_weights": spec.preset in PRESETS,
        }
    )


def on_screen(spec: Spec, key: str, head: int) -> dict[str, Any]:
    """Which stage of which text a LabView shows: the spec (the JSON face has its summary), the tokens, the stage
    and its number, the head."""
    return {"spec": spec, "summary": spec.summary(), "tokens": spec.tokens, "key": key,
            "index": STAGES.index(key) + 1, "head": head}  # fmt: skip


def step_links(state: LabQuery, key: str, n_heads: int, drop: tuple[str, ...] = ()) -> dict[str, Any]:
    """The step bar's links: the stage before and after `key`, every stage and every head. A link to another stage
    or to a head also drops the parameters named in `drop` (the lab's open cell)."""
    close = dict.fromkeys(drop)

    def to(stage: str) -> str:
        return state.url(stage=stage) if stage == key else state.url(stage=stage, **close)

    index = STAGES.index(key)
    return {
        "prev_url": to(STAGES[index - 1]) if index > 0 else None,
        "next_url": to(STAGES[index + 1]) if index + 1 < len(STAGES) else None,
        "stage_urls": [(s, to(s)) for s in STAGES],
        "head_urls": [(h, state.url(head=h, **close)) for h in range(n_heads)],
    }


def axis_labels(labels: list[str], most: int = 32, marks: Iterable[int] = ()) -> list[str]:
    """One entry per row (or column) of the map, in order: every k-th label shown (at most `most`), the rest empty,
    so equal flex items line up with the image's rows without any inline style. A label is its index and its text
    ("3: cat") where only some are shown, its index alone where the text is the index (a dimension, not a token).
    The positions in `marks` (where two runs first differ) are always labelled, and a k-th label nearer one than k
    is left out (no two labels closer than the k-th ones)."""
    n = len(labels)
    step = max(1, math.ceil(n / most))
    marked = {i for i in marks if 0 <= i < n}
    near = {j for i in marked for j in range(i - step + 1, i + step)}
    shown = {i for i in range(0, n, step) if i not in near} | marked

    def label(i: int) -> str:
        return labels[i] if step == 1 or labels[i] == str(i) else f"{i}: {labels[i]}"

    return [label(i) if i in shown else "" for i in range(n)]


COLOR_TICKS = {
    ("sequential", "linear"): ["0", "0.5", "1"],
    ("sequential", "log"): ["10⁻⁴", "10⁻²", "1"],
    ("sequential", "row"): ["0", "½ row max", "row max"],
    ("diverging", "linear"): None,
    ("diverging", "log"): ["−max", "0", "+max (log)"],
    ("diverging", "row"): ["−row max", "0", "+row max"],
}


def colour_ticks(scale: str, mode: str, bound: float) -> list[str]:
    """A heat map's colour bar: its ticks for `scale` drawn in `mode`; a linear diverging map runs over ±`bound`,
    the largest |value| of the matrix it shows (app/render/heatmap.py `png`)."""
    return COLOR_TICKS[(scale, mode)] or [short(-bound), "0", short(bound)]


SUPERSCRIPT = str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹")


def sig(v: float) -> str:
    """A value of any size in three significant digits, a tiny one as 8.73×10⁻⁵; a printed minus sign."""
    if v == 0:
        return "0"
    if 1e-3 <= abs(v) < 1e4:
        text = f"{v:.3g}"
    else:
        mantissa, _, exp = f"{v:.2e}".partition("e")
        text = f"{float(mantissa):g}×10{str(int(exp)).translate(SUPERSCRIPT)}"
    return text.replace("-", "−")


def difference_ticks(top: float | None, tol: float = 0.0) -> list[str]:
    """The difference map's colour bar (app/render/stages.py `difference_png`): log |Δ| from its floor (10⁻⁴ of the
    largest, or the tolerance `tol` where that is larger: what is below it is not counted; and less, 0 included)
    through the floor's and the top's geometric middle to the largest, `top`; a single 0 when nothing differs (the
    map is all the darkest)."""
    if top is None:
        return ["0"]
    floor = stages.difference_floor(top, tol)
    return ["≤ " + sig(floor), sig(math.sqrt(floor * top)), sig(top)]


def axis_tokens(labels: list[str] | tuple[str, ...], width: int = 12) -> list[str]:
    """Tokens as a heat map's axis labels (`axis_labels`), each cut to `width` characters."""
    return [x if len(x) <= width else x[: width - 1] + "…" for x in labels]


HEATMAP_PATH = "/api/v1/attention/heatmap.png"
THUMB = 96  # pixels: each head's thumbnail


def heat_mode(color: str, tensor: str) -> str:
    """The colour mode a heat map of `tensor` is drawn in: `color` (the URL's), else log for weights (near-uniform
    attention over many keys is one flat colour on a linear 0-1 scale) and linear for the rest."""
    return color or ("log" if tensor == "weights" else "linear")  # checked as the query was read (`Colour`)


def zoom_size(n_rows: int) -> int:
    """The zoomed head's longer side in pixels."""
    return min(768, max(256, n_rows))


def heatmap_query(state: LabQuery, key: str, head: int, size: int, mode: str) -> str:
    """The query of one heat map of this trace: the same string for the page's <img> and the server's drawing
    ahead (app/attention/ahead.py), so what was drawn ahead is what the browser asks for."""
    return state.api_query(stage=key, head=head, size=size, color=mode)


def window_tile(tile: MatrixView, tile_range: tuple[int, int, int, int]) -> MatrixView:
    """`tile` as the large view's window: its cells are read by the inspector, not opened, and know their place in
    the matrix (`tile_range`: first and last row, first and last column)."""
    tile.links = False
    tile.extra = {"row0": str(tile_range[0]), "col0": str(tile_range[2])}
    return tile


def large_context(trace: Trace | LongTrace, key: str, head: int, state: LabQuery, a: Any = None) -> LargeView:
    """The heat map of one head's matrix of stage `key` and a 16 × 16 window of it (templates/_heat.html). `a` is
    that matrix when the caller computed it (a long context's lazy trace); by default it is read from the trace."""
    spec = trace.spec
    tensor = MAIN_TENSOR[key]
    scale = stages.REGISTRY[key].scale  # the main tensor's colour scale: weights sequential, the rest diverging
    mode = heat_mode(state.color, tensor)
    if a is None:
        a = to_numpy(getattr(getattr(trace, key), tensor)[head])  # (N, N) or (N, d_k)
    finite = a[np.isfinite(a)]
    bound = float(np.abs(finite).max()) if finite.size else 0.0
    n_rows, n_cols = a.shape
    r0, c0 = state.tile
    row0 = min(r0, max(0, n_rows - TILE))
    col0 = min(c0, max(0, n_cols - TILE))
    tok = list(spec.tokens)
    keys = list(spec.kv_tokens) or tok
    col_labels = keys if tensor in KEY_AXIS else [f"{j}" for j in range(n_cols)]
    window = a[row0 : row0 + TILE, col0 : col0 + TILE]
    row_labels = [f"{row0 + i}: {tok[row0 + i]}" for i in range(window.shape[0])]
    tile_range = (row0, row0 + window.shape[0] - 1, col0, col0 + window.shape[1] - 1)
    tile = matrix_view(tensor, tensor, window, row_labels, col_labels[col0 : col0 + TILE], "window", scale, head)
    moves = {
        "up": state.url(tile=f"{max(0, row0 - TILE)},{col0}") if row0 > 0 else None,
        "down": state.url(tile=f"{row0 + TILE},{col0}") if row0 + TILE < n_rows else None,
        "left": state.url(tile=f"{row0},{max(0, col0 - TILE)}") if col0 > 0 else None,
        "right": state.url(tile=f"{row0},{col0 + TILE}") if col0 + TILE < n_cols else None,
    }
    stats = list(zip(row_labels, row_stats(a[row0 : row0 + TILE], keys), strict=True)) if tensor == "weights" else None
    size = zoom_size(n_rows)
    # A matrix far taller than wide (q, or a head's output, of many tokens) is drawn 4:1, not one screen wide and
    # many screens tall, and its few columns labelled sparsely; the readout and the click still find the cell.
    tall = n_rows > 2 * n_cols
    width, height = (160, 640) if tall else (640, round(640 * n_rows / n_cols))
    return LargeView(
        tensor=tensor,
        thumbs=[
            (h, HEATMAP_PATH + "?" + heatmap_query(state, key, h, THUMB, mode), state.url(head=h))
            for h in range(spec.n_heads)
        ],
        zoom_src=HEATMAP_PATH + "?" + heatmap_query(state, key, head, size, mode),
        color=mode,
        color_urls=[(m, state.url(color=m)) for m in COLOR_MODES],
        ticks=colour_ticks(scale, mode, bound),
        swatches=SWATCHES[scale],
        row_axis=axis_labels(tok),
        col_axis=axis_labels(col_labels, 8 if tall else 32),
        tall=tall,
        width=width,
        height=height,
        tile_url=state.url(tile="ROW,COL"),
        window_api="/api/v1/attention/window?" + state.api_query(stage=key, tensor=tensor, head=head),
        n_rows=n_rows,
        n_cols=n_cols,
        col_labels=col_labels,
        tile=window_tile(tile, tile_range),
        tile_range=tile_range,
        moves=moves,
        tile_stats=stats,
        scale_kind=scale,
    )
