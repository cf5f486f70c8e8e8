"""From attention to prediction: what a decoder predicts at every position, and what changes when we intervene.

Teacher forcing (the training view). A text of ids t_0 … t_{m-1} becomes the sequence s = [BOS] t_0 … t_{m-1} [EOS]
(each end only when the model defines that token and it is asked for); the inputs are s[:-1] and the targets s[1:],
shifted by one. One forward pass gives every position's next-token distribution at once; position i is scored by
loss_i = −log p(target_i | inputs_0 … inputs_i). The mean over the scored positions (from `loss_from` on: a loss
mask, as supervised fine-tuning scores only the answer) is what training minimises; exp(mean) is the perplexity.
A loss mask changes which positions count, never what any position attends to.

Interventions, applied inside the same forward pass (the model's own layers: engine/models/families.py):
- `ablate`: heads (layer, head) whose output is replaced before W_O, by zeros or by its running mean (position t
  gets the head's mean output over positions 0 … t, so a mean-ablated head still reads no future token);
- `mask_off`: layers whose causal mask is removed (every query reads every key, the future included);
- `drop_sink`: layers where no query but the first reads position 0 (its weight is given to the other keys).

Comparisons: two runs over sequences of the same length give, per position, the KL divergence of their next-token
distributions and the largest |Δ| of their logits; `leak` replaces one token and shows which earlier positions
change (none with the causal mask: the leakage proof). The logit lens sends each layer's residual stream through
the final norm and the unembedding. A head ranking ablates one head at a time, reusing the clean residual stream
below the head's layer.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from .errors import Message, SpecError

TOP = 5
BLOCK = 256  # query rows per block: at most H × BLOCK × N scores exist at once
LOGIT_ROWS = 32  # rows of logits the head ranking computes at once (SmolLM2: 6.3 MB)

Progress = Callable[[int, int], None] | None


@dataclass(frozen=True)
class Intervention:
    """What to change in a forward pass; the empty one changes nothing."""

    ablate: tuple[tuple[int, int], ...] = ()  # (layer, head)
    mean: bool = False  # mean-ablate (running mean over positions 0 … t) instead of zeroing
    mask_off: tuple[int, ...] = ()  # layers without the causal mask
    drop_sink: tuple[int, ...] = ()  # layers where queries after the first do not read position 0

    def __bool__(self) -> bool:
        return bool(self.ablate or self.mask_off or self.drop_sink)

    def heads_at(self, layer: int) -> list[int]:
        return sorted({h for i, h in self.ablate if i == layer})

    def check(self, n_layer: int, n_heads: int) -> None:
        """Raises SpecError (a ValueError) naming the field when a layer or head is out of range."""
        for i, h in self.ablate:
            if not (0 <= i < n_layer and 0 <= h < n_heads):
                raise SpecError("ablate", Message("not_a_head", layer=i, head=h, last_layer=n_layer - 1,
                                                  last_head=n_heads - 1))  # fmt: skip
        for name, layers in (("mask_off_layers", self.mask_off), ("drop_sink_layers", self.drop_sink)):
            for i in layers:
                if not 0 <= i < n_layer:
                    raise SpecError(name, Message("not_a_layer", layer=i, last=n_layer - 1))


NONE = Intervention()


def attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    causal: bool = True,
    window: int = 0,
    drop_sink: bool = False,
    copies: int = 1,
) -> torch.Tensor:
    """softmax(q kᵀ/√d_k + mask) v for (H, N, d_k) queries over (H_kv, N, d_k) keys and values (grouped-query
    heads share K/V without copies), BLOCK query rows at a time. `causal`: each query reads keys up to itself (the
    last `window` of them when window > 0); otherwise every key. `drop_sink`: queries after the first skip key 0.
    `copies` > 1: the rows are that many texts of N / copies tokens one after another, each reading only itself."""
    h, n, dk = q.shape
    kv = k.shape[0]
    group = h // kv
    out = torch.empty_like(q)
    keys, values = k.unsqueeze(1), v.unsqueeze(1)
    scale = 1.0 / math.sqrt(dk)
    m = n // copies
    where = torch.arange(n, device=q.device)
    cols, col_copy = where % m, where // m
    for r0 in range(0, n, BLOCK):
        r1 = min(n, r0 + BLOCK)
        rows, row_copy = cols[r0:r1].unsqueeze(1), col_copy[r0:r1].unsqueeze(1)
        s = (q[:, r0:r1].reshape(kv, group, r1 - r0, dk) @ keys.transpose(2, 3)) * scale
        hide = col_copy != row_copy
        if causal:
            hide |= cols > rows
            if window:
                hide |= cols <= rows - window
        if drop_sink:
            hide |= (cols == 0) & (rows > 0)
        w = torch.softmax(s.masked_fill_(hide, float("-inf")), dim=-1)
        out[:, r0:r1] = (w @ values).reshape(h, r1 - r0, dk)
    return out


def running_mean(x: torch.Tensor) -> torch.Tensor:
    """Row t of the result is the mean of rows 0 … t of x (N, d_k): what a mean-ablated head outputs at t."""
    return x.cumsum(0) / torch.arange(1, x.shape[0] + 1, device=x.device, dtype=x.dtype).unsqueeze(1)


def knock_out(x: torch.Tensor, mean: bool) -> torch.Tensor:
    """One head's output (N, d_k) knocked out: zeros, or its running mean."""
    return running_mean(x) if mean else torch.zeros_like(x)


