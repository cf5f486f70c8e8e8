"""Generation with any decoder through a KV cache (greedy, or sampled after temperature, top-k, top-p and min-p:
engine/sampling.py), and what one layer's heads look at while it generates.

The prompt is run once (prefill) and every layer's K and V are kept in preallocated buffers; each new token then
runs alone through the blocks, its query attending to the cache (nothing is recomputed). At the chosen layer the
new query's attention weights over the whole context are kept, head by head: the row that *predicted* the token
(the query is the context's last token). After the last block: the model's final norm, its logits, the token chosen
(the most likely, or one drawn after the filters, each filter's distribution kept), and the five most likely with their
probabilities. A branch forces chosen tokens at chosen steps and samples the rest. Several samples of one prompt
(`samples`, seeds seed, seed + 1, …) run the prompt once (`prefill`) and each continues from a copy of its K/V, the
extra ones as the rows of one forward a step where that keeps every number (`continuations`, `rows_alike`): the
same numbers, to the bit, as one `generate` per sample, the prompt not recomputed.

The same layers as the lab's traces (the model's embed, layer_qkv, layer_rest, final and unembed:
engine/models/families.py); tests compare the tokens with transformers' greedy `generate` on the same weights.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import torch

from .sampling import Choice, Sampling, choose

TOP = 5
GREEDY = Sampling()


@dataclass(frozen=True)
class Step:
    token_id: int
    top_ids: tuple[int, ...]  # the five most likely next tokens, most likely first
    top_probs: tuple[float, ...]
    attention: torch.Tensor | None  # (H, context) at the chosen layer: the query that predicted this token
    context: int  # tokens in the cache when this token was predicted (prompt + earlier generated tokens)
    choice: Choice | None = None  # how it was chosen: the distribution after each filter, its probability there
    forced: bool = False  # a branch's token, chosen by the user rather than drawn
    logits: torch.Tensor | None = None  # (V,) float32, kept only when asked (`keep_logits`: the .npz's distributions)


@dataclass(frozen=True)
class Generation:
    prompt_ids: tuple[int, ...]
    steps: tuple[Step, ...]
    layer: int | None
    kv_bytes_per_token: int  # K and V of one token in every layer (float32)
    stopped_at_eos: bool
    sampling: Sampling = GREEDY
    others: tuple[Generation, ...] = ()  # more continuations drawn under the same settings (seeds seed + 1, …)

    @property
    def logprob(self) -> float:
        """The sequence's log-probability under the distributions it was chosen from (the filtered ones when sampled;
        a forced token counts with its probability there, 0 if a filter had removed it: -inf)."""
        return sum(s.choice.logp for s in self.steps if s.choice is not None)

    @property
    def token_ids(self) -> tuple[int, ...]:
        return tuple(s.token_id for s in self.steps)

    @property
    def nbytes(self) -> int:
        kept = (t for s in self.steps for t in (s.attention, s.logits) if t is not None)
        return sum(t.numel() * 4 for t in kept) + 64 * len(self.steps) + sum(g.nbytes for g in self.others)


@dataclass(frozen=True)
class Prefill:
    """A prompt run once through every block (`prefill`): what each continuation of it starts from. Its K/V buffers
    are never written by `generate`, which copies the prompt's part into its own; any number of continuations (other
    seeds, other branches) can start from one Prefill, and each gets the numbers a fresh prefill would give it."""

    prompt_ids: tuple[int, ...]
    max_new_tokens: int  # the buffers hold the prompt and this many new tokens
    layer: int | None  # where `seen` was kept
    k: torch.Tensor  # (n_layer, kv, prompt + max_new_tokens, dk): the prompt's roped K in [:, :, :prompt]
    v: torch.Tensor
    hidden: torch.Tensor  # (d,) the prompt's last position after the last block
    seen: torch.Tensor | None  # (H, prompt) the last query's weights at `layer`


def _buffers(model: Any, total: int) -> tuple[torch.Tensor, torch.Tensor]:
    """One buffer per layer for K (roped) and V: written in place, never reallocated while generating."""
    info = model.info
    kv = info.n_kv_heads or info.n_heads
    shape = (info.n_layer, kv, total, info.d_model // info.n_heads)
    return torch.empty(shape, device=model.device), torch.empty(shape, device=model.device)


def _run(
    model: Any, ids: list[int], start: int, k_cache: torch.Tensor, v_cache: torch.Tensor, layer: int | None
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The new tokens at positions start.. through every block (the model's own layer_qkv / layer_rest), their K and
    V written into the cache; returns the last position's hidden state and, at `layer`, the last query's weights over
    every cached key (H, start + len(ids))."""
    info, dev = model.info, model.device
    h = info.n_heads
    kv, dk = k_cache.shape[1], k_cache.shape[3]
    group = h // kv
    window = getattr(info, "window", 0)
    scale = 1.0 / math.sqrt(dk)
    n = len(ids)
    end = start + n
    x = model.embed(ids, start)
    pos = model.rotation(torch.arange(start, end, device=dev), x)  # RoPE's angles once for every layer
    seen: torch.Tensor | None = None
    # Each query sees itself and what came before (within the sliding window, if the model has one).
    i_q = torch.arange(start, end, device=dev)[:, None]
    j_k = torch.arange(end, device=dev)[None, :]
    hidden = (j_k > i_q) | ((i_q - j_k >= window) if window else torch.zeros((), dtype=torch.bool, device=dev))
    for i in range(info.n_layer):
        q, k_cache[i, :, start:end], v_cache[i, :, start:end] = model.layer_qkv(i, x, pos)
        # Head j reads K/V head j // group: the query heads grouped over their shared K/V head (no copies).
        k = k_cache[i, :, :end].unsqueeze(1)  # (kv, 1, end, dk)
        v = v_cache[i, :, :end].unsqueeze(1)
        scores = (q.view(kv, group, n, dk) @ k.transpose(2, 3)) * scale  # (kv, group, n, end)
        scores = scores.masked_fill(hidden, float("-inf"))
        w = torch.softmax(scores, dim=-1)
        if i == layer:
            seen = w[:, :, -1].reshape(h, end).clone()
        x = model.layer_rest(i, x, (w @ v).reshape(h, n, dk))
    return x[-1], seen


