"""One stage's presentation: what every page that shows the stage puts above and around its numbers.

A presentation's functions take the trace the stage belongs to: an attention Trace for the five attention stages
(a block's own attention trace when shown inside a block, or a long context's lazy trace for the formula and what
it does), a BlockTrace for the stages around it. The tables of them are app/render/attention_stages.py and
app/render/block_stages.py; app/render/stages.py merges the two.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from .cells import MatrixView

Scale = Literal["diverging", "sequential", "plain"]  # how a matrix's numbers map to colours (cells.matrix_view)


@dataclass(frozen=True)
class Presentation:
    formula: Callable[[Any], str]  # trace -> MathML
    explain: Callable[[Any], str]  # trace -> the catalogue key of "what happens"
    notice: Callable[[Any, Any], str]  # trace, translator -> "what to notice" in these numbers
    matrices: Callable[[Any, int], list[MatrixView]]  # trace, head -> the matrices shown cell by cell
    scale: Scale  # the colour scale of the stage's main tensor (its heat map when the trace is large)


def said(key: str) -> Callable[[Any], str]:
    """An `explain` that reads nothing from the trace: always the catalogue key `key`."""
    return lambda trace: key
