"""`/lens`, the logit lens: layers × positions, the probability of the model's final prediction read from each
layer; a window of `LENS_WINDOW` positions drawn as cells, the whole text as one picture, so the page stays small
however long the text. It computes through the API's own `lens_of` and its document."""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Any
from urllib.parse import urlencode

import numpy as np
from fastapi import APIRouter
from markupsafe import Markup
from PIL import Image
from pydantic import Field, InstanceOf

from ..lab import Lab
from ..render.heatmap import colourise, data_uri
from ..web.page import page_route
from ..web.state import within
from ..web.view import HIDDEN, View
from .compute import Switched, lens_document, lens_of
from .request import LENS_KEYS, PREDICT_KEYS, LensQuery, LensRequest, api_url, form, read_page, state_of
from .shown import Candidate, bos_first, candidates, index_of, label, switched_words, twin, with_tokens

router = APIRouter(include_in_schema=False)

# The lens shows a window of positions (the JSON twin and the API keep every one): its page stays a few hundred kB
# however long the text, where a cell per layer and position of a 1,000-token text was 140 MB of HTML.
LENS_WINDOW = 32
LENS_WINDOW_PRESENT = 17  # on a projector: a class's sentence whole (16 tokens and the BOS before them), each number
# large enough to read from the back (the type is sized to the screen's height, the side panel beside the table)


@dataclass(frozen=True)
class LensCell:
    p_final: float  # the probability, read from this layer, of the model's final prediction here
    top: tuple[Candidate, ...]
    first: bool = False  # the layer from which the final prediction stays top-1
    top1: bool = False  # the final prediction is top-1 at this layer
    cls: Annotated[str, HIDDEN] = ""
    title: Annotated[str, HIDDEN] = ""  # written for the cells of the page's window only


@dataclass(frozen=True)
class LensWindow:
    """A window of positions the lens's overview map jumps to: `start` … `stop` − 1, numbered as the page numbers
    positions (the first window also holds the BOS before position 0)."""

    start: int
    stop: int
    current: bool = False  # it overlaps the window on the page


# A GET form's hidden fields around one control: those the page's URL writes before it, and those after it.
FormFields = tuple[tuple[tuple[str, str], ...], tuple[tuple[str, str], ...]]


class LensView(View):
    """The logit lens: each layer's residual stream through the final norm and the unembedding; `rows[l][i]` is
    layer l at position i (the probability there of the model's final prediction, and the top tokens); `final`
    the model's prediction at each position and `first_top1` the layer from which it stays the most likely. The
    page draws the cells of one window of positions, `start` … `stop` − 1 (`window_size` at a time, fewer in
    presenter mode); `rows` holds every position."""

    template = "lens.html"
    blocks = ()
    kind = "lens"
    own_present_toggle = True

    preset: str = ""
    text: str = ""
    tokens: tuple[str, ...] = ()
    final: tuple[str, ...] = ()
    first_top1: tuple[int | None, ...] = ()
    n_layer: int = 0
    rows: tuple[tuple[LensCell, ...], ...] = ()
    switches: Switched | None = None
    switched: tuple[str, ...] = ()
    # Side by side: the same text without the switches (when there are any) and where the final prediction changed.
    before_final: tuple[str, ...] = ()
    before_first: tuple[int | None, ...] = ()
    changed: tuple[int, ...] = ()
    changed_note: str = ""
    cell: tuple[int, int] | None = None  # (layer, position) chosen
    cell_title: str = ""
    cell_title_html: InstanceOf[Markup] | None = Field(None, exclude=True)
    cell_top: tuple[Candidate, ...] = ()
    summary: str = ""
    # The window of positions drawn as cells, and the links to the ones before and after it.
    start: int = 0  # columns: the BOS (when `first` = 1) is column 0, position 0 column `first`
    stop: int = 0  # one past the window's last column
    first: int = 0
    window_size: int = LENS_WINDOW
    prev_url: str | None = None
    next_url: str | None = None
    windows: tuple[LensWindow, ...] = Field((), exclude=True)  # the overview's, when there are several
    overview: str = Field("", exclude=True)  # every layer and position as one picture (a PNG data URI)
    cell_form: FormFields = Field(((), ()), exclude=True)  # the state around `cell`
    start_form: FormFields = Field(((), ()), exclude=True)  # the state around `start`
    json_url: str = ""
    twin_url: str = ""
    predict_url: str = ""
    present_url: str = ""
    present: bool = False


# -- /lens ---------------------------------------------------------------------------------------------------------


def settled_by_half(first: Sequence[int | None]) -> int | None:
    """The smallest layer by which at least half of the positions have settled (`first[i]` is the layer from which
    position i's final prediction stays top-1, None where it never does), as the summary says it; None when fewer
    than half ever settle. With an even count this is the lower median: of 8 positions, the 4th to settle."""
    settled = sorted(f for f in first if f is not None)
    need = (len(first) + 1) // 2  # at least half: 4 of 8, 4 of 7
    return settled[need - 1] if 0 < need <= len(settled) else None


def lens_window(state: LensQuery, n: int, chosen: tuple[int, int] | None, first: int = 0) -> tuple[int, int, int]:
    """The window of columns the page draws: from `start` (a parameter: the number of its first position, 0 …; 0
    takes the BOS before it too, `first` = 1), else the window of the chosen cell, else the first; one past its
    last column, and its size (`LENS_WINDOW`, `LENS_WINDOW_PRESENT` in presenter mode)."""
    size = LENS_WINDOW_PRESENT if state.present else LENS_WINDOW
    given = state.start
    start = -1 if given is None else within("start", given, 0, n - 1 - first) + (first if given else 0)
    if start < 0:
        start = chosen[1] // size * size if chosen is not None else 0
    return start, min(n, start + size), size


