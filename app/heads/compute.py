"""The head views computed through the lab's compute service, and their answers as typed results (Roled, Pruned,
Patched: what the API writes, by pydantic, and what the pages read): head roles (/api/v1/head_roles), the
pruning curve (/api/v1/prune) and activation patching (/api/v1/patch). The engine is engine/heads.py."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any

from engine import heads as E
from engine import predict as P
from engine.models import Model

from ..lab import Lab, job_kind
from ..schemas import FieldError, said
from ..web.knockouts import intervention
from ..web.sequence import Text, decoder
from ..web.sequence import text_of as sequence_text
from ..web.view import finite
from .request import PatchRequest, PruneRequest, RolesRequest

# The request's text as a sequence for the head views: a Pre-LN decoder's.
text_of = partial(sequence_text, views="heads", pre_ln=True)


Grid = tuple[tuple[float | None, ...], ...]  # layer × head (or position); a non-finite number is None


def grid(t: Any) -> Grid:
    return tuple(tuple(finite(float(v)) for v in row) for row in t.tolist())


def cost(model: Model, rows: int, logits_rows: int) -> int:
    """Estimated bytes: `logits_rows` rows of (vocab) log-probabilities, `rows` rows of a layer's activations and
    scores, the streams kept per layer."""
    a = model.arch
    return (3 * logits_rows * a.vocab + 8 * rows * max(a.d_ff, a.d_model) + a.n_heads * 256 * rows
            + 4 * a.n_layer * rows * a.d_model) * 4  # fmt: skip


# -- /api/v1/head_roles ------------------------------------------------------------------------------------------


async def roles_of(req: RolesRequest, lab: Lab, key: str | None) -> tuple[Text, P.Intervention, E.Roles]:
    t = await lab.off_loop(req.preset, text_of, req, lab, lab.settings.max_roles_tokens, False, "tokens")
    iv = intervention(req, t.model)
    limit = lab.settings.max_probe_n
    if req.probe_n > limit:
        raise FieldError("probe_n", said("at_most_here", limit=limit, n=req.probe_n))
    if 2 * req.probe_n + 1 > t.model.info.n_ctx:
        raise FieldError("probe_n", said("probe_context", n=req.probe_n, model=t.model.name, n_ctx=t.model.info.n_ctx))
    ablate = P.Intervention(ablate=iv.ablate, mean=iv.mean)
    # Without a head knocked out the mode changes nothing: one computation (and cache entry) for both.
    compute_key = (req.preset, t.seq, req.probe_n, req.seed, ablate if ablate.ablate else P.NONE)
    # Heads knocked out change only the probe's loss: the scores and the plain loss are the plain request's (its
    # cached roles when /heads drew them first), and the knocked pass is the one run here.
    plain = (await roles_of(req.model_copy(update={"ablate": None}), lab, key))[2] if ablate.ablate else None

    def work(progress: Any) -> E.Roles:
        try:
            return E.head_roles(t.model, t.seq, req.probe_n, req.seed, ablate, progress=progress, plain=plain)
        except ValueError as e:
            name, _, message = str(e).partition(": ")
            raise FieldError(name, message) from None

    rows = max(len(t.seq), 2 * req.probe_n + 1)
    roles, _ = await lab.compute("head_roles", compute_key, cost(t.model, rows, rows), work, progress=key)
    return t, ablate, roles


@dataclass(frozen=True)
class Probe:
    """The induction probe: the model's BOS, n random ordinary tokens drawn with `seed`, then the same n again."""

    token_ids: tuple[int, ...]
    n: int
    seed: int
    tokens: tuple[str, ...]


@dataclass(frozen=True)
class ProbeLoss:
    """The probe's loss (engine/heads.py's ProbeLoss): the means over the first and the second copy's targets, and
    the loss at each position."""

    first: float
    second: float
    positions: tuple[float, ...]

    @classmethod
    def of(cls, loss: E.ProbeLoss) -> ProbeLoss:
        return cls(loss.first, loss.second, loss.positions)


