"""Figures drawn by matplotlib, for print and slides: heat maps (a title, token labels, a colour bar, the page's
colour scales: viridis for weights, ColorBrewer's RdBu centred at 0 for scores, −∞ hatched grey) and curves, laid out
in one figure with a caption, as SVG (text kept as text), PDF (TrueType embedded: Chinese too) or PNG at 2×.

What a page shows is read into `Heat` and `Curves` panels by app/export/figure.py (from its JSON twin); a single
matrix downloaded from the API (/api/v1/attention/heatmap.svg) is one `Heat` (`heat_svg`). matplotlib is imported
inside `draw` only (the Agg backend, no pyplot): the server starts without it.
"""

from __future__ import annotations

import io
import itertools
import logging
import math
import threading
import warnings
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

FORMATS = {"svg": "image/svg+xml", "pdf": "application/pdf", "png": "image/png"}
PNG_DPI = 200  # 2× matplotlib's default 100 dpi: slides
ANNOTATE_CELLS = 100  # matrices of at most this many cells get their numbers printed in the cells
CJK_FAMILIES = ("WenQuanYi Micro Hei", "Noto Sans CJK SC", "Noto Sans SC", "Source Han Sans SC", "AR PL UMing CN")

AXIS = "export.fig.axis."  # the axes' words in the page's language: the catalogues' export.fig.axis.<word>


def words_of(lang: str) -> dict[str, str]:
    from ..templating import MESSAGES  # the catalogues (read when a figure is drawn)

    return {k.removeprefix(AXIS): v for k, v in MESSAGES.get(lang, MESSAGES["en"]).items() if k.startswith(AXIS)}


class TooLarge(ValueError):
    """A figure past one of the configured bounds; `setting` names the bound."""

    def __init__(self, setting: str, message: str) -> None:
        super().__init__(message)
        self.setting = setting


@dataclass
class Heat:
    title: str
    rows: list[str]
    cols: list[str]
    values: np.ndarray  # float64, NaN where the twin says −∞ (null)
    hatched: np.ndarray  # bool: −∞, or a weight the mask set to 0
    scale: str  # "sequential" (viridis), "diverging" (RdBu at 0) or "plain" (a mask: 0 / −∞)
    bound: float | None = None
    ylabel: str = "query"
    xlabel: str = "key"
    vmax: float | None = None


@dataclass
class Curves:
    title: str
    x: list[str]
    series: list[tuple[str, list[float]]]
    xlabel: str = "position"
    ylabel: str = "p"
    log: bool = False


@dataclass
class Lines:
    """A line chart over a numeric x axis (`charts.Chart`'s data): each series its own xs, log axes in powers of
    two, dashed series dashed, a legend."""

    title: str
    series: list[tuple[str, list[float], list[float], bool]]  # label, xs, ys, dashed
    xlabel: str
    ylabel: str
    xlog: bool = False
    ylog: bool = False


@dataclass
class Figure:
    title: str
    panels: list[Heat | Curves | Lines] = field(default_factory=list)


_LOCK = threading.Lock()  # matplotlib's font cache and rc state are process-wide: one figure at a time


def cjk_font() -> str | None:
    """A CJK font a system package installed (fonts-wqy-microhei, Noto CJK…), as matplotlib's font manager knows
    it; None when there is none (Chinese labels then show as boxes, nothing fails)."""
    from matplotlib import font_manager

    names = {f.name for f in font_manager.fontManager.ttflist}
    return next((n for n in CJK_FAMILIES if n in names), None)


