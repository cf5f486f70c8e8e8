"""GET/POST /api/v1/generate: greedy generation through the KV cache, with each new token's top five and the
attention of every head of one layer over the context that predicted it."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, Depends, Request, Response

from ..lab import Lab, get_lab, request_key
from ..render.payload import json_response
from ..schemas import ERRORS, query_parameters
from ..web.answer import parse_query
from ..web.cache import cached_get
from .view import GenerateRequest, document, generation_spec, run

router = APIRouter(prefix="/api/v1", tags=["generation"], responses=ERRORS)

NOTE = (
    "Greedy decoding (the most likely token each time, as transformers' generate(do_sample=False)) through a KV "
    "cache: the prompt runs once, then each token alone. generated[i]: token_id, token (its label), top (the five "
    "most likely tokens, labelled like `token`, and their probabilities), context (tokens in the cache when it was predicted), "
    "kv_cache_bytes, and attention (H, context): each head's weights at `layer`, for the query that predicted it "
    "(the context's last token). Stops after the end-of-text token."
)


async def answer(req: GenerateRequest, lab: Lab, key: str | None = None) -> Response:
    spec, layer = generation_spec(req, lab.limits, lab.device, lab.models, lab.settings.max_new_tokens)
    g = await run(lab, spec, req, layer, key)
    return json_response(document(lab.models[spec.preset], spec, g, req.decimals))


@router.post("/generate", description=NOTE)
async def generate_post(req: Annotated[GenerateRequest, Body()], lab: Annotated[Lab, Depends(get_lab)]) -> Response:
    return await answer(req, lab)


@router.get("/generate", description=NOTE, openapi_extra={"parameters": query_parameters(GenerateRequest)})
@cached_get
async def generate_get(request: Request, lab: Annotated[Lab, Depends(get_lab)]) -> Response:
    return await answer(parse_query(request, GenerateRequest), lab, request_key(request))
