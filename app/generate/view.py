"""A generation request, validated like every other (the prompt through the lab's own spec rules), computed once
per (model, prompt, length, layer) and kept in a byte-bounded memo, and its JSON document."""

from __future__ import annotations

import io
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, FiniteFloat

from engine.errors import Message
from engine.generate import Generation, samples
from engine.models import Model
from engine.sampling import Sampling, distributions
from engine.spec import Limits, Spec, make_spec

from ..lab import Lab
from ..render.arrays import to_numpy
from ..render.cells import MatrixView
from ..schemas import RETURNED, FieldError, LabField, said
from ..web.sequence import generators, top_labels
from ..web.view import View


@dataclass(frozen=True)
class FilterColumn:
    """The step's distribution after one filter ("logits": before any), over the View's `candidates` in order
    (`probs`, 0 where the filter removed one), `rest` the mass of every other survivor; how many tokens survive
    (`kept`) and the mass the filter removed from the distribution it was given (`cut`: 0 for a temperature, which
    reshapes without removing)."""

    name: str
    label: str
    probs: list[float]
    rest: float
    kept: int
    cut: float


@dataclass(frozen=True)
class StepCandidate:
    """One of the step's most likely tokens: whether it survives every filter (`kept`), whether it is the token
    taken (`drawn`), and the branch that takes it here instead (`url`: None for the token taken, or one cut)."""

    token: str
    token_id: int
    kept: bool
    drawn: bool
    url: str | None


class GenerateView(View):
    """Step `step` of a generation, as /generate shows it: the text so far (`prompt`, `generated`, labelled as the
    model's pieces; `written`, as a reader reads it), the token predicted there and from how much context (`title`), the five candidates it weighed
    (`top`, most likely first), the KV cache it read (`size` says it in words) and where every head of `layer` looked
    (`attention`, one row per head)."""

    template = "generate.html"
    kind = "generate"

    text: str = ""  # the prompt as typed ("" when given as token ids)
    max_new_tokens: int = 0
    layer: int = 0
    n_layer: int = 0
    step: int = 1
    n_steps: int = 0
    token_id: int = 0
    n_context: int = 0  # tokens in the cache when this step's token was predicted
    prompt: list[str] | None = None
    generated: list[str] | None = None
    # The text as a reader reads it: (text, first step, last step), a character the tokenizer split into byte
    # pieces written once (我, not 我₁ 我₂); the prompt's runs have steps 0.
    written: list[tuple[str, int, int]] | None = None
    title: str = ""
    top: list[tuple[str, float]] | None = None
    kv_bytes_per_token: int = 0
    cache_bytes: int = 0
    size: str = ""
    stopped_at_eos: bool = False
    notice: str | None = None  # at the last step, when the model ended the text itself
    attention: MatrixView | None = None
    # How the token was chosen (#45): the settings, and when drawing (or on a branch) the step's distribution filter
    # by filter over its `candidates` (the most likely tokens, each a branch link), the drawn token's probability
    # and the sequence's log-probability up to this step (`logprob`) and in all (`logprob_total`).
    sampling: Sampling | None = None
    filters: list[FilterColumn] | None = None
    candidates: list[StepCandidate] | None = None
    p: float | None = None
    logp: float | None = None
    forced: bool = False
    logprob: float | None = None
    logprob_total: float | None = None
    branch: list[tuple[int, str]] | None = None  # the forced tokens of this branch: (step, 1 is the first; token)
    trunk_url: str | None = None  # the same settings without the branch
    # Links.
    json_url: str | None = None
    first_url: str | None = None
    prev_url: str | None = None
    next_url: str | None = None
    step_urls: list[tuple[int, str]] | None = None
    # Drawing: the samples block below the step, asked for on its own (/generate/samples), and its id (its setting).
    samples_url: str | None = None
    samples_id: str | None = None


