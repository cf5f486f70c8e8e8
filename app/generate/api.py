"""GET/POST /api/v1/generate: greedy generation through the KV cache, with each new token's top five and the
attention of every head of one layer over the context that predicted it."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response

from ..lab import Lab, get_key
from ..render.payload import json_response
from ..schemas import ERRORS
from ..web.answer import twins
from .view import GenerateRequest, document, run

router = APIRouter(prefix="/api/v1", tags=["generation"], responses=ERRORS)


async def answer(request: Request, req: GenerateRequest, lab: Lab) -> Response:
    """Greedy decoding (the most likely token each time, as transformers' generate(do_sample=False)) through a KV
    cache: the prompt runs once, then each token alone. generated[i]: token_id, token (its label), top (the five
    most likely tokens, labelled like `token`, and their probabilities), context (tokens in the cache when it was
    predicted), kv_cache_bytes, and attention (H, context): each head's weights at `layer`, for the query that
    predicted it (the context's last token). Stops after the end-of-text token."""
    spec, _, g = await run(lab, req, get_key(request))
    return json_response(document(lab.models[spec.preset], spec, g, req.decimals))


twins(
    router,
    "/generate",
    GenerateRequest,
    answer,
    "generate",
    summary="Generate tokens greedily, with each step's attention",
)
