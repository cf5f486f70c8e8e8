"""One 2-D matrix out of a trace, for every route that shows one: heat maps (PNG), windows of exact numbers (JSON)
and CSV. The attention and block APIs share these; the matrix's query (`stage`, `tensor`, `head`, a window's
rectangle, a heat map's size and colours) is read once, by `MatrixQuery` (a FastAPI dependency)."""

from __future__ import annotations

import csv
import functools
import io
from collections.abc import Callable
from typing import Annotated, Any

import anyio.to_thread
import numpy as np
from fastapi import Query, Response
from pydantic import AfterValidator, BaseModel, ConfigDict, WithJsonSchema, model_validator

from engine.long import LongTrace
from engine.spec import MAIN_TENSOR

from ..lab import LoopLimiter
from ..render.arrays import Traced, to_numpy
from ..render.cells import full
from ..render.heatmap import COLOR_MODES, png
from ..render.payload import json_response
from ..schemas import FieldError, head_within, query_parameters
from .state import Digits, parse_stage, refused, within

NPZ: dict[int | str, dict[str, Any]] = {
    200: {"content": {"application/x-npz": {}}, "description": "np.load() gives x, q, k, v, raw, …, output"}
}


HEATMAP_DOC: dict[int | str, dict[str, Any]] = {
    200: {"content": {"image/png": {}}, "description": "One head's matrix as a PNG heat map"}
}


KEY_AXIS = ("raw", "scaled", "masked", "weights", "mask")  # tensors whose columns are keys


def key_tokens(trace: Traced | LongTrace) -> list[str]:
    """The labels of the key axis: the source tokens in cross-attention, else the tokens themselves."""
    spec = getattr(trace, "spec", None)
    return list(getattr(getattr(spec, "attn", spec), "kv_tokens", ()) or trace.tokens)


def heatmap_route(model: type[BaseModel]) -> dict[str, Any]:
    """The route options of a PNG heat map of `model`'s trace: its fields (`HeatQuery` documents its own)."""
    return {"response_class": Response, "responses": HEATMAP_DOC,
            "openapi_extra": {"parameters": query_parameters(model)}}  # fmt: skip


def colour_mode(mode: str) -> str:
    """`color`: linear, log or row (empty: the view's default)."""
    if mode and mode not in COLOR_MODES:
        raise refused(f"must be one of {', '.join(COLOR_MODES)}, got {mode[:40]!r}")
    return mode


Colour = Annotated[str, AfterValidator(colour_mode), WithJsonSchema({"type": "string", "enum": [*COLOR_MODES, ""]})]


class MatrixQuery(BaseModel):
    """The matrix a heat map, a window or a file shows, as its route's query (beside the request's fields): `stage`
    (a key or its 1-based place, checked against the trace's order), `tensor` (the stage's main one by default),
    `head`. Empty means the default; the bounds a trace sets are checked once it is known."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    stage: str = ""
    tensor: str = ""
    head: Digits(None, documented=(0, None)) = 0  # type: ignore[valid-type]

    @model_validator(mode="before")
    @classmethod
    def _given(cls, data: Any) -> Any:
        return {k: v for k, v in data.items() if v != ""} if isinstance(data, dict) else data


class WindowQuery(MatrixQuery):
    """A window's matrix, its top-left corner `row`, `col` and its `rows`, `cols` (16 each, cut to the matrix)."""

    row: Digits(None, documented=(0, None)) = 0  # type: ignore[valid-type]
    col: Digits(None, documented=(0, None)) = 0  # type: ignore[valid-type]
    rows: Digits(None, documented=(1, None)) = 16  # type: ignore[valid-type]
    cols: Digits(None, documented=(1, None)) = 16  # type: ignore[valid-type]


class HeatQuery(MatrixQuery):
    """A heat map's matrix, its `size` (the longer side in pixels) and `color` (linear, log or row)."""

    size: Digits(16, 2048) = 512  # type: ignore[valid-type]
    color: Colour = "linear"


# The routes' own query, documented by FastAPI in /openapi.json (the request's fields beside it by `openapi_extra`).
Matrix = Annotated[MatrixQuery, Query()]
Window = Annotated[WindowQuery, Query()]
Heat = Annotated[HeatQuery, Query()]


def pick(m: MatrixQuery, trace: Traced | LongTrace, default_stage: str = "softmax") -> tuple[str, str, int]:
    """`stage` (key or 1-based index), `tensor` (the stage's main one by default) and `head` of a trace's matrix,
    a whole one or a lazy one."""
    head = head_within(m.head, trace.n_heads)  # checked even where the tensor has no heads
    stage = parse_stage(m.stage, trace.order, default_stage)
    names = list(trace.stage(stage))
    tensor = m.tensor or MAIN_TENSOR.get(stage) or names[-1]
    if tensor not in names:
        raise FieldError("tensor", f"stage {stage} has no tensor {tensor!r}; it has {', '.join(names)}")
    return stage, tensor, head