def ablated(heads: torch.Tensor, which: Sequence[int], mean: bool) -> torch.Tensor:
    """The heads (H, N, d_k) with `which` knocked out (zeros, or their running mean over positions)."""
    if not which:
        return heads
    heads = heads.clone()
    for h in which:
        heads[h] = knock_out(heads[h], mean)
    return heads


def layer(model: Any, i: int, x: torch.Tensor, pos: Any, iv: Intervention = NONE) -> torch.Tensor:
    """Layer i of `model` on the residual stream x (N, d), with the intervention's changes at this layer."""
    q, k, v = model.layer_qkv(i, x, pos)
    off, sink = i in iv.mask_off, i in iv.drop_sink
    if off or sink:
        heads = attention(q, k, v, causal=not off, window=model.arch.window, drop_sink=sink)
    else:
        heads = model.attend(q, k, v)
    return model.layer_rest(i, x, ablated(heads, iv.heads_at(i), iv.mean))


def check_decoder(model: Any) -> None:
    if not getattr(model, "generates", False):
        raise ValueError(f"preset: {model.name} is an encoder: predictions need a decoder (a causal language model)")


@torch.inference_mode()
def residuals(
    model: Any, ids: Sequence[int], iv: Intervention = NONE, progress: Progress = None,
    each: Callable[[int, torch.Tensor], None] | None = None, start: tuple[int, torch.Tensor] | None = None,
) -> torch.Tensor:  # fmt: skip
    """The residual stream after the last layer (N, d); `each(i, x)` sees the stream after layer i (the logit
    lens); `start=(i, x)` begins at layer i from a stream computed before (a head ranking reuses the clean one)."""
    check_decoder(model)
    n_layer = model.arch.n_layer
    first, x = start if start is not None else (0, model.embed(ids))
    pos = model.rotation(torch.arange(len(ids), device=x.device), x)  # RoPE's angles once for every layer
    for i in range(first, n_layer):
        x = layer(model, i, x, pos, iv)
        if each is not None:
            each(i, x)
        if progress is not None:
            progress(i + 1 - first, n_layer - first)
    return x


def log_probs(model: Any, x: torch.Tensor) -> torch.Tensor:
    """log softmax of the logits of residual stream x (N, d): (N, vocab), float32. The normaliser is logsumexp's
    (max, then a cascade sum of exp): within ~2e-6 of float64 over SmolLM2's 49,152 tokens, where float32
    `log_softmax` is off by ~2.5e-5."""
    logits = model.unembed(model.final(x)).float()
    return logits.sub_(torch.logsumexp(logits, dim=-1, keepdim=True))