@torch.inference_mode()
def prefill(model: Any, prompt_ids: tuple[int, ...], max_new_tokens: int, layer: int | None) -> Prefill:
    """The prompt through every block once, its K and V kept in buffers with room for `max_new_tokens` more (the
    same buffers' shape `generate` would allocate, so that every continuation computes on the same layout)."""
    ids = tuple(prompt_ids)
    k_cache, v_cache = _buffers(model, len(ids) + max_new_tokens)
    hidden, seen = _run(model, list(ids), 0, k_cache, v_cache, layer)
    return Prefill(ids, max_new_tokens, layer, k_cache, v_cache, hidden, seen)


@torch.inference_mode()
def generate(
    model: Any,
    prompt_ids: tuple[int, ...],
    max_new_tokens: int,
    layer: int | None,
    progress: Callable[[int, int], None] | None = None,
    sampling: Sampling = GREEDY,
    forced: dict[int, int] | None = None,
    keep_logits: bool = False,
    prefilled: Prefill | None = None,
) -> Generation:
    """Up to `max_new_tokens` after `prompt_ids`, chosen as `sampling` says (greedy by default); `forced` maps a step
    (0-based) to the token taken there instead (a branch: no draw is made at that step); `keep_logits` keeps each
    step's logits (V floats a step: every filter's whole distribution can then be recomputed, `sampling.distributions`).
    `prefilled` (from `prefill` on the same model, prompt and max_new_tokens, and `layer` unless `layer` is None)
    starts from the prompt already run: the same numbers, without running the prompt again.
    Stops after an end-of-text token."""
    info = model.info
    n_layer, h = info.n_layer, info.n_heads
    kv = info.n_kv_heads or h
    dk = info.d_model // h
    n_prompt = len(prompt_ids)
    if prefilled is None:
        k_cache, v_cache = _buffers(model, n_prompt + max_new_tokens)
        hidden, seen = _run(model, list(prompt_ids), 0, k_cache, v_cache, layer)
    else:
        if prefilled.prompt_ids != tuple(prompt_ids) or prefilled.max_new_tokens != max_new_tokens:
            raise ValueError("prefilled: another prompt or another max_new_tokens")
        if layer is not None and prefilled.layer != layer:
            raise ValueError(f"prefilled: attention kept at layer {prefilled.layer}, not {layer}")
        k_cache, v_cache = _buffers(model, n_prompt + max_new_tokens)
        k_cache[:, :, :n_prompt] = prefilled.k[:, :, :n_prompt]  # the prompt's part: the rest is written below
        v_cache[:, :, :n_prompt] = prefilled.v[:, :, :n_prompt]
        hidden, seen = prefilled.hidden, (prefilled.seen if layer is not None else None)
    stops = set(model.eos_ids)

    steps: list[Step] = []
    forced = forced or {}
    generator = sampling.generator() if sampling.do_sample else None
    context = n_prompt
    stopped = False
    for _ in range(max_new_tokens):
        logits = model.unembed(model.final(hidden))
        probs = torch.softmax(logits.double(), dim=-1)
        top = torch.topk(probs, TOP)
        i = len(steps)
        choice = choose(logits, sampling, generator, forced.get(i))
        token = choice.token_id
        steps.append(Step(token, tuple(int(i) for i in top.indices), tuple(float(p) for p in top.values),
                          seen, context, choice, i in forced, logits.float().clone() if keep_logits else None))  # fmt: skip
        if progress is not None:
            progress(len(steps), max_new_tokens)
        if token in stops:
            stopped = True
            break
        if len(steps) == max_new_tokens:
            break
        hidden, seen = _run(model, [token], context, k_cache, v_cache, layer)
        context += 1
    return Generation(tuple(prompt_ids), tuple(steps), layer, 2 * n_layer * kv * dk * 4, stopped, sampling)


