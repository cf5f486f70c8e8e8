"""How the next token is chosen: greedy, or drawn after temperature, top-k, top-p (nucleus) and min-p.

The filters run in the order transformers' `generate(do_sample=True)` applies its logits processors (temperature,
then top-k, top-p, min-p; each only when it changes something), on float32 logits, with the same arithmetic, and the
token is drawn with `torch.multinomial` over the softmax of what is left. With a generator seeded as
`torch.manual_seed(seed)` seeds the global one, the same logits give the same tokens as transformers (tests compare
both, filter by filter and token by token).

What a class sees is kept per filter: the probabilities of the most likely tokens after each filter (renormalised
over the survivors), how many tokens survive, and the mass of everything else. Filters never reorder tokens (a
temperature keeps the order, the others cut from the bottom), so the most likely tokens of the raw logits are the
most likely after every filter and one list of ids serves all of them.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

SHOWN = 12  # the tokens a filter's distribution keeps by name; the rest is one "everything else" mass
FILTERS = ("logits", "temperature", "top_k", "top_p", "min_p")


@dataclass(frozen=True)
class Sampling:
    """The decoding settings. `do_sample=False` is greedy (the settings below are then ignored, as transformers
    does). A filter is off at its neutral value: temperature 1, top_k 0, top_p 1, min_p 0."""

    do_sample: bool = False
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    min_p: float = 0.0
    seed: int = 0

    def __post_init__(self) -> None:
        # The engine's own guard; the web layer answers 422s naming the field before a value gets here.
        if not self.temperature > 0:
            raise ValueError("temperature must be > 0")
        if self.top_k < 0:
            raise ValueError("top_k must be >= 0")
        if not 0 < self.top_p <= 1:
            raise ValueError("top_p must be in (0, 1]")
        if not 0 <= self.min_p <= 1:
            raise ValueError("min_p must be in [0, 1]")

    def active(self) -> tuple[str, ...]:
        """The filters that change the distribution, in the order they run (transformers' order)."""
        if not self.do_sample:
            return ()
        on = {
            "temperature": self.temperature != 1.0,
            "top_k": self.top_k != 0,
            "top_p": self.top_p < 1.0,
            "min_p": self.min_p > 0.0,
        }
        return tuple(name for name in FILTERS[1:] if on[name])

    def generator(self) -> torch.Generator:
        """A CPU generator in the state `torch.manual_seed(seed)` puts the global one in (no global state touched: two
        requests sampling at once do not share a stream)."""
        return torch.Generator().manual_seed(self.seed)


def apply(name: str, scores: torch.Tensor, s: Sampling) -> torch.Tensor:
    """One filter on (1, V) float32 scores (logits, or what earlier filters left; removed tokens are -inf), as
    transformers' warper of the same name computes it (min_tokens_to_keep = 1)."""
    if name == "temperature":
        out = scores / s.temperature
        finite = torch.isfinite(scores)
        if bool((finite & ~torch.isfinite(out)).any()):
            # float32 overflows (|logit| / T past 3.4e38, e.g. T = 1e-38): transformers' softmax is then NaN and it
            # cannot draw. The logits less their maximum (softmax ignores the shift) over the coldest temperature
            # float32 holds them at: the order kept (no ties made), every gap past exp's range, as at T itself.
            gaps = scores.double() - scores.masked_fill(~finite, float("-inf")).amax(dim=-1, keepdim=True).double()
            spread = float(-gaps[finite].min())
            cold = max(s.temperature, spread / (torch.finfo(scores.dtype).max / 2))
            out = (gaps / cold).to(scores.dtype).masked_fill(~finite, float("-inf"))
        return out
    if name == "top_k":
        k = min(s.top_k, scores.size(-1))
        return scores.masked_fill(scores < torch.topk(scores, k)[0][..., -1, None], float("-inf"))
    if name == "top_p":
        ordered, order = torch.sort(scores, descending=False)
        cumulative = ordered.softmax(dim=-1).cumsum(dim=-1)
        remove = cumulative <= (1 - s.top_p)  # the least likely tokens whose mass together stays under 1 − p
        remove[..., -1:] = False  # the most likely token always stays
        return scores.masked_fill(remove.scatter(1, order, remove), float("-inf"))
    if name == "min_p":
        probs = torch.softmax(scores, dim=-1)
        remove = probs < s.min_p * probs.amax(dim=-1, keepdim=True)  # under min_p × the top token's probability
        remove.scatter_(-1, torch.topk(probs, 1, dim=-1).indices, False)
        return scores.masked_fill(remove, float("-inf"))
    raise ValueError(f"no filter {name!r}")


@dataclass(frozen=True)
class Stage:
    """The distribution after one filter ("logits": before any): the shown tokens' probabilities (renormalised over
    what survives), how many tokens survive, and the probability of every survivor not shown."""

    name: str
    probs: tuple[float, ...]  # for `Choice.ids`, in that order; 0 for a token this filter removed
    kept: int
    rest: float


@dataclass(frozen=True)
class Choice:
    """One decoding step: the token chosen, its probability under the final distribution and its log, and the
    distribution after each filter that ran."""

    token_id: int
    p: float
    logp: float
    ids: tuple[int, ...]  # the most likely tokens of the raw logits, most likely first (SHOWN of them)
    stages: tuple[Stage, ...]


def stage(name: str, scores: torch.Tensor, ids: torch.Tensor) -> Stage:
    probs = torch.softmax(scores[0].double(), dim=-1)
    shown = probs[ids]
    kept = int(torch.isfinite(scores[0]).sum())
    return Stage(name, tuple(float(p) for p in shown), kept, max(0.0, float(1.0 - shown.sum())))


def choose(
    logits: torch.Tensor, s: Sampling, generator: torch.Generator | None = None, forced: int | None = None
) -> Choice:
    """The next token from (V,) logits: greedy (argmax, as transformers without sampling), or drawn from what the
    active filters leave, with `generator` (one per generation, advanced once per step as transformers' global
    generator is); or `forced` (a branch: nothing drawn, its probability where it would have been drawn from). Every
    stage is kept for the page."""
    scores = logits.float().reshape(1, -1)
    ids = torch.topk(scores[0], min(SHOWN, scores.size(-1))).indices
    stages = [stage("logits", scores, ids)]
    for name in s.active():
        scores = apply(name, scores, s)
        stages.append(stage(name, scores, ids))
    if forced is not None:
        token = forced
    elif s.do_sample:
        probs = torch.softmax(scores, dim=-1)
        token = int(torch.multinomial(probs, num_samples=1, generator=generator)[0, 0])
    else:
        token = int(torch.argmax(scores))
    logp = torch.log_softmax(scores[0].double(), dim=-1)[token]
    return Choice(token, float(logp.exp()), float(logp), tuple(int(i) for i in ids), tuple(stages))


def distributions(logits: torch.Tensor, s: Sampling) -> tuple[tuple[str, ...], torch.Tensor, torch.Tensor]:
    """The whole vocabulary's distribution after each filter that runs ("logits": before any), from (V,) logits:
    the names, (F, V) float64 probabilities (0 where a filter removed a token, or where a token survives with a
    probability under float64's smallest, as at temperature 0.01) and (F,) the tokens surviving each filter. The same
    filters and arithmetic as `choose`, whose `Stage`s keep only the most likely tokens of these rows."""
    scores = logits.float().reshape(1, -1)
    names, rows, kept = ["logits"], [torch.softmax(scores[0].double(), dim=-1)], [int(torch.isfinite(scores).sum())]
    for name in s.active():
        scores = apply(name, scores, s)
        names.append(name)
        rows.append(torch.softmax(scores[0].double(), dim=-1))
        kept.append(int(torch.isfinite(scores).sum()))
    return tuple(names), torch.stack(rows), torch.tensor(kept)  # (F, V), (F,)
