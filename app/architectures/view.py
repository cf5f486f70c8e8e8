"""What /architectures shows, as data: one input through the three families of the architecture chapter, side by
side: encoder-only (MiniLM, BERT's shape: bidirectional, padding masked), decoder-only (SmolLM2, GPT's: causal) and
encoder–decoder (the one /cross trains: a bidirectional encoder, a causal decoder, and cross-attention from the
decoder's positions to every real source position). For each: its masks as matrices (visible or −∞), what a chosen
position can read, and its training objective. The masks are the engine's own (engine/encdec.py `padding_mask`,
`causal_mask`), not drawn by hand.

Beside each mask, the same kind of attention in real weights (`Pattern`): the input through MiniLM and SmolLM2 as
the lab loaded them (one layer's softmax weights, engine/heads.py `layer_weights`: the lab's own forward pass, held
to transformers' eager attention in the tests), and through the newest finished encoder–decoder run of /train (its
encoder's, its decoder's and its cross-attention's weights, engine/encdec.py `forward` keeping them). Each model
reads its own tokens: MiniLM's WordPiece with [CLS] and [SEP], SmolLM2's byte pieces, the encoder–decoder its
task's vocabulary (the input when every word is in it, else its held-out probe)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Annotated, Any

import numpy as np
import torch
from pydantic import ConfigDict, Field

from engine.encdec import Kept, causal_mask, forward, greedy, padding_mask
from engine.encdec_tasks import BOS, EOS, SPECIALS
from engine.encdec_tasks import PAD as PAD_ID
from engine.encdec_train import task_of
from engine.heads import layer_weights

from ..render.heatmap import inline_svg as svg
from ..schemas import FieldError
from ..web.state import AsciiInt, HeadCell, PageQuery
from ..web.view import HIDDEN, View

PAD = "<pad>"
READS_SHOWN = 6  # the chosen row's largest weights listed
REAL = {"encoder_only": "minilm", "decoder_only": "smollm2"}  # the family's model among the lab's presets


class ArchitecturesQuery(PageQuery):
    """The input (words split on spaces, at most 8), the padding added to fill a batch, the position whose reading
    is listed, and the head (layer.head) drawn in real weights for each model."""

    model_config = ConfigDict(extra="ignore")

    text: str = Field("the cat sat on the mat", max_length=200, description="the input, split on spaces (≤ 8)")
    pad: AsciiInt = Field(2, ge=0, le=4, description="<pad> tokens after it, as in a batch")
    pos: AsciiInt = Field(2, ge=0, le=11, description="the position whose reading is listed")
    minilm: HeadCell = Field((0, 0), description="MiniLM's head drawn: layer.head")
    smollm2: HeadCell = Field((0, 1), description="SmolLM2's head drawn: layer.head")
    encdec: HeadCell = Field((0, 0), description="the encoder–decoder's head drawn: layer.head")


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
class Pattern:
    """One head's softmax weights in a real model, beside the mask of the same attention."""

    name: str  # encoder | decoder | cross: the mask it stands beside
    model: str  # the preset, or the run
    title: str  # which model, layer and head, in words
    layer: int
    head: int
    layers: int
    heads: int
    rows: list[str]  # the model's own tokens (queries), numbered
    cols: list[str]  # (keys)
    weights: list[list[float]]  # (rows, cols), each row summing to 1
    row: int  # the chosen position (within this model's tokens)
    reads: list[tuple[str, float]]  # what it reads: its largest weights, largest first
    zeros: int  # how many keys the chosen row gives exactly 0 (the mask's work)
    above: float  # the largest weight above the diagonal (0 in a causal pattern; square patterns only)
    lab_url: str | None  # the same head on the lab's stages
    picture: Annotated[str, HIDDEN] = ""
    unknown: int = 0  # its tokens that its vocabulary lacks ([UNK]: MiniLM's WordPiece has few CJK characters)


@dataclass(frozen=True)
class Computed:
    """What one model's pass gives the page (kept in the lab's cache, which counts `nbytes`)."""

    patterns: list[Pattern]
    ids: list[int]  # the model's token ids (the lab's link reads the same)
    read_input: bool = True  # the encoder–decoder read the page's words (else its probe)

    @property
    def nbytes(self) -> int:
        return 256 + sum(8 * len(p.rows) * len(p.cols) + len(p.picture) for p in self.patterns)