def samples(
    model: Any,
    prompt_ids: tuple[int, ...],
    max_new_tokens: int,
    layer: int | None,
    sampling: Sampling,
    n: int,
    forced: dict[int, int] | None = None,
    keep_logits: bool = False,
    progress: Callable[[int, int], None] | None = None,
    first: Generation | None = None,
) -> Generation:
    """`n` continuations of one prompt under the same settings, continuation i drawn with seed `sampling.seed + i`:
    the first as `generate(..., layer, sampling, forced, keep_logits)` gives it, the others (no attention, no logits
    kept) in its `others`. The prompt is run through the blocks once (`prefill`) and every continuation starts from
    it; the others advance together, one forward a step for several of them (`continuations`). Each is what its own
    `generate` call gives: the same logits to the bit, so the same tokens and probabilities.
    `first`: the first continuation already computed (`samples(..., n=1)` with the same arguments: /generate's step
    page computed it before its samples block asks for all n), taken as it is and not drawn again.
    `progress(done, n * max_new_tokens)` counts every continuation's tokens (a finished one counts whole)."""
    if first is not None and (first.prompt_ids != tuple(prompt_ids) or first.sampling != sampling
                              or first.layer != layer or len(first.steps) > max_new_tokens):  # fmt: skip
        raise ValueError("first: a continuation of another prompt, setting or layer")
    if first is not None and n == 1:
        return replace(first, others=())
    total = n * max_new_tokens
    shared = prefill(model, prompt_ids, max_new_tokens, layer)
    if first is None:
        told = None if progress is None else (lambda done, _: progress(done, total))
        first = generate(model, prompt_ids, max_new_tokens, layer, told, sampling, forced, keep_logits, shared)
    told = None if progress is None else (lambda done, _: progress(max_new_tokens + done, total))
    drawn = [replace(sampling, seed=sampling.seed + i) for i in range(1, n)]
    return replace(first, others=continuations(model, shared, drawn, forced, progress=told))


# -- several continuations at once ----------------------------------------------------------------------------------
#
# Continuations of one prefill advance in lockstep (every one's new token sits at the same position), so a step can
# run several of them as the rows of one forward: their new tokens through every layer's W_Q/W_K/W_V, W_O, norms and
# feed-forward together, and through the final norm and the output projection together; each one's attention reads
# its own K/V buffers alone (the same expressions, shapes and layout `_run` uses). A matrix product of several rows
# is not always the same float32 arithmetic as the product of one row: on the CPU (oneMKL's sgemm, measured with
# torch 2.13 on AVX-512), weights stored (in, out) as GPT-2's give 2 or 3 rows the one-row result to the bit, while 4
# rows or more take another kernel whose sums round otherwise (2e-6 to 4e-5 apart on GPT-2 sized layers); weights read
# transposed, (out, in) as LLaMA's, Qwen2's, Mistral's, Gemma's and SmolLM2's, round otherwise from 2 rows on. How
# many rows give every row its one-row numbers exactly is measured once per model, device and thread count
# (`rows_alike` for the blocks, `output_rows_alike` for the output layer: a tied embedding is read transposed), and a
# step never runs more rows together than that: the batching changes no number, and where no batch keeps them (1),
# every continuation runs alone, as `generate` would.