@dataclass(frozen=True)
class HeadScore:
    layer: int
    head: int
    score: float | None


@dataclass(frozen=True)
class Ablated:
    """The probe's loss with the heads of `ablate` knocked out."""

    ablate: tuple[tuple[int, int], ...]
    ablate_mode: str
    probe_loss: ProbeLoss

    @classmethod
    def of(cls, iv: P.Intervention, r: E.Roles) -> Ablated | None:
        if r.ablated_loss is None:
            return None
        return cls(iv.ablate, "mean" if iv.mean else "zero", ProbeLoss.of(r.ablated_loss))


@dataclass(frozen=True)
class Roled:
    """/api/v1/head_roles's answer, and what /heads shows of it: every head's role scores (layer × head), the top
    heads of each role, the induction probe and its loss, plain and (`ablated`) with heads knocked out."""

    preset: str
    layers: int
    heads: int
    tokens: tuple[str, ...]
    token_ids: tuple[int, ...]
    probe: Probe
    roles: dict[str, Grid]
    top: dict[str, tuple[HeadScore, ...]]
    probe_loss: ProbeLoss
    ablated: Ablated | None


def roles_document(t: Text, iv: P.Intervention, r: E.Roles, top: int) -> Roled:
    model = t.model
    return Roled(
        preset=model.name,
        layers=model.arch.n_layer,
        heads=model.arch.n_heads,
        tokens=t.labels,
        token_ids=t.seq,
        probe=Probe(r.probe, r.n, r.seed, tuple(model.labels(list(r.probe)))),
        roles={role: grid(r.scores[role]) for role in E.ROLES},
        top={role: tuple(HeadScore(li, h, finite(s)) for li, h, s in r.top(role, top)) for role in E.ROLES},
        probe_loss=ProbeLoss.of(r.loss),
        ablated=Ablated.of(iv, r),
    )


# -- /api/v1/prune -----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Pruned:
    """/api/v1/prune's answer, and /heads's pruning curve: every head knocked out alone (`single`), the heads in
    that order knocked out together (`mean_loss[k]`: the first k), and how many can go before the loss rises by
    more than `rise`."""

    preset: str
    layers: int
    heads: int
    tokens: tuple[str, ...]
    token_ids: tuple[int, ...]
    ablate_mode: str
    order: tuple[tuple[int, int], ...]
    mean_loss: tuple[float | None, ...]
    single: Grid
    clean_loss: float | None
    rise: float
    can_go: int
    fraction: float


