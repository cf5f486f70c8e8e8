"""Heat maps as PNG, drawn by the server for traces too large for numbers in cells.

Weights use viridis (sequential, readable with every common colour-vision deficiency, 0 → 1 fixed); scores use
ColorBrewer's RdBu (diverging, symmetric around 0 with the matrix's largest |value|). −∞ is drawn grey, hatched; a
weight that is 0 because the mask removed its key is hatched light grey (as the cells are), never dark purple.
"""

from __future__ import annotations

import base64
import functools
import io

import numpy as np
from PIL import Image

VIRIDIS = [
    "#440154", "#482475", "#414487", "#355f8d", "#2a788e", "#21918c",
    "#22a884", "#44bf70", "#7ad151", "#bddf26", "#fde725",
]  # fmt: skip
RDBU = [
    "#053061", "#2166ac", "#4393c3", "#92c5de", "#d1e5f0", "#f7f7f7",
    "#fddbc7", "#f4a582", "#d6604d", "#b2182b", "#67001f",
]  # fmt: skip
MASKED = (189, 189, 189)
HATCH = {  # (stripe, gap) colours of the diagonal hatching: −∞ scores, and weights the mask set to 0
    "neginf": ((189, 189, 189), (214, 214, 214)),
    "masked": ((217, 221, 227), (238, 241, 244)),  # as td.masked in static/lab.css
}
HATCH_PERIOD = 8  # pixels along a row from one stripe to the next


def _lut(hexes: list[str], n: int = 256) -> np.ndarray:
    anchors = np.array([[int(h[i : i + 2], 16) for i in (1, 3, 5)] for h in hexes], dtype=np.float64)
    xs = np.linspace(0, 1, len(anchors))
    t = np.linspace(0, 1, n)
    return np.stack([np.interp(t, xs, anchors[:, c]) for c in range(3)], axis=1).round().astype(np.uint8)


LUTS = {"sequential": _lut(VIRIDIS), "diverging": _lut(RDBU)}


COLOR_MODES = ("linear", "log", "row")
LOG_FLOOR = 1e-4  # log scale for weights: 10⁻⁴ … 1


def rescale(a: np.ndarray, scale: str, mode: str) -> np.ndarray:
    """The values a colour map reads, for `mode`: `linear` as they are; `log` weights on log10 from 10⁻⁴ to 1
    (scores on a symmetric log of |value|); `row` each row divided by its largest |value|, so the structure of
    near-uniform rows shows. −∞ stays −∞. Sequential results lie in [0, 1]; diverging in [−1, 1] (or as given)."""
    if mode == "linear":
        return a
    finite = np.isfinite(a)
    out = np.where(finite, a, 0.0).astype(np.float64)
    if mode == "log":
        if scale == "sequential":
            out = (np.log10(np.clip(out, LOG_FLOOR, 1.0)) - np.log10(LOG_FLOOR)) / -np.log10(LOG_FLOOR)
        else:
            bound = float(np.abs(out).max()) or 1.0
            out = np.sign(out) * np.log10(1 + 9 * np.abs(out) / bound)
    elif mode == "row":
        peak = np.abs(out).max(axis=-1, keepdims=True)
        out = out / np.where(peak > 0, peak, 1.0)
    else:
        raise ValueError(f"unknown colour mode {mode!r}")
    return np.where(finite, out, a)


def colourise(a: np.ndarray, scale: str, bound: float | None = None) -> np.ndarray:
    """(R, C) floats -> (R, C, 3) uint8; a diverging map runs over ±`bound` (the largest |value| by default).
    In float32 with a uint8 index into the colour table (a class draws hundreds of these)."""
    finite = np.isfinite(a)
    clean = bool(finite.all())
    x = a.astype(np.float32, copy=False)
    if not clean:
        x = np.where(finite, x, np.float32(0))
    if scale == "sequential":
        t = x * np.float32(255)
    else:
        if bound is None:
            bound = float(np.abs(x[finite]).max()) if finite.any() else 0.0
        if bound > 0:
            t = x * np.float32(255 / (2 * bound)) + np.float32(127.5)
        else:
            t = np.full(a.shape, 127.5, dtype=np.float32)
    index = np.rint(np.clip(t, 0, 255, out=t)).astype(np.uint8)
    rgb = np.take(LUTS[scale], index, axis=0)
    if not clean:
        rgb[~finite] = MASKED
    return rgb


@functools.lru_cache(maxsize=32)
def _stripes(h: int, w: int) -> np.ndarray:
    """Where the stripes of an (h, w) picture lie (the same for every heat map of that size)."""
    y, x = np.indices((h, w))
    stripe = ((x + y) % HATCH_PERIOD) < HATCH_PERIOD // 2
    stripe.flags.writeable = False
    return stripe


def _at(cells: np.ndarray, target: tuple[int, int], enlarge: bool) -> np.ndarray:
    """A boolean (R, C) map of cells at the image's pixel size (W, H): a pixel is set when most of it is."""
    img = Image.fromarray(cells.astype(np.uint8) * 255, "L")
    if img.size != target:
        img = img.resize(target, Image.Resampling.NEAREST if enlarge else Image.Resampling.BOX)
    return np.asarray(img) >= 128