ROWS_TRIED = 8  # the most rows `rows_alike` tries in one forward
_ROWS: weakref.WeakKeyDictionary[Any, dict[tuple[str, int], tuple[int, int]]] = weakref.WeakKeyDictionary()


@torch.inference_mode()
def rows_alike(model: Any) -> int:
    """The most rows (1 … ROWS_TRIED) that one forward through the model's blocks may carry with each row getting, to
    the bit, what it gets alone: every layer's `layer_qkv` and `layer_rest` run on m random rows and on each row
    alone, for m = 2, 3, … until one differs (measured once per device and thread count: which kernel a matrix
    product takes depends on its shape and layout, never on its values). `output_rows_alike`: the same for the output
    layer (`final`, `unembed`)."""
    return _measured(model)[0]


@torch.inference_mode()
def output_rows_alike(model: Any) -> int:
    """The most rows the output layer (`final` then `unembed`) may take at once, each row's logits to the bit what
    they are alone (1 where the output projection is read transposed, as a tied embedding: oneMKL rounds 2 rows
    otherwise)."""
    return _measured(model)[1]


def _measured(model: Any) -> tuple[int, int]:
    key = (str(model.device), torch.get_num_threads())
    known = _ROWS.setdefault(model, {})
    if key not in known:
        found = []
        for alike in (_blocks_alike, _output_alike):
            rows = 1
            for m in range(2, ROWS_TRIED + 1):
                if not alike(model, m):
                    break
                rows = m
            found.append(rows)
        known[key] = (found[0], found[1])
    return known[key]


