"""The view parameters of the attention pages (the lab and /embed, /sinks, /tiles): what each page's URL carries
besides the request's fields, typed and read once (app/web/state.py `Params`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from engine import STAGES

from ..web.state import Cell, Digits, PageQuery, Params, integer, param, parse_cell, parse_tile, stage_of


@dataclass(frozen=True)
class LabParams(Params):
    """The lab's view: the stage on screen, the head, an open cell (`tensor.head.row.col`), the large view's tile
    (`row,col`), a comparison (`compare=mask|scale|leak|text`, the second prompt in `compare_text`), the heat
    maps' colour mode and the parts of an embedded view to hide. `step` is an older spelling of `lesson_step`."""

    ALIASES: ClassVar[dict[str, str]] = {"step": "lesson_step"}

    stage: str = param(STAGES[0], stage_of(STAGES))
    head: int = param(0, integer(None))  # checked against the trace's heads once it is known
    compare: str = param("")
    compare_text: str = param("")
    cell: Cell | None = param(None, lambda key, raw: parse_cell(raw))
    tile: tuple[int, int] = param((0, 0), lambda key, raw: parse_tile(raw))
    color: str = param("")
    hide: str = param("")


class SinksQuery(PageQuery):
    """/sinks: the head whose sink share is drawn."""

    head: Digits(None) = 0  # type: ignore[valid-type]


class TilesQuery(PageQuery):
    """/tiles: the query block and the key block of the walk-through (the key block's default is the first that
    does something, known once the schedule is computed)."""

    qb: Digits(None) = 0  # type: ignore[valid-type]
    kb: Digits(None) | None = None  # type: ignore[valid-type]
