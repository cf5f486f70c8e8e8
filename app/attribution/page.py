"""The page `/attribution`: is a big attention weight an important one? Its query (the API's request fields and the
page's own `head`, `sort` and `key`) and View (app/attribution/view.py) and its template; htmx redraws the page's
body (`blocks`), and a head chosen on the grid swaps that head's section alone."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fastapi import APIRouter, Request

from engine.spec import PRESETS

from ..lab import Lab
from ..web.page import page_route
from ..web.sequence import generators
from .api import BUILTIN, AttributionRequest, encoders
from .view import DEFAULT_TEXT, AttributionQuery, AttributionView, attribution_view

router = APIRouter(include_in_schema=False)
API_KEYS = ("preset", "text", "token_ids", "bos", "position", "target", "contrast", "flow")
assert set(API_KEYS) <= set(AttributionRequest.model_fields)


# What names a place in one model's tokens, heads or vocabulary: meaningless in another's.
MODEL_BOUND = ("head", "key", "position", "target", "contrast", "token_ids")


def state_of(request: Request, path: str, keys: tuple[str, ...], query: type[AttributionQuery]) -> AttributionQuery:
    """The page's query; a token's own spaces count (" London" is not "London"): kept as typed. The form sends the
    model it was drawn for (`was`): when its model menu changed, the head, key, position and tokens it carries from
    the old model are dropped (layer 23 of SmolLM2 is no head of the toy), and the new model opens on its defaults."""
    params: Mapping[str, str] = request.query_params
    was = params.get("was", "")
    if was and was != params.get("preset", ""):
        params = {k: v for k, v in params.items() if k not in MODEL_BOUND}
    state = query.of(params, path, keys)
    for name in ("target", "contrast"):
        if name in state.params:
            state.params[name] = params[name]
    return state


def form(lab: Lab, state: AttributionQuery, lang: str) -> dict[str, Any]:
    """What the page draws whatever its View says: the models its form offers (every decoder, then the encoders:
    MiniLM has no logit to split, but its norms and rollout)."""
    preset = state.params.get("preset", "")  # the toy's and gpt2-small's text: their own tokens
    return {"presets": [*generators(lab.models), *encoders(lab), *BUILTIN],
            "default_text": " ".join(PRESETS[preset].tokens) if preset in BUILTIN else DEFAULT_TEXT}  # fmt: skip


page_route(router, "/attribution", "attribution.html", API_KEYS, AttributionQuery, attribution_view, form, AttributionView.blocks,
           state_of)  # fmt: skip
