"""Matrices as the page shows them: labelled rows and columns, a shape, and per-cell text, value and colour.

Colours are CSS classes, not inline styles, so the page needs no 'unsafe-inline': a diverging scale (dv-m5 … dv-p5,
blue below zero, red above) for scores, a colour-blind-safe sequential one (sq-0 … sq-10, viridis) for weights.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, NotRequired, cast

import numpy as np
from markupsafe import Markup, escape
from pydantic import GetCoreSchemaHandler
from pydantic_core import core_schema
from typing_extensions import TypedDict

DENSE_COLS = 16  # a matrix wider than this gets narrower cells (CSS: table[data-matrix].dense)
# The colour classes of each scale, low to high (the colour bar draws them in order).
SWATCHES = {
    "sequential": [f"sq-{i}" for i in range(11)],
    "diverging": [f"dv-m{i}" for i in range(5, 0, -1)] + ["dv-p0"] + [f"dv-p{i}" for i in range(1, 6)],
}


@dataclass(frozen=True)
class Cell:
    text: str  # two decimals, or −∞
    value: str  # the full float32 value, or -inf (data-value)
    cls: str  # colour class


class Matrix(TypedDict):
    """A matrix in a page's JSON face: its labels and float values (−∞, a masked score, as null, as in the API);
    `bound` on a diverging scale (it runs from −bound to +bound), `masked` where the mask removed an entry,
    `cell_urls` where each cell links somewhere of its own (the editable mask)."""

    name: str
    label: str
    head: int | None
    shape: str
    scale: str
    rows: list[str]
    cols: list[str]
    values: list[list[float | None]]
    bound: NotRequired[float]
    masked: NotRequired[list[list[bool]]]
    cell_urls: NotRequired[list[list[str]]]


@dataclass
class MatrixView:
    name: str  # the tensor's name in the API (data-matrix)
    label: str  # how the page titles it, e.g. "Q" or "A = softmax(S′)"
    head: int | None  # None for (N, d) and (N, N) tensors without a head axis
    rows: list[str]
    cols: list[str]
    cells: list[list[Cell]]
    shape: str  # "(N, d_k) = (5, 4)"
    scale: str  # "diverging" | "sequential" | "plain"
    links: bool = True  # cells open their arithmetic
    extra: dict[str, str] = field(default_factory=dict)
    cell_urls: list[list[str]] | None = None  # per-cell links instead of the arithmetic (the editable mask)
    bound: float = 0.0  # the diverging scale runs from −bound to +bound

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: GetCoreSchemaHandler) -> core_schema.CoreSchema:
        """In a View: written as its `Matrix` (`face`), read back from one (`from_json`) or taken as it is."""
        face = handler.generate_schema(Matrix)
        from_face = core_schema.no_info_after_validator_function(cls.from_json, face)
        return core_schema.json_or_python_schema(
            json_schema=from_face,
            python_schema=core_schema.union_schema([core_schema.is_instance_schema(cls), from_face]),
            serialization=core_schema.plain_serializer_function_ser_schema(lambda m: m.face(), return_schema=face),
        )

    def face(self) -> Matrix:
        """The JSON face of a View: labels and float values (−∞ becomes null there, as in the API)."""
        named = {k: getattr(self, k) for k in ("name", "label", "head", "shape", "scale", "rows", "cols")}
        out = cast(Matrix, named | {"values": [[float(c.value) for c in row] for row in self.cells]})
        if self.scale == "diverging":
            out["bound"] = self.bound  # the colour scale runs from −bound to +bound
        if any(c.cls.startswith("masked") for row in self.cells for c in row):
            out["masked"] = [[c.cls.startswith("masked") for c in row] for row in self.cells]
        if self.cell_urls is not None:
            out["cell_urls"] = self.cell_urls
        return out

    @classmethod
    def from_json(cls, data: Matrix) -> MatrixView:
        """The matrix again from its JSON face (a client of the lab's API draws what the page draws)."""
        values = np.array([[-math.inf if v is None else v for v in row] for row in data["values"]], dtype=np.float64)
        masked = np.array(data["masked"], dtype=bool) if "masked" in data else None
        symbols = str(data["shape"]).split(" = ")[0]
        m = matrix_view(data["name"], data["label"], values, list(data["rows"]), list(data["cols"]), symbols,
                        data["scale"], data["head"], data.get("bound"), masked)  # fmt: skip
        m.cell_urls = data.get("cell_urls")
        return m

    @property
    def ticks(self) -> list[str]:
        """The colour bar's tick values, low to high."""
        if self.scale == "sequential":
            return ["0", "0.5", "1"]
        if self.scale == "diverging" and self.bound > 0:
            return [short(-self.bound), "0", short(self.bound)]
        return []

    @property
    def swatches(self) -> list[str]:
        return SWATCHES[self.scale]

    def body(self, state: Any, selected: tuple[str, int, int, int] | None = None) -> Markup:
        """The table's rows as HTML (templates/_matrix.html's tbody): written here rather than as a Jinja loop,
        because a large trace's page shows a 16 × 16 window and the loop's per-cell escaping and lookups cost more
        than the rest of the page. Every text is escaped; a cell links to its arithmetic (`links`), or to its own
        URL (`cell_urls`, the editable mask)."""
        row0, col0 = int(self.extra.get("row0") or 0), int(self.extra.get("col0") or 0)
        head = self.head or 0
        pick = tuple(selected[2:]) if selected and selected[0] == self.name and selected[1] == head else None
        out = []
        for r, (label, row) in enumerate(zip(self.rows, self.cells, strict=False)):
            out.append(f'\n      <tr><th scope="row">{escape(label)}</th>')
            for c, cell in enumerate(row):
                value, text = escape(cell.value), escape(cell.text)
                if self.cell_urls:
                    inner = f'<a href="{escape(self.cell_urls[r][c])}" data-edit="mask">{text}</a>'
                elif self.links:
                    inner = f'<a href="{escape(state.url(cell=f"{self.name}.{head}.{r}.{c}"))}">{text}</a>'
                else:
                    inner = text
                here = " selected" if pick == (r, c) else ""
                out.append(f'\n        <td data-row="{row0 + r}" data-col="{col0 + c}" data-value="{value}" '
                           f'class="{escape(cell.cls)}{here}" title="{value}">{inner}</td>')  # fmt: skip
            out.append("</tr>")
        return Markup("".join(out))

    @property
    def dense(self) -> bool:
        """Wider than DENSE_COLS columns: narrower cells (a 24-token sentence's 24 × 24 fits a laptop's width)."""
        return len(self.cols) > DENSE_COLS


def full(v: float) -> str:
    if not math.isfinite(v):  # −∞ is a mask; +∞ and NaN would be an overflow, shown for what they are
        return "nan" if math.isnan(v) else ("-inf" if v < 0 else "inf")
    return str(np.float32(v))  # the shortest text that reads back as the same float32, as in the JSON


def short(v: float, decimals: int = 2) -> str:
    if not math.isfinite(v):
        return "NaN" if math.isnan(v) else ("−∞" if v < 0 else "+∞")
    text = f"{v:.{decimals}f}"
    return "0.00" if text == "-0.00" else text.replace("-", "−")


def colour(v: float, scale: str, bound: float, masked: bool = False) -> str:
    if v == -math.inf:
        return "neginf"
    if masked:  # a weight of exactly 0 because its key was masked: hatched, never mistaken for a small real weight
        return "masked"
    if not math.isfinite(v):
        return "nonfinite"
    if scale == "sequential":
        return f"sq-{min(10, max(0, round(v * 10)))}"
    if scale == "diverging" and bound > 0:
        b = max(-5, min(5, round(v / bound * 5)))
        return f"dv-{'m' if b < 0 else 'p'}{abs(b)}"
    return "plain"


def matrix_view(
    name: str,
    label: str,
    a: np.ndarray,
    rows: list[str],
    cols: list[str],
    shape_symbols: str,
    scale: str = "diverging",
    head: int | None = None,
    bound: float | None = None,
    masked: np.ndarray | None = None,
    links: bool = True,
) -> MatrixView:
    """`bound` fixes the diverging scale (so a tensor keeps its colours when a toggle changes other cells);
    by default it is the largest finite |value|. `masked` marks entries the mask removed. `links`: the cells open
    their arithmetic."""
    if bound is None:
        finite = a[np.isfinite(a)]
        bound = float(np.abs(finite).max()) if finite.size else 0.0
    hidden = np.zeros(a.shape, dtype=bool) if masked is None else masked
    cells = [
        [Cell(short(float(v)), full(float(v)), colour(float(v), scale, bound, bool(m)))
         for v, m in zip(row, hrow, strict=True)]
        for row, hrow in zip(a, hidden, strict=True)
    ]  # fmt: skip
    shape = f"{shape_symbols} = ({', '.join(str(s) for s in a.shape)})"
    return MatrixView(name, label, head, rows, cols, cells, shape, scale, links, bound=bound)


def dims(n: int, prefix: str = "") -> list[str]:
    return [f"{prefix}{j}" for j in range(n)]


@dataclass(frozen=True)
class RowStats:
    """One softmax row: its entropy (nats), its largest weight and its top-3 keys with their weights."""

    entropy: float
    max: float
    top: tuple[tuple[str, float], ...]


def row_stats(weights: np.ndarray, keys: list[str]) -> list[RowStats]:
    """The statistics of each softmax row (N, N)."""
    out = []
    for row in weights:
        p = row[row > 0]
        entropy = max(0.0, float(-(p * np.log(p)).sum())) if p.size else 0.0
        top = np.argsort(-row, kind="stable")[:3]
        out.append(RowStats(entropy, float(row.max()) if row.size else 0.0,
                            tuple((keys[j], float(row[j])) for j in top if row[j] > 0)))  # fmt: skip
    return out
