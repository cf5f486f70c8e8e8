"""The poll box of a class's screens (and the teacher's remote's results card), rendered here for the screen's role and language (templates/_room_poll.html)
and swapped in by htmx: sent on the room's event stream as `poll-html` (app/rooms/stream.py), and fetched from
/r/<code>/poll/<id> every second while a poll is open on the projector (its count), or after a student answers
(their answer). The screens hold no poll of their own: what they show is what the server rendered."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import parse_qs

from markupsafe import Markup

from ..templating import TEMPLATES, translator
from .store import Poll, Store

Role = Literal["teacher", "student", "remote"]  # the projector's bar, a student's, the teacher's remote (live)


@dataclass(frozen=True)
class Bar:
    """One answer's bar: its key, its label in the screen's language, its count and its share of the largest."""

    key: str
    label: str
    n: int
    share: float
    is_key: bool


def step_of(page: str, query: str) -> str:
    """The step a poll belongs to: a lesson's step, else the page's stage. A revealed poll leaves the screens when
    the class moves to another (another lesson step, or another stage of a page outside a lesson)."""
    p = {k: v[-1] for k, v in parse_qs(query).items()}
    if lesson := p.get("lesson"):
        return f"{lesson}:{p.get('lesson_step') or p.get('step') or '1'}"
    return f"{page}:{p.get('stage', '')}"


def labels(poll: Poll, lang: str) -> tuple[str, list[str]]:
    """The poll's prompt and options in `lang` (a lesson's poll carries every language; answers go by index)."""
    mine = poll.languages.get(lang)
    if mine and len(mine.get("options") or ()) == len(poll.options):
        return mine.get("prompt", poll.prompt), list(mine.get("options") or ())
    return poll.prompt, list(poll.options)


def render(
    poll: Poll | None,
    role: Role,
    lang: str,
    counts: dict[str, int],
    mine: str | None,
    code: str,
    student: str | None = None,
) -> str:
    """The box (empty without a poll): the question and its options (a student's, with their own answer, which
    `student` sends from there), or the
    prompt and the number of answers (the projector's, never the open histogram); the key and the histogram once
    the poll is closed."""
    if poll is None:
        return TEMPLATES.get_template("_room_poll.html").render(poll=None)
    prompt, options = labels(poll, lang)

    def label(value: str | None) -> str:
        if value is None:
            return "—"
        if poll.kind == "choice" and value in poll.options:
            return options[poll.options.index(value)]
        return poll.cell_label(value)

    closed = poll.status == "closed"
    live = closed or role == "remote"  # the counts and the key: once revealed, or on the teacher's own remote
    shown = counts if live else {}
    top = max(shown.values(), default=0)
    keys = list(poll.options) if poll.kind == "choice" else list(shown)
    bars = [Bar(k, label(k), n := shown.get(k, 0), n / top if top else 0.0, live and k == poll.answer) for k in keys]
    ctx: dict[str, Any] = {"t": translator(lang), "lang": lang, "poll": poll, "role": role, "prompt": prompt,
                           "options": options, "closed": closed, "bars": bars, "total": sum(counts.values()),
                           "key": label(poll.answer) if closed else None, "mine": mine, "mine_label": label(mine) if mine else None,
                           "code": code, "counts": shown, "student": student}  # fmt: skip
    return TEMPLATES.get_template("_room_poll.html").render(ctx)


async def poll_box(store: Store, code: str, poll: Poll | None, role: Role, lang: str, student: str | None) -> str:
    """The box for `poll` as the store has it now: its counts (all of them for the projector's tally; shown only
    once closed) and, for a student, their own answer."""
    counts = await store.counts(code, poll.id) if poll else {}
    mine = None
    if poll and role == "student" and student:
        mine = next((a.answer for a in await store.answers(code, poll.id) if a.student == student), None)
    return render(poll, role, lang, counts, mine, code, student)


async def results_card(store: Store, code: str, poll: Poll | None, lang: str, cleared: bool) -> str:
    """The remote's results card (templates/_room_results.html): the question and its live histogram with the key,
    reveal and clear, the CSV; hidden without a poll. A poll `cleared` off the class's screens stays on the card."""
    ctx: dict[str, Any] = {"t": translator(lang), "lang": lang, "code": code, "poll": poll, "cleared": cleared}
    if poll is not None:
        ctx |= {
            "prompt": labels(poll, lang)[0],
            "live": Markup(await poll_box(store, code, poll, "remote", lang, None)),
        }
    return TEMPLATES.get_template("_room_results.html").render(ctx)