def png(a: np.ndarray, scale: str, size: int, mode: str = "linear", masked: np.ndarray | None = None) -> bytes:
    """A PNG whose longer side is `size` pixels: nearest-neighbour when enlarging, area-averaged when shrinking.
    The shorter side never loses rows (or columns) it has room for, so a (7, 3072) strip keeps its 7 tokens.
    `mode` (linear, log, row) chooses what the colours read. −∞ is hatched grey; `masked` (a boolean matrix of
    a's shape) marks weights the mask removed, hatched light grey."""
    neginf = ~np.isfinite(a)
    a = rescale(a, scale, mode)
    # A diverging map runs over ±(the largest |value|) of the matrix itself, not of its area averages when shrunk:
    # the colour bar beside it (ticks ±that bound) holds for the picture.
    bound = None
    if scale == "diverging":
        bound = 1.0 if mode != "linear" else (float(np.abs(a[~neginf]).max()) if (~neginf).any() else 0.0)
    h, w = a.shape
    factor = size / max(h, w)
    target = (max(round(w * factor), min(w, size), 1), max(round(h * factor), min(h, size), 1))
    if factor < 1 and np.isfinite(a).all():
        # Shrinking: average the values first (area averaging), then colour only the pixels that remain.
        a = np.asarray(Image.fromarray(a.astype(np.float32), "F").resize(target, Image.Resampling.BOX))
    img = Image.fromarray(colourise(a, scale, bound), "RGB")
    if img.size != target:
        img = img.resize(target, Image.Resampling.NEAREST if factor >= 1 else Image.Resampling.BOX)
    hatched = [("neginf", neginf)] + ([("masked", masked & ~neginf)] if masked is not None else [])
    if any(cells.any() for _, cells in hatched):
        rgb = np.array(img)
        for kind, cells in hatched:  # diagonal stripes, top-right to bottom-left as the cells' 135° gradient
            where = _at(cells, target, factor >= 1)
            stripe = _stripes(*where.shape)
            rgb[where & stripe], rgb[where & ~stripe] = HATCH[kind]
        img = Image.fromarray(rgb, "RGB")
    buf = io.BytesIO()
    img.save(buf, "PNG", optimize=False, compress_level=3)
    return buf.getvalue()


def data_uri(png_bytes: bytes) -> str:
    """A PNG inside the page itself (img-src allows data:): a picture made for one page, never asked for again."""
    return "data:image/png;base64," + base64.b64encode(png_bytes).decode()


LABEL = 11  # the inline heat map's row and column labels, in its drawing's units
CHOSEN = "#D55E00"  # the frame of a chosen row: Okabe and Ito's vermillion, seen on viridis and on the masks' grey


def inline_svg(a: np.ndarray, rows: list[str], cols: list[str], scale: str, title: str, cell: int = 28,
               *, em: bool = False, shown: bool = True, row: int | None = None) -> str:  # fmt: skip
    """A small labelled heat map drawn inside a page (/architectures' masks, /cross): one rect per cell, its value
    in a <title>; −∞ drawn grey. Hand-written, as the page's own pictures are: sized in the page's pixels, in its
    font, and drawn in microseconds (matplotlib's figure would bring its own margins, fonts and colour bar).
    `title` names the picture (aria-label) and is drawn above the cells unless not `shown` (a figure whose heading
    says it: then no room is kept for it). With `em` its size is given in em of the labels (width="23.1em"):
    drawn at its CSS font-size, its labels are that size on screen whatever the matrix's size, so a page sizes
    every picture's labels at once (presenter mode: from the screen). `row`: a row framed over its cells and its
    label in bold (a chosen query position), drawn in the picture itself."""
    from html import escape

    rgb = colourise(a, scale)
    left = 12 + 8 * max((len(r) for r in rows), default=1)
    top = (40 if shown else 14) + 8 * max((len(c) for c in cols), default=1)
    right = max(10, 4 * len(cols[-1]) if cols else 0)  # the last column's label leans right, past its cell
    w, h = left + cell * a.shape[1] + right, top + cell * a.shape[0] + 10
    size = f'width="{w / LABEL:.3f}em" height="{h / LABEL:.3f}em"' if em else f'width="{w}" height="{h}"'
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {w} {h}" {size} role="img" '
           f'aria-label="{escape(title)}">']  # fmt: skip
    if shown:
        out.append(f'<text x="{left}" y="18" font-size="14" font-weight="600">{escape(title)}</text>')
    for j, c in enumerate(cols):
        x = left + j * cell + cell / 2
        out.append(
            f'<text x="{x:.1f}" y="{top - 6}" font-size="{LABEL}" transform="rotate(-60 {x:.1f} {top - 6})">{escape(c)}</text>'
        )
    for i, r in enumerate(rows):
        y = top + i * cell
        bold = ' font-weight="700" class="chosen-label"' if i == row else ""
        out.append(
            f'<text x="{left - 6}" y="{y + cell / 2 + 4:.1f}" font-size="{LABEL}" text-anchor="end"{bold}>{escape(r)}</text>'
        )
        for j in range(a.shape[1]):
            v = float(a[i, j])
            fill = "#" + "".join(f"{int(x):02x}" for x in rgb[i, j])
            label = "−∞" if v == float("-inf") else f"{v:.4g}"
            out.append(f'<rect x="{left + j * cell}" y="{y}" width="{cell}" height="{cell}" fill="{fill}" '
                       f'stroke="#ffffff"><title>{escape(r)} → {escape(cols[j])}: {label}</title></rect>')  # fmt: skip
    if row is not None and 0 <= row < a.shape[0]:  # over the cells, so no cell's white stroke covers it
        out.append(f'<rect class="chosen-row" data-row="{row}" x="{left - 1.5}" y="{top + row * cell - 1.5}" '
                   f'width="{cell * a.shape[1] + 3}" height="{cell + 3}" fill="none" stroke="{CHOSEN}" '
                   f'stroke-width="3"/>')  # fmt: skip
    out.append("</svg>")
    return "".join(out)
