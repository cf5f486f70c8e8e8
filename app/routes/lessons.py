"""Guided lessons: `/lessons` lists them, `/lessons/{slug}` shows one as steps into the lab."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import HTMLResponse, Response

from ..i18n import LANGS, negotiate, translator
from ..lessons import BY_SLUG, LESSONS
from ..templating import TEMPLATES

router = APIRouter(include_in_schema=False)


def with_lang(url: str, lang: str) -> str:
    path, _, fragment = url.partition("#")
    joined = f"{path}{'&' if '?' in path else '?'}lang={lang}"
    return f"{joined}#{fragment}" if fragment else joined


def _ctx(request: Request, page: str, path: str) -> dict[str, object]:
    lang = negotiate(request.query_params.get("lang"), request.headers.get("accept-language"))
    return {
        "page": page,
        "t": translator(lang),
        "lang": lang,
        "langs": LANGS,
        "lang_urls": {c: f"{path}?lang={c}" for c in LANGS},
    }


@router.get("/lessons", response_class=HTMLResponse)
def lessons_index(request: Request) -> Response:
    ctx = _ctx(request, "lessons", "/lessons")
    ctx["lessons"] = LESSONS
    return TEMPLATES.TemplateResponse(request, "lessons.html", ctx)


@router.get("/lessons/{slug}", response_class=HTMLResponse)
def lesson_page(request: Request, slug: str) -> Response:
    lesson = BY_SLUG.get(slug)
    if lesson is None:
        raise HTTPException(404, f"no lesson {slug!r}; see /lessons")
    ctx = _ctx(request, "lessons", f"/lessons/{slug}")
    lang = str(ctx["lang"])
    ctx["lesson"] = lesson
    ctx["steps"] = [(with_lang(s.url, lang), *(s.zh if lang == "zh" else s.en)) for s in lesson.steps]
    i = LESSONS.index(lesson)
    ctx["next_lesson"] = LESSONS[i + 1] if i + 1 < len(LESSONS) else None
    return TEMPLATES.TemplateResponse(request, "lesson.html", ctx)
