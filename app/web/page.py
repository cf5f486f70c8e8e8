"""The page kernel: every HTML page goes through `serve`.

One pipeline for all of them: the language (`?lang=`, else Accept-Language), the rendered-page cache (keyed by URL,
language, fragment flag and whatever else the page shows), the page's base context (language links, its JSON twin),
inline errors (a bad field is shown in the page, in its language, with a 422; a busy server with a 503), and the
rendering: the whole page, or for an htmx request only the blocks it swaps, with `Vary`.

A page module is then a view state, a `build(ctx)` that adds what the page shows, and a template.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import quote

from fastapi import Request, Response
from pydantic import ValidationError

from engine import SpecError
from engine.budget import Busy

from ..errors import clean
from ..lab import Lab, cached_page, is_fragment, page_key, remember_page
from ..schemas import FieldError
from ..templating import TEMPLATES
from .i18n import LANGS, error_message, negotiate, translator
from .state import ViewState

Build = Callable[[dict[str, Any]], Awaitable[None]]


def language(request: Request) -> str:
    return negotiate(request.query_params.get("lang"), request.headers.get("accept-language"))


@contextmanager
def inline_errors(ctx: dict[str, Any], t: Any) -> Iterator[None]:
    """Bad input is shown in the page, in its language, with a 422 (503 when the server is busy)."""
    try:
        yield
    except ValidationError as exc:
        errors = clean(exc.errors(), "query")
        ctx["error"] = [
            t(
                "error.field",
                field=e["loc"][1 if len(e["loc"]) > 1 else 0],
                message=error_message(e["msg"], ctx["lang"]),
            )
            for e in errors
        ]
        ctx["status"] = 422
    except (SpecError, FieldError) as exc:
        ctx["error"] = [t("error.field", field=exc.field, message=error_message(exc.message, ctx["lang"]))]
        ctx["status"] = 422
    except Busy as exc:
        ctx["error"] = [t("error.busy", seconds=exc.retry_after)]
        ctx["status"] = 503


async def serve(
    request: Request,
    lab: Lab,
    template: str,
    state: ViewState,
    build: Build,
    *,
    page: str | None = None,
    json_url: str | None = None,
    shows: str = "",
    blocks: tuple[str, ...] = ("stage", "controls"),
    **extra: Any,
) -> Response:
    """Render `template` for `state`: from the cache when this exact view was rendered before.

    `shows` names anything else the page shows that its URL does not (presenter mode's public address), so the
    cache keys by it; `blocks` are what an htmx request swaps; `page` (the template's name by default) marks the
    navigation's current link."""
    lang = language(request)
    t = translator(lang)
    key = page_key(request, lang)
    if shows:
        key = (f"{key[0]}@{shows}", key[1])
    if (hit := cached_page(lab, key)) is not None:
        return hit
    fragment = is_fragment(request) and bool(blocks)
    ctx: dict[str, Any] = {
        "page": page or template.removesuffix(".html"),
        "t": t,
        "lang": lang,
        "langs": LANGS,
        "state": state,
        "lang_urls": {code: state.url(lang=code) for code in LANGS},
        "json_url": json_url,
        "error": None,
        "status": 200,
        "fragment": fragment,
    } | extra
    with inline_errors(ctx, t):
        await build(ctx)
    headers = {"Vary": "HX-Request, Accept-Language"}
    if ctx["error"]:  # the refusal in words, for callers that read no HTML (a room checking a shared view)
        headers["X-Lab-Error"] = quote("; ".join(ctx["error"]), safe=" :;,.()'=-_")
    response = TEMPLATES.TemplateResponse(
        request,
        template,
        ctx,
        status_code=ctx["status"],
        block_names=list(blocks) if fragment else [],
        headers=headers,
    )
    return remember_page(lab, key, response)