def matrix_of(m: MatrixQuery, trace: Traced, default_stage: str = "softmax") -> tuple[str, np.ndarray]:
    """The 2-D matrix a heat map or a window shows: `stage`, `tensor` and `head` (for tensors with a head axis)."""
    stage, tensor, head = pick(m, trace, default_stage)
    t = trace.stage(stage)[tensor]
    if t.dim() == 3:  # K and V under GQA have n_kv_heads heads: query head h reads K/V head h // (H / H_kv)
        t = t[head * t.shape[0] // trace.n_heads]
    return tensor, to_numpy(t)


def hatched(trace: Any, tensor: str, a: np.ndarray) -> np.ndarray | None:
    """Where one head's weights are 0 because the mask removed the key (a heat map hatches them, not small)."""
    mask = getattr(getattr(trace, "mask", None), "mask", None)
    if tensor != "weights" or mask is None:
        return None
    hidden = ~np.isfinite(to_numpy(mask))
    return hidden if hidden.shape == a.shape else None


DRAWING = 2  # heat maps drawn at once, in worker threads
drawing = LoopLimiter("attention_lab_drawing", DRAWING)


async def drawn(tensor: str, a: np.ndarray, size: int, mode: str = "linear",
                masked: np.ndarray | None = None) -> Response:  # fmt: skip
    """One matrix's heat map as a PNG answer, drawn in a worker thread, at most DRAWING at once per event loop. A
    class asks for dozens of new heat maps in the same second; drawn forty at a time (anyio's default) they share the
    core and all finish late, one after another each finishes in its turn, and the requests answered from the cache
    in between are not held up by forty threads taking the GIL."""
    work = functools.partial(png, a, "sequential" if tensor == "weights" else "diverging", size, mode, masked)
    body = await anyio.to_thread.run_sync(work, limiter=drawing())
    return Response(body, media_type="image/png", headers={"Cache-Control": "public, max-age=3600"})


def window_response(m: WindowQuery, trace: Traced, tensor: str, a: np.ndarray) -> Response:
    return window_of(m, trace, tensor, a.shape, lambda r0, r1: a[r0:r1])


def window_of(m: WindowQuery, trace: Traced | LongTrace, tensor: str, shape: tuple[int, ...],
              rows_of: Callable[[int, int], Any]) -> Response:  # fmt: skip
    """A rectangle of one matrix: `row`, `col` (its top-left corner), `rows`, `cols`; `rows_of(r0, r1)` gives the
    matrix's rows r0..r1 (a slice of a whole trace, or rows a lazy trace computes now)."""
    r0, c0 = within("row", m.row, 0, shape[0] - 1), within("col", m.col, 0, shape[1] - 1)
    given = m.model_fields_set  # a size not given is 16, cut to the matrix's
    rows = within("rows", m.rows, 1, shape[0]) if "rows" in given else m.rows
    cols = within("cols", m.cols, 1, shape[1]) if "cols" in given else m.cols
    if rows * cols > 65_536:
        raise FieldError("rows", f"a window holds at most 65,536 numbers; {rows} × {cols} asked for")
    tok, keys = list(trace.tokens), key_tokens(trace)
    col_labels = keys if tensor in KEY_AXIS else [str(j) for j in range(shape[1])]
    block = rows_of(r0, min(shape[0], r0 + rows))
    if not isinstance(block, np.ndarray):
        block = to_numpy(block)
    return json_response(
        {
            "tensor": tensor,
            "row": r0,
            "col": c0,
            "rows": tok[r0 : r0 + rows],
            "cols": col_labels[c0 : c0 + cols],
            "values": np.ascontiguousarray(block[:, c0 : c0 + cols]),
        }
    )


def long_window(m: WindowQuery, lt: LongTrace) -> Response:
    _, tensor, head = pick(m, lt)
    shape = (lt.row_count(tensor), lt.columns(tensor))
    return window_of(m, lt, tensor, shape, lambda r0, r1: lt.rows(tensor, head, r0, r1))


FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def csv_label(text: str) -> str:
    """A token as a spreadsheet-safe cell: text that a spreadsheet would run as a formula gets a leading '."""
    return "'" + text if text.startswith(FORMULA_START) else text


def to_csv(trace: Traced, tensor: str, a: np.ndarray) -> str:
    tok, keys = [csv_label(t) for t in trace.tokens], [csv_label(t) for t in key_tokens(trace)]
    cols = keys if tensor in KEY_AXIS else [str(j) for j in range(a.shape[1])]
    rows = tok if a.shape[0] == len(tok) else keys if a.shape[0] == len(keys) else [str(i) for i in range(a.shape[0])]
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["", *cols])
    for label, row in zip(rows, a.tolist(), strict=True):
        w.writerow([label, *(full(v) for v in row)])  # the shortest text of each float32, as in the JSON
    return buf.getvalue()