# -- teacher forcing ---------------------------------------------------------------------------------------------


def sequence(model: Any, ids: Sequence[int], bos: bool, eos: bool) -> list[int]:
    """The training sequence of a text's ids: the model's BOS before it and its EOS after it, when asked for and
    defined (and not already there)."""
    out = list(ids)
    b = model.bos_id
    if bos and b is not None and (not out or out[0] != b):
        out.insert(0, b)
    e = model.eos_ids[0] if model.eos_ids else None
    if eos and e is not None and (not out or out[-1] != e):
        out.append(e)
    return out


@dataclass(frozen=True)
class Scored:
    """One position of a run: the target's probability, loss and rank, and the most likely tokens there."""

    p_target: float
    loss: float
    rank: int  # 1 = the target was the most likely token
    top_ids: tuple[int, ...]
    top_probs: tuple[float, ...]


@dataclass(frozen=True)
class Run:
    """A teacher-forced forward pass over `inputs` scored against `targets` (same length)."""

    inputs: tuple[int, ...]
    targets: tuple[int, ...]
    positions: tuple[Scored, ...]
    loss_from: int
    mean_loss: float
    perplexity: float

    @property
    def nbytes(self) -> int:
        return 256 * len(self.positions) + 64


def scored(logp: torch.Tensor, inputs: Sequence[int], targets: Sequence[int], loss_from: int, top: int = TOP) -> Run:
    """Every position of log-probabilities `logp` (N, vocab), read from `inputs`, scored against `targets`."""
    t = torch.tensor(list(targets), device=logp.device)
    lp = logp.gather(1, t.unsqueeze(1)).squeeze(1)
    rank = (logp > lp.unsqueeze(1)).sum(1) + 1
    tp, ti = logp.topk(min(top, logp.shape[1]), dim=1)
    losses = (-lp).double()
    ps, ls, rs, ids, probs = (-losses).exp().tolist(), losses.tolist(), rank.tolist(), ti.tolist(), tp.exp().tolist()
    positions = tuple(Scored(ps[i], ls[i], rs[i], tuple(ids[i]), tuple(probs[i])) for i in range(len(ls)))
    counted = losses[loss_from:]
    mean = float(counted.mean()) if counted.numel() else float("nan")
    return Run(tuple(inputs), tuple(targets), positions, loss_from, mean, perplexity(mean))


def perplexity(mean_loss: float) -> float:
    """e to the mean loss: inf past what a float holds (a very confident, very wrong model's mean loss can be
    over 709.78, where math.exp raises), NaN for no positions."""
    try:
        return math.exp(mean_loss)
    except OverflowError:
        return math.inf


@dataclass(frozen=True)
class Prediction:
    """A teacher-forced run, and the run it is compared with (`before`: the same text without the intervention, or
    the unreplaced text under the same intervention), position by position."""

    run: Run
    before: Run | None = None
    kl: tuple[float, ...] = ()  # KL(before ‖ run) of each position's next-token distribution
    max_abs_diff: tuple[float, ...] = ()  # max |Δ logit| at each position
    replaced: tuple[int, int] | None = None  # (position, token id) when a token was replaced

    @property
    def nbytes(self) -> int:
        return self.run.nbytes * 2 + 16 * len(self.kl)


def _forward(model: Any, inputs: Sequence[int], iv: Intervention, progress: Progress) -> torch.Tensor:
    return log_probs(model, residuals(model, inputs, iv, progress))


