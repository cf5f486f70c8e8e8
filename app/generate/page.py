"""The generation page `/generate`: SmolLM2 writes token by token through its KV cache; each step shows the token,
the five it weighed (or, drawing, every filter's cut), the cache it grew and where every head of one layer looked when
predicting it. Drawing, a block below asks `/generate/samples` by htmx for N continuations of the same setting."""

from __future__ import annotations

import hashlib
from typing import Any

from fastapi import APIRouter

from ..lab import Lab
from ..render.arrays import to_numpy
from ..render.cells import matrix_view
from ..web.page import page_route
from ..web.state import Digits, PageQuery, url_fields, within
from .view import FilterColumn, GenerateRequest, GenerateView, SamplesView, StepCandidate, run, samples_view, top_labels

router = APIRouter(include_in_schema=False)
API_KEYS = url_fields(GenerateRequest)


class GenerateQuery(PageQuery):
    """/generate's view: the generated token on screen (1 is the first)."""

    step: Digits(None) = 1  # type: ignore[valid-type]


DEFAULT_TEXT = {"en": "The cat sat on the mat. The dog", "zh": "猫坐在垫子上，然后"}
SAMPLES = 8  # the samples block's continuations when the URL names none (the server's MAX_SAMPLES caps it)


def written(model: Any, ids: list[int], prompt_n: int) -> list[tuple[str, int, int]]:
    """The prompt and the generated tokens as a reader reads them: the byte pieces of one character as the character,
    each run with the steps that wrote it (1 is the first generated token; 0 for the prompt's)."""
    out = []
    for a, b, text in model.runs(ids):
        first, last = max(a, prompt_n) - prompt_n + 1, b - prompt_n
        out.append((text, first, last) if b > prompt_n else (text, 0, 0))
    return out


def default_prompt(state: GenerateQuery, lang: str) -> dict[str, str]:
    """The prompt of a first visit (no text, no token ids), in the page's language; none otherwise."""
    given = "text" in state.params or "token_ids" in state.params
    return {} if given else {"text": DEFAULT_TEXT[lang]}


def twin(state: GenerateQuery, lang: str, **more: str) -> str:
    """The API's URL for the generation the page shows (the default prompt of a first visit included), or with
    `more` (the samples block's `samples`)."""
    return "/api/v1/generate?" + state.api_query(**default_prompt(state, lang), **more)


async def generate_view(state: GenerateQuery, lab: Lab, progress: str, ctx: dict[str, Any]) -> GenerateView:
    """What /generate shows for `state`: the page's View (its JSON face is the page's `.json` twin)."""
    t = ctx["t"]
    prompt = default_prompt(state, ctx["lang"])
    req = state.request(GenerateRequest, **prompt)
    spec, layer, g = await run(lab, req.model_copy(update={"samples": 1}), progress)  # the samples: their own block
    model = lab.models[spec.preset]
    n = len(g.steps)
    step = within("step", state.step, 1, n)  # a first visit opens on the first token generated
    s = g.steps[step - 1]
    assert s.attention is not None  # a layer is always watched here
    ids = list(g.prompt_ids) + [x.token_id for x in g.steps]
    labels = model.labels(ids)
    prompt_n = len(g.prompt_ids)
    heads = [f"{t('head')} {h}" for h in range(model.info.n_heads)]
    attention = matrix_view("attention", "a", to_numpy(s.attention), heads, labels[: s.context],
                            "(H, t)", "sequential", None)  # fmt: skip
    attention.links = False
    cache_bytes = s.context * g.kv_bytes_per_token
    return GenerateView(
        text=req.text if req.text is not None else "",
        max_new_tokens=req.max_new_tokens,
        layer=layer,
        n_layer=model.info.n_layer,
        step=step,
        n_steps=n,
        token_id=s.token_id,
        n_context=s.context,
        prompt=labels[:prompt_n],
        generated=labels[prompt_n:],
        written=written(model, ids, prompt_n),
        title=t("generate.step_title", i=step, n=n, c=s.context),
        top=list(zip(top_labels(model, ids, labels, s.context, s.top_ids), s.top_probs, strict=True)),
        kv_bytes_per_token=g.kv_bytes_per_token,
        cache_bytes=cache_bytes,
        size=t("generate.cache", c=s.context, per=f"{g.kv_bytes_per_token:,}", total=f"{cache_bytes:,}"),
        stopped_at_eos=g.stopped_at_eos,
        notice=t("generate.eos") if g.stopped_at_eos and step == n else None,
        attention=attention,
        **choosing(state, req, model, ids, labels, g, step, t),
        json_url=twin(state, ctx["lang"]),
        first_url=state.url(step=1),
        prev_url=state.url(step=step - 1) if step > 1 else None,
        next_url=state.url(step=step + 1) if step < n else None,
        step_urls=[(i, state.url(step=i)) for i in range(1, n + 1)],
        **samples_slot(state, lab) if req.do_sample else {},
    )


def on(path: str, state: GenerateQuery, **changes: object) -> str:
    """`state.url(**changes)` on another page of the same state (/generate and /generate/samples)."""
    return path + state.url(**changes).removeprefix(state.path)


