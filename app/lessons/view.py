"""What the lesson pages show: `LessonsView` (/lessons, the list) and `LessonView` (/lessons/<slug>, one lesson's
steps). Their JSON faces are the pages' `.json` twins."""

from __future__ import annotations

from dataclasses import dataclass

from ..web.view import View


@dataclass(frozen=True)
class LessonLink:
    slug: str
    title: str  # in the reader's language
    url: str
    steps: int = 0  # how many steps it has


class LessonsView(View):
    """Every guided lesson, in order, with a link to each."""

    template = "lessons.html"
    blocks = ()
    kind = "lessons"

    lessons: tuple[LessonLink, ...] = ()
    json_url: str | None = None


@dataclass(frozen=True)
class LessonStep:
    """One step: a link into the lab (carrying the lesson and the hints switch), what to look at, the question
    and its answer (None while hints are off: the teacher shows it when the class has answered), and the kind of
    its prepared question (a class asked from this page answers a "choice"; a "cell" is asked on the step's page).
    The key is never here."""

    k: int  # from 1
    url: str
    look: str
    question: str
    answer: str | None
    poll: str | None = None


class LessonView(View):
    """One lesson's steps, and the way on to the next lesson."""

    template = "lesson.html"
    blocks = ()
    kind = "lesson"

    slug: str = ""
    title: str = ""
    steps: tuple[LessonStep, ...] = ()
    hints: bool = True
    hidden_note: str = ""  # what each step shows in place of its answer while hints are off
    lessons_url: str = ""  # the list of lessons
    next_lesson: LessonLink | None = None
    json_url: str | None = None
