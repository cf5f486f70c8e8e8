"""Heads with jobs: what each head does, which heads can go, and where an answer lives.

Head roles, from each head's softmax weights A (N × N):
  previous_token   mean over queries i ≥ 1 of A[i, i − 1], on a text;
  sink             mean over queries i ≥ 1 of A[i, 0] (query 0 can only read itself): engine/sinks.py's
                   `sink_share`, the one definition /model and /sinks show too;
and on the induction probe — the model's BOS (when it has one), then n tokens r drawn without repeats from its
ordinary vocabulary (no special token) with a seed, then r again — over the second copy's queries i:
  duplicate_token  mean of A[i, i − n] (the same token, earlier);
  induction        mean of A[i, i − n + 1] (the token that followed it the first time).
The probe's loss per position says why induction matters: the first copy is unpredictable (about ln |vocab|),
the second predictable by copying; `first` and `second` are the mean losses of the positions whose target lies in
each copy.

The pruning curve ranks every head by how much knocking it out alone raises the mean loss over a text, then
removes heads cumulatively, least important first: entry k of `mean_loss` is the loss with the first k heads of
`order` knocked out (zeros, or their running mean, as engine/predict.py knocks heads out).

Activation patching runs the corrupted prompt with one activation replaced by the clean run's and reports the
normalised effect (patched − corrupted) / (clean − corrupted) of a metric read at the last position (the logit
difference of two answer tokens, or the answer's probability): the residual stream entering each layer at each
position (resid_pre), each layer's attention output after W_O (attn_out) and MLP output (mlp_out) at each position,
and each head's output at every position (head). The corrupted run below the patched layer is computed once and
reused; the patched runs of one layer go together as copies of the prompt side by side (each copy reads only
itself), as the head ranking batches its ablations.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from .attention import linear
from .block import feed_forward, normalise
from .predict import NONE, Intervention, Progress, ablated, check_decoder, knock_out, log_probs

ROLES = ("previous_token", "sink", "duplicate_token", "induction")
KINDS = ("resid_pre", "attn_out", "mlp_out")
METRICS = ("logit_diff", "prob")
ROWS = 1024  # rows (copies × tokens) run side by side at most


# -- head roles ------------------------------------------------------------------------------------------------


def ordinary_ids(model: Any) -> list[int]:
    """The token ids a probe may draw: inside the embedding and the tokenizer, and no special token (BOS, EOS, the
    tokenizer's added special tokens)."""
    size = model.arch.vocab
    special = set(model.eos_ids) | ({model.bos_id} if model.bos_id is not None else set())
    if getattr(model, "has_tokenizer", False):
        tok = model.tokenizer()
        size = min(size, tok.get_vocab_size(with_added_tokens=True))
        special |= {i for i, t in tok.get_added_tokens_decoder().items() if getattr(t, "special", True)}
    return [i for i in range(size) if i not in special]


def probe_ids(model: Any, n: int, seed: int) -> list[int]:
    """The induction probe: the model's BOS (when it defines one), n distinct ordinary tokens drawn with `seed`,
    the same n again."""
    pool = ordinary_ids(model)
    if n > len(pool):
        raise ValueError(f"probe_n: {model.name} has {len(pool)} ordinary tokens, fewer than {n}")
    g = torch.Generator().manual_seed(seed)
    r = [pool[int(j)] for j in torch.randperm(len(pool), generator=g)[:n]]
    return ([model.bos_id] if model.bos_id is not None else []) + r + r


@dataclass(frozen=True)
class ProbeLoss:
    """The probe's loss at each input position j (predicting token j + 1), and the means over the positions whose
    target lies in the first and in the second copy."""

    positions: tuple[float, ...]
    first: float
    second: float


@dataclass(frozen=True)
class Roles:
    tokens: tuple[int, ...]  # the text the previous-token and sink scores read
    probe: tuple[int, ...]
    n: int
    seed: int
    scores: dict[str, torch.Tensor]  # role -> (L, H) float64
    loss: ProbeLoss  # the probe's loss, plain
    ablated_loss: ProbeLoss | None = None  # under the intervention, when one was given

    @property
    def nbytes(self) -> int:
        return 8 * sum(s.numel() for s in self.scores.values()) + 16 * len(self.probe) + 256

    def top(self, role: str, k: int) -> list[tuple[int, int, float]]:
        """The k highest-scoring heads for `role`: (layer, head, score), highest first (ties: lower layer, head)."""
        s = self.scores[role]
        cells = [(li, hi, float(s[li, hi])) for li in range(s.shape[0]) for hi in range(s.shape[1])]
        cells.sort(key=lambda c: (-c[2] if not math.isnan(c[2]) else math.inf, c[0], c[1]))
        return cells[:k]


def _diagonals(
    model: Any, ids: Sequence[int], offsets: dict[str, int], rows: range, iv: Intervention = NONE,
    progress: Progress = None,
) -> tuple[dict[str, torch.Tensor], torch.Tensor]:  # fmt: skip
    """One forward pass over `ids` under `iv`: for each name, the mean over query rows `rows` of A[i, i − offset]
    (offset ≥ 0) or A[i, −offset − 1] for a negative offset (−1: key 0), per layer and head (L, H) float64; and the
    stream after the last layer."""
    check_decoder(model)
    n_layer, h = model.arch.n_layer, model.arch.n_heads
    sums = {name: torch.zeros(n_layer, h, dtype=torch.float64) for name in offsets}
    x = model.embed(ids)
    pos = model.rotation(torch.arange(len(ids), device=x.device), x)
    lo, hi = rows.start, rows.stop
    for i in range(n_layer):

        def seen(r0: int, w: torch.Tensor, i: int = i) -> None:
            r = torch.arange(max(lo, r0), min(hi, r0 + w.shape[1]), device=w.device)
            if not r.numel():
                return
            for name, off in offsets.items():
                keys = r - off if off >= 0 else torch.full_like(r, -off - 1)
                sums[name][i] += w[:, r - r0, keys].sum(1, dtype=torch.float64).cpu()

        q, k, v = model.layer_qkv(i, x, pos)
        heads = model.attend(q, k, v, seen)
        x = model.layer_rest(i, x, ablated(heads, iv.heads_at(i), iv.mean))
        if progress is not None:
            progress(i + 1, n_layer)
    count = max(hi - lo, 0)
    return {k: (s / count if count else torch.full_like(s, math.nan)) for k, s in sums.items()}, x


def probe_loss(model: Any, probe: Sequence[int], n: int, x: torch.Tensor) -> ProbeLoss:
    """The probe's per-position loss from its final stream x, and the two copies' means."""
    logp = log_probs(model, x[:-1])
    targets = torch.tensor(list(probe[1:]), device=logp.device)
    losses = (-logp.gather(1, targets.unsqueeze(1)).squeeze(1)).double()
    b = len(probe) - 2 * n  # 1 with a BOS, else 0
    # target index t (in probe) is predicted at position t − 1; first copy t in [b, b + n), second [b + n, b + 2n)
    first = losses[max(b - 1, 0) : b + n - 1]
    second = losses[b + n - 1 : b + 2 * n - 1]
    return ProbeLoss(tuple(losses.tolist()), float(first.mean()), float(second.mean()))


@torch.inference_mode()
def head_roles(
    model: Any, ids: Sequence[int], n: int = 32, seed: int = 0, iv: Intervention = NONE, progress: Progress = None
) -> Roles:  # fmt: skip
    """The four role scores of every head (previous token and sink on `ids`, duplicate token and induction on the
    probe) and the probe's loss; under `iv` (heads knocked out) the probe's loss again, for the two side by side."""
    probe = probe_ids(model, n, seed)
    b = len(probe) - 2 * n
    passes = 3 if iv.ablate else 2

    def part(k: int) -> Progress:
        return None if progress is None else (lambda done, total: progress(k * total + done, passes * total))

    text, _ = _diagonals(model, ids, {"previous_token": 1, "sink": -1}, range(1, len(ids)), progress=part(0))
    on_probe, x = _diagonals(model, probe, {"duplicate_token": n, "induction": n - 1}, range(b + n, b + 2 * n),
                             progress=part(1))  # fmt: skip
    loss = probe_loss(model, probe, n, x)
    knocked = None
    if iv.ablate:
        _, y = _diagonals(model, probe, {}, range(0), Intervention(ablate=iv.ablate, mean=iv.mean), part(2))
        knocked = probe_loss(model, probe, n, y)
    scores = {**text, **on_probe}
    return Roles(tuple(ids), tuple(probe), n, seed, {r: scores[r] for r in ROLES}, loss, knocked)


@torch.inference_mode()
def layer_weights(model: Any, ids: Sequence[int], layer: int) -> torch.Tensor:
    """Layer `layer`'s softmax weights (H, N, N) on `ids` (stage 4 of the lab, for a head's pattern on the probe)."""
    n = len(ids)
    out = torch.zeros(model.arch.n_heads, n, n)

    def seen(i: int, r0: int, w: torch.Tensor) -> None:
        if i == layer:
            out[:, r0 : r0 + w.shape[1], : w.shape[2]] = w.float().cpu()

    model.hidden(ids, layer + 1, observe=seen)
    return out


# -- batched runs: copies of one text side by side ----------------------------------------------------------------

Edit = Callable[[int, torch.Tensor], torch.Tensor]  # (layer, heads (H, copies × n, d_k)) -> heads


def run_copies(model: Any, x: torch.Tensor, first: int, n: int, edit: Edit | None = None) -> torch.Tensor:
    """The streams x (copies × n, d) entering layer `first`, each copy a text of n tokens reading only itself,
    through the layers above; `edit` may change each layer's head outputs before W_O."""
    copies = x.shape[0] // n
    rot = model.rotation(torch.arange(n, device=x.device).repeat(copies), x)
    for i in range(first, model.arch.n_layer):
        q, k, v = model.layer_qkv(i, x, rot)
        o = copies_attention(q, k, v, copies, model.arch.window)
        if edit is not None:
            o = edit(i, o)
        x = model.layer_rest(i, x, o)
    return x


def copies_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, copies: int, window: int = 0) -> torch.Tensor:
    """Causal attention of `copies` texts of n tokens side by side, (H, copies × n, d_k) queries over (H_kv, copies ×
    n, d_k) keys and values, each copy reading only itself: one (n × n) score matrix per copy and head, never the
    (copies × n)² of a block-diagonal mask."""
    h, rows, dk = q.shape
    kv, n = k.shape[0], rows // copies
    g = h // kv
    qs = q.view(kv, g, copies, n, dk)
    ks, vs = k.view(kv, 1, copies, n, dk), v.view(kv, 1, copies, n, dk)
    s = (qs @ ks.transpose(-1, -2)) * (1.0 / math.sqrt(dk))
    hide = torch.ones(n, n, dtype=torch.bool, device=q.device).triu_(1)
    if window:
        hide |= torch.ones(n, n, dtype=torch.bool, device=q.device).tril_(-window)
    w = torch.softmax(s.masked_fill_(hide, float("-inf")), dim=-1)
    return (w @ vs).reshape(h, rows, dk)