def _rows(model: Any, m: int) -> tuple[torch.Tensor, torch.Tensor]:
    info, dev = model.info, model.device
    g = torch.Generator().manual_seed(m)
    x = torch.randn(m, info.d_model, generator=g).to(dev)
    return x, torch.randn(info.n_heads, m, info.d_model // info.n_heads, generator=g).to(dev)


def _blocks_alike(model: Any, m: int) -> bool:
    info, dev = model.info, model.device
    at = min(7, info.n_ctx - 1)
    x, heads = _rows(model, m)
    pos = model.rotation(torch.full((m,), at, device=dev), x)
    for i in range(info.n_layer):
        together = (*model.layer_qkv(i, x, pos), model.layer_rest(i, x, heads))
        for r in range(m):
            one = x[r : r + 1].clone()
            alone = (*model.layer_qkv(i, one, model.rotation(torch.arange(at, at + 1, device=dev), one)),
                     model.layer_rest(i, one, heads[:, r : r + 1].clone()))  # fmt: skip
            if not all(torch.equal(a[..., r : r + 1, :], b) for a, b in zip(together[:3], alone[:3], strict=True)):
                return False
            if not torch.equal(together[3][r : r + 1], alone[3]):
                return False
    return True


def _output_alike(model: Any, m: int) -> bool:
    x, _ = _rows(model, m)
    logits = model.unembed(model.final(x))
    return all(torch.equal(logits[r], model.unembed(model.final(x[r].clone()))) for r in range(m))


def _run_rows(
    model: Any, tokens: list[int], start: int, caches: list[tuple[torch.Tensor, torch.Tensor]]
) -> torch.Tensor:
    """One new token per continuation, every one at position `start`, as the rows of one forward; continuation r's K
    and V written into its own buffers caches[r] and its query attending to them alone, as `_run` does for one.
    Returns the rows' last hidden states (len(tokens), d)."""
    info, dev = model.info, model.device
    h = info.n_heads
    kv, dk = caches[0][0].shape[1], caches[0][0].shape[3]
    group = h // kv
    window = getattr(info, "window", 0)
    scale = 1.0 / math.sqrt(dk)
    end = start + 1
    x = torch.cat([model.embed([t], start) for t in tokens])  # each row embedded as `_run` embeds it alone
    pos = model.rotation(torch.full((len(tokens),), start, device=dev), x)
    i_q = torch.arange(start, end, device=dev)[:, None]
    j_k = torch.arange(end, device=dev)[None, :]
    hidden = (j_k > i_q) | ((i_q - j_k >= window) if window else torch.zeros((), dtype=torch.bool, device=dev))
    for i in range(info.n_layer):
        q, k, v = model.layer_qkv(i, x, pos)  # (H, rows, dk), (kv, rows, dk)
        out = []
        for r, (k_cache, v_cache) in enumerate(caches):
            k_cache[i, :, start:end], v_cache[i, :, start:end] = k[:, r : r + 1], v[:, r : r + 1]
            keys = k_cache[i, :, :end].unsqueeze(1)
            values = v_cache[i, :, :end].unsqueeze(1)
            scores = (q[:, r].contiguous().view(kv, group, 1, dk) @ keys.transpose(2, 3)) * scale
            w = torch.softmax(scores.masked_fill(hidden, float("-inf")), dim=-1)
            out.append((w @ values).reshape(h, 1, dk))
        x = model.layer_rest(i, x, torch.cat(out, dim=1))
    return x


@torch.inference_mode()
def continuations(
    model: Any,
    shared: Prefill,
    samplings: list[Sampling],
    forced: dict[int, int] | None = None,
    keep_logits: bool = False,
    progress: Callable[[int, int], None] | None = None,
) -> tuple[Generation, ...]:
    """One continuation of the prefilled prompt per setting in `samplings` (no attention kept), each exactly what
    `generate(model, shared.prompt_ids, shared.max_new_tokens, None, sampling=s, forced=forced,
    keep_logits=keep_logits, prefilled=shared)` gives (each draws with its own generator, as that call would), the
    unfinished ones advancing together, `rows_alike(model)` rows a forward. `progress(done, len(samplings) *
    max_new_tokens)` after each step (a finished continuation counts whole)."""
    if not samplings:
        return ()
    info = model.info
    n_layer, h = info.n_layer, info.n_heads
    kv = info.n_kv_heads or h
    dk = info.d_model // h
    ids, new = shared.prompt_ids, shared.max_new_tokens
    n_prompt = len(ids)
    stops = set(model.eos_ids)
    forced = forced or {}
    count = len(samplings)
    generators = [s.generator() if s.do_sample else None for s in samplings]
    caches = []
    for _ in samplings:
        k_cache, v_cache = _buffers(model, n_prompt + new)
        k_cache[:, :, :n_prompt], v_cache[:, :, :n_prompt] = shared.k[:, :, :n_prompt], shared.v[:, :, :n_prompt]
        caches.append((k_cache, v_cache))
    steps: list[list[Step]] = [[] for _ in samplings]
    stopped = [False] * count
    going = list(range(count))
    rows, out_rows = _measured(model) if count > 1 else (1, 1)
    context = n_prompt
    first = model.unembed(model.final(shared.hidden))  # every continuation's first logits: the prompt's
    logits: dict[int, torch.Tensor] = dict.fromkeys(going, first)
    for _ in range(new):
        step = len(steps[going[0]])
        for c in going:
            out = logits[c]
            probs = torch.softmax(out.double(), dim=-1)
            top = torch.topk(probs, TOP)
            choice = choose(out, samplings[c], generators[c], forced.get(step))
            steps[c].append(Step(choice.token_id, tuple(int(i) for i in top.indices),
                                 tuple(float(p) for p in top.values), None, context, choice, step in forced,
                                 out.float().clone() if keep_logits else None))  # fmt: skip
            stopped[c] = choice.token_id in stops
        going = [c for c in going if not stopped[c]]
        if progress is not None:
            progress(sum(new if stopped[c] else len(steps[c]) for c in range(count)), count * new)
        if not going or step + 1 == new:
            break
        logits = {}
        for at in range(0, len(going), rows):
            part = going[at : at + rows]
            x = _run_rows(model, [steps[c][-1].token_id for c in part], context, [caches[c] for c in part])
            if 1 < len(part) <= out_rows:
                out = model.unembed(model.final(x))
                logits |= {c: out[r].clone() for r, c in enumerate(part)}
            else:  # each row alone: as `generate` takes its last row (a vector) to the output layer
                logits |= {c: model.unembed(model.final(x[r])) for r, c in enumerate(part)}
        context += 1
    return tuple(Generation(ids, tuple(steps[c]), None, 2 * n_layer * kv * dk * 4, stopped[c], samplings[c])
                 for c in range(count))  # fmt: skip
