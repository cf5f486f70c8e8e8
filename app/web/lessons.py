"""Guided lessons (course data every page can show beside the lab): short series of lab states, each with a question and an answer the student reveals.

The lessons are data (lessons.json, both languages side by side, for a teacher or a translator to edit). A step is a
link into the lab (any page of it) plus text in both languages; the numbers are whatever the lab computes at that
state, so a lesson never goes stale.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlencode

PARTS = ("look", "question", "answer")


@dataclass(frozen=True)
class Step:
    url: str  # a lab URL without `lang`; the page adds the reader's language
    en: tuple[str, str, str]  # what to look at, the question, the answer
    zh: tuple[str, str, str]

    def text(self, lang: str) -> tuple[str, str, str]:
        return self.zh if lang == "zh" else self.en


@dataclass(frozen=True)
class Lesson:
    slug: str
    title: dict[str, str]
    steps: tuple[Step, ...]


DATA = Path(__file__).with_name("lessons.json")


def load(path: Path = DATA) -> tuple[Lesson, ...]:
    data = json.loads(path.read_text(encoding="utf-8"))
    return tuple(
        Lesson(
            item["slug"],
            dict(item["title"]),
            tuple(
                Step(
                    s["url"],
                    tuple(s["en"][p] for p in PARTS),
                    tuple(s["zh"][p] for p in PARTS),
                )
                for s in item["steps"]
            ),
        )
        for item in data
    )


LESSONS: tuple[Lesson, ...] = load()
BY_SLUG = {lesson.slug: lesson for lesson in LESSONS}


def with_query(url: str, **params: object) -> str:
    """`url` with `params` added to its query (before any #fragment)."""
    path, _, fragment = url.partition("#")
    extra = urlencode([(k, str(v)) for k, v in params.items()])
    joined = f"{path}{'&' if '?' in path else '?'}{extra}"
    return f"{joined}#{fragment}" if fragment else joined


def on_the_lab(url: str) -> bool:
    return url == "/" or url.startswith("/?")


def step_url(lesson: Lesson, k: int, lang: str) -> str:
    """Step k (from 1) in the reader's language; a step on the lab page carries the lesson, so its panel stays."""
    url = lesson.steps[k - 1].url
    return with_query(url, lesson=lesson.slug, step=k, lang=lang) if on_the_lab(url) else with_query(url, lang=lang)


@dataclass(frozen=True)
class Panel:
    """A lesson step shown beside the lab: what to look at, the question, its answer, the way on."""

    slug: str
    title: str
    k: int
    n: int
    look: str
    question: str
    answer: str
    prev_url: str | None
    next_url: str | None
    lesson_url: str


def panel(slug: str, step: int, lang: str) -> Panel | None:
    lesson = BY_SLUG.get(slug)
    if lesson is None or not 1 <= step <= len(lesson.steps):
        return None
    look, question, answer = lesson.steps[step - 1].text(lang)
    n = len(lesson.steps)
    return Panel(
        slug, lesson.title[lang if lang in lesson.title else "en"], step, n, look, question, answer,
        step_url(lesson, step - 1, lang) if step > 1 else None,
        step_url(lesson, step + 1, lang) if step < n else None,
        f"/lessons/{slug}?lang={lang}",
    )  # fmt: skip