def form_fields(state: LensQuery, name: str) -> FormFields:
    """The page's state as the hidden fields of a GET form whose control `name` changes one parameter: the fields
    the URL writes before `name` (to go before the control) and those after it, so that the form goes to
    `state.url(name=value)` itself. A form carries a long text once, where a link per cell carried it in each."""
    at = state.page_keys.index(name)
    kept = [k for k in state.page_keys if k in state.params and k != name]
    return (tuple((k, state.params[k]) for k in kept if state.page_keys.index(k) < at),
            tuple((k, state.params[k]) for k in kept if state.page_keys.index(k) > at))  # fmt: skip


def overview_png(p_final: np.ndarray, width: int) -> str:
    """Every layer (rows) and position (columns) of the lens in one picture, a pixel per cell, in the colours of
    its cells (viridis, 0 → 1): a PNG data URI `width` pixels wide, the columns past the text left white so that
    each window of the overview is as wide as the next."""
    rgb = np.full((p_final.shape[0], width, 3), 255, dtype=np.uint8)
    rgb[:, : p_final.shape[1]] = colourise(p_final, "sequential")
    buf = io.BytesIO()
    Image.fromarray(rgb, "RGB").save(buf, "PNG", compress_level=6)
    return data_uri(buf.getvalue())


async def build_lens(state: LensQuery, lab: Lab, key: str, ctx: dict[str, Any]) -> LensView:
    """What /lens shows for `state` (its JSON face is the page's `.json` twin): every layer and position as data,
    the cells of one window of positions on the page."""
    t = ctx["t"]
    req, (text, iv, lens), prompt, _ = await read_page(state, lab, key, ctx, LensRequest, lens_of)
    doc = lens_document(text, iv, lens)
    read = doc.read
    layers = read.p_final
    n_layer, n = len(layers), len(doc.tokens)
    first = read.first_top1
    at0 = bos_first(text.model.bos_id, text.seq)  # the column of position 0: the BOS is shown, not numbered
    cell = state.cell
    chosen = None if cell is None else (within("cell", cell[0], 0, n_layer - 1), index_of("cell", cell[1], at0, n))
    start, stop, size = lens_window(state, n, chosen, at0)
    rows = []
    for li, row in enumerate(layers):
        cells = []
        for i, p in enumerate(row):
            top = candidates(read.top(li, i), read.final_ids[i])
            title = t("lens.cell", layer=li, i=label(i, at0), p=f"{p:.3f}", final=read.final[i],
                      top=", ".join(f"{c.token!r} {c.p:.2f}" for c in top)) if start <= i < stop else ""  # fmt: skip
            cells.append(LensCell(p, top, first[i] == li, bool(top) and top[0].target,
                                  f"sq-{min(10, max(0, round(p * 10)))}", title))  # fmt: skip
        rows.append(tuple(cells))
    cell_top: tuple[Candidate, ...] = ()
    cell_title, cell_title_html = "", None
    if chosen is not None:
        li, i = chosen
        cell_top = rows[li][i].top
        cell_title, cell_title_html = with_tokens(t, "lens.chosen", {"token": doc.tokens[i], "final": read.final[i]},
                                                  layer=li, i=label(i, at0))  # fmt: skip
    windows: tuple[LensWindow, ...] = ()
    overview = ""
    if n > size:  # a text longer than one window: the whole map, each window of it a button
        windows = tuple(LensWindow(max(0, a - at0), min(n, a + size) - at0, a < stop and start < a + size)
                        for a in range(0, n, size))  # numbered as the page numbers positions  # fmt: skip
        if ctx.get("html", True):
            p_final = np.array(layers, dtype=np.float32)
            overview = overview_png(p_final, len(windows) * size)
    settled = sorted(f for f in first if f is not None)
    half = settled_by_half(first)
    summary = t("lens.summary", n=n, layers=n_layer, median="—" if half is None else half,
                earliest=settled[0] if settled else "—")  # fmt: skip
    predict_params = {k: state.get(k) for k in PREDICT_KEYS if state.get(k)} | dict(prompt)
    if state.get("lang"):
        predict_params["lang"] = state.get("lang")
    return LensView(
        preset=doc.preset,
        text=state.get("text") or prompt.get("text", ""),
        tokens=doc.tokens,
        final=read.final,
        first_top1=tuple(first),
        n_layer=n_layer,
        rows=tuple(rows),
        switches=doc.switches,
        switched=switched_words(doc.switches, text.model.arch.n_layer, t),
        before_final=doc.before.final if doc.before else (),
        before_first=doc.before.first_top1 if doc.before else (),
        changed=doc.changed,
        changed_note=t("lens.changed", k=len(doc.changed), n=n) if doc.before else "",
        cell=chosen,
        cell_title=cell_title,
        cell_title_html=cell_title_html,
        cell_top=cell_top,
        summary=summary,
        start=start,
        stop=stop,
        window_size=size,
        prev_url=state.url(start=max(0, start - size - at0)) if start > 0 else None,
        next_url=state.url(start=start + size - at0) if start + size < n else None,
        first=at0,
        windows=windows,
        overview=overview,
        cell_form=form_fields(state, "cell"),
        start_form=form_fields(state, "start"),
        json_url=api_url("/api/v1/logit_lens", req),
        twin_url=twin(state),
        predict_url="/predict?" + urlencode(predict_params),
        present_url=state.url(present=None if state.present else "1"),
        present=state.present,
    )


page_route(router, "/lens", "lens.html", LENS_KEYS, LensQuery, build_lens, form, state_of=state_of)