@dataclass
class Family:
    name: str  # encoder_only | decoder_only | encoder_decoder
    model: str  # the model of the lab that has this shape
    masks: list[MaskPanel]
    objective: str  # in words
    real: list[Pattern] = field(default_factory=list)  # its attention in real weights (none: `missing` says why)
    missing: str = ""  # why there is no real pattern, and how to get one
    note: str = ""  # what the real model read, when not the input


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
    run: str | None  # the encoder–decoder run whose weights are drawn


def panel(name: str, mask: torch.Tensor, rows: list[str], cols: list[str], pos: int, title: str,
          label: str) -> MaskPanel:  # fmt: skip
    """A panel from an additive mask (0 or −∞, (rows, cols)); `label` names its picture (the heading says `title`);
    the chosen row is framed in it."""
    m = mask.numpy().astype(np.float64)
    visible = (m == 0).tolist()
    row = min(pos, len(rows) - 1)
    reads = [c for c, ok in zip(cols, visible[row], strict=True) if ok]
    picture = svg(np.where(m == 0, 1.0, -np.inf), rows, cols, "sequential", label, 22, em=True, shown=False, row=row)
    return MaskPanel(name, title, rows, cols, visible, reads, picture)


def pattern(name: str, model: str, w: torch.Tensor, at: tuple[int, int], size: tuple[int, int], rows: list[str],
            cols: list[str], pos: int, title: str, t: Any) -> Pattern:  # fmt: skip
    """A Pattern from one head's weights w (rows, cols), its chosen row framed in its picture."""
    a = w.double().numpy()
    row = min(pos, len(rows) - 1)
    order = sorted(range(len(cols)), key=lambda j: -a[row, j])
    reads = [(cols[j], float(a[row, j])) for j in order[:READS_SHOWN] if a[row, j] > 0]
    above = float(np.triu(a, 1).max()) if a.shape[0] == a.shape[1] and a.shape[0] > 1 else 0.0
    cell = 22 if max(a.shape) <= 12 else 16
    label = t("architectures.svg.real", title=title, chosen=t("architectures.chosen", row=rows[row]))
    picture = svg(a, rows, cols, "sequential", label, cell, em=True, shown=False, row=row)  # the figure's heading
    return Pattern(name, model, title, at[0], at[1], size[0], size[1], rows, cols, a.tolist(), row, reads,
                   int((a[row] == 0).sum()), above, None, picture)  # fmt: skip


def numbered(tokens: list[str]) -> list[str]:
    return [f"{i}:{w}" for i, w in enumerate(tokens)]


def head_at(key: str, at: tuple[int, int], layers: int, heads: int, t: Any) -> tuple[int, int]:
    """`layer.head` checked against the model's sizes: a 422 naming the key otherwise (in the page's language)."""
    if not (0 <= at[0] < layers and 0 <= at[1] < heads):
        raise FieldError(key, t("architectures.no_head", head=f"{at[0]}.{at[1]}", layer=layers - 1, last=heads - 1))
    return at


def real_pattern(model: Any, text: str, at: tuple[int, int], pos: int, t: Any) -> Computed:
    """The text through a loaded model (its own tokens) up to layer `at[0]`: that layer's head `at[1]` (computed in
    the caller's worker thread: `layer_weights` runs the layers below for real)."""
    ids = model.tokenize(text)
    w = layer_weights(model, ids, at[0])[at[1]]
    a = model.arch
    title = t("architectures.real.title", model=model.name, layer=at[0], head=at[1])
    labels = numbered(model.labels(ids))
    shown = pattern("decoder" if a.decoder else "encoder", model.name, w, at, (a.n_layer, a.n_heads), labels, labels,
                    pos, title, t)  # fmt: skip
    unknown = sum(label == "[UNK]" for label in model.labels(ids))
    return Computed([replace(shown, unknown=unknown)], ids)