@dataclass(frozen=True)
class Sample:
    """One continuation of the samples block: drawn with `seed`, its text (the prompt left out), its tokens, its
    log-probability under the distributions it was drawn from, the earlier sample it repeats (`same_as`, 1 is the
    first; None for the first of its text), and the step view of this seed (`url`)."""

    index: int
    seed: int
    text: str
    n_tokens: int
    logprob: float
    same_as: int | None
    url: str
    shown: bool = False  # the continuation the step view above shows (the page's own seed)


class SamplesView(View):
    """N continuations of one prompt under one setting, sample i drawn with seed + i (as /api/v1/generate's
    `samples`): each one's text and log-probability, and how many of them are different (`distinct`). The block
    below /generate's step view, asked for by htmx on its own so the step view stays fast."""

    template = "generate_samples.html"
    blocks = ("samples",)
    kind = "generate_samples"

    prompt: str = ""
    settings: str = ""  # the setting, in words ("temperature 0.7, top-p 0.9")
    n: int = 0
    distinct: int = 0
    title: str = ""  # "5 different texts among 8 samples"
    samples: list[Sample] | None = None
    generate_url: str | None = None  # the step view of the same setting
    json_url: str | None = None  # the API's answer for the same samples


class GenerateRequest(BaseModel):
    """A prompt for a causal language model, how many tokens to generate, greedily or drawn after the filters, and
    the layer to watch."""

    model_config = ConfigDict(extra="forbid", strict=True)

    preset: str = Field("smollm2", max_length=64, description="A causal language model this server loaded: smollm2.")
    text: str | None = Field(None, max_length=4000, description="The prompt, for the model's own tokenizer.")
    token_ids: list[int] | None = Field(None, max_length=4096, description="The prompt as token ids instead.")
    max_new_tokens: int = Field(16, ge=1, le=4096, description="Tokens to generate (the server's cap applies: 64).")
    layer: int | None = Field(
        None, ge=0, le=4096, description="The layer whose attention is returned (default: the last)."
    )
    decimals: int | None = LabField(None, "Round the attention weights.", ge=0, le=8, **RETURNED)
    # How each token is chosen (engine/sampling.py): greedy unless do_sample; then the filters in transformers' order.
    do_sample: bool = Field(
        False, description="Draw each token (after the filters below) instead of taking the most likely."
    )
    temperature: FiniteFloat = Field(
        1.0, gt=0, le=100, description="Divide the logits by this before the other filters (1: off)."
    )
    top_k: int = Field(
        0, ge=0, le=1_000_000, description="Keep the k most likely tokens (0: off; the server's cap applies: 1000)."
    )
    top_p: FiniteFloat = Field(
        1.0,
        gt=0,
        le=1,
        description="Keep the fewest most likely tokens whose probabilities reach p, the one that crosses p included (1: off).",
    )
    min_p: FiniteFloat = Field(
        0.0, ge=0, le=1, description="Keep the tokens at least min_p × the top token's probability (0: off)."
    )
    seed: int = Field(
        0,
        ge=0,
        lt=2**63,  # not le=2**63 - 1: OpenAPI's bounds are floats, and 2**63 - 1 would be documented as 2**63
        description="The draws' seed: the same seed and settings, the same tokens (as torch.manual_seed(seed) before transformers' generate).",
    )
    samples: int = Field(
        1, ge=1, le=64, description="Continuations to draw, sample i with seed + i (the server's cap applies: 8)."
    )
    branch: str | None = Field(
        None,
        max_length=2000,
        pattern=r"^\d+:\d+(,\d+:\d+)*$",
        description="Tokens forced at chosen steps, `step:token_id` comma-separated (steps from 0): a branch of the tree, the rest drawn or greedy as set.",
    )

    def sampling(self, seed: int | None = None) -> Sampling:
        return Sampling(self.do_sample, self.temperature, self.top_k, self.top_p, self.min_p,
                        self.seed if seed is None else seed)  # fmt: skip

    def forced(self) -> dict[int, int]:
        return {int(s): int(t) for s, t in (pair.split(":") for pair in self.branch.split(","))} if self.branch else {}


