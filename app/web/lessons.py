"""Guided lessons (course data every page can show beside the lab): short series of lab states, each with a question and an answer the student reveals.

The lessons are data (lessons.json, both languages side by side, for a teacher or a translator to edit). A step is a
link into the lab (any page of it) plus text in both languages; the numbers are whatever the lab computes at that
state, so a lesson never goes stale.

Every step also holds a prepared classroom poll on its question, so a teacher can ask the class in one press:

    "poll": {"kind": "choice", "en": ["…", "…"], "zh": ["…", "…"], "answer": 0}   the key: an index from 0
    "poll": {"kind": "cell", "answer": [row, col]}     students click a cell of the matrix the step shows

A choice poll has 2 to 5 options, the same ones in the same order in both languages. A malformed poll stops the
server at start (a ValueError naming the lesson and the step), never a broken poll in front of a class.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

PARTS = ("look", "question", "answer")
LANGS = ("en", "zh")
POLL_KINDS = ("choice", "cell")
MIN_OPTIONS, MAX_OPTIONS = 2, 5
MAX_OPTION_CHARS = 60  # the rooms API takes 80; a phone's button takes about this many
MAX_PROMPT_CHARS = 300  # the rooms API's limit on a poll's prompt


@dataclass(frozen=True)
class LessonPoll:
    """A step's question as a classroom poll: the options in each language (none for a cell poll) and the key."""

    kind: str  # "choice" or "cell"
    options: dict[str, tuple[str, ...]]  # language → options; empty for a cell poll
    answer: int | tuple[int, int]  # the correct option's index, or the cell (row, col) from 0

    def for_lang(self, question: str, lang: str) -> dict[str, Any]:
        """The body of POST /api/v1/rooms/<code>/polls: the question, the options in `lang`, and the key (the
        option's text, or "row,col")."""
        if self.kind == "cell":
            assert isinstance(self.answer, tuple)
            return {"prompt": question, "kind": "cell", "options": [], "answer": f"{self.answer[0]},{self.answer[1]}"}
        assert isinstance(self.answer, int)
        options = self.options.get(lang, self.options["en"])
        return {"prompt": question, "kind": "choice", "options": list(options), "answer": options[self.answer]}


@dataclass(frozen=True)
class Step:
    url: str  # a lab URL without `lang`; the page adds the reader's language
    en: tuple[str, str, str]  # what to look at, the question, the answer
    zh: tuple[str, str, str]
    poll: LessonPoll | None = None

    def text(self, lang: str) -> tuple[str, str, str]:
        return self.zh if lang == "zh" else self.en


@dataclass(frozen=True)
class Lesson:
    slug: str
    title: dict[str, str]
    steps: tuple[Step, ...]


DATA = Path(__file__).with_name("lessons.json")


def is_index(x: object) -> bool:
    """A whole number from 0 (JSON's true/false are not numbers here)."""
    return isinstance(x, int) and not isinstance(x, bool) and x >= 0


def parse_poll(raw: object, questions: dict[str, str]) -> LessonPoll:
    """One step's "poll" object, checked; any fault is a ValueError saying what is wrong."""
    if not isinstance(raw, dict):
        raise ValueError("poll: must be an object")
    kind = raw.get("kind")
    if kind not in POLL_KINDS:
        raise ValueError(f"poll: unknown kind {kind!r} (one of {', '.join(POLL_KINDS)})")
    for lang, question in questions.items():
        if not question.strip() or len(question) > MAX_PROMPT_CHARS:
            raise ValueError(f"poll: the {lang} question is its prompt: 1 to {MAX_PROMPT_CHARS} characters")
    answer = raw.get("answer")
    if kind == "cell":
        if extra := set(raw) - {"kind", "answer"}:
            raise ValueError(f"poll: a cell poll has only kind and answer, not {sorted(extra)}")
        if not (isinstance(answer, list) and len(answer) == 2 and all(is_index(a) for a in answer)):
            raise ValueError(f"poll: a cell poll's answer is [row, col], two whole numbers from 0, not {answer!r}")
        return LessonPoll("cell", {}, (answer[0], answer[1]))
    if set(raw) != {"kind", "answer", *LANGS}:
        raise ValueError(f"poll: a choice poll has kind, answer and options in {', '.join(LANGS)}; got {sorted(raw)}")
    options: dict[str, tuple[str, ...]] = {}
    for lang in LANGS:
        opts = raw[lang]
        if not (isinstance(opts, list) and all(isinstance(o, str) for o in opts)):
            raise ValueError(f"poll: {lang} options must be a list of strings")
        if not MIN_OPTIONS <= len(opts) <= MAX_OPTIONS:
            raise ValueError(f"poll: {MIN_OPTIONS} to {MAX_OPTIONS} options, {lang} has {len(opts)}")
        for o in opts:
            if not o.strip() or o != o.strip() or len(o) > MAX_OPTION_CHARS:
                raise ValueError(f"poll: {lang} option {o!r}: 1 to {MAX_OPTION_CHARS} characters, no outer spaces")
        if len(set(opts)) != len(opts):
            raise ValueError(f"poll: {lang} options repeat: {opts}")
        options[lang] = tuple(opts)
    lengths = {lang: len(o) for lang, o in options.items()}
    if len(set(lengths.values())) != 1:
        raise ValueError(f"poll: the languages must have the same options, in the same order; counts {lengths}")
    if not (isinstance(answer, int) and is_index(answer) and answer < lengths["en"]):
        raise ValueError(f"poll: answer must be an option's index, 0 to {lengths['en'] - 1}, not {answer!r}")
    return LessonPoll("choice", options, answer)


