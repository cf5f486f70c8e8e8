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
from dataclasses import dataclass, replace
from typing import Any

import torch

from .attention import linear
from .block import feed_forward, normalise
from .predict import NONE, Intervention, Progress, ablated, check_decoder, log_probs

ROLES = ("previous_token", "sink", "duplicate_token", "induction")
KINDS = ("resid_pre", "attn_out", "mlp_out")
METRICS = ("logit_diff", "prob")
ROWS = 1024  # rows (copies × tokens) run side by side at most
LOGITS = 32 << 20  # bytes of logits at once


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
    model: Any, ids: Sequence[int], n: int = 32, seed: int = 0, iv: Intervention = NONE, progress: Progress = None,
    plain: Roles | None = None,
) -> Roles:  # fmt: skip
    """The four role scores of every head (previous token and sink on `ids`, duplicate token and induction on the
    probe) and the probe's loss; under `iv` (heads knocked out) the probe's loss again, for the two side by side.
    The scores and the plain loss never depend on `iv`: `plain`, the same ids, n and seed's roles already computed
    without it, gives them, and only the knocked pass runs (one pass of three)."""
    probe = probe_ids(model, n, seed)
    if plain is not None:
        if plain.tokens != tuple(ids) or plain.n != n or plain.seed != seed:
            raise ValueError("plain: the roles of another text, probe length or seed")
        if not iv.ablate:
            return replace(plain, ablated_loss=None)
        _, y = _diagonals(model, probe, {}, range(0), Intervention(ablate=iv.ablate, mean=iv.mean), progress)
        return replace(plain, ablated_loss=probe_loss(model, probe, n, y))
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
    run = lineage(model, ids)
    return run.streams[:-1], run.streams[-1]