def encdec_patterns(job: Any, words: list[str], at: tuple[int, int], pos: int, t: Any) -> Computed:
    """A finished encoder–decoder run on its own input: the page's words when every one is in its task's
    vocabulary (at most its longest source), else its held-out probe; the target is what it writes (greedy), read
    back through the decoder. Its encoder's, decoder's and cross-attention's weights at layer.head `at`, and whether
    it read the page's words."""
    c, p = job.run.config, job.run.params
    task = task_of(c)
    known = set(task.vocab) - set(SPECIALS)
    source = words if words and all(w in known for w in words) and len(words) <= task.n_src else task.probe()[0]
    index = {w: i for i, w in enumerate(task.vocab)}
    src = torch.full((1, task.n_src), PAD_ID, dtype=torch.long)
    src[0, : len(source)] = torch.tensor([index[w] for w in source])
    p = {k: v.float().cpu() for k, v in p.items()}
    with torch.no_grad():
        out = greedy(c, p, src, task.n_tgt - 1)[0].tolist()
        out = out[: out.index(EOS)] if EOS in out else out
        tgt_in = torch.tensor([[BOS, *out]])
        kept = Kept([], [], [])
        forward(c, p, src, tgt_in, kept)
    src_labels = numbered([*source, *[PAD] * (task.n_src - len(source))])
    tgt_labels = numbered(["<bos>", *(task.vocab[i] for i in out)])
    size = (c.n_layer, c.n_heads)
    layer, head = at
    name = f"{job.id} ({c.task})"

    def one(kind: str, rows: list[str], cols: list[str]) -> Pattern:
        w = getattr(kept, kind)[layer]["weights"][0, head]
        title = t(f"architectures.real.{kind}", layer=layer, head=head)
        return pattern(kind, name, w, at, size, rows, cols, pos, title, t)

    patterns = [one("encoder", src_labels, src_labels), one("decoder", tgt_labels, tgt_labels),
                one("cross", tgt_labels, src_labels)]  # fmt: skip
    return Computed(patterns, src[0].tolist(), source is words)


def mask_families(q: ArchitecturesQuery, words: list[str], t: Any) -> tuple[list[str], list[str], list[Family]]:
    """The three families' masks on the page's words (the real patterns added by the caller)."""
    tokens = words + [PAD] * q.pad
    n = len(tokens)
    labels = numbered(tokens)
    src = torch.tensor([[0 if w == PAD else 1 for w in tokens]])  # engine/encdec's <pad> id is 0
    pad = padding_mask(src)[0, 0, 0].expand(n, n)  # (N, N): the same for every row
    causal = causal_mask(n) + pad  # a decoder-only batch pads too: its pads are masked as keys
    target = ["<bos>", *reversed(words)]
    m = len(target)
    tlabels = numbered(target)
    pos = q.pos

    def one(family: str, name: str, mask: torch.Tensor, rows: list[str], cols: list[str], title: str) -> MaskPanel:
        chosen = t("architectures.chosen", row=rows[min(pos, len(rows) - 1)])
        label = t("architectures.svg.mask", family=t(f"architectures.family.{family}"),
                  title=t(f"architectures.mask.{title}"), chosen=chosen)  # fmt: skip
        return panel(name, mask, rows, cols, pos, t("architectures.mask." + title), label)

    families = [
        Family("encoder_only", "MiniLM", [one("encoder_only", "encoder", pad, labels, labels, "bidirectional")],
               t("architectures.objective.encoder_only")),
        Family("decoder_only", "SmolLM2", [one("decoder_only", "decoder", causal, labels, labels, "causal")],
               t("architectures.objective.decoder_only")),
        Family("encoder_decoder", t("architectures.model.encoder_decoder"), [
            one("encoder_decoder", "encoder", pad, labels, labels, "encoder"),
            one("encoder_decoder", "decoder", causal_mask(m), tlabels, tlabels, "decoder"),
            one("encoder_decoder", "cross", padding_mask(src)[0, 0, 0].expand(m, n), tlabels, labels, "cross"),
        ], t("architectures.objective.encoder_decoder")),
    ]  # fmt: skip
    return tokens, target, families


def words_of(q: ArchitecturesQuery) -> list[str]:
    return q.text.split()[:8] or ["the", "cat", "sat"]