@torch.inference_mode()
def predict(
    model: Any, seq: Sequence[int], iv: Intervention = NONE, loss_from: int = 0,
    replace: tuple[int, int] | None = None, top: int = TOP, progress: Progress = None,
) -> Prediction:  # fmt: skip
    """Teacher forcing over the training sequence `seq` (see `sequence`), under `iv`; `replace=(i, t)` puts token t at
    input position i: the text becomes another text, so t is also position i − 1's target (scored against t). Compared
    with the plain run (when `iv` changes something) or with the unreplaced text under the same `iv` (when `replace`
    is given: each run scored against its own text's targets)."""
    inputs, targets = list(seq[:-1]), list(seq[1:])
    changed, changed_targets = list(inputs), list(targets)
    if replace is not None:
        changed[replace[0]] = replace[1]
        if replace[0] > 0:  # the shift by one: the token put at input i is what position i − 1 predicts
            changed_targets[replace[0] - 1] = replace[1]
    compare = replace is not None or bool(iv)
    passes = 2 if compare else 1

    def each_pass(k: int) -> Progress:
        if progress is None:
            return None
        return lambda done, total: progress(k * total + done, passes * total)

    logp = _forward(model, changed, iv, each_pass(0))
    run = scored(logp, changed, changed_targets, loss_from, top)
    if not compare:
        return Prediction(run)
    base = _forward(model, inputs, iv if replace is not None else NONE, each_pass(1))
    before = scored(base, inputs, targets, loss_from, top)
    kl = (base.exp() * (base - logp)).sum(1).clamp_min(0)
    return Prediction(run, before, tuple(kl.tolist()), tuple(max_abs_diff(base, logp).tolist()), replace)


@dataclass(frozen=True)
class Pair:
    """Two texts under the same intervention, compared position by position where both have one: `kl[i]` is
    KL(a ‖ b) of the two next-token distributions at input position i and `max_abs_diff[i]` their max |Δ log p|.
    Under the causal mask a position whose inputs up to it are the same in both texts predicts exactly alike."""

    a: Run
    b: Run
    kl: tuple[float, ...]
    max_abs_diff: tuple[float, ...]

    @property
    def nbytes(self) -> int:
        return self.a.nbytes + self.b.nbytes + 16 * len(self.kl)


@torch.inference_mode()
def predict_pair(
    model: Any, seq_a: Sequence[int], seq_b: Sequence[int], iv: Intervention = NONE, loss_from: int = 0,
    top: int = TOP, progress: Progress = None,
) -> Pair:  # fmt: skip
    """Teacher forcing over two training sequences under the same `iv` (two prompts side by side).

    Under the causal mask both run at the same length, the shorter padded at its end with its own last input (the
    padded positions are dropped; no earlier position can read them): the same shapes make the same rounding, so
    positions whose inputs agree predict bit for bit alike. Run at their own lengths, a 9- and a 10-token text
    differ there by some 1e-5 in log-probability from the matrix products' blocking alone. With the mask off at a
    layer each runs unpadded (its positions read every later one)."""

    def each_pass(k: int) -> Progress:
        return None if progress is None else (lambda done, total: progress(k * total + done, 2 * total))

    runs, logps = [], []
    length = 0 if iv.mask_off else max(len(seq_a), len(seq_b)) - 1
    for k, seq in enumerate((seq_a, seq_b)):
        inputs, targets = list(seq[:-1]), list(seq[1:])
        padded = inputs + inputs[-1:] * (length - len(inputs))
        logp = _forward(model, padded, iv, each_pass(k))[: len(inputs)]
        runs.append(scored(logp, inputs, targets, min(loss_from, len(inputs) - 1), top))
        logps.append(logp)
    n = min(len(logps[0]), len(logps[1]))
    pa, pb = logps[0][:n], logps[1][:n]
    kl = (pa.exp() * (pa - pb)).sum(1).clamp_min(0)
    return Pair(runs[0], runs[1], tuple(kl.tolist()), tuple(max_abs_diff(pa, pb).tolist()))


