"""The prediction views computed through the lab's compute service, and their JSON documents: teacher forcing with
interventions (/api/v1/predict), the logit lens (/api/v1/logit_lens) and a ranking of the heads by their effect on
one prediction (/api/v1/head_ranking). The engine is engine/predict.py."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

from engine import predict as P
from engine.models import Model

from ..lab import Lab, job_kind
from ..schemas import FieldError, said
from ..web.knockouts import intervention
from ..web.sequence import Text, text_of, top_labels
from ..web.view import OPTIONAL
from .request import LensRequest, PredictRequest, RankRequest


def forward_cost(model: Model, n: int, passes: int = 2) -> int:
    """Estimated bytes of teacher-forced passes: (N, vocab) log-probabilities, a layer's activations, the weights."""
    a = model.arch
    return passes * 3 * n * a.vocab * 4 + 6 * n * max(a.d_ff, a.d_model) * 4 + a.n_heads * n * min(n, 256) * 4


# -- /api/v1/predict -----------------------------------------------------------------------------------------------


async def predict_of(req: PredictRequest, lab: Lab, key: str | None) -> tuple[Text, P.Intervention, P.Prediction]:
    t = await lab.off_loop(req.preset, text_of, req, lab, lab.settings.max_predict_tokens, req.eos)
    iv = intervention(req, t.model)
    n = len(t.inputs)
    replace = None
    if req.replace is not None:
        if req.replace.position >= n:
            raise FieldError("replace", said("replace_position", last=n - 1, position=req.replace.position))
        if req.replace.token_id >= t.model.arch.vocab:
            raise FieldError("replace", said("replace_token_id", model=t.model.name, last=t.model.arch.vocab - 1))
        replace = (req.replace.position, req.replace.token_id)
    if req.loss_from >= n:
        raise FieldError("loss_from", said("nothing_scored", last=n - 1))
    compute_key = (req.preset, t.seq, iv, req.loss_from, replace, req.top)

    def work(progress: Any) -> P.Prediction:
        return P.predict(t.model, t.seq, iv, req.loss_from, replace, req.top, progress=progress)

    pred, _ = await lab.compute("predict", compute_key, forward_cost(t.model, n), work, progress=key)
    return t, iv, pred


async def pair_of(req: PredictRequest, other_text: str, lab: Lab, key: str | None) -> tuple[Text, Text, P.Pair]:
    """The request's text and a second one (`other_text`, read as the field `compare_text`) under the same switches,
    position by position: two prompts side by side."""
    t = await lab.off_loop(req.preset, text_of, req, lab, lab.settings.max_predict_tokens, req.eos)
    other = req.model_copy(update={"text": other_text, "token_ids": None, "replace": None})
    try:
        t2 = await lab.off_loop(req.preset, text_of, other, lab, lab.settings.max_predict_tokens, req.eos)
    except FieldError as e:
        raise FieldError("compare_text", e.message) from None
    iv = intervention(req, t.model)
    compute_key = ("pair", req.preset, t.seq, t2.seq, iv, req.loss_from, req.top)

    def work(progress: Any) -> P.Pair:
        return P.predict_pair(t.model, t.seq, t2.seq, iv, req.loss_from, req.top, progress=progress)

    cost = forward_cost(t.model, max(len(t.seq), len(t2.seq)))
    pair, _ = await lab.compute("predict", compute_key, cost, work, progress=key)
    return t, t2, pair


@dataclass(frozen=True)
class Top:
    """One of the most likely tokens at a position, labelled as the text labels its pieces."""

    token: str
    token_id: int
    p: float


def labelled_top(model: Model, ids: list[int], labels: list[str], i: int, s: P.Scored) -> tuple[Top, ...]:
    """The most likely tokens at input position i, labelled as the text labels its pieces."""
    names = top_labels(model, ids, labels, i + 1, s.top_ids)
    return tuple(Top(name, t, p) for name, t, p in zip(names, s.top_ids, s.top_probs, strict=True))


@dataclass(frozen=True)
class Switched:
    """The switches a run was made under, as the API names them."""

    ablate: tuple[tuple[int, int], ...]
    ablate_mode: str
    mask_off_layers: tuple[int, ...]
    drop_sink_layers: tuple[int, ...]

    @classmethod
    def of(cls, iv: P.Intervention) -> Switched:
        return cls(iv.ablate, "mean" if iv.mean else "zero", iv.mask_off, iv.drop_sink)


