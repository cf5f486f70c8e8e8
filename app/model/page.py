"""The model view page `/model`: every layer × head of a pretrained model at a glance, one statistic at a time,
each cell a link into the lab at that layer and head; the heads most like a chosen one."""

from __future__ import annotations

import math
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse, Response

from engine.model_view import STATS, similar_heads

from ..lab import Lab, get_lab, request_key
from ..schemas import FieldError, from_query
from ..web.page import serve
from ..web.state import ViewState, parse_int
from .view import ModelViewRequest, model_view_of

router = APIRouter(include_in_schema=False)
KEYS = tuple(ModelViewRequest.model_fields)


@router.get("/model", response_class=HTMLResponse)
async def model_page(request: Request, lab: Annotated[Lab, Depends(get_lab)]) -> Response:
    state = ViewState.of(request.query_params, "/model", KEYS, ("stat", "layer", "head"))

    async def build(ctx: dict[str, Any]) -> None:
        stat = state.get("stat") or "entropy"
        if stat not in STATS:
            raise FieldError("stat", f"one of {', '.join(STATS)}")
        req = ModelViewRequest.model_validate(from_query(state.api_params(), None, ModelViewRequest))
        spec, view = await model_view_of(req, lab, request_key(request))
        n_layer = view["layers"]
        top = math.log(max(2, spec.n_tokens)) if stat == "entropy" else 1.0
        ids = ",".join(str(i) for i in spec.token_ids)

        def lab_url(layer: int, head: int) -> str:
            return f"/?preset={spec.preset}&token_ids={ids}&layer={layer}&head={head}&stage=4&lang={ctx['lang']}"

        rows = [
            [(s[stat], f"sq-{min(10, max(0, round(10 * s[stat] / top)))}", lab_url(li, hi)) for hi, s in enumerate(row)]
            for li, row in enumerate(view["stats"])
        ]
        ranked = sorted(((s[stat], li, hi) for li, row in enumerate(view["stats"]) for hi, s in enumerate(row)),
                        reverse=stat != "entropy")[:10]  # fmt: skip
        chosen = None
        if state.get("layer") or state.get("head"):
            layer = parse_int("layer", state.get("layer"), 0, 0, n_layer - 1)
            head = parse_int("head", state.get("head"), 0, 0, spec.n_heads - 1)
            chosen = {"layer": layer, "head": head, "url": lab_url(layer, head),
                      "like": [(li, hi, d, lab_url(li, hi)) for li, hi, d in similar_heads(view["stats"], layer, head)]}  # fmt: skip
        ctx.update(view=view, stat=stat, rows=rows, ranked=[(v, li, hi, lab_url(li, hi)) for v, li, hi in ranked],
                   stats=STATS, stat_urls=[(s, state.url(stat=s)) for s in STATS], chosen=chosen,
                   head_url=lambda li, hi: state.url(layer=li, head=hi), spec=spec)  # fmt: skip

    return await serve(
        request,
        lab,
        "model.html",
        state,
        build,
        json_url="/api/v1/model_view?" + state.api_query(),
        blocks=(),
        models=lab.models,
    )
