"""What /cross shows, as data: cross-attention through its five stages for one held-out pair of a trained (or
untrained) encoder–decoder, and the alignment forming over the run's snapshots.

The numbers come from the run's snapshots (engine/encdec_train.py `read_probe`): the last decoder layer's
cross-attention on the probe, Q from the decoder, K and V from the encoder, the N_dec × N_enc scores, the source's
padding mask, the softmax and the weighted sum. With no run chosen, the page reads the same probe through the default
config's initial weights (step 0, nothing trained), so there is always something to look at before a class trains."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal
from urllib.parse import urlencode

import numpy as np
import torch
from pydantic import ConfigDict, Field

from engine.encdec import EncDecConfig, init_params, nonlinearity
from engine.encdec_train import EncDecRun, EncDecSnapshot, new_run, read_probe, task_of

from ..render.charts import Series, line_chart
from ..render.heatmap import inline_svg as svg
from ..web.state import AsciiInt, AsciiIntOrNone, PageQuery
from ..web.view import HIDDEN, View

SMALL_ROWS, SMALL_DK = 10, 16  # every number on screen up to this many decoder rows and this head width
NL_SHOWN = 8  # the nonlinearity panel prints this many of a row's d_k numbers (two tables side by side)
NL_LAYER, NL_HEAD = 3, 4  # SmolLM2's head shown by default (layer 3 runs in well under a second on a laptop)
NL_TEXT = "The cat sat on the mat, and the dog sat on the log."
NL_CHARS = 400  # the text's characters; its tokens are bounded by engine/nonlinear.py's MAX_TOKENS


class CrossQuery(PageQuery):
    """/cross's URL: the run shown (none: the untrained model), the snapshot (its index; the last by default), the
    cross-attention head (of the last decoder layer)."""

    model_config = ConfigDict(extra="ignore")

    run: str = Field("", pattern=r"^[A-Za-z0-9_-]{0,32}$", description="an encoder-decoder run's id")
    preset: str = Field(
        "",
        pattern=r"^(train-[A-Za-z0-9_-]{1,32})?$",
        description="a finished encoder-decoder run served as a preset (GET /api/v1/presets)",
    )
    snap: AsciiIntOrNone = Field(None, ge=0, le=100, description="the snapshot's index")
    head: AsciiInt = Field(0, ge=0, le=7, description="the cross-attention head")
    nl: Literal["toy", "smollm2"] = Field("toy", description="the nonlinearity panel's model: the run's, or SmolLM2")
    nl_layer: AsciiInt = Field(NL_LAYER, ge=0, le=63, description="SmolLM2's layer in the nonlinearity panel")
    nl_head: AsciiInt = Field(NL_HEAD, ge=0, le=63, description="SmolLM2's query head in the nonlinearity panel")
    nl_text: str = Field(NL_TEXT, min_length=1, max_length=NL_CHARS, description="the text SmolLM2 reads there")


@dataclass(frozen=True)
class RunLink:
    id: str
    task: str
    status: str
    step: int
    steps: int
    href: str
    preset: str | None = None  # the name it is served as, once finished (app/train/presets.py)
    preset_href: str | None = None


@dataclass(frozen=True)
class SnapLink:
    index: int
    step: int
    accuracy: float
    alignment: float | None  # reverse: this head's mean weight on the mirrored source position
    output: str  # what the model wrote for the probe at that step
    href: str
    picture: Annotated[str, HIDDEN] = ""  # this head's cross-attention at that step, an SVG


@dataclass(frozen=True)
class Stages:
    """One head's cross-attention on the probe, stage by stage (rows: decoder positions; columns: source ones)."""

    q: list[list[float]]  # (N_dec, d_k)  from the decoder
    k: list[list[float]]  # (N_enc, d_k)  from the encoder's output
    v: list[list[float]]  # (N_enc, d_k)
    scores: list[list[float]]  # (N_dec, N_enc)  QKᵀ / √d_k
    mask: list[float | None]  # (N_enc,)  0, or None (−∞) on the source's padding: the same for every row
    masked: list[list[float | None]]  # (N_dec, N_enc)  scores + mask
    weights: list[list[float]]  # (N_dec, N_enc)  softmax over the source; each row sums to 1
    out: list[list[float]]  # (N_dec, d_k)  the weighted sum of V's rows


