"""GET/POST /api/v1/generate: greedy or sampled generation through the KV cache, with each new token's top five, how
it was chosen filter by filter, and the attention of every head of one layer over the context that predicted it; and
/api/v1/generate.npz: the same with every filter's whole distribution, as a NumPy archive."""

from __future__ import annotations

import anyio
from fastapi import APIRouter, Request, Response

from ..lab import Lab, get_key
from ..render.payload import json_response
from ..schemas import ERRORS
from ..web.answer import twins
from .view import GenerateRequest, document, npz, run

router = APIRouter(prefix="/api/v1", tags=["generation"], responses=ERRORS)


async def answer(request: Request, req: GenerateRequest, lab: Lab) -> Response:
    """Generation through a KV cache: the prompt runs once, then each token alone. Each token is the most likely
    (greedy, as transformers' generate(do_sample=False)) or, with do_sample, drawn after temperature, top_k, top_p
    (the smallest set of the most likely tokens whose probabilities reach p, the token that crosses p included) and
    min_p, in that order, from torch.manual_seed(seed)'s stream (the tokens of transformers' generate(do_sample=True));
    branch forces chosen steps. Stops after the end-of-text token. The answer: preset, layer, the prompt's tokens and
    token_ids (text_start: where its text begins), text (the generated tokens decoded), stopped_at_eos,
    kv_cache_bytes_per_token (K and V of one token in every layer, float32: 2 · layers · kv heads · d_k · 4), sampling
    (the settings, and filters: those that ran), logprob (the sequence's, under the distributions it was drawn from),
    samples[s] (each continuation's seed, token_ids, text and logprob) and distinct (how many of them differ).
    generated[i]: token_id, token (its label), top (the five most likely tokens of the raw logits, labelled like
    `token`, and their probabilities), context (tokens in the cache when it was predicted), kv_cache_bytes (context ×
    kv_cache_bytes_per_token), attention (H, context): each head's weights at `layer`, for the query that predicted
    it (the context's last token); p and logp (its probability under the final distribution), forced (a branch's
    token), candidates (the twelve most likely tokens of the raw logits: token_id, token) and filters[f] (name:
    "logits", then each filter that ran; kept: the tokens it leaves; probs: the candidates' probabilities after it,
    renormalised; rest: the probability of every other token it leaves)."""
    spec, _, g = await run(lab, req, get_key(request))
    return json_response(document(lab.models[spec.preset], spec, g, req.decimals))


async def answer_npz(request: Request, req: GenerateRequest, lab: Lab) -> Response:
    """The generation of /api/v1/generate (the same fields) as a NumPy archive, with what JSON leaves out: each
    step's distribution after each filter over the whole vocabulary. np.load() gives prompt_ids, prompt_tokens,
    text_start, token_ids, tokens; filters (F: "logits", then those that ran, in order) and probs (T, F, V) float32,
    0 where a filter removed a token, kept (T, F); candidates (T, 12) and candidate_probs (T, F, 12): the JSON's
    candidates and filters[].probs; p, logp (T,) of the token taken, forced (T,), logprob (); top_ids, top_probs
    (T, 5), context (T,), attention (T, H, n + T − 1) NaN past each step's context; samples_seed, samples_logprob
    (S,), samples_token_ids (S, T), −1 after a sample ended, and distinct ()."""
    spec, _, g = await run(lab, req, get_key(request), logits=True)
    body = await anyio.to_thread.run_sync(npz, lab.models[spec.preset], spec, g)
    headers = {"Content-Disposition": 'attachment; filename="generate.npz"'}
    return Response(body, media_type="application/x-npz", headers=headers)


twins(
    router,
    "/generate",
    GenerateRequest,
    answer,
    "generate",
    summary="Generate tokens greedily or by sampling, with each step's filters and attention",
)
NPZ = {200: {"content": {"application/x-npz": {}}, "description": "np.load() gives token_ids, filters, probs, …"}}
twins(
    router,
    "/generate.npz",
    GenerateRequest,
    answer_npz,
    "generate_npz",
    response_class=Response,
    responses=NPZ,
    summary="A generation as a NumPy archive: every filter's whole distribution at every step",
)