def samples_view(
    req: GenerateRequest, model: Any, g: Generation, step_url: Any, t: Any, shown_seed: int
) -> SamplesView:
    """The samples block for `g` (drawn with req.samples > 1): `step_url(seed)` is the step view of one seed."""
    tok = model.tokenizer()
    first: dict[tuple[int, ...], int] = {}
    rows = []
    for i, d in enumerate((g, *g.others), start=1):
        seed = d.sampling.seed
        rows.append(Sample(i, seed, tok.decode(list(d.token_ids)), len(d.steps), d.logprob, first.get(d.token_ids),
                           step_url(seed), seed == shown_seed))  # fmt: skip
        first.setdefault(d.token_ids, i)
    s = g.sampling
    said = [t(f"generate.filter.{name}", v=f"{getattr(s, name):g}") for name in s.active()]
    return SamplesView(
        prompt=req.text if req.text is not None else tok.decode(list(g.prompt_ids)),
        settings=", ".join(said) if said else t("generate.samples.plain"),
        n=len(rows),
        distinct=len(first),
        title=t("generate.samples.title", d=len(first), n=len(rows)),
        samples=rows,
    )


def generation_spec(req: GenerateRequest, limits: Limits, device: str, models: Mapping[str, Any],
                    max_new: int, caps: tuple[int, int] = (8, 1000)) -> tuple[Spec, int]:  # fmt: skip
    """The prompt as a Spec (its tokens, ids and limits checked by make_spec) and the layer to watch."""
    if req.preset not in models or not getattr(models[req.preset], "generates", False):
        names = ", ".join(generators(models))
        raise FieldError(
            "preset", said("generation_needs_decoder", names=names) if names else said("generation_no_decoder")
        )
    info = models[req.preset].info
    layer = info.n_layer - 1 if req.layer is None else req.layer
    if not 0 <= layer < info.n_layer:
        raise FieldError("layer", Message("model_layers", model=req.preset, last=info.n_layer - 1, layer=layer))
    if req.max_new_tokens > max_new:
        raise FieldError("max_new_tokens", said("max_new_tokens", limit=max_new, n=req.max_new_tokens))
    check_sampling(req, info.vocab, *caps)
    if req.text is None and req.token_ids is None:
        raise FieldError("text", said("prompt_text"))
    spec = make_spec(text=req.text, token_ids=req.token_ids, preset=req.preset, layer=layer, models=models,
                     device=device, limits=limits)  # fmt: skip
    room = min(limits.max_tokens, info.n_ctx)
    if spec.n_tokens + req.max_new_tokens > room:
        field = "token_ids" if req.token_ids is not None else "text"
        raise FieldError(field, said("prompt_fit", n=spec.n_tokens, room=room))
    return spec, layer


def check_sampling(req: GenerateRequest, vocab: int, max_samples: int, max_top_k: int) -> None:
    """The sampling settings against the server's caps (MAX_SAMPLES, MAX_TOP_K) and the model's vocabulary: a 422
    naming the field past a bound."""
    if req.samples > max_samples:
        raise FieldError("samples", said("samples_max", limit=max_samples, n=req.samples))
    if req.top_k > max_top_k:
        raise FieldError("top_k", said("at_most_not", limit=max_top_k, n=req.top_k))
    if req.samples > 1 and not req.do_sample:
        raise FieldError("samples", said("samples_sample"))
    forced = req.forced()
    pairs = [tuple(map(int, pair.split(":"))) for pair in req.branch.split(",")] if req.branch else []
    for step, token in pairs:  # one step given two tokens: `forced` would keep the last one silently
        if forced[step] != token:
            raise FieldError("branch", said("branch_twice", step=step, a=token, b=forced[step]))
    if any(step >= req.max_new_tokens for step in forced):
        raise FieldError("branch", said("branch_steps", limit=req.max_new_tokens))
    if any(token >= vocab for token in forced.values()):
        raise FieldError("branch", said("branch_ids", vocab=vocab))