def logit_rows(model: Any) -> int:
    """How many rows of logits exist at once: about LOGITS bytes of them (one reused buffer)."""
    return max(1, LOGITS // (4 * model.arch.vocab))


def mean_losses(model: Any, x: torch.Tensor, targets: Sequence[int], loss_from: int) -> list[float]:
    """Each copy's mean loss over positions loss_from.. of its n = len(targets) positions, from the copies' final
    streams x (copies × n, d). The logits of a few copies at a time go into one reused buffer (a fresh (rows,
    vocab) tensor costs its page faults every time); the loss is log_probs' (the logsumexp of max, then a sum of
    exp), taken in place."""
    n = len(targets)
    m = n - loss_from
    copies = x.shape[0] // n
    rows = x.view(copies, n, -1)[:, loss_from:].reshape(copies * m, -1)
    t = torch.tensor(list(targets[loss_from:]), device=x.device).repeat(copies).unsqueeze(1)
    per = max(1, logit_rows(model) // m) * m  # whole copies per chunk
    probe = model.unembed(model.final(rows[:1]))
    buf = (
        torch.empty((min(per, rows.shape[0]), probe.shape[1]), device=x.device)
        if probe.dtype == torch.float32
        else None
    )
    losses = []
    for r0 in range(0, rows.shape[0], per):
        h = model.final(rows[r0 : r0 + per])
        logits = model.unembed(h, out=buf[: h.shape[0]]) if buf is not None else model.unembed(h).float()
        target = logits.gather(1, t[r0 : r0 + per]).squeeze(1)
        top = logits.amax(1, keepdim=True)
        lse = logits.sub_(top).exp_().sum(1).log_() + top.squeeze(1)
        losses.append(lse - target)
    loss = torch.cat(losses).double().view(copies, m)
    return loss.mean(1).tolist()


# -- runs with heads knocked out, sharing what they share -----------------------------------------------------------

Heads = frozenset[tuple[int, int]]


@dataclass(frozen=True)
class Lineage:
    """One run of a text with a set of heads knocked out: the stream entering each layer (L + 1 entries: the last
    is the output) and each layer's head outputs (H, N, d_k) before that layer's knock-outs."""

    streams: list[torch.Tensor]
    heads: list[torch.Tensor]


def lineage(model: Any, ids: Sequence[int]) -> Lineage:
    """The plain run's lineage."""
    x = model.embed(ids)
    pos = model.rotation(torch.arange(len(ids), device=x.device), x)
    streams, heads = [], []
    for i in range(model.arch.n_layer):
        streams.append(x)
        q, k, v = model.layer_qkv(i, x, pos)
        o = model.attend(q, k, v)
        heads.append(o)
        x = model.layer_rest(i, x, o)
    streams.append(x)
    return Lineage(streams, heads)


def knocked_runs(
    model: Any, n: int, base: Lineage, base_set: Heads, sets: Sequence[Heads], mean: bool, keep: int | None = None,
    progress: Callable[[int], None] | None = None,
) -> tuple[torch.Tensor, Lineage | None]:  # fmt: skip
    """The final streams (len(sets) × n, d) of the runs with each set of heads knocked out, every set holding
    `base_set`, whose run is `base`; with `keep`, the lineage of sets[keep] as well. Runs that have knocked out the
    same heads below a layer are one run there (a state): layer by layer each state is computed once, the states
    side by side as copies of the text (each reads only itself), and a state that knocked out nothing beyond
    `base_set` is read from `base`. So the H single knock-outs of a layer share everything below it, and the
    cumulative sets order[:k] share everything below the layer of the head that k adds. `progress(layers)` after
    each layer, with the layers done (those below the first knock-out count as done)."""
    n_layer, n_heads = model.arch.n_layer, model.arch.n_heads
    extra = [tuple(sorted(s - base_set)) for s in sets]
    first = min((li for e in extra for li, _ in e), default=n_layer)
    streams, heads = list(base.streams[:first]), list(base.heads[:first])
    own: dict[tuple[tuple[int, int], ...], int] = {}  # a state's key (its extra heads below the layer) -> block of x
    x = base.streams[first][:0]
    rot = model.rotation(torch.arange(n, device=x.device).repeat(max(1, len(sets))), x)
    for i in range(first, n_layer):
        s_in = x.shape[0] // n
        if s_in:
            q, k, v = model.layer_qkv(i, x, _first_rows(rot, s_in * n))
            o = torch.cat([base.heads[i], copies_attention(q, k, v, s_in, model.arch.window)], 1)
            x_all = torch.cat([base.streams[i], x])
        else:
            o, x_all = base.heads[i], base.streams[i]
        below = [tuple(h for h in e if h[0] < i) for e in extra]
        upto = [tuple(h for h in e if h[0] <= i) for e in extra]
        if keep is not None:  # the kept run's stream entering layer i and its heads there
            b = 0 if not below[keep] else own[below[keep]] + 1
            streams.append(x_all[b * n : (b + 1) * n])
            heads.append(o[:, b * n : (b + 1) * n])
        out: dict[tuple[tuple[int, int], ...], int] = {}
        src: list[int] = []
        for key, under in zip(upto, below, strict=True):
            if key and key not in out:
                out[key] = len(src)
                src.append(0 if not under else own[under] + 1)
        if not src:
            own, x = out, x[:0]
            if progress is not None:
                progress(i + 1)
            continue
        rows = (torch.tensor(src, device=x.device).unsqueeze(1) * n + torch.arange(n, device=x.device)).flatten()
        o = o.index_select(1, rows)
        hit = torch.zeros(n_heads, len(src), dtype=torch.bool, device=x.device)
        for h in {h for li, h in base_set if li == i}:
            hit[h] = True
        for key, t in out.items():
            for li, h in key:
                if li == i:
                    hit[h, t] = True
        view = o.view(n_heads, len(src), n, -1)
        if mean:
            csum = view.cumsum(2) / torch.arange(1, n + 1, device=o.device, dtype=o.dtype).view(1, 1, n, 1)
            o = torch.where(hit.view(n_heads, len(src), 1, 1), csum, view).view_as(o)
        else:
            view.masked_fill_(hit.view(n_heads, len(src), 1, 1), 0.0)
        x = model.layer_rest(i, x_all.index_select(0, rows), o)
        own = out
        if progress is not None:
            progress(i + 1)
    ends = [base.streams[n_layer] if not e else x[own[e] * n : (own[e] + 1) * n] for e in extra]
    kept = None
    if keep is not None:
        streams.append(ends[keep])
        kept = Lineage(streams, heads)
    return torch.cat(ends) if ends else x, kept


def _first_rows(rot: Any, rows: int) -> Any:
    """The first `rows` rows of a `rotation` (RoPE's Angles, or positions)."""
    return type(rot)(*(t[:rows] for t in rot)) if isinstance(rot, tuple) else rot[:rows]


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
    """The pruning curve over a teacher-forced text: every head knocked out alone, ordered by the rise of the mean
    loss, then the first k knocked out together for every k. Both go through `knocked_runs` at most ROWS rows at a
    time: the single knock-outs of consecutive layers together from the plain run (a head's run is the plain one
    below its layer), the cumulative sets order[:k] for consecutive k together from the run of the set before them
    (order[:k + 1]'s run is order[:k]'s below the layer of order[k])."""
    check_decoder(model)
    n, n_layer, heads = len(inputs), model.arch.n_layer, model.arch.n_heads
    every = n_layer * heads
    per = max(1, ROWS // n)  # sets per batch
    cells = [(li, hi) for li in range(n_layer) for hi in range(heads)]
    batches = -(-every // per)
    total = 2 * batches * n_layer  # a layer of a batch is a step

    def step(b: int) -> Callable[[int], None] | None:
        return None if progress is None else (lambda layers: progress(b * n_layer + layers, total))

    clean_run = lineage(model, inputs)
    clean = mean_losses(model, clean_run.streams[-1], targets, loss_from)[0]
    single_losses: list[float] = []
    for b, c0 in enumerate(range(0, every, per)):
        y, _ = knocked_runs(model, n, clean_run, frozenset(), [frozenset([c]) for c in cells[c0 : c0 + per]], mean,
                            progress=step(b))  # fmt: skip
        single_losses += mean_losses(model, y, targets, loss_from)
    single = torch.tensor(single_losses, dtype=torch.float64).view(n_layer, heads)
    order = sorted(cells, key=lambda c: (float(single[c]) - clean, c[0], c[1]))
    curve = [clean]
    base, base_set = clean_run, frozenset[tuple[int, int]]()
    for b, k0 in enumerate(range(0, every, per)):  # sets order[:k], k = k0 + 1 … k0 + per, from order[:k0]'s run
        sets = [frozenset(order[:k]) for k in range(k0 + 1, min(every, k0 + per) + 1)]
        y, kept = knocked_runs(model, n, base, base_set, sets, mean, keep=len(sets) - 1, progress=step(batches + b))
        curve += mean_losses(model, y, targets, loss_from)
        assert kept is not None
        base, base_set = kept, sets[-1]
    return Pruning(tuple(order), single, tuple(curve), mean)


# -- activation patching -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Cache:
    """One run's activations: the stream entering each layer (L + 1 entries: the last is the output), each layer's
    head outputs (H, N, d_k), attention output after W_O and MLP output (N, d), and its keys and values (H_kv, N,
    d_k, rotated)."""

    resid: list[torch.Tensor]
    heads: list[torch.Tensor]
    attn: list[torch.Tensor]
    mlp: list[torch.Tensor]
    keys: list[torch.Tensor]
    values: list[torch.Tensor]


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
    c = Cache([x], [], [], [], [], [])
    for i in range(model.arch.n_layer):
        q, k, v = model.layer_qkv(i, x, pos)
        heads = model.attend(q, k, v)
        attn, mlp = split_layer(model, i, x, heads)
        x = x + attn + mlp
        c.resid.append(x)
        c.heads.append(heads)
        c.attn.append(attn)
        c.mlp.append(mlp)
        c.keys.append(k)
        c.values.append(v)
    return c


def run_from(model: Any, run: Cache, first: int, starts: Sequence[int], x: torch.Tensor) -> torch.Tensor:
    """Copies of `run` changed from layer `first` on, copy c from position starts[c] on: x holds only the changed
    rows (copy c's positions starts[c] … N − 1, copy after copy), as they enter layer `first`. A causal model's
    earlier positions never read a later change, so they stay `run`'s: each layer reads their keys and values
    from its cache. The final stream at each copy's last position (copies, d)."""
    n = run.resid[0].shape[0]
    dev = x.device
    copies = len(starts)
    pos = torch.cat([torch.arange(p, n, device=dev) for p in starts])
    at = torch.cat([c * n + torch.arange(p, n, device=dev) for c, p in enumerate(starts)])  # each row's place
    last = torch.tensor([n - p for p in starts], device=dev).cumsum(0) - 1  # each copy's last row
    rot = model.rotation(pos, x)
    for i in range(first, model.arch.n_layer):
        q, k, v = model.layer_qkv(i, x, rot)
        keys, values = run.keys[i].repeat(1, copies, 1), run.values[i].repeat(1, copies, 1)
        keys[:, at], values[:, at] = k, v
        queries = q.new_zeros(q.shape[0], copies * n, q.shape[2])  # the rows before a copy's start: not read
        queries[:, at] = q
        o = copies_attention(queries, keys, values, copies, model.arch.window)[:, at]
        if i == model.arch.n_layer - 1:  # only the last position's output is read
            x, o = x[last], o[:, last]
        x = model.layer_rest(i, x, o)
    return x if first < model.arch.n_layer else x[last]


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
    """The metric of final streams at the last position (rows, d): logit[answer] − logit[wrong], or p(answer).
    A logit difference reads only its two tokens' logits (their rows of the output projection), not the whole
    vocabulary's: on SmolLM2 the (rows, 49,152) products were an eighth of /patch's time."""
    if metric == "prob":
        logits = model.unembed(model.final(last)).float()
        return torch.softmax(logits.double(), -1)[:, answer]
    assert wrong is not None
    two = (model.final(last) @ model.unembedding([answer, wrong]).T).float()  # (rows, 2): answer's, wrong's
    return (two[:, 0] - two[:, 1]).double()


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
    of the model side by side (`run_from`), at most ROWS rows at a time: a run patched at position p from p on
    only (its earlier positions are the corrupted run's), and a cell whose clean activation equals the corrupted
    one (a shared first token) is the corrupted run itself, not run again."""
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

    def value(last: torch.Tensor) -> list[float]:
        return metric_of(model, last, metric, answer, wrong).tolist()

    clean_value, corrupted_value = value(good.resid[-1][-1:])[0], value(bad.resid[-1][-1:])[0]
    values = {k: torch.full((n_layer, n), corrupted_value, dtype=torch.float64) for k in KINDS}
    values["head"] = torch.full((n_layer, h), corrupted_value, dtype=torch.float64)

    def differs(a: torch.Tensor, b: torch.Tensor) -> int | None:  # the first row where a and b differ
        rows = (a != b).reshape(a.shape[0], -1).any(1).nonzero()
        return int(rows[0]) if rows.numel() else None

    for li in range(-1, n_layer):
        above = li + 1
        cells: list[tuple[str, int, int, int, torch.Tensor]] = []  # (grid, row, column, start, rows from start)
        if above < n_layer:  # the stream entering layer `above`, patched at each position
            for p in range(n):
                if not torch.equal(good.resid[above][p], bad.resid[above][p]):
                    rows = torch.cat([good.resid[above][p : p + 1], bad.resid[above][p + 1 :]])
                    cells.append(("resid_pre", above, p, p, rows))
        if li >= 0:
            x, out = bad.resid[li], bad.resid[above]
            mid = x + good.attn[li]  # layer li's attention output patched: the MLP reads the patched row
            attn_rows = mid + mlp_of(model, li, mid)
            mlp_rows = x + bad.attn[li] + good.mlp[li]
            for p in range(n):
                if not torch.equal(good.attn[li][p], bad.attn[li][p]):
                    cells.append(("attn_out", li, p, p, torch.cat([attn_rows[p : p + 1], out[p + 1 :]])))
                if not torch.equal(good.mlp[li][p], bad.mlp[li][p]):
                    cells.append(("mlp_out", li, p, p, torch.cat([mlp_rows[p : p + 1], out[p + 1 :]])))
            starts = [differs(good.heads[li][g], bad.heads[li][g]) for g in range(h)]
            o = bad.heads[li].repeat(1, h, 1)  # copy g: head g's output from the clean run
            for g in range(h):
                o[g, g * n : (g + 1) * n] = good.heads[li][g]
            patched = model.layer_rest(li, x.repeat(h, 1), o).view(h, n, -1)
            for g, start in enumerate(starts):
                if start is not None:
                    cells.append(("head", li, g, start, patched[g, start:]))
        i = 0
        while i < len(cells):  # at most ROWS rows at a time (at least one run)
            j, size = i, 0
            while j < len(cells) and (j == i or size + n - cells[j][3] <= ROWS):
                size += n - cells[j][3]
                j += 1
            part = cells[i:j]
            got = value(run_from(model, bad, above, [c[3] for c in part], torch.cat([c[4] for c in part])))
            for (kind, r, col, _, _), v in zip(part, got, strict=True):
                values[kind][r, col] = v
            i = j
        if progress is not None:
            progress(li + 2, n_layer + 1)
    span = clean_value - corrupted_value
    grids = {k: (v - corrupted_value) / span if span != 0 else torch.full_like(v, math.nan) for k, v in values.items()}
    return Patching(tuple(clean), tuple(corrupted), metric, answer, wrong, clean_value, corrupted_value, grids, values)
