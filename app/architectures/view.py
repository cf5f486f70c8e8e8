"""What /architectures shows, as data: one input through the three families of the architecture chapter, side by
side: encoder-only (MiniLM, BERT's shape: bidirectional, padding masked), decoder-only (SmolLM2, GPT's: causal) and
encoder–decoder (the one /cross trains: a bidirectional encoder, a causal decoder, and cross-attention from the
decoder's positions to every real source position). For each: its masks as matrices (visible or −∞), what a chosen
position can read, and its training objective. The masks are the engine's own (engine/encdec.py `padding_mask`,
`causal_mask`), not drawn by hand."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

import numpy as np
import torch
from pydantic import ConfigDict, Field

from engine.encdec import causal_mask, padding_mask

from ..render.heatmap import inline_svg as svg
from ..web.state import PageQuery
from ..web.view import HIDDEN, View

PAD = "<pad>"


class ArchitecturesQuery(PageQuery):
    """The input (words split on spaces, at most 8), the padding added to fill a batch, the position whose reading
    is listed."""

    model_config = ConfigDict(extra="ignore")

    text: str = Field("the cat sat on the mat", max_length=200, description="the input, split on spaces (≤ 8)")
    pad: int = Field(2, ge=0, le=4, description="<pad> tokens after it, as in a batch")
    pos: int = Field(2, ge=0, le=11, description="the position whose reading is listed")


@dataclass(frozen=True)
class MaskPanel:
    name: str  # encoder | decoder | cross
    title: str  # what the mask is, in words
    rows: list[str]  # query positions
    cols: list[str]  # key positions
    visible: list[list[bool]]  # (rows, cols): may row i read column j
    reads: list[str]  # what the chosen row reads
    picture: Annotated[str, HIDDEN] = ""  # an SVG of the mask


@dataclass(frozen=True)
class Family:
    name: str  # encoder_only | decoder_only | encoder_decoder
    model: str  # the model of the lab that has this shape
    masks: list[MaskPanel]
    objective: str  # in words


class ArchitecturesView(View):
    """The three families side by side on one input."""

    template = "architectures.html"
    blocks = ()
    kind = "architectures"

    tokens: list[str]  # the input with its padding
    target: list[str]  # the encoder–decoder's target here: the input reversed (/cross's reverse task)
    pos: int
    families: list[Family]
    values: dict[str, Any]


def panel(name: str, mask: torch.Tensor, rows: list[str], cols: list[str], pos: int, title: str) -> MaskPanel:
    """A panel from an additive mask (0 or −∞, (rows, cols))."""
    m = mask.numpy().astype(np.float64)
    visible = (m == 0).tolist()
    row = min(pos, len(rows) - 1)
    reads = [c for c, ok in zip(cols, visible[row], strict=True) if ok]
    picture = svg(np.where(m == 0, 1.0, -np.inf), rows, cols, "sequential", "", 22)
    return MaskPanel(name, title, rows, cols, visible, reads, picture)


def architectures_view(q: ArchitecturesQuery, t: Any) -> ArchitecturesView:
    words = q.text.split()[:8] or ["the", "cat", "sat"]
    tokens = words + [PAD] * q.pad
    n = len(tokens)
    labels = [f"{i}:{w}" for i, w in enumerate(tokens)]
    src = torch.tensor([[0 if w == PAD else 1 for w in tokens]])  # engine/encdec's <pad> id is 0
    pad = padding_mask(src)[0, 0, 0].expand(n, n)  # (N, N): the same for every row
    causal = causal_mask(n) + pad  # a decoder-only batch pads too: its pads are masked as keys
    target = ["<bos>", *reversed(words)]
    m = len(target)
    tlabels = [f"{i}:{w}" for i, w in enumerate(target)]
    pos = q.pos
    enc = panel("encoder", pad, labels, labels, pos, t("architectures.mask.bidirectional"))
    dec = panel("decoder", causal, labels, labels, pos, t("architectures.mask.causal"))
    families = [
        Family("encoder_only", "MiniLM", [enc], t("architectures.objective.encoder_only")),
        Family("decoder_only", "SmolLM2", [dec], t("architectures.objective.decoder_only")),
        Family("encoder_decoder", t("architectures.model.encoder_decoder"), [
            panel("encoder", pad, labels, labels, pos, t("architectures.mask.encoder")),
            panel("decoder", causal_mask(m), tlabels, tlabels, pos, t("architectures.mask.decoder")),
            panel("cross", padding_mask(src)[0, 0, 0].expand(m, n), tlabels, labels, pos,
                  t("architectures.mask.cross")),
        ], t("architectures.objective.encoder_decoder")),
    ]  # fmt: skip
    return ArchitecturesView(tokens=tokens, target=target, pos=pos, families=families,
                             values={"text": " ".join(words), "pad": q.pad, "pos": pos})  # fmt: skip
