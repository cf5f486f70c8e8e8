"""The model view page `/model`: every layer × head of a pretrained model at a glance, one statistic at a time,
each cell a link into the lab at that layer and head; the heads most like a chosen one."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from typing import Any, ClassVar
from urllib.parse import urlencode

from fastapi import APIRouter

from engine.model_view import STATS, similar_heads
from engine.spec import Spec

from ..lab import Lab
from ..schemas import FieldError
from ..web.knockouts import form_request, head_name, heads_text
from ..web.page import lab_url, page_route
from ..web.state import Choice, Digits, PageQuery, within
from .view import ChosenHead, HeadLink, ModelCompare, ModelView, ModelViewRequest, model_view_of

router = APIRouter(include_in_schema=False)
KEYS = tuple(ModelViewRequest.model_fields)


class ModelQuery(PageQuery):
    """/model's view: the statistic drawn, a chosen layer and head (their similar heads marked), a second text
    beside the first. The heads to knock out are the request's `ablate`, which the form writes as `L3 H1, L5 H2`
    (once `3.1, 5.2`, still read), once spelled `heads`."""

    ALIASES: ClassVar[dict[str, str]] = {"heads": "ablate"}

    stat: Choice(STATS) = "entropy"  # type: ignore[valid-type]
    layer: Digits(None) | None = None  # type: ignore[valid-type]
    head: Digits(None) | None = None  # type: ignore[valid-type]
    compare_text: str = ""


CHANGED = 0.1  # a head's statistic moved by a tenth of its colour scale (ln N for entropy, 1 for the shares)


def api_url(state: ModelQuery, ablate: list[list[int]] | None = None) -> str:
    """/api/v1/model_view for the page's request, the heads knocked out written as the API's JSON pairs."""
    written = json.dumps(ablate, separators=(",", ":")) if ablate else None
    return "/api/v1/model_view?" + state.api_query(ablate=written)


async def model_page_view(state: ModelQuery, lab: Lab, progress: str, ctx: dict[str, Any]) -> ModelView:
    """What /model shows for `state`: the page's View."""
    can_knock = knocks(lab, state)
    stat = state.stat
    req = form_request(state, ModelViewRequest)
    try:
        spec, doc = await model_view_of(req, lab, progress)
    except FieldError as e:  # the field as the user spelled it
        raise FieldError(state.spelled.get("ablate", "ablate") if e.field == "ablate" else e.field, e.message) from None
    t = ctx["t"]
    present = state.present
    spec_b, doc_b = None, None
    knocked: tuple[tuple[int, int], ...] = ()
    if state.compare_text:  # a second text beside the first (heads knocked out of both, if any)
        other = req.model_copy(update={"text": state.compare_text, "token_ids": None})
        try:
            spec_b, doc_b = await model_view_of(other, lab, progress)
        except FieldError as e:
            raise FieldError("compare_text", e.message) from None
    elif doc.ablate:  # heads knocked out: the clean run (A) beside the run without them (B)
        knocked = doc.ablate
        spec_b, doc_b = spec, doc
        spec, doc = await model_view_of(req.model_copy(update={"ablate": None}), lab)
    values = doc.grid(stat)
    longest = max(spec.n_tokens, spec_b.n_tokens if spec_b else 0)
    top = math.log(max(2, longest)) if stat == "entropy" else 1.0  # one colour scale for both grids

    def link(
        layer: int, head: int, value: float, cls: str = "", of: Spec = spec, text: str | None = req.text
    ) -> HeadLink:
        return HeadLink(layer, head, value, lab_url(of.preset, of.token_ids, layer, head, ctx["lang"], present, text),
                        state.url(layer=layer, head=head) + "#chosen", cls)  # fmt: skip

    def colour(value: float) -> str:
        return f"sq-{min(10, max(0, round(10 * value / top)))}"

    grid = tuple(tuple(link(li, hi, v, colour(v)) for hi, v in enumerate(row)) for li, row in enumerate(values))
    compare = None
    text_b = state.compare_text or req.text  # the second grid's text: the one compared, or the same one knocked out
    if spec_b is not None and doc_b is not None:
        values_b = doc_b.grid(stat)
        moved = sorted(((abs(b - a), b - a, li, hi)
                        for li, (row_a, row_b) in enumerate(zip(values, values_b, strict=True))
                        for hi, (a, b) in enumerate(zip(row_a, row_b, strict=True))), reverse=True)  # fmt: skip
        marked = {(li, hi) for d, _, li, hi in moved if d > CHANGED * top}

        def mark(c: HeadLink, b: bool = False) -> HeadLink:
            c = replace(c, cls=c.cls + " changed") if (c.layer, c.head) in marked else c
            return replace(c, cls=c.cls + " knocked") if b and (c.layer, c.head) in knocked else c

        grid = tuple(tuple(mark(c) for c in row) for row in grid)
        compare = ModelCompare(
            text=state.compare_text or state.get("text"),
            knocked=knocked,
            knocked_mode=req.ablate_mode if knocked else "",
            tokens=doc_b.tokens,
            grid=tuple(
                tuple(mark(link(li, hi, v, colour(v), spec_b, text_b), b=True) for hi, v in enumerate(row))
                for li, row in enumerate(values_b)
            ),
            changed=len(marked),
            threshold=CHANGED * top,
            most_changed=tuple(link(li, hi, d, "", spec_b, text_b) for _, d, li, hi in moved[:10]),
        )
    ranked = sorted(((v, li, hi) for li, row in enumerate(values) for hi, v in enumerate(row)),
                    reverse=stat != "entropy")[:10]  # fmt: skip
    chosen = None
    if state.layer is not None or state.head is not None:
        layer = within("layer", state.layer or 0, 0, doc.layers - 1)
        head = within("head", state.head or 0, 0, spec.n_heads - 1)
        like = tuple(link(li, hi, d) for li, hi, d in similar_heads(doc.stats, layer, head))
        knock = (state.url(ablate=head_name(layer, head), compare_text=None, layer=None, head=None) + "#compare"
                 if can_knock else "")  # fmt: skip
        roles = ("/heads?" + urlencode({"preset": spec.preset, "text": state.get("text"), "head": f"{layer}.{head}",
                                        "lang": ctx["lang"]}) + "#probe") if getattr(lab.models.get(spec.preset),
                                                                                     "generates", False) else ""  # fmt: skip
        url = lab_url(spec.preset, spec.token_ids, layer, head, ctx["lang"], present, req.text)
        chosen = ChosenHead(layer, head, url, t("model.distance"), like, knock, roles)
        near = {(h.layer, h.head) for h in like}

        def spot(c: HeadLink) -> HeadLink:
            where = (c.layer, c.head)
            cls = " chosen" if where == (layer, head) else " like" if where in near else ""
            return replace(c, cls=c.cls + cls) if cls else c

        grid = tuple(tuple(spot(c) for c in row) for row in grid)
    return ModelView(
        compare=compare,
        compare_close_url=state.url(compare_text=None, ablate=None, ablate_mode=None) if compare else None,
        spec=spec,
        preset=spec.preset,
        tokens=doc.tokens,
        layers=doc.layers,
        heads=doc.heads,
        stat=stat,
        explain=t("model.explain." + stat),
        scale_ticks=("0", f"{top / 2:.2f}", f"{top:.2f}"),
        grid=grid,
        ranked=tuple(link(li, hi, v) for v, li, hi in ranked),
        chosen=chosen,
        stat_urls=tuple((s, state.url(stat=s)) for s in STATS),
        json_url=api_url(state, req.ablate),
        present_url=state.url(present=None if present else "1"),
        can_knock=can_knock,
        heads_text=heads_text(req.ablate or []) or state.get("ablate"),
    )


def knocks(lab: Lab, state: ModelQuery) -> bool:
    """The form offers knocking heads out for a decoder read in one pass."""
    return bool(getattr(lab.models.get(state.get("preset") or "smollm2"), "one_pass_view", False))


def form(lab: Lab, state: ModelQuery, lang: str) -> dict[str, Any]:
    """What /model draws whatever its View says (an error page keeps the form's fields): the models its form offers,
    the API's answer for its request, the heads knocked out as typed."""
    return {
        "models": lab.models,
        "json_url": api_url(state),
        "can_knock": knocks(lab, state),
        "heads_text": state.get("ablate"),
    }


page_route(router, "/model", "model.html", KEYS, ModelQuery, model_page_view, form)