def samples_slot(state: GenerateQuery, lab: Lab) -> dict[str, Any]:
    """Where the samples block loads from (the step and the lesson left out: one block for every step), and the
    block's id, which names its setting: htmx keeps a loaded block while the steps change (hx-preserve) and asks
    again when a setting does."""
    url = on("/generate/samples", state, step=None, lesson=None, lesson_step=None, samples=samples(state, lab))
    return {"samples_url": url, "samples_id": "samples-" + hashlib.sha1(url.encode()).hexdigest()[:12]}


async def samples_page(state: GenerateQuery, lab: Lab, progress: str, ctx: dict[str, Any]) -> SamplesView:
    """What /generate/samples shows: N continuations of the page's setting, seeds seed, seed + 1, …"""
    n = samples(state, lab)
    req = state.request(GenerateRequest, **default_prompt(state, ctx["lang"]), samples=n)
    spec, _, g = await run(lab, req, progress)
    view = samples_view(req, lab.models[spec.preset], g, lambda seed: on("/generate", state, seed=seed),
                        ctx["t"], req.seed)  # fmt: skip
    return view.model_copy(update={"generate_url": on("/generate", state),
                                   "json_url": twin(state, ctx["lang"], samples=samples(state, lab))})  # fmt: skip


def samples(state: GenerateQuery, lab: Lab) -> str:
    """How many continuations the samples block draws: the URL's `samples`, else SAMPLES (capped by the server's)."""
    return state.get("samples") or str(min(SAMPLES, lab.settings.max_samples))


def choosing(
    state: GenerateQuery, req: GenerateRequest, model: Any, ids: list[int], labels: list[str], g: Any, step: int, t: Any
) -> dict[str, Any]:
    """How step `step`'s token was chosen, for the page (#45): nothing beyond the settings on a greedy page (it stays
    as it was); when drawing, or on a branch, the distribution after each filter over the most likely tokens, each
    survivor a link to the branch that takes it here, and the log-probabilities."""
    s = g.steps[step - 1]
    c = s.choice
    if c is None or not (req.do_sample or req.branch):
        return {"sampling": g.sampling}
    settings = {"temperature": req.temperature, "top_k": req.top_k, "top_p": req.top_p, "min_p": req.min_p}
    columns = []
    for k, st in enumerate(c.stages):
        # The logits cut nothing, a temperature reshapes; a filter only masks: its survivors renormalised by their mass
        # before it (the top token always kept), so that mass is the top token's probability before over after.
        before = c.stages[k - 1].probs[0] if k else 0.0
        cut = max(0.0, 1.0 - before / st.probs[0]) if k and st.name != "temperature" else 0.0
        label = t(f"generate.filter.{st.name}", v=f"{settings[st.name]:g}" if st.name in settings else "")
        columns.append(FilterColumn(st.name, label, list(st.probs), st.rest, st.kept, cut))
    last = c.stages[-1]
    forced = req.forced()
    here = step - 1  # the branch's steps count from 0, the page's from 1
    keep = {k: v for k, v in forced.items() if k < here}  # a new branch here drops the choices after it

    def branch_url(token: int) -> str:  # opens the branch at the step after the token taken (if there is one)
        path = ",".join(f"{k}:{v}" for k, v in sorted((keep | {here: token}).items()))
        ends = step == req.max_new_tokens or token in model.eos_ids
        return state.url(branch=path, step=step if ends else step + 1)

    names = top_labels(model, ids, labels, s.context, list(c.ids))
    candidates = [
        StepCandidate(name, i, p > 0, i == s.token_id, branch_url(i) if p > 0 and i != s.token_id else None)
        for name, i, p in zip(names, c.ids, last.probs, strict=True)
    ]
    lp = [x.choice.logp for x in g.steps if x.choice is not None]
    return {
        "sampling": g.sampling,
        "filters": columns,
        "candidates": candidates,
        "p": c.p,
        "logp": c.logp,
        "forced": s.forced,
        "logprob": sum(lp[:step]),
        "logprob_total": sum(lp),
        "branch": [(k + 1, labels[len(g.prompt_ids) + k]) for k in sorted(forced) if k < len(g.steps)],
        "trunk_url": state.url(branch=None) if forced else None,
    }


def form(lab: Lab, state: GenerateQuery, lang: str) -> dict[str, Any]:
    """What /generate draws whatever its View says: the API's answer for its request (the JSON twin)."""
    return {"json_url": twin(state, lang), "max_samples": lab.settings.max_samples, "samples_default": SAMPLES}


def samples_form(lab: Lab, state: GenerateQuery, lang: str) -> dict[str, Any]:
    """What the block draws even when refused: its JSON twin, and (opened as a page of its own) the way back to the
    step view of the same setting, where the form shows the field at fault."""
    return {"json_url": twin(state, lang, samples=samples(state, lab)), "generate_url": on("/generate", state)}


page_route(router, "/generate", "generate.html", API_KEYS, GenerateQuery, generate_view, form, GenerateView.blocks)
page_route(router, "/generate/samples", "generate_samples.html", API_KEYS, GenerateQuery, samples_page, samples_form,
           SamplesView.blocks, pushed=False)  # fmt: skip