@dataclass(frozen=True)
class Nonlinear:
    """One cross-attention head of the last decoder layer as a map of its inputs (biases left out), on the probe:
    A(2X, 2M) against 2·A(X, M) and A(X+Y, M+N) against A(X, M) + A(Y, N) (engine/encdec.py `nonlinearity`): the
    first decoder row of each side, their relative difference, the same with the weights held (a linear map's: 0),
    the softmax's share of the difference, and the first row's weights over the real source tokens for each input.
    With nl=smollm2, one head of a layer of SmolLM2 on its real residual after the layer's norm, A(2X) against 2·A(X)
    and A(X+Y) against A(X) + A(Y), on the last token's row (engine/nonlinear.py)."""

    step: int  # the weights' step: the run's last (or 0, untrained); SmolLM2: 0
    layer: int
    head: int
    row: str  # the row shown: the toy's first decoder row, SmolLM2's last token
    cols: list[str]  # the keys of that row: the real source tokens, or SmolLM2's text's tokens
    shown: int  # how many of the d_k output numbers are printed
    scale: dict[str, Any]  # a2x, two_ax (d_k), diff, held_diff, share, wx, w2x (N_real)
    sum: dict[str, Any]  # axy, ax_ay (d_k), diff, held_diff, share, wx, wy, wxy (N_real)
    model: str = "toy"  # toy | smollm2
    kv: int | None = None  # SmolLM2: the K/V head this query head shares (GQA)
    n_layer: int = 0  # SmolLM2: its layers and query heads (the form's bounds)
    n_heads: int = 0
    text: str = ""  # SmolLM2: the text it reads

    @property
    def nbytes(self) -> int:  # what the lab's cache counts it as (its numbers, as Python floats, and its labels)
        numbers = sum(len(v) for part in (self.scale, self.sum) for v in part.values() if isinstance(v, list))
        return 32 * numbers + 64 * len(self.cols) + 2 * len(self.text) + 512


class CrossView(View):
    """/cross: one head of the last decoder layer's cross-attention on the run's probe pair at one snapshot, stage by
    stage, the snapshots' alignment, and the runs to choose from."""

    template = "cross.html"
    blocks = ("live",)
    kind = "cross"

    runs: list[RunLink]
    run: str  # "" for the untrained model
    preset: str | None = (
        None  # the preset shown (its weights, loaded back from its export, feed the nonlinearity panel)
    )
    task: str
    run_status: str  # queued, running, done, cancelled, failed, untrained
    step: int
    steps: int
    message: str
    source: list[str]  # the encoder's tokens, its padding included (the columns)
    reads: list[str]  # what each decoder position reads: <bos> and the target so far
    writes: list[str]  # what each decoder position should write: the target and <eos>
    rows: list[str]  # the rows' labels: reads → writes
    n_real: int  # real source tokens (the rest is padding)
    d_k: int
    layer: int  # the decoder layer shown (the last)
    head: int
    heads: list[tuple[int, str]]  # each head and its link
    snap: int
    snaps: list[SnapLink]
    accuracy: float  # held-out exact match at this snapshot
    output: str  # what the model writes for the probe at this snapshot
    stages: Stages
    small: bool  # every number on screen (else heat maps)
    live: bool
    events_url: str
    stop_url: str
    export_url: str | None
    config: dict[str, Any]
    nonlinear: Nonlinear | None = None  # on the run's final weights (or the untrained ones; none while it trains), or
    # on SmolLM2's (nl=smollm2)
    nl_model: str = "toy"  # the panel's model: toy | smollm2
    nl_links: dict[str, str] = Field(default_factory=dict)  # the panel's switch: each model's link
    pictures: Annotated[dict[str, str], HIDDEN] = Field(default_factory=dict)  # scores, weights, self, encoder: SVGs
    loss_chart: Annotated[str, HIDDEN] = ""