@dataclass(frozen=True)
class Compared:
    """One position of the run compared with (`before`)."""

    p_target: float
    loss: float
    rank: int
    top: tuple[Top, ...]
    # Its own target, where a replaced token changed this position's (else the same, and not written).
    target: Annotated[str | None, OPTIONAL] = None
    target_id: Annotated[int | None, OPTIONAL] = None


@dataclass(frozen=True)
class Row:
    """One position of a teacher-forced run: its input, its target, how well the run predicted it; with a run to
    compare, that run's numbers there (`before`), KL(before ‖ this run) and max |Δ log p|."""

    position: int
    input: str
    input_id: int
    target: str
    target_id: int
    scored: bool  # counts in the mean loss (i ≥ loss_from)
    p_target: float
    loss: float
    rank: int
    top: tuple[Top, ...]
    # A run compared with none has no before, kl or max_abs_diff.
    before: Annotated[Compared | None, OPTIONAL] = None
    kl: Annotated[float | None, OPTIONAL] = None
    max_abs_diff: Annotated[float | None, OPTIONAL] = None


@dataclass(frozen=True)
class Replaced:
    position: int
    token_id: int
    token: str


@dataclass(frozen=True)
class Baseline:
    """The run compared with, as a whole."""

    mean_loss: float
    perplexity: float
    what: str


@dataclass(frozen=True)
class Predicted:
    """/api/v1/predict's answer, and what /predict shows of it: the run over the text's training sequence, position
    by position, with the run it is compared with."""

    preset: str
    tokens: tuple[str, ...]  # the inputs, as run (a replaced token among them)
    targets: tuple[str, ...]  # of the text as run: a replaced input is also its previous position's target
    token_ids: tuple[int, ...]
    target_ids: tuple[int, ...]
    bos: int | None
    # Where the text begins in `tokens` and `positions`: 1 when a BOS begins the sequence (position 0 is the BOS), else
    # 0; /api/v1/attention and /api/v1/generate say it alike (their tokens may begin with [CLS], or with no BOS).
    text_start: int
    loss_from: int
    positions: tuple[Row, ...]
    mean_loss: float
    perplexity: float
    switches: Switched
    replace: Replaced | None
    before: Baseline | None


def predict_document(t: Text, iv: P.Intervention, pred: P.Prediction) -> Predicted:
    run, before = pred.run, pred.before
    ids = [*run.inputs, t.seq[-1]]
    base_ids, base_labels = list(t.seq), list(t.labels)
    labels, replaced = base_labels, None
    if pred.replaced is not None:  # the text as run: its labels with the replaced token's
        labels = t.model.labels(ids)
        replaced = Replaced(pred.replaced[0], pred.replaced[1], labels[pred.replaced[0]])
    rows = []
    for i, s in enumerate(run.positions):
        compared, kl, diff = None, None, None
        if before is not None:
            b = before.positions[i]
            # a replaced token is the previous position's target too: the run compared with keeps its own target
            was = (base_labels[i + 1], before.targets[i]) if before.targets[i] != run.targets[i] else (None, None)
            compared = Compared(b.p_target, b.loss, b.rank, labelled_top(t.model, base_ids, base_labels, i, b), *was)
            kl, diff = pred.kl[i], pred.max_abs_diff[i]
        rows.append(Row(i, labels[i], run.inputs[i], labels[i + 1], run.targets[i], i >= run.loss_from, s.p_target,
                        s.loss, s.rank, labelled_top(t.model, ids, labels, i, s), compared, kl, diff))  # fmt: skip
    what = "the same switches on the unreplaced text" if pred.replaced else "the same text without the switches"
    return Predicted(
        preset=t.preset,
        tokens=tuple(labels[:-1]),
        targets=tuple(labels[1:]),  # of the text as run: a replaced input is also its previous position's target
        token_ids=run.inputs,
        target_ids=run.targets,
        bos=t.model.bos_id if t.seq[0] == t.model.bos_id else None,
        text_start=t.text_start,
        loss_from=run.loss_from,
        positions=tuple(rows),
        mean_loss=run.mean_loss,
        perplexity=run.perplexity,
        switches=Switched.of(iv),
        replace=replaced,
        before=None if before is None else Baseline(before.mean_loss, before.perplexity, what),
    )


# -- /api/v1/logit_lens ----------------------------------------------------------------------------------------------


