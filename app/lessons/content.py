"""Guided lessons: short series of lab states, each with a question and an answer the student reveals.

The lessons are data (lessons.json, both languages side by side, for a teacher or a translator to edit). A step is a
link into the lab (any page of it) plus text in both languages; the numbers are whatever the lab computes at that
state, so a lesson never goes stale.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

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
