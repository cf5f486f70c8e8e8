"""What every lab-like page shares: its base context, its inline errors, and its (cached) rendering.

A page renders whole, or — for an htmx request — as its `stage` block plus the controls out of band; a successful
rendering is kept in the response cache under its URL, language and fragment flag.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from fastapi import Request, Response
from pydantic import ValidationError

from engine import SpecError
from engine.budget import Busy

from ..errors import clean
from ..i18n import LANGS
from ..lab import Lab, is_fragment, remember_page
from ..schemas import FieldError
from ..templating import TEMPLATES


def base_context(request: Request, page: str, lang: str, t: Any, state: Any, **extra: Any) -> dict[str, Any]:
    return {
        "page": page,
        "t": t,
        "lang": lang,
        "langs": LANGS,
        "state": state,
        "lang_urls": {code: state.url(lang=code) for code in LANGS},
        "error": None,
        "status": 200,
        "fragment": is_fragment(request),
    } | extra


@contextmanager
def inline_errors(ctx: dict[str, Any], t: Any) -> Iterator[None]:
    """Bad input is shown in the page, in its language, with a 422 (503 when the server is busy)."""
    try:
        yield
    except ValidationError as exc:
        ctx["error"] = [t("error.field", field=e["loc"][1], message=e["msg"]) for e in clean(exc.errors(), "query")]
        ctx["status"] = 422
    except (SpecError, FieldError) as exc:
        ctx["error"] = [t("error.field", field=exc.field, message=exc.message)]
        ctx["status"] = 422
    except Busy as exc:
        ctx["error"] = [t("error.busy", seconds=exc.retry_after)]
        ctx["status"] = 503


def render(request: Request, lab: Lab, template: str, ctx: dict[str, Any], cache_key: tuple[str, str]) -> Response:
    response = TEMPLATES.TemplateResponse(
        request,
        template,
        ctx,
        status_code=ctx["status"],
        block_names=["stage", "controls"] if ctx["fragment"] else [],
        headers={"Vary": "HX-Request, Accept-Language"},
    )
    return remember_page(lab, cache_key, response)