async def lens_of(req: LensRequest, lab: Lab, key: str | None) -> tuple[Text, P.Intervention, P.Lens]:
    t = await lab.off_loop(req.preset, text_of, req, lab, lab.settings.max_predict_tokens, False, "tokens", 1)
    # the lens reads the text as it is (one token is enough): with bos, the sequence's last token is an input too
    iv = intervention(req, t.model)
    inputs = t.seq
    compute_key = (req.preset, inputs, iv, req.top)

    def work(progress: Any) -> P.Lens:
        return P.lens(t.model, inputs, iv, req.top, progress=progress)

    a = t.model.arch
    cost = forward_cost(t.model, len(inputs), 1) + a.n_layer * len(inputs) * a.d_model * 4
    lens, _ = await lab.compute("lens", compute_key, cost, work, progress=key)
    return t, iv, lens


@dataclass(frozen=True)
class LensRead:
    """One lens read, layer × position: the most likely tokens read from layer l at position i (`top(l, i)`), the
    probability there of the model's final prediction (`p_final[l][i]`), the final prediction at each position and
    the first layer from which it stays the most likely. The tops are kept as the engine's numbers and one table of
    labels: a long text's lens has some 100,000 of them, made into objects only where they are read."""

    final: tuple[str, ...]
    final_ids: tuple[int, ...]
    first_top1: tuple[int | None, ...]
    top_ids: list[list[list[int]]]  # (L, N, top)
    top_probs: list[list[list[float]]]  # (L, N, top)
    p_final: list[list[float]]  # (L, N)
    names: dict[tuple[int, int], str]  # (position, token id) → its label there

    def top(self, layer: int, i: int) -> tuple[Top, ...]:
        ids, probs = self.top_ids[layer][i], self.top_probs[layer][i]
        return tuple([Top(self.names[i, tok], tok, p) for tok, p in zip(ids, probs, strict=True)])

    def layers(self) -> list[list[dict[str, Any]]]:
        """`layers[l][i]` as the API writes it: {top: [{token, token_id, p}], p_final}."""
        names = self.names

        def cell(i: int, ids: list[int], probs: list[float], p_final: float) -> dict[str, Any]:
            return {"top": [{"token": names[i, t], "token_id": t, "p": p} for t, p in zip(ids, probs, strict=True)],
                    "p_final": p_final}  # fmt: skip

        return [
            [cell(i, ti, tp, pf) for i, (ti, tp, pf) in enumerate(zip(top_ids, top_p, p_final, strict=True))]
            for top_ids, top_p, p_final in zip(self.top_ids, self.top_probs, self.p_final, strict=True)
        ]

    def as_json(self) -> dict[str, Any]:
        return {"final": self.final, "final_ids": self.final_ids, "first_top1": self.first_top1,
                "layers": self.layers()}  # fmt: skip


@dataclass(frozen=True)
class Lensed:
    """/api/v1/logit_lens's answer, and what /lens shows of it: the run under the switches (`read`, its fields
    written at the top level) and, with switches, the same text without them (`before`) and where the final
    prediction changed."""

    preset: str
    tokens: tuple[str, ...]
    token_ids: tuple[int, ...]
    read: LensRead
    switches: Switched
    before: LensRead | None
    changed: tuple[int, ...]
    text_start: int = 0  # where the text begins in `tokens` (1: after the BOS the lens put before it), as predict's

    def as_json(self) -> dict[str, Any]:
        """Plain data but `switches` (a dataclass): orjson writes it whole, fast (see api.py)."""
        before = None if self.before is None else self.before.as_json()
        return {"preset": self.preset, "tokens": self.tokens, "token_ids": self.token_ids,
                "text_start": self.text_start, **self.read.as_json(),
                "switches": self.switches, "before": before, "changed": self.changed}  # fmt: skip


def lens_document(t: Text, iv: P.Intervention, lens: P.Lens) -> Lensed:
    model, ids, labels = t.model, list(t.seq), list(t.labels)
    names: dict[tuple[int, int], str] = {}  # a token is often among the top at many layers of one position

    def name(i: int, tok: int) -> str:
        if (i, tok) not in names:
            names[i, tok] = top_labels(model, ids, labels, i + 1, [tok])[0]
        return names[i, tok]

    def read(lens: P.Lens) -> LensRead:
        top_ids, top_p, p_final = lens.top_ids.tolist(), lens.top_probs.tolist(), lens.p_final.tolist()
        for layer in top_ids:
            for i, ti in enumerate(layer):
                for tok in ti:
                    name(i, tok)
        final = tuple(name(i, tok) for i, tok in enumerate(lens.final_ids))
        return LensRead(final, lens.final_ids, lens.first_top1, top_ids, top_p, p_final, names)

    before = None if lens.before is None else read(lens.before)
    changed = () if lens.before is None else tuple(
        i for i, (a, b) in enumerate(zip(lens.final_ids, lens.before.final_ids, strict=True)) if a != b)  # fmt: skip
    return Lensed(t.preset, t.labels, t.seq, read(lens), Switched.of(iv), before, changed, t.text_start)