def max_abs_diff(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """max |Δ| per position between two runs' log-probabilities (N, vocab): 0 exactly when the distributions agree
    (the logits themselves may differ by a constant per row, which changes no probability)."""
    return (a - b).abs().amax(1)


# -- the logit lens ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Lens:
    """Each layer's residual stream read as a prediction: top tokens and the probability of the model's final
    prediction, layer × position; the last layer is the model's own output."""

    inputs: tuple[int, ...]
    top_ids: torch.Tensor  # (L, N, top)
    top_probs: torch.Tensor  # (L, N, top)
    p_final: torch.Tensor  # (L, N): probability of the final prediction (the model's top-1) at each layer
    final_ids: tuple[int, ...]  # the model's top-1 at each position
    first_top1: tuple[int | None, ...]  # the first layer from which the final prediction stays top-1
    before: Lens | None = None  # the same text without the intervention (when there is one), side by side

    @property
    def nbytes(self) -> int:
        own = 3 * self.top_ids.numel() * 8 + self.p_final.numel() * 4 + 64
        return own + (self.before.nbytes if self.before is not None else 0)


@torch.inference_mode()
def lens(model: Any, inputs: Sequence[int], iv: Intervention = NONE, top: int = TOP, progress: Progress = None) -> Lens:
    """The logit lens over `inputs` (under `iv`): one forward pass, each layer's stream through final norm and
    unembedding, keeping only the top tokens and a full distribution's worth of one layer at a time. Under an
    intervention the plain text's lens comes too (`before`), for the two side by side."""
    if not iv:
        return _lens(model, inputs, iv, top, progress)

    def half(k: int) -> Progress:
        return None if progress is None else (lambda done, total: progress(k * total + done, 2 * total))

    after = _lens(model, inputs, iv, top, half(0))
    return dataclasses.replace(after, before=_lens(model, inputs, NONE, top, half(1)))


def read_out(
    model: Any, x: torch.Tensor, top: int, chosen: torch.Tensor | None, buf: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:  # fmt: skip
    """One layer of the lens: stream x (N, d) through the final norm and the unembedding, into `buf` (N, vocab)
    when given (then overwritten). The top token ids and probabilities, the probability of the `chosen` ids (the
    top-1 when None) and those ids. The softmax's normaliser is taken in place (max, exp, sum), never a second
    (N, vocab) tensor; the numbers are log_softmax's."""
    h = model.final(x)
    logits = model.unembed(h, out=buf) if buf is not None else model.unembed(h).float()
    tl, ti = logits.topk(min(top, logits.shape[1]), dim=1)
    ids = ti[:, 0] if chosen is None else chosen
    lc = logits.gather(1, ids.unsqueeze(1)).squeeze(1)
    m = tl[:, :1]
    lse = logits.sub_(m).exp_().sum(1).log_() + m.squeeze(1)  # as logsumexp (see log_probs)
    return ti, (tl - lse.unsqueeze(1)).exp(), (lc - lse).exp(), ids


def _lens(model: Any, inputs: Sequence[int], iv: Intervention, top: int, progress: Progress) -> Lens:
    streams: list[torch.Tensor] = []  # (N, d) per layer: small; the (N, vocab) logits live in one reused buffer
    residuals(model, inputs, iv, progress, lambda i, x: streams.append(x))
    h = model.final(streams[-1][:1])
    probe = model.unembed(h)  # the logits' dtype: a float32 model writes into the buffer, others are converted
    buf = torch.empty((len(inputs), probe.shape[1]), device=probe.device) if probe.dtype == torch.float32 else None
    last = read_out(model, streams[-1], top, None, buf)
    final = last[3]
    tops, probs, p_final, top1 = [], [], [], []
    for x in streams[:-1]:
        t, p, pf, _ = read_out(model, x, top, final, buf)
        tops.append(t)
        probs.append(p)
        top1.append(t[:, 0])
        p_final.append(pf)
    tops.append(last[0])
    probs.append(last[1])
    top1.append(last[0][:, 0])
    p_final.append(last[2])
    is_top = (torch.stack(top1) == final.unsqueeze(0)).tolist()  # (L, N)
    n_layer = len(streams)
    first: list[int | None] = []
    for j in range(len(inputs)):
        k = n_layer
        while k > 0 and is_top[k - 1][j]:
            k -= 1
        first.append(k if k < n_layer else None)
    return Lens(tuple(inputs), torch.stack(tops), torch.stack(probs), torch.stack(p_final), tuple(final.tolist()),
                tuple(first))  # fmt: skip


# -- a head ranking -------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Ranking:
    """Every head's effect on one prediction: the target's loss at `position` with that head ablated."""

    position: int
    target: int
    loss: float  # without any ablation
    heads: tuple[tuple[int, int, float], ...]  # (layer, head, loss with it ablated), largest increase first

    @property
    def nbytes(self) -> int:
        return 32 * len(self.heads) + 64


def rank_cost(arch: Any, n: int) -> int:
    """The token-layer passes (one token through one layer) `rank_heads` makes over `n` tokens, known before it
    starts: the clean run through every layer, then each layer's heads as copies side by side from that layer up —
    n × (L + H·L(L+1)/2): tokens × heads × the layers each knocked-out head's copy runs through."""
    layers, heads = arch.n_layer, arch.n_heads
    return n * (layers + heads * layers * (layers + 1) // 2)


@torch.inference_mode()
def rank_heads(
    model: Any, inputs: Sequence[int], position: int, target: int, mean: bool = False,
    layers: Iterable[int] | None = None, progress: Progress = None,
) -> Ranking:  # fmt: skip
    """One ablation per head (of `layers`, default all), each scored by the loss of `target` at `position`. Only
    positions up to `position` are computed (a causal model's later positions cannot change it); the clean stream
    entering each layer is kept, and the H ablations of one layer run together from there as H copies of the text
    side by side (each copy reads only itself), so the weights above that layer are read once per layer, not per
    head."""
    check_decoder(model)
    ids = list(inputs[: position + 1])
    n, heads, n_layer = len(ids), model.arch.n_heads, model.arch.n_layer
    chosen = sorted(set(range(n_layer) if layers is None else layers))
    streams: dict[int, torch.Tensor] = {}
    x = model.embed(ids)
    pos = torch.arange(n, device=x.device)
    rot = model.rotation(pos, x)
    for i in range(n_layer):
        streams[i] = x
        x = layer(model, i, x, rot)
    clean = -float(log_probs(model, x[-1:])[0, target])
    tiled = model.rotation(pos.repeat(heads), x)
    ends: list[torch.Tensor] = []
    for done, first in enumerate(chosen):
        x = streams[first].repeat(heads, 1)  # copy h has head h of layer `first` knocked out
        for i in range(first, n_layer):
            q, k, v = model.layer_qkv(i, x, tiled)
            o = attention(q, k, v, window=model.arch.window, copies=heads)
            if i == first:
                o = o.clone()
                for h in range(heads):  # copy h: head h knocked out
                    o[h, h * n : (h + 1) * n] = knock_out(o[h, h * n : (h + 1) * n], mean)
            x = model.layer_rest(i, x, o)
        ends.append(x[n - 1 :: n])  # each copy's last position
        if progress is not None:
            progress(done + 1, len(chosen))
    # Every copy's last position through the unembedding at once: the (vocab × d) matrix read once, not per layer
    # for a few rows (it was a third of the ranking's time). At most LOGIT_ROWS rows of logits at a time.
    losses: list[float] = []
    rows = torch.cat(ends) if ends else x[:0]
    for r0 in range(0, rows.shape[0], LOGIT_ROWS):
        losses += (-log_probs(model, rows[r0 : r0 + LOGIT_ROWS])[:, target]).tolist()
    out = [(first, h, losses[done * heads + h]) for done, first in enumerate(chosen) for h in range(heads)]
    out.sort(key=lambda r: (-(r[2] - clean), r[0], r[1]))
    return Ranking(position, target, clean, tuple(out))