def href(run: str, snap: int | None, head: int, lang: str) -> str:
    query = {"run": run, "snap": "" if snap is None else str(snap), "head": str(head) if head else "", "lang": lang}
    return "/cross?" + urlencode({k: v for k, v in query.items() if v})


def nl_href(q: CrossQuery, model: str, lang: str) -> str:
    """This page with the nonlinearity panel on `model`, at the panel."""
    query = {"run": q.run, "snap": "" if q.snap is None else str(q.snap), "head": str(q.head) if q.head else "",
             "nl": "" if model == "toy" else model, "lang": lang}  # fmt: skip
    if model == "smollm2":
        query |= {"nl_layer": str(q.nl_layer), "nl_head": str(q.nl_head), "nl_text": q.nl_text}
    return "/cross?" + urlencode({k: v for k, v in query.items() if v}) + "#cross-nonlinear"


def preview(c: EncDecConfig | None = None) -> EncDecRun:
    """The model of config `c` (the default's when none) as initialised, the weights a run of `c` starts from: one
    snapshot at step 0 (no training: a few milliseconds)."""
    c = c or EncDecConfig()
    task = task_of(c)
    run = new_run(c, "untrained")
    d = read_probe(c, init_params(c, len(task.vocab), task.n_src, task.n_tgt), task)
    run.snapshots.append(EncDecSnapshot(0, float("nan"), 0.0, d["alignment"], d["output"], d["weights"]))
    return run


def picture(a: Sequence[Sequence[float | None]], rows: list[str], cols: list[str], scale: str, title: str,
            cell: int = 28) -> str:  # fmt: skip
    m = np.array([[float("-inf") if x is None else x for x in row] for row in a], dtype=np.float64)
    return svg(m, rows, cols, scale, title, cell)


