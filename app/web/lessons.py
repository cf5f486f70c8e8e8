"""Guided lessons (course data every page can show beside the lab): short series of lab states, each with a question and an answer the student reveals.

The lessons are data (lessons.json, both languages side by side, for a teacher or a translator to edit). A step is a
link into the lab (any page of it) plus text in both languages; the numbers are whatever the lab computes at that
state, so a lesson never goes stale.

Every step also holds a prepared classroom poll on its question, so a teacher can ask the class in one press:

    "poll": {"kind": "choice", "en": ["…", "…"], "zh": ["…", "…"], "answer": 0}   the key: an index from 0
    "poll": {"kind": "cell", "answer": [row, col]}     students click a cell of the matrix the step shows

A choice poll has 2 to 5 options, the same ones in the same order in both languages. The file is read by the
pydantic models below (`Lesson`, `Step`, `ChoicePoll`, `CellPoll`); a malformed lesson stops the server at start (a
ValueError naming the lesson, the step and the field), never a broken poll in front of a class.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, NamedTuple
from urllib.parse import urlencode

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, TypeAdapter, ValidationError, model_validator

from .view import HIDDEN

LANGS = ("en", "zh")
MIN_OPTIONS, MAX_OPTIONS = 2, 5
MAX_OPTION_CHARS = 60  # the rooms API takes 80; a phone's button takes about this many
MAX_PROMPT_CHARS = 300  # the rooms API's limit on a poll's prompt

Index = Annotated[int, Field(ge=0)]  # a whole number from 0 (strict: JSON's true/false are not numbers here)
Option = Annotated[str, StringConstraints(min_length=1, max_length=MAX_OPTION_CHARS, pattern=r"^\S(.*\S)?$")]
Options = Annotated[list[Option], Field(min_length=MIN_OPTIONS, max_length=MAX_OPTIONS)]


class Data(BaseModel):
    """lessons.json's objects: exactly these fields, of exactly these types, read once and never changed."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)


class ChoicePoll(Data):
    """A step's question as a choice: the same options in the same order in both languages, and the key's index."""

    kind: Literal["choice"]
    en: Options
    zh: Options
    answer: Index

    @model_validator(mode="after")
    def _agree(self) -> ChoicePoll:
        for lang, opts in self.options.items():
            if len(set(opts)) != len(opts):
                raise ValueError(f"{lang} options repeat: {opts}")
        if len(self.en) != len(self.zh):
            raise ValueError(f"the languages must have the same options, in the same order; counts {len(self.en)}, "
                             f"{len(self.zh)}")  # fmt: skip
        if self.answer >= len(self.en):
            raise ValueError(f"answer must be an option's index, 0 to {len(self.en) - 1}, not {self.answer}")
        return self

    @property
    def options(self) -> dict[str, list[str]]:
        return {"en": self.en, "zh": self.zh}

    def for_lang(self, question: str, lang: str) -> dict[str, Any]:
        """The body of POST /api/v1/rooms/<code>/polls: the question, the options in `lang`, and the key's text."""
        options = self.options.get(lang, self.en)
        return {"prompt": question, "kind": "choice", "options": list(options), "answer": options[self.answer]}


class CellPoll(Data):
    """A step's question as a cell of the matrix it shows: the key is (row, col) from 0."""

    kind: Literal["cell"]
    answer: tuple[Index, Index]

    @property
    def options(self) -> dict[str, list[str]]:
        return {}

    def for_lang(self, question: str, lang: str) -> dict[str, Any]:
        """The body of POST /api/v1/rooms/<code>/polls: the question and the key, "row,col"."""
        return {"prompt": question, "kind": "cell", "options": [], "answer": f"{self.answer[0]},{self.answer[1]}"}


LessonPoll = Annotated[ChoicePoll | CellPoll, Field(discriminator="kind")]


class Texts(NamedTuple):
    """A step in one language: what to look at, the question, the answer."""

    look: str
    question: str
    answer: str


class Step(Data):
    url: str  # a lab URL without `lang`; the page adds the reader's language
    en: Texts
    zh: Texts
    poll: LessonPoll | None = None

    @model_validator(mode="after")
    def _askable(self) -> Step:
        """A poll's prompt is the step's question, so each language's must fit the rooms API."""
        for lang in LANGS if self.poll else ():
            question = self.text(lang).question
            if not question.strip() or len(question) > MAX_PROMPT_CHARS:
                raise ValueError(f"poll: the {lang} question is its prompt: 1 to {MAX_PROMPT_CHARS} characters")
        return self

    def text(self, lang: str) -> Texts:
        return self.zh if lang == "zh" else self.en


class Lesson(Data):
    slug: str
    title: dict[str, str]
    steps: tuple[Step, ...]


DATA = Path(__file__).with_name("lessons.json")
LESSONS_JSON = TypeAdapter(tuple[Lesson, ...])


def load(path: Path = DATA) -> tuple[Lesson, ...]:
    """The lessons in `path`; a malformed one raises ValueError naming each fault's lesson, step (from 1) and field."""
    text = path.read_text(encoding="utf-8")
    try:
        return LESSONS_JSON.validate_json(text)
    except ValidationError as exc:
        raw = TypeAdapter(Any).validate_json(text)
        raise ValueError(f"{path.name}: " + "; ".join(fault(raw, e["loc"], e["msg"]) for e in exc.errors())) from None


def fault(raw: Any, loc: tuple[int | str, ...], msg: str) -> str:
    """One validation error as the lessons' author reads it: "lesson 'scale', step 2: poll.en[1]: <msg>"."""
    where: list[str] = []
    rest = list(loc)
    if rest and isinstance(i := rest[0], int):
        slug = raw[i].get("slug") if isinstance(raw[i], dict) else None
        where.append(f"lesson {slug!r}" if isinstance(slug, str) else f"lesson {i + 1}")
        rest = rest[1:]
        if len(rest) > 1 and rest[0] == "steps" and isinstance(k := rest[1], int):
            where.append(f"step {k + 1}")
            rest = rest[2:]
    if rest[:1] == ["poll"] and rest[1:2] in (["choice"], ["cell"]):
        del rest[1]  # the poll's kind, which pydantic names as the union's member
    field = "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in rest).lstrip(".")
    return ", ".join(where) + (f": {field}" if field else "") + ": " + msg.removeprefix("Value error, ")


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
    poll: Annotated[dict[str, Any] | None, HIDDEN] = None
    next_lesson_url: str | None = None  # at the last step: the next lesson's first step (keeping presenter mode)
    # The step's place on its page (its URL's #fragment, e.g. /demos#scaling): a screen that reached the step without
    # it (stepped by the teacher's remote, joined by the room's link: a room's view has no fragment) scrolls there.
    anchor: Annotated[str | None, HIDDEN] = None
    # The page's knocked-out heads differ from the step's own (#32: the teacher knocked out another head): the step's
    # heads and the page's as the pages write them ("L1 H0", "" for none) and the step's own view, to go back to.
    knocked: Annotated[tuple[str, str] | None, HIDDEN] = None
    own_url: Annotated[str | None, HIDDEN] = None


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
