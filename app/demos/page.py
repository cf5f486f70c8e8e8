"""The demonstrations page `/demos`: each demonstration's form and its computed answer, and the √d_k charts."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError

from engine import demos

from ..lab import Lab
from ..templating import error_message
from ..web.page import language, page_route
from ..web.state import EXAMPLES, PageQuery
from .view import DemosView, PermutationQuery, RopeQuery, SoftmaxQuery, run_demos, scaling_charts

router = APIRouter(include_in_schema=False)

KEYS = tuple(dict.fromkeys((*PermutationQuery.model_fields, *RopeQuery.model_fields, *SoftmaxQuery.model_fields)))


def demos_query(request: Request, path: str, keys: tuple[str, ...], query: type[PageQuery]) -> PageQuery:
    """The permutation's tokens when the URL names none: the reader's language's example, as the lab's toy."""
    state = query.of(request.query_params, path, keys)
    state.shows(EXAMPLES.get(language(request)))
    return state


def form(lab: Lab, state: PageQuery, lang: str) -> dict[str, Any]:
    return {"json_url": "/api/v1/demo/all?" + state.api_query(), "values": state.params}


async def demos_view(state: PageQuery, lab: Lab, progress: str, ctx: dict[str, Any]) -> DemosView:
    """What /demos shows for `state`: every demonstration that its parameters allow, the others' errors in words
    (with a 422). On the JSON face an error is the API's 422, every bad field named, as /api/v1/demo/all says."""
    t = ctx["t"]
    sections, errors = run_demos(state.api_params())
    if errors and not ctx["html"]:
        raise RequestValidationError(
            [{"loc": ("query", field), "msg": message, "type": "value_error"} for field, message in errors.values()]
        )
    if errors:
        ctx["status"] = 422
    scaling = await run_in_threadpool(demos.scaling)
    return DemosView(
        **sections,
        scaling=scaling,
        errors={
            name: t("error.field", field=field, message=error_message(message, ctx["lang"]))
            for name, (field, message) in errors.items()
        },
        texts=texts(sections, scaling, t),
        notices=notices(sections, t),
        charts=scaling_charts(scaling, t),
        json_url="/api/v1/demo/all?" + state.api_query(),
        api_urls={name: f"/api/v1/demo/{name}" for name in ("permutation", "rope", "scaling", "softmax")},
    )


def texts(sections: dict[str, Any], scaling: dict[str, Any], t: Any) -> dict[str, str]:
    """What the page says above a demonstration's numbers."""
    out = {"scaling": t("demo.scale_text", samples=scaling["samples"], n=scaling["n_keys"])}
    if "permutation" in sections:
        out["permutation"] = t("demo.perm_text", shuffled=" ".join(sections["permutation"]["shuffled"]))
    return out


def notices(sections: dict[str, Any], t: Any) -> dict[str, str]:
    """What to notice under each demonstration shown."""
    out = {
        name: t(f"demo.{key}_notice") for name, key in (("permutation", "perm"), ("rope", "rope")) if name in sections
    }
    out["scaling"] = t("demo.scale_notice")
    if (sm := sections.get("softmax")) is not None:
        out["softmax"] = t("demo.softmax_notice", max=f"{sm['max_finite']:,.0f}", dtype=sm["dtype"])
    return out


page_route(router, "/demos", "demos.html", KEYS, PageQuery, demos_view, form, state_of=demos_query)