def loss_chart(r: EncDecRun, t: Any) -> str:
    if not r.loss:
        return ""
    every = max(1, len(r.loss) // 200)
    steps = list(range(1, len(r.loss) + 1, every))
    series = [Series(t("cross.series.train"), steps, [r.loss[s - 1] for s in steps])]
    if r.eval_steps:
        series.append(Series(t("cross.series.eval"), r.eval_steps, r.eval_loss, dashed=True))
    return line_chart(series, t("cross.chart.loss"), t("cross.chart.step"), t("cross.chart.nats"), chart_id="loss",
                      x_range=(0, r.config.steps), width=480, height=260)  # fmt: skip


def nonlinear(r: EncDecRun, head: int, row: str) -> Nonlinear | None:
    """The nonlinearity panel on the run's final weights, the untrained model's initial ones, or None (training)."""
    c = r.config
    task = task_of(c)
    if r.params:
        p, step = r.params, r.step
    elif r.status == "untrained":
        p, step = init_params(c, len(task.vocab), task.n_src, task.n_tgt), 0
    else:
        return None
    src, tgt = task.encode([(r.probe, r.target)])
    with torch.no_grad():
        d = nonlinearity(c, {k: v.cpu() for k, v in p.items()}, src, tgt[:, : len(r.target) + 1], head)
    return Nonlinear(step, d["layer"], head, row, r.probe, min(c.d_k, NL_SHOWN), d["scale"], d["sum"])


def smollm2_nonlinear(model: Any, q: CrossQuery) -> Nonlinear:
    """The nonlinearity panel on SmolLM2's head `nl_head` of layer `nl_layer` over `nl_text` (engine/nonlinear.py);
    a size out of bounds is a SpecError naming the URL's field (nl_text, nl_layer, nl_head)."""
    from engine import nonlinear as NL
    from engine.errors import SpecError

    ids = model.tokenize(q.nl_text)
    try:
        d = NL.nonlinearity(model, ids, q.nl_layer, q.nl_head)
    except SpecError as e:
        raise SpecError(f"nl_{e.field}" if e.field in ("text", "layer", "head") else e.field, e.message) from None
    labels = model.labels(ids)
    return Nonlinear(0, q.nl_layer, q.nl_head, labels[-1], labels, min(model.arch.d_k, NL_SHOWN), d["scale"], d["sum"],
                     "smollm2", d["kv"], model.arch.n_layer, model.arch.n_heads, q.nl_text)  # fmt: skip


def cross_view(q: CrossQuery, r: EncDecRun, runs: list[RunLink], t: Any, lang: str, message: str = "",
               live: bool = False, real: Nonlinear | None = None, served: EncDecRun | None = None,
               preset: str | None = None) -> CrossView:  # fmt: skip
    c = r.config
    snaps = r.snapshots
    pick = len(snaps) - 1 if q.snap is None else min(q.snap, len(snaps) - 1)
    s = snaps[pick]
    task = task_of(c)
    head = min(q.head, c.n_heads - 1)
    st = s.weights["stages"]
    n_real = len(r.probe)
    source = r.probe + ["<pad>"] * (task.n_src - n_real)
    reads = ["<bos>", *r.target]
    writes = [*r.target, "<eos>"]
    stages = Stages(q=st["q"][head], k=st["k"][head], v=st["v"][head], scores=st["scaled"][head], mask=st["mask"],
                    masked=st["masked"][head], weights=st["weights"][head], out=st["heads"][head])  # fmt: skip
    rows = [f"{r}→{w}" for r, w in zip(reads, writes, strict=True)]  # what each decoder position reads → writes
    cols = [f"{j}:{w}" for j, w in enumerate(source)]
    film = []
    for i, snap in enumerate(snaps):
        w = snap.weights["cross"][-1][head]
        align = snap.alignment[-1][head] if snap.alignment else None
        title = t("cross.film.step", step=snap.step)
        film.append(SnapLink(i, snap.step, snap.accuracy, align, " ".join(snap.output), href(q.run, i, head, lang),
                             picture(w, [f"→{x}" for x in writes], source, "sequential", title, 16)))  # fmt: skip
    pictures = {
        "masked": picture(stages.masked, rows, cols, "diverging", t("cross.stage.mask")),
        "weights": picture(stages.weights, rows, cols, "sequential", t("cross.stage.softmax")),
        "self": picture(s.weights["decoder"][-1][head], rows, reads, "sequential", t("cross.self.title")),
        "encoder": picture(s.weights["encoder"][-1][head], cols, cols, "sequential", t("cross.encoder.title")),
    }
    return CrossView(
        runs=runs, run=q.run, task=c.task, run_status=r.status, step=r.step, steps=c.steps, message=message,
        source=source, reads=reads, writes=writes, rows=rows, n_real=n_real, d_k=c.d_k, layer=c.n_layer - 1, head=head,
        heads=[(h, href(q.run, q.snap, h, lang)) for h in range(c.n_heads)], snap=pick, snaps=film,
        accuracy=s.accuracy, output=" ".join(s.output), stages=stages,
        small=len(reads) <= SMALL_ROWS and c.d_k <= SMALL_DK, live=live,
        events_url=f"/api/v1/train/{q.run}/events" if q.run else "",
        stop_url=f"/api/v1/train/{q.run}/stop" if q.run else "",
        export_url=f"/api/v1/train/{q.run}/export" if q.run and r.params else None, config=c.__dict__.copy(),
        nonlinear=real if q.nl == "smollm2" else nonlinear(served or r, head, rows[0]), nl_model=q.nl, preset=preset,
        nl_links={m: nl_href(q, m, lang) for m in ("toy", "smollm2")}, pictures=pictures, loss_chart=loss_chart(r, t),
    )  # fmt: skip