def _reduce(h: Heat, max_cells: int, words: dict[str, str]) -> Heat:
    """A heat map past `max_cells` cells averaged over blocks of k × k cells (hatched where any cell is), its labels
    every k-th: the same picture at a bounded cost."""
    n, m = h.values.shape
    if n * m <= max_cells:
        return h
    k = math.ceil(math.sqrt(n * m / max_cells))
    pn, pm = math.ceil(n / k) * k, math.ceil(m / k) * k
    v = np.full((pn, pm), np.nan)
    v[:n, :m] = np.where(h.hatched, np.nan, h.values)
    hat = np.ones((pn, pm), dtype=bool)
    hat[:n, :m] = h.hatched
    blocks = v.reshape(pn // k, k, pm // k, k)
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        mean = np.nanmean(blocks, axis=(1, 3))
    hatched = hat.reshape(pn // k, k, pm // k, k).all(axis=(1, 3))
    return Heat(f"{h.title} ({words['blocks'].format(k=k)})", h.rows[::k], h.cols[::k], mean, hatched | np.isnan(mean),
                h.scale, h.bound, h.ylabel, h.xlabel, h.vmax)  # fmt: skip


def draw(fig_spec: Figure, fmt: str, caption: str, lang: str = "en", *, max_cells: int = 65536,
         max_panels: int = 12, max_labels: int = 64, metadata: dict[str, str] | None = None,
         inspect: Callable[[Any], None] | None = None) -> bytes:  # fmt: skip
    """The figure as `fmt` bytes (svg, pdf or png). Bounded: at most `max_panels` panels, each heat map reduced to
    at most `max_cells` cells, at most `max_labels` labels per axis (every k-th beyond, fewer where they would
    overlap). `inspect`, when given, sees the laid-out matplotlib figure before it is written (the tests)."""
    if fmt not in FORMATS:
        raise ValueError(f"format must be one of {', '.join(FORMATS)}")
    if len(fig_spec.panels) > max_panels:
        raise TooLarge("figure_max_panels", f"the page shows {len(fig_spec.panels)} figures; the bound is {max_panels}")
    with _LOCK, warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Glyph .* missing from font")  # a control character: a box
        return _draw(fig_spec, fmt, caption, lang, max_cells, max_labels, metadata or {}, inspect)


def _draw(spec: Figure, fmt: str, caption: str, lang: str, max_cells: int, max_labels: int,
          metadata: dict[str, str], inspect: Callable[[Any], None] | None = None) -> bytes:  # fmt: skip
    import matplotlib

    matplotlib.use("Agg", force=False)
    from matplotlib import rc_context
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure as MplFigure

    logging.getLogger("matplotlib.font_manager").setLevel(logging.ERROR)  # "no bold CJK face": the regular one is used
    words = words_of(lang)
    cjk = cjk_font()
    rc: dict[str, Any] = {
        "font.family": ["DejaVu Sans", *([cjk] if cjk else [])],  # matplotlib falls back glyph by glyph
        "svg.fonttype": "none",  # text stays text: the labels are searchable and selectable
        # The SVG's ids (clip paths, hatches) hashed with a fixed salt, not a random one per draw: with no date in
        # the metadata either (`_metadata`), the same figure is the same bytes whenever it is drawn.
        "svg.hashsalt": "attention-lab",
        "pdf.fonttype": 42,  # TrueType embedded (Type 3 cannot hold CJK well)
        "hatch.color": "#8a8a8a",
        "hatch.linewidth": 0.6,
        "axes.titlesize": 10,
        "font.size": 8,
    }
    with rc_context(rc):  # type: ignore[arg-type]
        panels = [_reduce(p, max_cells, words) if isinstance(p, Heat) else p for p in spec.panels]
        n = len(panels)
        ncols = 1 if n == 1 else 2 if n in (2, 4) else 3
        nrows = math.ceil(n / ncols)
        width = 4.2 * ncols + 0.4
        height = 3.9 * nrows + 0.9
        fig = MplFigure(figsize=(width, height), layout="constrained")
        FigureCanvasAgg(fig)
        fig.suptitle(spec.title, fontsize=12, fontweight="bold")
        labelled: list[tuple[Any, str, list[str]]] = []  # the axes whose tick labels are tokens or positions
        cells: list[tuple[Any, int, list[Any]]] = []  # each heat map's axes, its columns, the numbers in its cells
        for i, p in enumerate(panels):
            ax = fig.add_subplot(nrows, ncols, i + 1)
            if isinstance(p, Heat):
                cells.append((ax, p.values.shape[1], _heat(fig, ax, p, words, max_labels)))
                labelled += [(ax, "x", p.cols), (ax, "y", p.rows)]
            elif isinstance(p, Lines):
                _lines(ax, p)
            else:
                _curves(ax, p, words, max_labels)
                labelled.append((ax, "x", p.x))
        if any(isinstance(p, Heat) and p.hatched.any() for p in panels):
            caption = f"{caption} · {words['hatched']}"
        fig.text(0.5, 0.0, caption, ha="center", va="bottom", fontsize=7, color="#444444", wrap=True)
        fig.get_layout_engine().set(h_pad=0.08, rect=(0, 0.05, 1, 0.95))  # type: ignore[union-attr, call-arg]
        _declutter(fig, labelled)
        _fit_cells(fig, cells)
        # The layout _declutter checked is the one written: with an engine, savefig lays the figure out again (at
        # its own dpi, for the same result within a point) in a draw of its own before the draw it writes.
        fig.set_layout_engine(None)
        if inspect is not None:
            inspect(fig)
        buf = io.BytesIO()
        meta = _metadata(fmt, spec.title, caption, metadata)
        fig.savefig(buf, format=fmt, dpi=PNG_DPI if fmt == "png" else 100, metadata=meta)
        return buf.getvalue()


def _metadata(fmt: str, title: str, caption: str, extra: dict[str, str]) -> dict[str, Any]:
    """The file's own metadata; no date (matplotlib writes the time of the draw unless told None, and PNG has none):
    a figure is a function of what it shows, byte for byte, cached or drawn again (`heat_svg` keeps its SVGs)."""
    if fmt == "pdf":
        return {"Title": title, "Subject": caption, "Creator": "Attention Lab (matplotlib)",
                "Keywords": "; ".join(f"{k}={v}" for k, v in extra.items()), "CreationDate": None}  # fmt: skip
    if fmt == "svg":
        return {"Title": title, "Description": caption + "\n" + "\n".join(f"{k}: {v}" for k, v in extra.items()),
                "Creator": "Attention Lab (matplotlib)", "Date": None}  # fmt: skip
    return {"Title": title, "Description": caption, "Software": "Attention Lab (matplotlib)", **extra}


LABEL_GAP_PX = 1.0  # the least room between two neighbouring tick labels' boxes, as drawn
DECLUTTER_ROUNDS = 4


def _declutter(fig: Any, labelled: list[tuple[Any, str, list[str]]]) -> None:
    """Thin the token labels of each axis (every k-th), and turn a crowded key axis's labels upright, until no two
    neighbours' boxes, as matplotlib lays them out, come within LABEL_GAP_PX: a long probe's 65 keys no longer print
    over each other, a short sentence keeps every label. Each round lays the figure out again (the labels' room
    changes the axes' size): the layout engine alone, as a draw would run it first, without drawing every artist;
    the tick labels' boxes follow the axes' new transforms. The figure leaves laid out for its final ticks."""
    engine, renderer = fig.get_layout_engine(), fig.canvas.get_renderer()
    for _ in range(DECLUTTER_ROUNDS):
        engine.execute(fig)
        crowded = False
        for ax, which, labels in labelled:
            texts = [t for t in (ax.get_xticklabels() if which == "x" else ax.get_yticklabels()) if t.get_text()]
            if len(texts) < 2:
                continue
            boxes = [t.get_window_extent(renderer) for t in texts]
            lo, hi = ("x0", "x1") if which == "x" else ("y0", "y1")
            boxes.sort(key=lambda b: getattr(b, lo))
            pitch = (getattr(boxes[-1], lo) - getattr(boxes[0], lo)) / (len(boxes) - 1)
            need = max(getattr(b, hi) - getattr(b, lo) for b in boxes) + LABEL_GAP_PX
            if all(getattr(b, lo) - getattr(a, hi) >= LABEL_GAP_PX for a, b in itertools.pairwise(boxes)):
                continue
            crowded = True
            step = math.ceil(len(labels) / len(texts))
            rotation = texts[0].get_rotation()
            if which == "x" and rotation not in (0, 90):  # upright first: a 60° label's box is wider than its line
                _set_ticks(ax, which, labels, step, 90)
                continue
            _set_ticks(ax, which, labels, max(step + 1, math.ceil(step * need / max(pitch, 1e-6))), rotation)
        if not crowded:
            return
    engine.execute(fig)  # the last round's ticks


CELL_FONT_MIN = 4.5  # points: numbers that would need a smaller font to fit their cells are left out


def _fit_cells(fig: Any, cells: list[tuple[Any, int, list[Any]]]) -> None:
    """Numbers printed in the cells of a wide panel (a 5 × 16 map in a figure of three columns) would run into
    their neighbours at 7 pt: as laid out, each panel's numbers shrink until the widest fits its cell's width, and
    a panel whose numbers would need less than CELL_FONT_MIN points shows none (its colours and colour bar say it).
    Text inside the axes does not move the layout, so the layout `_declutter` checked stays the one written."""
    renderer = fig.canvas.get_renderer()
    for ax, m, texts in cells:
        if not texts:
            continue
        room = 0.9 * ax.get_window_extent(renderer).width / m
        widest = max(t.get_window_extent(renderer).width for t in texts)
        if widest <= room:
            continue
        size = texts[0].get_fontsize() * room / widest
        for t in texts:
            if size < CELL_FONT_MIN:
                t.remove()
            else:
                t.set_fontsize(size)


def _set_ticks(ax: Any, which: str, labels: list[str], step: int, rotation: float = 0) -> None:
    idx = list(range(0, len(labels), step))
    shown = [labels[i] for i in idx]
    if which == "y":
        ax.set_yticks(idx, shown)
    elif rotation in (0, 90):
        ax.set_xticks(idx, shown, rotation=rotation, ha="center", rotation_mode="default")
    else:
        ax.set_xticks(idx, shown, rotation=rotation, ha="right", rotation_mode="anchor")


def _ticks(labels: list[str], max_labels: int) -> tuple[list[int], list[str]]:
    step = max(1, math.ceil(len(labels) / max_labels))
    idx = list(range(0, len(labels), step))
    return idx, [labels[i] for i in idx]


def _heat(fig: Any, ax: Any, h: Heat, words: dict[str, str], max_labels: int) -> list[Any]:
    """Draw `h` on `ax`; returns the numbers printed in its cells (none past ANNOTATE_CELLS), for `_fit_cells`."""
    import matplotlib as mpl
    from matplotlib.colors import Colormap, ListedColormap, Normalize, TwoSlopeNorm
    from matplotlib.patches import Rectangle

    n, m = h.values.shape
    data = np.ma.masked_array(h.values, mask=h.hatched | np.isnan(h.values))
    cmap: Colormap
    if h.scale == "sequential":
        cmap = mpl.colormaps["viridis"]
        finite = data.compressed()
        top = (
            h.vmax if h.vmax is not None else (1.0 if finite.size and finite.max() <= 1 and finite.min() >= 0 else None)
        )
        norm: Normalize = Normalize(vmin=0.0 if top == 1.0 else None, vmax=top)
        if top is None and finite.size:
            norm = Normalize(vmin=float(finite.min()), vmax=float(finite.max()) or 1.0)
    elif h.scale == "plain":  # a mask: 0 where attention may look, −∞ (hatched) where it may not
        cmap = ListedColormap(["#f7f7f7"])
        norm = Normalize(vmin=-1, vmax=1)
    else:
        cmap = mpl.colormaps["RdBu_r"]  # ColorBrewer RdBu, negative blue and positive red as the page
        finite = data.compressed()
        bound = float(h.bound) if h.bound else float(np.abs(finite).max()) if finite.size else 1.0
        bound = bound or 1.0
        norm = TwoSlopeNorm(vcenter=0.0, vmin=-bound, vmax=bound)
    cmap = cmap.with_extremes(bad=(0, 0, 0, 0))  # transparent: the hatched rectangle beneath shows through
    ax.add_patch(Rectangle((-0.5, -0.5), m, n, facecolor="#e3e3e3", hatch="///", edgecolor="#8a8a8a", lw=0,
                           zorder=0))  # fmt: skip
    if n * m <= 64 * 64:  # vector cells
        mesh = ax.pcolormesh(np.arange(m + 1) - 0.5, np.arange(n + 1) - 0.5, data, cmap=cmap, norm=norm,
                             edgecolors="white" if n * m <= ANNOTATE_CELLS else "face", linewidth=0.5, zorder=1)  # fmt: skip
    else:
        mesh = ax.imshow(data, cmap=cmap, norm=norm, interpolation="nearest", aspect="auto", zorder=1)
    ax.set_xlim(-0.5, m - 0.5)
    ax.set_ylim(n - 0.5, -0.5)
    ax.set_title(h.title)
    xi, xl = _ticks(h.cols, max_labels)
    yi, yl = _ticks(h.rows, max_labels)
    ax.set_xticks(xi, xl, rotation=60 if max(map(len, xl), default=0) > 2 else 0, ha="right" if xl else "center",
                  rotation_mode="anchor")  # fmt: skip
    ax.set_yticks(yi, yl)
    ax.set_xlabel(words.get(h.xlabel, h.xlabel))
    ax.set_ylabel(words.get(h.ylabel, h.ylabel))
    ax.tick_params(length=0)
    cells = []
    if n * m <= ANNOTATE_CELLS:
        for i in range(n):
            for j in range(m):
                v = h.values[i, j]
                if np.isnan(v):
                    text, colour = "−∞", "#333333"
                else:
                    text = f"{v:.2f}"
                    r, g, b, _ = cmap(norm(v))
                    colour = "black" if 0.299 * r + 0.587 * g + 0.114 * b > 0.55 else "white"
                if h.hatched[i, j] and not np.isnan(v):
                    colour = "#333333"
                cells.append(ax.text(j, i, text, ha="center", va="center", fontsize=7, color=colour, zorder=2))
    if h.scale != "plain":
        bar = fig.colorbar(mesh, ax=ax, shrink=0.85)
        bar.ax.tick_params(labelsize=7)
    return cells


def _curves(ax: Any, c: Curves, words: dict[str, str], max_labels: int) -> None:
    xs = np.arange(len(c.x))
    for name, ys in c.series[:12]:
        ax.plot(xs, ys, marker="o", markersize=3, linewidth=1.2, label=name)
    if c.log:
        ax.set_yscale("log")
    xi, xl = _ticks(c.x, min(max_labels, 16))
    ax.set_xticks(xi, xl, rotation=60 if max(map(len, xl), default=0) > 3 else 0, ha="right", rotation_mode="anchor")
    ax.set_title(c.title)
    ax.set_xlabel(words.get(c.xlabel, c.xlabel))
    ax.set_ylabel(words.get(c.ylabel, c.ylabel))
    ax.grid(alpha=0.3)
    if len(c.series) > 1:
        ax.legend(fontsize=6, ncols=2 if len(c.series) > 6 else 1)


def _lines(ax: Any, c: Lines) -> None:
    # The inline charts' colour-blind-safe palette, in the same order; a long series is its line alone, as there.
    from .charts import MARKERS_UP_TO, OKABE_ITO

    for i, (name, xs, ys, dashed) in enumerate(c.series[:12]):
        shown = [(x, y) for x, y in zip(xs, ys, strict=True) if math.isfinite(y) and (not c.xlog or x > 0)]
        marker = "o" if len(shown) <= MARKERS_UP_TO else ""
        ax.plot([x for x, _ in shown], [y for _, y in shown], linestyle="--" if dashed else "-", marker=marker,
                markersize=3, linewidth=1.4, label=name, color=OKABE_ITO[i % len(OKABE_ITO)])  # fmt: skip
    from matplotlib.ticker import FuncFormatter

    plain = FuncFormatter(lambda v, _: f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.4g}")  # 16, not 2⁴: text as text
    if c.xlog:
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_formatter(plain)
    if c.ylog:
        ax.set_yscale("log", base=2)
        ax.yaxis.set_major_formatter(plain)
    if c.title:
        ax.set_title(c.title)
    ax.set_xlabel(c.xlabel)
    ax.set_ylabel(c.ylabel)
    ax.grid(alpha=0.3)
    if len(c.series) > 1:
        ax.legend(fontsize=7)


def chart_figure(chart: Any, fmt: str, caption: str, lang: str = "en") -> bytes:
    """A `charts.Chart` (the data and words of a chart a page draws inline) drawn by matplotlib as `fmt`."""
    series = [(s.label, [float(x) for x in s.xs], [float(y) for y in s.ys], s.dashed) for s in chart.series]
    lines = Lines("", series, chart.x_label, chart.y_label, chart.x_log, chart.y_log)  # the figure's title is its
    return draw(Figure(chart.title, [lines]), fmt, caption, lang)


SVG_KEPT = 32  # heat maps `heat_svg` keeps, the most recently drawn (each at most 64 × 64 cells: some 100 kB)
_svgs: OrderedDict[tuple[Any, ...], str] = OrderedDict()
_svgs_lock = threading.Lock()


def heat_svg(a: np.ndarray, rows: list[str], cols: list[str], scale: str, title: str,
             masked: np.ndarray | None = None) -> str:  # fmt: skip
    """One matrix as a labelled SVG heat map to download (slides, papers), as every figure the lab gives away is: a
    colour bar, −∞ hatched, and a weight the mask set to 0 (`masked`) hatched too, as the PNG does; its numbers in
    the cells when small; its title the caption too. The drawing is a function of these arguments alone, so the
    last SVG_KEPT are kept by their content: the same matrix asked for by another URL (a default spelled out, a
    parameter the matrix does not depend on) is not drawn again (matplotlib takes 0.3–3 s for one)."""
    key = (a.dtype.str, a.shape, a.tobytes(), tuple(rows), tuple(cols), scale, title,
           None if masked is None else (masked.shape, np.packbits(masked).tobytes()))  # fmt: skip
    with _svgs_lock:
        if key in _svgs:
            _svgs.move_to_end(key)
            return _svgs[key]
    values = np.where(np.isneginf(a), np.nan, a).astype(np.float64)
    hidden = np.isnan(values) if masked is None else np.isnan(values) | masked
    heat = Heat(title, rows, cols, values, hidden, scale)
    svg = draw(Figure(title, [heat]), "svg", f"Attention Lab · {title}").decode()
    with _svgs_lock:
        _svgs[key] = svg
        while len(_svgs) > SVG_KEPT:
            _svgs.popitem(last=False)
    return svg
