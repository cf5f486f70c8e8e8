"""Guided lessons: `/lessons` lists them, `/lessons/{slug}` shows one as steps into the lab; both have a JSON twin
under /api/v1/lessons."""

from __future__ import annotations

import functools
from typing import Any, Literal

from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import HTMLResponse, Response

from ..lab import Lab
from ..schemas import ERRORS, Problem
from ..web.lessons import BY_SLUG, LESSONS, Lesson, step_url, with_query
from ..web.page import page_route, serve
from ..web.state import PageQuery, show
from .view import LessonLink, LessonStep, LessonsView, LessonView

router = APIRouter(include_in_schema=False)
NOT_FOUND: dict[int | str, dict[str, Any]] = {**ERRORS, 404: {"model": Problem, "description": "No such lesson"}}
api = APIRouter(prefix="/api/v1", tags=["lessons"])


def lesson_of(slug: str) -> Lesson:
    lesson = BY_SLUG.get(slug)
    if lesson is None:
        raise HTTPException(404, f"no lesson {show(slug, 30)}; see /lessons")  # the echo bounded, as every field's
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


def link(lesson: Lesson, lang: str, carry: dict[str, str] | None = None) -> LessonLink:
    title = lesson.title.get(lang, lesson.title["en"])
    url = with_query(f"/lessons/{lesson.slug}", **(carry or {}), lang=lang)
    return LessonLink(lesson.slug, title, url, len(lesson.steps))


async def lessons_view(state: PageQuery, lab: Lab, progress: str, ctx: dict[str, Any]) -> LessonsView:
    """What /lessons shows: every lesson, linked."""
    lang = ctx["lang"]
    return LessonsView(lessons=tuple(link(lesson, lang) for lesson in LESSONS),
                       json_url=with_query("/api/v1/lessons", lang=lang))  # fmt: skip


page_route(router, "/lessons", "lessons.html", (), PageQuery, lessons_view, lambda lab, state, lang: {})


async def lesson_view(lesson: Lesson, state: PageQuery, ctx: dict[str, Any]) -> LessonView:
    """What /lessons/<slug> shows: the steps, each a link into the lab. With hints off (`hints=off`, as in the
    lab) the answers stay hidden, and the steps' links carry the switch into the lab."""
    lang, hints = ctx["lang"], state.hints
    carry: dict[str, str] = {k: state.params[k] for k in ("present", "hints") if k in state.params}  # the screen's
    steps = []
    for k, step in enumerate(lesson.steps, start=1):
        look, question, answer = step.text(lang)
        poll = step.poll.kind if step.poll else None
        steps.append(LessonStep(k, step_url(lesson, k, lang, carry), look, question, answer if hints else None, poll))
    i = LESSONS.index(lesson)
    return LessonView(
        slug=lesson.slug,
        title=lesson.title.get(lang, lesson.title["en"]),
        steps=tuple(steps),
        hints=hints,
        hidden_note="" if hints else ctx["t"]("hints.hidden"),
        lessons_url=with_query("/lessons", lang=lang),
        next_lesson=link(LESSONS[i + 1], lang, carry) if i + 1 < len(LESSONS) else None,
        json_url=with_query(f"/api/v1/lessons/{lesson.slug}", lang=lang),
    )


@router.get("/lessons/{slug}", response_class=HTMLResponse)
async def lesson_page(request: Request, slug: str) -> Response:
    state = PageQuery.of(request.query_params, f"/lessons/{slug}")  # its path is the lesson's
    build = functools.partial(lesson_view, lesson_of(slug), state)
    return await serve(request, "lesson.html", state, build, page="lessons", blocks=())


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
