"""The view parameters of the attention pages (the lab and /embed, /sinks, /tiles): what each page's URL carries
besides the request's fields, typed and read once (app/web/state.py `PageQuery`)."""

from __future__ import annotations

from pydantic import AliasChoices, Field

from engine import STAGES

from ..web.state import CellField, Digits, PageQuery, Stage, TileField
from ..web.tensors import Colour


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