# -- /api/v1/head_ranking ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RankCost:
    """What a ranking will cost, stated before it starts: every head (`heads`, L × H) knocked out in turn over the
    `tokens` up to the position, each knocked-out head's copy run from its layer up — `per_token` token-layer passes
    for each token (L + H·L(L+1)/2), `total` in all, against this server's `limit` (MAX_RANK_COST)."""

    tokens: int
    heads: int
    per_token: int
    total: int
    limit: int

    @property
    def allowed(self) -> bool:
        return self.total <= self.limit

    @property
    def max_tokens(self) -> int:
        """The most tokens a ranking on this model may cover under the limit."""
        return self.limit // self.per_token


def rank_cost(model: Model, tokens: int, limit: int) -> RankCost:
    a = model.arch
    return RankCost(tokens, a.n_layer * a.n_heads, P.rank_cost(a, 1), P.rank_cost(a, tokens), limit)


def check_rank_cost(cost: RankCost, field: str) -> None:
    """A ranking over the limit is refused before it starts, naming the field that sets its length."""
    if cost.allowed:
        return
    code = "rank_cost_at" if cost.max_tokens >= 2 else "rank_cost_none"
    raise FieldError(field, said(code, heads=cost.heads, tokens=cost.tokens, total=cost.total, per_token=cost.per_token,
                                 limit=cost.limit, position=cost.max_tokens - 1))  # fmt: skip


@dataclass(frozen=True)
class HeadLoss:
    layer: int
    head: int
    loss: float
    delta: float  # loss − the plain loss


@dataclass(frozen=True)
class Ranked:
    """/api/v1/head_ranking's answer: every head's effect on one prediction, largest first, and what it cost."""

    preset: str
    tokens: tuple[str, ...]
    position: int
    target: str
    target_id: int
    ablate_mode: str
    loss: float
    heads: tuple[HeadLoss, ...]
    cost: RankCost


async def ranking_of(req: RankRequest, lab: Lab, key: str | None) -> Ranked:
    """The head ranking, computed here or (--redis) by a queue worker (`Lab.job`)."""
    return await lab.job(ranking_job, req, key)


@job_kind("head_ranking", RankRequest, Ranked)
async def ranking_job(req: RankRequest, lab: Lab, key: str | None) -> Ranked:
    t = await lab.off_loop(req.preset, text_of, req, lab, lab.settings.max_rank_tokens, False)
    n = len(t.seq)
    position = n - 2 if req.position is None else req.position
    limit = n - 1 if req.target_id is not None else n - 2
    if position > limit:
        raise FieldError("position", said("positions_place" if req.target_id else "positions_next", limit=limit,
                                          position=position))  # fmt: skip
    target = t.seq[position + 1] if req.target_id is None else req.target_id
    if target >= t.model.arch.vocab:
        raise FieldError("target_id", said("vocab_ids", model=t.model.name, last=t.model.arch.vocab - 1))
    field = "position" if req.position is not None else "token_ids" if req.token_ids is not None else "text"
    passes = rank_cost(t.model, position + 1, lab.settings.max_rank_cost)
    check_rank_cost(passes, field)
    compute_key = (req.preset, t.seq[: position + 1], position, target, req.ablate_mode)
    a = t.model.arch

    def work(progress: Any) -> P.Ranking:
        return P.rank_heads(t.model, t.seq, position, target, req.ablate_mode == "mean", progress=progress)

    cost = forward_cost(t.model, position + 1, 1) + a.n_layer * (position + 1) * a.d_model * 4
    cost += 3 * min(P.LOGIT_ROWS, a.n_layer * a.n_heads) * a.vocab * 4  # the copies' logits, LOGIT_ROWS at a time
    r, _ = await lab.compute("rank", compute_key, cost, work, progress=key)
    return Ranked(t.preset, t.labels[: r.position + 1], r.position,
                  top_labels(t.model, list(t.seq), list(t.labels), r.position + 1, [r.target])[0], r.target,
                  req.ablate_mode, r.loss, tuple(HeadLoss(i, h, loss, loss - r.loss) for i, h, loss in r.heads),
                  passes)  # fmt: skip
