"""The model view page `/model`: every layer × head of a pretrained model at a glance, one statistic at a time,
each cell a link into the lab at that layer and head; the heads most like a chosen one."""

from __future__ import annotations

import functools
import math
from typing import Annotated, Any
from urllib.parse import urlencode

from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse, Response

from engine.model_view import STATS, similar_heads
from engine.spec import Spec

from ..lab import Lab, get_lab, request_key
from ..schemas import FieldError, from_query
from ..web.page import serve
from ..web.state import ViewState, parse_int
from .view import ChosenHead, HeadLink, ModelView, ModelViewRequest, model_view_of

router = APIRouter(include_in_schema=False)
KEYS = tuple(ModelViewRequest.model_fields)


@router.get("/model", response_class=HTMLResponse)
async def model_page(request: Request, lab: Annotated[Lab, Depends(get_lab)]) -> Response:
    state = ViewState.of(request.query_params, "/model", KEYS, ("stat", "layer", "head"))
    build = functools.partial(model_page_view, state, lab, request_key(request))
    return await serve(request, lab, "model.html", state, build, json_url="/api/v1/model_view?" + state.api_query(),
                       blocks=(), models=lab.models)  # fmt: skip


def lab_url(spec: Spec, layer: int, head: int, lang: str) -> str:
    """The lab at one layer and head of the same tokens, on the weights stage."""
    ids = ",".join(str(i) for i in spec.token_ids)
    query = {"preset": spec.preset, "token_ids": ids, "layer": layer, "head": head, "stage": 4, "lang": lang}
    return "/?" + urlencode(query, safe=",")


async def model_page_view(state: ViewState, lab: Lab, progress: str, ctx: dict[str, Any]) -> ModelView:
    """What /model shows for `state`: the page's View."""
    stat = state.get("stat") or "entropy"
    if stat not in STATS:
        raise FieldError("stat", f"one of {', '.join(STATS)}")
    req = ModelViewRequest.model_validate(from_query(state.api_params(), None, ModelViewRequest))
    spec, computed = await model_view_of(req, lab, progress)
    stats, t = computed["stats"], ctx["t"]
    top = math.log(max(2, spec.n_tokens)) if stat == "entropy" else 1.0

    def link(layer: int, head: int, value: float, cls: str = "") -> HeadLink:
        return HeadLink(layer, head, value, lab_url(spec, layer, head, ctx["lang"]),
                        state.url(layer=layer, head=head), cls)  # fmt: skip

    grid = tuple(
        tuple(link(li, hi, s[stat], f"sq-{min(10, max(0, round(10 * s[stat] / top)))}") for hi, s in enumerate(row))
        for li, row in enumerate(stats)
    )
    ranked = sorted(((s[stat], li, hi) for li, row in enumerate(stats) for hi, s in enumerate(row)),
                    reverse=stat != "entropy")[:10]  # fmt: skip
    chosen = None
    if state.get("layer") or state.get("head"):
        layer = parse_int("layer", state.get("layer"), 0, 0, computed["layers"] - 1)
        head = parse_int("head", state.get("head"), 0, 0, spec.n_heads - 1)
        like = tuple(link(li, hi, d) for li, hi, d in similar_heads(stats, layer, head))
        chosen = ChosenHead(layer, head, lab_url(spec, layer, head, ctx["lang"]), t("model.distance"), like)
    return ModelView(
        spec=spec,
        preset=spec.preset,
        tokens=tuple(computed["tokens"]),
        layers=computed["layers"],
        heads=computed["heads"],
        stat=stat,
        explain=t("model.explain." + stat),
        grid=grid,
        ranked=tuple(link(li, hi, v) for v, li, hi in ranked),
        chosen=chosen,
        stat_urls=tuple((s, state.url(stat=s)) for s in STATS),
        json_url="/api/v1/model_view?" + state.api_query(),
    )
