"""The generation page `/generate`: SmolLM2 writes token by token through its KV cache; each step shows the token,
the five it weighed, the cache it grew and where every head of one layer looked when predicting it."""

from __future__ import annotations

from typing import Annotated, Any
from urllib.parse import urlencode

from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse, Response

from ..lab import Lab, get_lab, request_key
from ..render.arrays import to_numpy
from ..render.cells import matrix_view
from ..schemas import from_query
from ..web.page import language, serve
from ..web.state import ViewState, parse_int, url_fields
from .view import GenerateRequest, generation_spec, run, top_labels

router = APIRouter(include_in_schema=False)
API_KEYS = url_fields(GenerateRequest)
DEFAULT_TEXT = {"en": "The cat sat on the mat. The dog", "zh": "猫坐在垫子上，然后"}


@router.get("/generate", response_class=HTMLResponse)
async def generate_page(request: Request, lab: Annotated[Lab, Depends(get_lab)]) -> Response:
    state = ViewState.of(request.query_params, "/generate", API_KEYS, ("step",))
    params = state.api_params()
    if "text" not in params and "token_ids" not in params:  # a first visit: a prompt in the page's language
        params["text"] = DEFAULT_TEXT[language(request)]
    twin = "/api/v1/generate?" + urlencode(params)

    async def build(ctx: dict[str, Any]) -> None:
        req = GenerateRequest.model_validate(from_query(params, None, GenerateRequest))
        spec, layer = generation_spec(req, lab.limits, lab.device, lab.models, lab.settings.max_new_tokens)
        model = lab.models[spec.preset]
        g = await run(lab, spec, req, layer, request_key(request))
        n = len(g.steps)
        step = parse_int("step", state.get("step"), 1, 1, n)  # a first visit opens on the first generated token
        s = g.steps[step - 1]
        assert s.attention is not None  # a layer is always watched here
        ids = list(g.prompt_ids) + [x.token_id for x in g.steps]
        labels = model.labels(ids)
        prompt_n = len(g.prompt_ids)
        heads = [f"{ctx['t']('head')} {h}" for h in range(model.info.n_heads)]
        attention = matrix_view("attention", "a", to_numpy(s.attention), heads, labels[: s.context],
                                "(H, t)", "sequential", None)  # fmt: skip
        attention.links = False
        ctx.update(
            spec=spec, layer=layer, n_layer=model.info.n_layer, gen=g, step=step, n_steps=n, cur=s,
            prompt=labels[:prompt_n], generated=labels[prompt_n:], attention=attention,
            top=list(zip(top_labels(model, ids, labels, s.context, s.top_ids), s.top_probs, strict=True)),
            cache_bytes=s.context * g.kv_bytes_per_token, final_bytes=(len(ids) - 1) * g.kv_bytes_per_token,
            text=req.text if req.text is not None else "", max_new=req.max_new_tokens,
            step_urls=[(i, state.url(step=i)) for i in range(1, n + 1)], first_url=state.url(step=1),
            prev_url=state.url(step=step - 1) if step > 1 else None,
            next_url=state.url(step=step + 1) if step < n else None,
        )  # fmt: skip

    return await serve(request, lab, "generate.html", state, build, json_url=twin)
