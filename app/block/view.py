"""The block page's view. Its stages' formulas, notices and matrices are their presentations in the kernel
(app/render/stages.py, for the norms, residuals and FFN around the attention; the attention stages inside are
presented exactly as on the lab page, on the block's own attention trace)."""

from __future__ import annotations

from typing import Any

from pydantic import Field, InstanceOf

from engine import STAGES
from engine.block import BlockSpec
from engine.spec import Spec

from ..render.cells import MatrixView
from ..render.stages import Checks
from ..web.view import StageView


class BlockView(StageView):
    """One stage of one transformer block, as /block shows it: the flow of its stages, the stage's formula, what it
    does and what to notice, and its matrices cell by cell (`matrices`) or, for a large block, one heat-map strip
    per tensor (`heatmaps`, with each one's `shapes` and drawn size in `boxes`). Links are URLs of the same page
    with one thing changed."""

    template = "block.html"
    kind = "block"

    spec: InstanceOf[BlockSpec] | None = Field(None, exclude=True)  # the form's; the JSON face has its `summary`
    attn_spec: InstanceOf[Spec] | None = Field(None, exclude=True)
    in_attention: bool = False
    stage_labels: dict[str, str] | None = None  # every stage's name in the page's language
    formula: str = ""  # MathML
    explain: str = ""
    notice: str = ""
    checks: Checks | None = None
    matrices: list[MatrixView] | None = None
    heatmaps: list[tuple[str, str]] | None = None  # (tensor, its heat map's URL)
    shapes: dict[str, tuple[int, ...]] | None = None
    per_head: tuple[str, ...] = ()  # the tensors drawn for one head
    boxes: dict[str, tuple[int, int]] | None = None  # each heat map's width and height on the page
    # Links.
    json_url: str | None = None
    npz_url: str | None = None
    flow: list[tuple[str, str, bool]] | None = None  # (stage, its URL, inside the attention)
    prev_url: str | None = None
    next_url: str | None = None
    head_urls: list[tuple[int, str]] | None = None


def strip_box(shape: tuple[int, ...]) -> tuple[int, int]:
    """Display width and height of a heat map: wide strips for (N, d), at most 600 px tall."""
    rows, cols = shape
    height = round(min(600, max(48, 1200 * rows / cols, 6 * rows)))
    width = round(min(1200, height * cols / rows)) if 1200 * rows / cols > 600 else 1200
    return width, height


def stage_label(key: str, t: Any) -> str:
    return str(t(f"stage.{key}") if key in STAGES else t(f"bstage.{key}"))