# Computed here or (--redis) by a queue worker: `lab.job(prune_job, req, key)`.
@job_kind("prune", PruneRequest, Pruned)
async def prune_job(req: PruneRequest, lab: Lab, key: str | None) -> Pruned:
    t = await lab.off_loop(req.preset, text_of, req, lab, lab.settings.max_prune_tokens, req.eos, "inputs")
    n = len(t.seq) - 1
    if req.loss_from >= n:
        raise FieldError("loss_from", said("nothing_scored", last=n - 1))
    mean = req.ablate_mode == "mean"
    compute_key = (req.preset, t.seq, req.loss_from, mean)

    def work(progress: Any) -> E.Pruning:
        return E.prune(t.model, t.seq[:-1], t.seq[1:], req.loss_from, mean, progress=progress)

    rows = min(E.ROWS, max(n, E.ROWS // n * n))
    logits = max(n, -(-E.logit_rows(t.model) // 3))  # the losses' one buffer of logits (cost counts 3 per row)
    p, _ = await lab.compute("prune", compute_key, cost(t.model, rows, logits), work, progress=key)
    every, k, model = len(p.order), p.can_go(req.rise), t.model
    return Pruned(model.name, model.arch.n_layer, model.arch.n_heads, t.labels, t.seq, "mean" if p.mean else "zero",
                  p.order, tuple(finite(v) for v in p.mean_loss), grid(p.single), finite(p.clean), req.rise, k,
                  k / every if every else 0.0)  # fmt: skip


# -- /api/v1/patch -----------------------------------------------------------------------------------------------


def prompts_of(req: PatchRequest, lab: Lab) -> tuple[Text, Text]:
    """The two prompts through the model's tokenizer, of the same length (a 422 showing both tokenisations)."""
    model = decoder(lab, req.preset, "heads", pre_ln=True)
    if not model.has_tokenizer:
        raise FieldError("preset", said("patch_tokenizer", model=req.preset))
    limit = min(lab.settings.max_patch_tokens, model.info.n_ctx)
    out = []
    for name in ("clean", "corrupted"):
        seq = P.sequence(model, model.tokenize(getattr(req, name)), req.bos, False)
        if not seq:  # a text of characters the tokenizer drops (a trained run's small vocabulary), and no BOS
            raise FieldError(name, said("no_vocab_tokens", model=model.name))
        if len(seq) > limit:
            raise FieldError(name, said("tokens_here", room=limit, n=len(seq)))
        out.append(Text(req.preset, model, tuple(seq), tuple(model.labels(seq))))
    a, b = out
    if len(a.seq) != len(b.seq):
        raise FieldError(
            "corrupted", said("prompts_match", n=len(a.seq), labels=list(a.labels), m=len(b.seq), other=list(b.labels))
        )
    for name in ("answer", "wrong"):
        v = getattr(req, name)
        if v is not None and v >= model.arch.vocab:
            raise FieldError(name, said("vocab_ids", model=model.name, last=model.arch.vocab - 1))
    if req.metric == "logit_diff" and req.answer is not None and req.answer == req.wrong:
        raise FieldError("wrong", said("differ_answer"))
    return a, b


@dataclass(frozen=True)
class Token:
    token_id: int
    token: str


@dataclass(frozen=True)
class Patched:
    """/api/v1/patch's answer, and what /patch shows of it: the metric on the clean and the corrupted run, and the
    normalised effect of patching each activation (grids: resid_pre, attn_out, mlp_out layer × position; head
    layer × head)."""

    preset: str
    layers: int
    heads: int
    clean_tokens: tuple[str, ...]
    corrupted_tokens: tuple[str, ...]
    clean_ids: tuple[int, ...]
    corrupted_ids: tuple[int, ...]
    metric: str
    answer: Token | None
    wrong: Token | None
    clean_value: float | None
    corrupted_value: float | None
    grids: dict[str, Grid]


# Computed here or (--redis) by a queue worker: `lab.job(patch_job, req, key)`.
@job_kind("patch", PatchRequest, Patched)
async def patch_job(req: PatchRequest, lab: Lab, key: str | None) -> Patched:
    a, b = await lab.off_loop(req.preset, prompts_of, req, lab)
    compute_key = (req.preset, a.seq, b.seq, req.answer, req.wrong, req.metric)
    n, m = len(a.seq), a.model.arch

    def work(progress: Any) -> E.Patching:
        return E.patch(a.model, a.seq, b.seq, req.answer, req.wrong, req.metric, progress=progress)

    rows = min(E.ROWS, (3 * n + m.n_heads) * n)
    cached = 2 * m.n_layer * n * (4 * m.d_model) * 4
    p, _ = await lab.compute("patch", compute_key, cost(a.model, rows, 2 * n) + cached, work, progress=key)
    model = a.model

    def token(t: int | None) -> Token | None:
        return None if t is None else Token(t, model.labels([t])[0])

    return Patched(model.name, model.arch.n_layer, model.arch.n_heads, a.labels, b.labels, a.seq, b.seq, p.metric,
                   token(p.answer), token(p.wrong), finite(p.clean_value), finite(p.corrupted_value),
                   {k: grid(p.grids[k]) for k in (*E.KINDS, "head")})  # fmt: skip
