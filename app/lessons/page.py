"""Guided lessons: `/lessons` lists them, `/lessons/{slug}` shows one as steps into the lab; both have a JSON twin
under /api/v1/lessons."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, HTTPException, Request
from fastapi.responses import HTMLResponse, Response

from ..lab import Lab, get_lab
from ..schemas import ERRORS, Problem
from ..web.lessons import BY_SLUG, LESSONS, Lesson, step_url
from ..web.page import serve
from ..web.state import ViewState

router = APIRouter(include_in_schema=False)
NOT_FOUND: dict[int | str, dict[str, Any]] = {**ERRORS, 404: {"model": Problem, "description": "No such lesson"}}
api = APIRouter(prefix="/api/v1", tags=["lessons"])


def lesson_of(slug: str) -> Lesson:
    lesson = BY_SLUG.get(slug)
    if lesson is None:
        raise HTTPException(404, f"no lesson {slug!r}; see /lessons")
    return lesson


def lesson_json(lesson: Lesson, lang: str) -> dict[str, Any]:
    return {
        "slug": lesson.slug,
        "title": lesson.title[lang],
        "steps": [
            dict(zip(("url", "look", "question", "answer"), (step_url(lesson, k, lang), *s.text(lang)), strict=True))
            for k, s in enumerate(lesson.steps, start=1)
        ],
    }


async def _index(ctx: dict[str, Any]) -> None:
    ctx["json_url"] = f"/api/v1/lessons?lang={ctx['lang']}"


@router.get("/lessons", response_class=HTMLResponse)
async def lessons_index(request: Request, lab: Annotated[Lab, Depends(get_lab)]) -> Response:
    state = ViewState.of(request.query_params, "/lessons", ())
    return await serve(request, lab, "lessons.html", state, _index, blocks=(), lessons=LESSONS)  # fmt: skip


@router.get("/lessons/{slug}", response_class=HTMLResponse)
async def lesson_page(request: Request, slug: str, lab: Annotated[Lab, Depends(get_lab)]) -> Response:
    lesson = lesson_of(slug)
    i = LESSONS.index(lesson)
    state = ViewState.of(request.query_params, f"/lessons/{slug}", ())

    async def build(ctx: dict[str, Any]) -> None:
        lang = ctx["lang"]
        ctx["steps"] = [(step_url(lesson, k, lang), *s.text(lang)) for k, s in enumerate(lesson.steps, start=1)]
        ctx["json_url"] = f"/api/v1/lessons/{slug}?lang={ctx['lang']}"

    return await serve(
        request,
        lab,
        "lesson.html",
        state,
        build,
        page="lessons",
        blocks=(),
        lesson=lesson,
        next_lesson=LESSONS[i + 1] if i + 1 < len(LESSONS) else None,
    )


@api.get("/lessons", summary="The guided lessons, in English or Chinese")
def lessons_json(lang: Literal["en", "zh"] = "en") -> dict[str, Any]:
    return {"lessons": [lesson_json(lesson, lang) for lesson in LESSONS]}


@api.get(
    "/lessons/{slug}",
    responses=NOT_FOUND,
    summary="One lesson's steps: a lab URL, what to look at, a question and its answer",
)
def one_lesson_json(slug: str, lang: Literal["en", "zh"] = "en") -> dict[str, Any]:
    return lesson_json(lesson_of(slug), lang)