def cost(spec: Spec, max_new: int, info: Any) -> int:
    """Estimated bytes: the KV cache, the prompt's attention scores in one layer, the weights' working set."""
    n = spec.n_tokens + max_new
    kv = 2 * info.n_layer * (info.n_kv_heads or info.n_heads) * (info.d_model // info.n_heads) * n * 4
    return kv + 3 * info.n_heads * spec.n_tokens * n * 4 + 8 * info.d_model * info.d_ff * 4


async def run(lab: Lab, req: GenerateRequest, key: str | None, logits: bool = False) -> tuple[Spec, int, Generation]:
    """The request's prompt as a Spec (the tokenizer off the event loop), the layer watched, and the generation
    (from the server's cache when it ran before), token by token for /api/v1/progress; `logits` keeps each step's
    logits (the .npz's whole distributions: a generation of its own in the cache)."""
    spec, layer = await lab.off_loop(req.preset, generation_spec, req, lab.limits, lab.device, lab.models,
                                     lab.settings.max_new_tokens,
                                     (lab.settings.max_samples, lab.settings.max_top_k))  # fmt: skip
    model = lab.models[spec.preset]
    forced, n = req.forced(), req.max_new_tokens

    done = (spec.preset, spec.token_ids, n, layer, req.sampling() if req.do_sample else None, req.samples,
            tuple(sorted(forced.items())), logits)  # fmt: skip
    alone = (*done[:5], 1, *done[6:])  # the first sample's own generation: /generate's step page computes it

    def work(progress: Any) -> Generation:
        # Sample i with seed + i, every sample continuing from one run of the prompt (engine.generate.samples); the
        # first is taken from the cache when the step page computed it, and kept for the step page when it did not.
        first = lab.kept("generate", alone) if req.samples > 1 else None
        g = samples(model, spec.token_ids, n, layer, req.sampling(), req.samples, forced, logits, progress, first)
        if req.samples > 1 and first is None:
            lab.keep("generate", alone, replace(g, others=()))
        return g

    size = cost(spec, n, model.info) + (4 * n * model.info.vocab if logits else 0)
    result, _ = await lab.compute("generate", done, size, work, progress=key, unit="tokens")
    return spec, layer, result


def document(model: Model, spec: Spec, g: Generation, decimals: int | None) -> dict[str, Any]:
    ids = list(g.prompt_ids) + [s.token_id for s in g.steps]
    labels = model.labels(ids)  # byte pieces of one character are named together (猫₁ 猫₂ 猫₃)
    n = len(g.prompt_ids)
    tok = model.tokenizer()

    return {
        "preset": spec.preset,
        "layer": g.layer,
        "tokens": labels[:n],
        "text_start": spec.text_start,  # where the prompt's text begins in tokens, as /api/v1/predict says
        "token_ids": list(g.prompt_ids),
        "text": tok.decode([s.token_id for s in g.steps]),
        "stopped_at_eos": g.stopped_at_eos,
        "kv_cache_bytes_per_token": g.kv_bytes_per_token,
        "sampling": asdict(g.sampling) | {"filters": list(g.sampling.active())},
        "logprob": g.logprob,
        "samples": [
            {
                "seed": d.sampling.seed,
                "token_ids": list(d.token_ids),
                "text": tok.decode(list(d.token_ids)),
                "logprob": d.logprob,
            }
            for d in (g, *g.others)
        ],
        "distinct": len({d.token_ids for d in (g, *g.others)}),
        "generated": [
            {
                "token_id": s.token_id,
                "token": labels[n + i],
                "top": [
                    [label, p]
                    for label, p in zip(top_labels(model, ids, labels, s.context, s.top_ids), s.top_probs, strict=True)
                ],
                "context": s.context,
                "kv_cache_bytes": s.context * g.kv_bytes_per_token,
                "attention": None if s.attention is None else to_numpy(s.attention, decimals),
                **chosen(model, ids, labels, s),
            }
            for i, s in enumerate(g.steps)
        ],
    }


def npz(model: Model, spec: Spec, g: Generation) -> bytes:
    """The generation as a NumPy archive: what `document` says in JSON, plus every filter's whole distribution over the
    vocabulary (recomputed from each step's logits with the filters' own code: `g` must keep them). Its arrays are
    listed once, where the API describes it (api.py `answer_npz`); `probs` and `attention` are float32, the other
    probabilities float64, the ids int64."""
    if any(s.logits is None for s in g.steps):  # (a generation cached without them)
        raise ValueError("the .npz needs a generation that kept its logits (run(..., logits=True))")
    ids = list(g.prompt_ids) + [s.token_id for s in g.steps]
    labels = model.labels(ids)
    n, steps = len(g.prompt_ids), g.steps
    names = ("logits", *g.sampling.active())
    each = [distributions(s.logits, g.sampling) for s in steps if s.logits is not None]
    probs = np.stack([p.float().numpy() for _, p, _ in each])  # (T, F, V)
    runs = (g, *g.others)
    longest = max(len(d.steps) for d in runs)
    sample_ids = np.full((len(runs), longest), -1, dtype=np.int64)
    for row, d in zip(sample_ids, runs, strict=True):
        row[: len(d.steps)] = d.token_ids
    arrays: dict[str, np.ndarray] = {
        "prompt_ids": np.array(g.prompt_ids, dtype=np.int64),
        "prompt_tokens": np.array(labels[:n]),
        "text_start": np.array(spec.text_start),
        "token_ids": np.array([s.token_id for s in steps], dtype=np.int64),
        "tokens": np.array(labels[n:]),
        "filters": np.array(names),
        "probs": probs,
        "kept": np.stack([k.numpy() for _, _, k in each]),
        "candidates": np.array([s.choice.ids for s in steps if s.choice is not None], dtype=np.int64),
        "candidate_probs": np.array([[st.probs for st in s.choice.stages] for s in steps if s.choice is not None]),
        "p": np.array([s.choice.p for s in steps if s.choice is not None]),
        "logp": np.array([s.choice.logp for s in steps if s.choice is not None]),
        "forced": np.array([s.forced for s in steps]),
        "logprob": np.array(g.logprob),
        "top_ids": np.array([s.top_ids for s in steps], dtype=np.int64),
        "top_probs": np.array([s.top_probs for s in steps]),
        "context": np.array([s.context for s in steps], dtype=np.int64),
        "samples_seed": np.array([d.sampling.seed for d in runs], dtype=np.int64),
        "samples_logprob": np.array([d.logprob for d in runs]),
        "samples_token_ids": sample_ids,
        "distinct": np.array(len({d.token_ids for d in runs})),
    }
    rows = [s.attention for s in steps if s.attention is not None]
    if len(rows) == len(steps):
        attention = np.full((len(steps), model.info.n_heads, n + len(steps) - 1), np.nan, dtype=np.float32)
        for a, seen in zip(attention, rows, strict=True):
            a[:, : seen.shape[-1]] = to_numpy(seen)
        arrays["attention"] = attention
    buf = io.BytesIO()
    np.savez(buf, **arrays)  # type: ignore[arg-type]
    return buf.getvalue()


def chosen(model: Model, ids: list[int], labels: list[str], s: Any) -> dict[str, Any]:
    """How step `s`'s token was chosen: its probability (and log) under the distribution it came from, whether a
    branch forced it, and the distribution after each filter over the most likely tokens (`candidates`, labelled
    like `top`), with how many tokens survived and the mass of the others."""
    c = s.choice
    if c is None:
        return {}
    return {
        "p": c.p,
        "logp": c.logp,
        "forced": s.forced,
        "candidates": [{"token_id": i, "token": label}
                       for i, label in zip(c.ids, top_labels(model, ids, labels, s.context, c.ids), strict=True)],
        "filters": [{"name": st.name, "kept": st.kept, "rest": st.rest, "probs": list(st.probs)} for st in c.stages],
    }  # fmt: skip
