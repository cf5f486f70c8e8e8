"""The page /cost: where a block's work goes as N grows, counted from the shapes and timed on this machine. The View
is built in app/cost/view.py, the counts and timings in app/cost/flops.py.

A bad value keeps the form as the user typed it: the route reads the query once (`refusals`), the page says each
refused field beside its input, and the error names the field by the label the user sees and by its URL key."""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse, Response
from pydantic import ValidationError

from ..errors import clean
from ..lab import Lab, get_lab
from ..schemas import FieldError
from ..templating import error_message, translator
from ..web.page import language, query_of, serve
from ..web.state import PageQuery
from .view import CostQuery, CostView, cost_view

router = APIRouter(include_in_schema=False)
KEYS = tuple(k for k in CostQuery.model_fields if k not in PageQuery.model_fields)  # its own
LABELS = {"model": "cost.model", "n_max": "cost.n_max"}  # each field's label in the form (the catalogues' keys)


def refusals(given: dict[str, str]) -> dict[str, str]:
    """Each refused field's message, by its URL key (empty when the query is good): the API's English, coded so a
    page says it in its reader's language (`error_message`)."""
    try:
        CostQuery.model_validate(given)
    except ValidationError as exc:
        out: dict[str, str] = {}
        for e in clean(exc.errors(), "query"):
            out.setdefault(str(e["loc"][1]), e["msg"])
        return out
    return {}


def named(key: str, lang: str) -> str:
    """A field as the user sees it, with the key the URL spells: “Time up to N (n_max)”."""
    label = translator(lang)(LABELS[key]) if key in LABELS else key
    return translator(lang)("cost.field", label=label, name=key)


@router.get("/cost", response_class=HTMLResponse)
async def cost_page(
    request: Request,
    lab: Annotated[Lab, Depends(get_lab)],
    state: Annotated[PageQuery, Depends(query_of(PageQuery, "/cost", KEYS))],
) -> Response:
    given = {k: v for k, v in state.params.items() if k in KEYS}
    lang = language(request)
    refused = refusals(given)

    async def build(ctx: dict[str, Any]) -> CostView:
        for key, message in refused.items():  # the first refused field is the page's error (422); every one is
            raise FieldError(named(key, lang) if ctx["html"] else key, message)  # said beside its input
        q = CostQuery.model_validate(given)
        return await asyncio.to_thread(cost_view, q, ctx["t"], ctx["lang"])  # the timing: off the event loop

    typed = {"model": given.get("model", "gpt2"), "n_max": given.get("n_max", "1024")}  # the form as typed
    return await serve(request, "cost.html", state, build, blocks=(), deferred=not refused,  # timing takes seconds
                       typed=typed, refused={k: error_message(m, lang) for k, m in refused.items()})  # fmt: skip