def clean_streams(model: Any, ids: Sequence[int]) -> tuple[list[torch.Tensor], torch.Tensor]:
    """The stream entering each layer, and the last layer's output."""
    x = model.embed(ids)
    pos = model.rotation(torch.arange(len(ids), device=x.device), x)
    streams = []
    for i in range(model.arch.n_layer):
        streams.append(x)
        q, k, v = model.layer_qkv(i, x, pos)
        x = model.layer_rest(i, x, model.attend(q, k, v))
    return streams, x


def mean_losses(model: Any, x: torch.Tensor, targets: Sequence[int], loss_from: int) -> list[float]:
    """Each copy's mean loss over positions loss_from.. of its n = len(targets) positions."""
    n = len(targets)
    t = torch.tensor(list(targets), device=x.device)
    out = []
    for c in range(x.shape[0] // n):
        logp = log_probs(model, x[c * n + loss_from : (c + 1) * n])
        out.append(float((-logp.gather(1, t[loss_from:].unsqueeze(1))).double().mean()))
    return out


# -- the pruning curve -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Pruning:
    order: tuple[tuple[int, int], ...]  # least important first
    single: torch.Tensor  # (L, H): the mean loss with that head alone knocked out
    mean_loss: tuple[float, ...]  # entry k: the first k heads of `order` knocked out (k = 0 … L × H)
    mean: bool

    @property
    def clean(self) -> float:
        return self.mean_loss[0]

    @property
    def nbytes(self) -> int:
        return 40 * len(self.mean_loss) + 8 * self.single.numel() + 64

    def can_go(self, rise: float = 0.05) -> int:
        """How many heads can go (in `order`) before the loss rises by more than `rise` (a fraction) over the
        clean loss: the largest k with every entry up to k within that."""
        limit = self.clean * (1 + rise) if self.clean >= 0 else self.clean
        k = 0
        while k + 1 < len(self.mean_loss) and self.mean_loss[k + 1] <= limit:
            k += 1
        return k


@torch.inference_mode()
def prune(
    model: Any, inputs: Sequence[int], targets: Sequence[int], loss_from: int = 0, mean: bool = False,
    progress: Progress = None,
) -> Pruning:  # fmt: skip
    """The pruning curve over a teacher-forced text: every head knocked out alone (the H heads of one layer as H
    copies side by side from the clean stream entering it), ordered by the rise of the mean loss, then the first k
    knocked out together for every k, several k side by side from the clean stream entering the lowest layer any
    of them touches."""
    check_decoder(model)
    n, n_layer, heads = len(inputs), model.arch.n_layer, model.arch.n_heads
    every = n_layer * heads
    per = max(1, ROWS // n)  # copies per batch
    batches = -(-every // per)
    total = n_layer + batches
    streams, out = clean_streams(model, inputs)
    clean = mean_losses(model, out, targets, loss_from)[0]
    single = torch.zeros(n_layer, heads, dtype=torch.float64)
    for first in range(n_layer):
        losses: list[float] = []
        for c0 in range(0, heads, per):  # at most `per` copies at a time: copy c knocks head c0 + c out
            c1 = min(heads, c0 + per)

            def alone(i: int, o: torch.Tensor, first: int = first, c0: int = c0, c1: int = c1) -> torch.Tensor:
                if i != first:
                    return o
                o = o.clone()
                for c in range(c1 - c0):
                    o[c0 + c, c * n : (c + 1) * n] = knock_out(o[c0 + c, c * n : (c + 1) * n], mean)
                return o

            y = run_copies(model, streams[first].repeat(c1 - c0, 1), first, n, alone)
            losses += mean_losses(model, y, targets, loss_from)
        single[first] = torch.tensor(losses, dtype=torch.float64)
        if progress is not None:
            progress(first + 1, total)
    cells = [(li, hi) for li in range(n_layer) for hi in range(heads)]
    order = sorted(cells, key=lambda c: (float(single[c]) - clean, c[0], c[1]))
    curve = [clean]
    for b in range(batches):
        ks = list(range(1 + b * per, min(every, (b + 1) * per) + 1))  # copy c removes order[: ks[c]]
        first = min(li for li, _ in order[: ks[-1]])
        sets = [_by_layer(order[:k]) for k in ks]

        def cumulative(i: int, o: torch.Tensor, sets: list[dict[int, list[int]]] = sets) -> torch.Tensor:
            o = o.clone()
            for c, s in enumerate(sets):
                for h in s.get(i, ()):
                    o[h, c * n : (c + 1) * n] = knock_out(o[h, c * n : (c + 1) * n], mean)
            return o

        y = run_copies(model, streams[first].repeat(len(ks), 1), first, n, cumulative)
        curve += mean_losses(model, y, targets, loss_from)
        if progress is not None:
            progress(n_layer + b + 1, total)
    return Pruning(tuple(order), single, tuple(curve), mean)


def _by_layer(heads: Sequence[tuple[int, int]]) -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for li, hi in heads:
        out.setdefault(li, []).append(hi)
    return out


# -- activation patching -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Cache:
    """One run's activations: the stream entering each layer (L + 1 entries: the last is the output), each layer's
    head outputs (H, N, d_k), attention output after W_O and MLP output (N, d)."""

    resid: list[torch.Tensor]
    heads: list[torch.Tensor]
    attn: list[torch.Tensor]
    mlp: list[torch.Tensor]


def split_layer(model: Any, i: int, x: torch.Tensor, heads: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A Pre-LN layer after its attention, in its two parts: the attention output through W_O and the MLP output
    (the layer's output is x + attn + mlp), the same operations as the family's `layer_rest`."""
    w = model.attention_weights(i)
    attn = linear(heads.transpose(0, 1).reshape(x.shape[0], -1), w.w_o, w.b_o)
    return attn, mlp_of(model, i, x + attn)


def mlp_of(model: Any, i: int, mid: torch.Tensor) -> torch.Tensor:
    bw, arch = model.block_weights(i), model.arch
    return feed_forward(normalise(mid, bw.ln2_w, bw.ln2_b, arch.norm, arch.eps), bw, arch.ffn, arch.gelu)[1]


def cache(model: Any, ids: Sequence[int]) -> Cache:
    x = model.embed(ids)
    pos = model.rotation(torch.arange(len(ids), device=x.device), x)
    c = Cache([x], [], [], [])
    for i in range(model.arch.n_layer):
        q, k, v = model.layer_qkv(i, x, pos)
        heads = model.attend(q, k, v)
        attn, mlp = split_layer(model, i, x, heads)
        x = x + attn + mlp
        c.resid.append(x)
        c.heads.append(heads)
        c.attn.append(attn)
        c.mlp.append(mlp)
    return c


@dataclass(frozen=True)
class Patching:
    clean: tuple[int, ...]
    corrupted: tuple[int, ...]
    metric: str
    answer: int
    wrong: int | None
    clean_value: float
    corrupted_value: float
    grids: dict[str, torch.Tensor]  # resid_pre, attn_out, mlp_out (L, N); head (L, H): normalised effects
    values: dict[str, torch.Tensor]  # the same cells' patched metric values

    @property
    def nbytes(self) -> int:
        return 16 * sum(g.numel() for g in self.grids.values()) + 256


def metric_of(model: Any, last: torch.Tensor, metric: str, answer: int, wrong: int | None) -> torch.Tensor:
    """The metric of final streams at the last position (rows, d): logit[answer] − logit[wrong], or p(answer)."""
    logits = model.unembed(model.final(last)).float()
    if metric == "prob":
        return torch.softmax(logits.double(), -1)[:, answer]
    assert wrong is not None
    return (logits[:, answer] - logits[:, wrong]).double()


def answers(model: Any, clean: Sequence[int], corrupted: Sequence[int]) -> tuple[int, int]:
    """The default answer tokens: the clean prompt's prediction, and the corrupted one's (its second choice when
    both predict the same token)."""
    _, a = clean_streams(model, clean)
    _, b = clean_streams(model, corrupted)
    ca = model.unembed(model.final(a[-1:])).float()[0]
    cb = model.unembed(model.final(b[-1:])).float()[0]
    answer = int(ca.argmax())
    top2 = cb.topk(2).indices.tolist()
    return answer, top2[0] if top2[0] != answer else top2[1]


@torch.inference_mode()
def patch(
    model: Any, clean: Sequence[int], corrupted: Sequence[int], answer: int | None = None,
    wrong: int | None = None, metric: str = "logit_diff", progress: Progress = None,
) -> Patching:  # fmt: skip
    """Activation patching of every layer × position (resid_pre, attn_out, mlp_out) and every head, clean into
    corrupted (prompts of the same token length). The patched runs of one layer all enter the layer above it (a
    stream patched entering layer l + 1, or layer l's attention, MLP or one head patched) and go through the rest
    of the model side by side, at most ROWS rows at a time."""
    check_decoder(model)
    if model.arch.placement != "pre":
        raise ValueError(f"preset: {model.name} is Post-LN: patching reads a Pre-LN layer's attention and MLP outputs")
    if len(clean) != len(corrupted):
        raise ValueError(f"corrupted: {len(corrupted)} tokens, the clean prompt {len(clean)}: they must match")
    if metric not in METRICS:
        raise ValueError(f"metric: one of {', '.join(METRICS)}")
    n, n_layer, h = len(clean), model.arch.n_layer, model.arch.n_heads
    if answer is None or (metric == "logit_diff" and wrong is None):
        a, w = answers(model, clean, corrupted)
        answer = a if answer is None else answer
        wrong = w if wrong is None else wrong
    if metric == "prob":
        wrong = None
    good, bad = cache(model, clean), cache(model, corrupted)

    def value(x: torch.Tensor) -> list[float]:
        return metric_of(model, x[n - 1 :: n], metric, answer, wrong).tolist()

    clean_value, corrupted_value = value(good.resid[-1])[0], value(bad.resid[-1])[0]
    values = {k: torch.zeros(n_layer, n, dtype=torch.float64) for k in KINDS}
    values["head"] = torch.zeros(n_layer, h, dtype=torch.float64)

    def through(x: torch.Tensor, first: int) -> list[float]:  # copies entering layer `first`
        out: list[float] = []
        per = max(1, ROWS // n)
        for c0 in range(0, x.shape[0] // n, per):
            part = x[c0 * n : (c0 + per) * n]
            out += value(run_copies(model, part, first, n) if first < n_layer else part)
        return out

    eye = torch.eye(n, dtype=torch.bool, device=good.resid[0].device)
    for li in range(-1, n_layer):
        batch = []
        above = li + 1
        if above < n_layer:  # the stream entering layer above, patched at each position
            batch.append(torch.where(eye.unsqueeze(-1), good.resid[above].unsqueeze(0), bad.resid[above]))
        if li >= 0:
            x, out = bad.resid[li], bad.resid[above]
            mid = x + good.attn[li]  # layer li's attention output patched: the MLP reads the patched row
            attn_rows = mid + mlp_of(model, li, mid)
            batch.append(torch.where(eye.unsqueeze(-1), attn_rows.unsqueeze(0), out))
            mlp_rows = x + bad.attn[li] + good.mlp[li]
            batch.append(torch.where(eye.unsqueeze(-1), mlp_rows.unsqueeze(0), out))
            o = bad.heads[li].repeat(1, h, 1)  # copy g: head g's output from the clean run
            for g in range(h):
                o[g, g * n : (g + 1) * n] = good.heads[li][g]
            batch.append(model.layer_rest(li, x.repeat(h, 1), o).view(h, n, -1))
        got = through(torch.cat(batch).reshape(-1, x_dim(good)), above)
        k = 0
        if above < n_layer:
            values["resid_pre"][above] = torch.tensor(got[:n], dtype=torch.float64)
            k = n
        if li >= 0:
            values["attn_out"][li] = torch.tensor(got[k : k + n], dtype=torch.float64)
            values["mlp_out"][li] = torch.tensor(got[k + n : k + 2 * n], dtype=torch.float64)
            values["head"][li] = torch.tensor(got[k + 2 * n : k + 2 * n + h], dtype=torch.float64)
        if progress is not None:
            progress(li + 2, n_layer + 1)
    span = clean_value - corrupted_value
    grids = {k: (v - corrupted_value) / span if span != 0 else torch.full_like(v, math.nan) for k, v in values.items()}
    return Patching(tuple(clean), tuple(corrupted), metric, answer, wrong, clean_value, corrupted_value, grids, values)


def x_dim(c: Cache) -> int:
    return int(c.resid[0].shape[-1])