def parse_step(s: dict[str, Any]) -> Step:
    en, zh = (tuple(s[lang][p] for p in PARTS) for lang in LANGS)
    poll = parse_poll(s["poll"], {"en": en[1], "zh": zh[1]}) if "poll" in s else None
    return Step(s["url"], en, zh, poll)


def load(path: Path = DATA) -> tuple[Lesson, ...]:
    """The lessons in `path`; a malformed step raises ValueError naming its lesson and step (from 1)."""
    data = json.loads(path.read_text(encoding="utf-8"))
    lessons = []
    for item in data:
        steps = []
        for k, s in enumerate(item["steps"], start=1):
            try:
                steps.append(parse_step(s))
            except ValueError as exc:
                raise ValueError(f"{path.name}: lesson {item['slug']!r}, step {k}: {exc}") from exc
        lessons.append(Lesson(item["slug"], dict(item["title"]), tuple(steps)))
    return tuple(lessons)


LESSONS: tuple[Lesson, ...] = load()
BY_SLUG = {lesson.slug: lesson for lesson in LESSONS}


def with_query(url: str, **params: object) -> str:
    """`url` with `params` added to its query (before any #fragment)."""
    path, _, fragment = url.partition("#")
    extra = urlencode([(k, str(v)) for k, v in params.items()])
    joined = f"{path}{'&' if '?' in path else '?'}{extra}"
    return f"{joined}#{fragment}" if fragment else joined


def step_url(lesson: Lesson, k: int, lang: str, carry: dict[str, str] | None = None) -> str:
    """Step k (from 1) in the reader's language. The step's page carries the lesson (`lesson_step`, never a page's
    own `step`, such as /decode's), so its panel stays — the lab places it beside the stage, any other page above
    itself — and `carry` (presenter mode, the hints switch: what belongs to the screen, not to the step)."""
    return with_query(lesson.steps[k - 1].url, lesson=lesson.slug, lesson_step=k, **(carry or {}), lang=lang)


@dataclass(frozen=True)
class Panel:
    """A lesson step shown beside the lab: what to look at, the question, its answer, the way on, and the step's
    prepared poll (the body for POST /api/v1/rooms/<code>/polls; it holds the key, so never show it to students)."""

    slug: str
    title: str
    k: int
    n: int
    look: str
    question: str
    answer: str | None  # None while hints are off
    prev_url: str | None
    next_url: str | None
    lesson_url: str
    # The key is in the poll: a View's JSON face (anyone can read it) leaves it out.
    poll: dict[str, Any] | None = field(default=None, metadata={"json": False})
    next_lesson_url: str | None = None  # at the last step: the next lesson's first step (keeping presenter mode)
    # The step's place on its page (its URL's #fragment, e.g. /demos#scaling): a screen that reached the step without
    # it (stepped by the teacher's remote, joined by the room's link: a room's view has no fragment) scrolls there.
    anchor: str | None = field(default=None, metadata={"json": False})
    # The page's knocked-out heads differ from the step's own (#32: the teacher knocked out another head): the step's
    # heads and the page's as the pages write them ("L1 H0", "" for none) and the step's own view, to go back to.
    knocked: tuple[str, str] | None = field(default=None, metadata={"json": False})
    own_url: str | None = field(default=None, metadata={"json": False})


def panel(slug: str, step: int, lang: str, carry: dict[str, str] | None = None) -> Panel | None:
    lesson = BY_SLUG.get(slug)
    if lesson is None or not 1 <= step <= len(lesson.steps):
        return None
    here = lesson.steps[step - 1]
    look, question, answer = here.text(lang)
    n = len(lesson.steps)
    return Panel(
        slug, lesson.title[lang if lang in lesson.title else "en"], step, n, look, question, answer,
        step_url(lesson, step - 1, lang, carry) if step > 1 else None,
        step_url(lesson, step + 1, lang, carry) if step < n else None,
        f"/lessons/{slug}?lang={lang}",
        here.poll.for_lang(question, lang) if here.poll else None,
        next_lesson(lesson, lang, carry) if step == n else None,
        here.url.partition("#")[2] or None,
    )  # fmt: skip


def next_lesson(lesson: Lesson, lang: str, carry: dict[str, str] | None) -> str | None:
    """The first step of the lesson after `lesson`, so a class goes on without leaving the lab (or presenter mode)."""
    i = LESSONS.index(lesson)
    return step_url(LESSONS[i + 1], 1, lang, carry) if i + 1 < len(LESSONS) else None
