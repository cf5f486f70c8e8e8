"""/api/v1/rooms: a class following its teacher, and predict-then-reveal polls. The pages use this API; so can
scripts and tests.

A room holds one view (a lab page and its URL query) and a version that grows with every change. Students follow
it over server-sent events: `event: state` on connect and after every change, `event: poll` when a poll opens or
closes, `event: end` when the teacher ends the class. A stream that reconnects with `Last-Event-ID` gets what it
missed.
"""

from __future__ import annotations

import contextlib
import secrets
import time
from typing import Annotated, Any, Literal
from urllib.parse import parse_qs, parse_qsl, urlencode

from fastapi import APIRouter, Depends, FastAPI, Header, Path, Query, Request, Response
from markupsafe import Markup
from pydantic import ValidationError
from redis.exceptions import RedisError
from starlette.background import BackgroundTask

from engine import STAGES

from ..render.payload import json_response
from ..schemas import FieldError, Problem
from ..templating import LANGS
from ..web import lessons, sse
from ..web.state import AsciiInt, parse_stage, show
from .bodies import (
    AnswerIn,
    AnswerOut,
    LessonPollIn,
    PollCreated,
    PollIn,
    PollOut,
    RoomInfo,
    RoomOut,
    SummaryOut,
    VersionOut,
    ViewIn,
    cell_key,
    view_limits,
)
from .fragments import poll_box, results_card
from .service import (
    RoomError,
    Rooms,
    RoomsDep,
    check_json,
    check_same_origin,
    check_view,
    client_address,
    join_url,
    store_down,
)
from .store import Answer, Poll, Room
from .stream import Follow
from .summary import cell_safe, csv_file, end_class, summary_rows, teachers_summary

__all__ = ["PollIn", "install", "router", "view_limits"]


def same_origin_json(request: Request) -> None:
    """Every change (POST, PUT, DELETE) comes from the lab's own pages or a non-browser client, as JSON."""
    if request.method not in ("GET", "HEAD", "OPTIONS"):
        check_same_origin(request)
        check_json(request)


router = APIRouter(prefix="/api/v1/rooms", tags=["rooms"], dependencies=[Depends(same_origin_json)])


def problem_doc(description: str) -> dict[str, Any]:
    return {"model": Problem, "description": description}


REFUSALS: dict[int | str, dict[str, Any]] = {
    403: problem_doc("A change sent by another site's page (`sec-fetch-site` or `origin` names it)"),
    404: problem_doc("No open room with this code (or no such poll)"),
    415: problem_doc("A body that is not application/json (`content-type`)"),
    422: problem_doc("A field is invalid; `message` and `detail[].loc` name it"),
    429: problem_doc("Too many requests, unknown codes, open rooms or answers from this client's address"),
    503: problem_doc("Rooms are off on this server (several workers without --redis), full, or the store is down"),
}
TEACHER: dict[int | str, dict[str, Any]] = REFUSALS | {
    401: problem_doc("No teacher token (Authorization: Bearer <teacher_token>)"),
    403: problem_doc("A token that is not this room's teacher token, or a change sent by another site's page"),
}
OPENED: dict[str, Any] = {"status_code": 201, "response_model": PollCreated, "responses": TEACHER}  # a poll opens
CSV: dict[str, Any] = {"responses": TEACHER | {200: {"content": {"text/csv": {}}}}, "response_class": Response}


def install(app: FastAPI) -> None:
    """A refusal raised anywhere in a room route is its 4xx/503 answer; a room store that fails (Redis down, its
    pool exhausted past the wait) is a 503 that says so, never a 500."""

    @app.exception_handler(RoomError)
    async def _refused(request: Request, exc: RoomError) -> Response:
        return refused(exc)

    @app.exception_handler(RedisError)
    async def _store_down(request: Request, exc: RedisError) -> Response:
        return refused(store_down(exc))


# Where each refused field came from, for `detail[].loc` (the same shape as every other 4xx of the API).
WHERE = {"code": "path", "poll": "path", "authorization": "header", "last-event-id": "header",
         "sec-fetch-site": "header", "origin": "header", "content-type": "header",
         "query": "body", "page": "body", "answer": "body", "lang": "query"}  # fmt: skip


def refused(exc: RoomError) -> Response:
    loc = [WHERE.get(exc.field, "request"), exc.field]
    body = {"message": str(exc), "detail": [{"loc": loc, "msg": exc.message, "type": "room"}]}
    return json_response(body, exc.status, exc.headers)


@router.post(
    "", summary="Start a class (a room) on a view", status_code=201, response_model=RoomOut, responses=REFUSALS
)
async def create_room(request: Request, rooms: RoomsDep, body: ViewIn | None = None) -> Response:
    """Start a room on a view (default: the lab's start). The teacher token in the answer is never shown again."""
    body = body or ViewIn()
    page, query = rooms.view(body.page, body.query)  # a body the schema refuses: 422 whatever this address did before
    await rooms.creates.check(client_address(request), "rooms", "too_many_starts")
    await check_view(request.app, page, query)
    room, token = await rooms.create(page, query, client_address(request))
    out = {"code": room.code, "teacher_token": token, "join_url": join_url(request, room.code), "page": room.page,
           "query": room.query, "version": room.version}  # fmt: skip
    return json_response(out, 201, {"Location": f"/api/v1/rooms/{room.code}"})


@router.get("/{code}", summary="A room's current view and state", response_model=RoomInfo, responses=REFUSALS)
async def get_room(code: str, request: Request, rooms: RoomsDep) -> Response:
    room = await rooms.room(code, request)
    followers = await rooms.store.followers(room.code)
    return json_response({"code": room.code, "page": room.page, "query": room.query, "version": room.version,
                          "followers": followers, "poll": room.poll})  # fmt: skip


@router.put(
    "/{code}/state", summary="Move the class to a new view (teacher)", response_model=VersionOut, responses=TEACHER
)
async def put_state(code: str, body: ViewIn, request: Request, rooms: RoomsDep) -> Response:
    """The teacher's new view: checked by the lab (a view it would refuse is a 422), then sent to every follower."""
    room = await rooms.teacher(request, code)
    page, query = kept_sentence(rooms.view(body.page, body.query), room.query)
    if (page, query) == (room.page, room.query):
        return json_response({"version": room.version})  # nothing changed: no event
    await check_view(request.app, page, query)
    await close_left_behind(rooms, room, page, query)
    version = await rooms.store.publish(room.code, "state", {"page": page, "query": query}, (page, query))
    return json_response({"version": version})


# The pages whose toy, when their query names no sentence, shows each screen the example of its own language (#42,
# app/web/state.py lab_state): a Chinese phone 猫 坐 在 垫子 上, an English projector "cat sat on the mat".
EXAMPLE_PAGES = frozenset({"/", "/embed", "/block", "/decode", "/tiles"})


def kept_sentence(view: tuple[str, str], before: str) -> tuple[str, str]:
    """A class keeps its sentence: a class started on the toy names it (the page pins its example in its address),
    and a new view on the toy that names none (a lesson step opened from the remote) keeps the class's `tokens`
    rather than letting each screen fall back to its own language's example, other numbers and other cells."""
    page, query = view
    params, kept = dict(parse_qsl(query)), dict(parse_qsl(before)).get("tokens")
    if kept is None or page not in EXAMPLE_PAGES or {"tokens", "text", "token_ids"} & params.keys():
        return view
    if params.get("preset", "toy") != "toy":
        return view
    tokens = urlencode({"tokens": kept})
    return page, f"{query}&{tokens}" if query else tokens


async def close_left_behind(rooms: Rooms, room: Room, page: str, query: str) -> None:
    """A cell poll ("which cell of Q is largest?") asks about a matrix of the page it was asked on, at its stage:
    when the class moves to another page, or to another stage of it (the mask's matrices after a question on the
    weights, #42), that matrix is off the screens and nobody may answer by tapping another's cells. It closes (its
    answers stay for the results, the CSV and the class summary) and leaves every screen, the remote's included,
    before the class sees the new view."""
    if room.poll is None:
        return
    poll = await rooms.store.poll(room.code, room.poll)
    if poll is None or poll.kind != "cell" or poll.page is None:
        return
    if poll.page != page:
        reason = "page"
    elif poll.place is not None and poll.place != view_place(page, query):
        reason = "stage"
    else:
        return
    await rooms.store.close_poll(room.code, poll.id)
    # "reason": the remote drops its card too (a poll the teacher cleared stays there, with its results).
    await rooms.store.publish(room.code, "poll", {"id": poll.id, "status": "cleared", "reason": reason})


# What picks a page's matrices besides its path: the lab's and the block's stage, the KV cache's decode step, and the
# lesson step (its question). `step` is the lab's older spelling of lesson_step, and /decode's own step.
PLACE_KEYS = ("stage", "step", "lesson_step")


def view_place(page: str, query: str) -> str:
    """Where on `page` a view is, as far as its matrices go: its stage (the lab's by name, "4" and "softmax" alike,
    none being its first), its step and its lesson step."""
    params = parse_qs(query)
    place = {k: (params.get(k) or [""])[-1].strip() for k in PLACE_KEYS}
    with contextlib.suppress(FieldError):  # the lab's stages; the block's names stay as written
        place["stage"] = parse_stage(place["stage"], STAGES)
    return urlencode(place)


@router.delete("/{code}", summary="End the class (teacher)", status_code=204, responses=TEACHER)
async def end_room(code: str, request: Request, rooms: RoomsDep) -> Response:
    """End the class: every stream gets `event: end` and closes; its summary stays for the teacher
    (`GET …/summary`) for ROOM_IDLE_S."""
    room = await rooms.teacher(request, code)
    await end_class(rooms, room)
    return Response(status_code=204)


# What the remote's stream sends (`now`) as the class moves: htmx asks the page for its controls (app/web/remote.py)
# and swaps them into the remote's "now" (a newer view's request replaces an older one's).
NOW = (
    '<div hx-get="{url}" hx-headers=\'{{"X-Lab-Remote": "1"}}\' hx-trigger="load" hx-target=".teach-now" '
    'hx-swap="innerHTML" hx-sync=".teach-now:replace"></div>'
)


@router.get(
    "/{code}/events",
    summary="Follow a room: its views and polls as server-sent events",
    responses=REFUSALS | sse.RESPONSES,
    response_class=sse.EventSourceResponse,
)
async def events(
    code: str,
    request: Request,
    rooms: RoomsDep,
    last_event_id: Annotated[str | None, Header(max_length=20)] = None,
    lang: Annotated[str | None, Query(description="a screen of the lab: its language, for `poll-html`")] = None,
    student: Annotated[str | None, Query(max_length=64, description="a student's screen: whose answer to show")] = None,
    remote: Annotated[bool, Query(description="the teacher's remote: `poll-html` is its results card")] = False,
) -> Response:
    """The room as server-sent events: `state` (`{"page", "query", "version"}`, id = version) on connect and on
    every change, `poll` when a poll opens or closes, `end`; a comment every few seconds keeps proxies open. A
    `retry:` hint says when to reconnect; `retry` (no id) says the stream ends because the room store went away:
    reconnect with Last-Event-ID (a 503 with Retry-After while it is still away). With `lang` (the lab's own
    screens), also `poll-html`: the screen's poll box, rendered for its role and language, on connect and whenever
    the poll it shows changes. The teacher's streams (its token), also `followers`: how many follow (a bare number,
    no id), on connect and whenever one joins or leaves, on any worker."""
    if lang is not None and lang not in LANGS:
        raise RoomError(422, "lang", f"must be one of {', '.join(LANGS)}")
    await rooms.joins.check(client_address(request), "events", "too_many_joins")
    room = await rooms.room(code, request)
    if last_event_id is not None and not (last_event_id.isascii() and last_event_id.isdigit()):
        raise RoomError(422, "last-event-id", "must be a version number from an earlier event")
    await rooms.store.listening()  # Redis: not before this process receives the room's events again
    # The teacher's own page listens too (poll events), but is no follower. A follower is counted before its
    # stream starts, in one step with the limit's check.
    follower = None if await rooms.is_teacher(request, room) else secrets.token_hex(8)
    if follower and not await rooms.store.follow(room.code, follower, rooms.settings.max_followers):
        raise RoomError(503, "events", f"this room has its limit of {rooms.settings.max_followers} followers",
                        {"Retry-After": "30"})  # fmt: skip
    render = None
    remote = remote and follower is None
    if lang is not None:
        role: Literal["teacher", "student"] = "student" if follower else "teacher"

        async def render(poll: Poll | None, cleared: bool) -> str:
            if remote:
                return await results_card(rooms.store, room.code, poll, lang, cleared)
            return await poll_box(rooms.store, room.code, poll, role, lang, student)

    def now(page: str, query: str) -> str:  # the remote loads the controls of the page the class sees
        url = f"{page}?{query}&lang={lang}" if query else f"{page}?lang={lang}"
        return Markup(NOW).format(url=url)

    keepalive = rooms.settings.room_keepalive_s
    after = None if last_event_id is None else int(last_event_id)  # the version a reconnecting client saw last
    follow = Follow(rooms.store, room.code, room.version, follower, after, keepalive, render, remote,
                    now=now if remote and lang else None)  # fmt: skip
    # `unfollow` also runs when the stream never started (its client left at once): it is idempotent.
    return sse.stream(follow.stream(), keepalive, background=BackgroundTask(follow.unfollow))


@router.post("/{code}/polls", summary="Open a poll on the current view (teacher)", **OPENED)
async def open_poll(code: str, body: PollIn, request: Request, rooms: RoomsDep) -> Response:
    """Open a poll on the current view (any open one closes): students see it at once and answer once."""
    return await ask(rooms, await rooms.teacher(request, code), body)


async def ask(rooms: Rooms, room: Room, body: PollIn, languages: dict[str, Any] | None = None) -> Response:
    """Open the poll on the room's current page, with the screens following it now as its audience."""
    cell = body.kind == "cell"
    poll = Poll(secrets.token_hex(4), body.prompt, body.kind, tuple(body.options), body.rows, body.cols, body.answer,
                languages=languages or {}, opened_at=time.time(), audience=await rooms.store.followers(room.code),
                page=room.page, place=view_place(room.page, room.query) if cell else None,
                row_labels=tuple(body.row_labels or ()) if cell else (),
                col_labels=tuple(body.col_labels or ()) if cell else ())  # fmt: skip
    version = await rooms.store.open_poll(room.code, poll)
    return json_response({"id": poll.id, "version": version}, 201)


Labels = tuple[list[str] | None, list[str] | None]  # a cell poll's row and column labels, as the page sent them


def prepared_poll(slug: str, k: int, lang: str, rows: int | None, cols: int | None,
                  labels: Labels = (None, None)) -> tuple[PollIn, dict[str, Any]]:  # fmt: skip
    """Step k (from 1) of a lesson as a poll: its question, options and key, checked like a teacher's own; and its
    question and options in every language."""
    lesson = lessons.BY_SLUG.get(slug)
    if lesson is None:
        raise RoomError(422, "lesson", f"no lesson {show(slug, 30)}; see /lessons")
    if not 1 <= k <= len(lesson.steps):
        raise RoomError(422, "step", f"lesson {lesson.slug!r} has steps 1..{len(lesson.steps)}, got {k}")
    step = lesson.steps[k - 1]
    if step.poll is None:
        raise RoomError(422, "step", f"step {k} of {lesson.slug!r} has no prepared question")
    prepared = step.poll.for_lang(step.text(lang)[1], lang) | {"rows": rows, "cols": cols}
    if step.poll.kind == "cell":  # the page's labels of the matrix it shows (a choice poll names no cell)
        prepared |= {"row_labels": labels[0], "col_labels": labels[1]}
    try:
        poll = PollIn.model_validate(prepared)
    except ValidationError as exc:  # the lesson's key against the page's matrix (rows/cols): a 422, not a 500
        error = exc.errors()[0]["msg"]
        raise RoomError(422, next((f for f in ("row_labels", "col_labels") if f in error), "rows"), error) from exc
    languages = {code: {key: step.poll.for_lang(step.text(code)[1], code)[key] for key in ("prompt", "options")}
                 for code in ("en", "zh")}  # fmt: skip
    return poll, languages


@router.post("/{code}/polls/lesson", summary="Ask a lesson step's prepared question (teacher)", **OPENED)
async def open_lesson_poll(code: str, body: LessonPollIn, request: Request, rooms: RoomsDep) -> Response:
    """Ask the class a lesson step's own question: its options and its key come from the lesson (never from the
    projected page, which does not hold the key); students see the question at once, the key when it closes."""
    room = await rooms.teacher(request, code)
    labels = (body.row_labels, body.col_labels)
    return await ask(rooms, room, *prepared_poll(body.lesson, body.step, body.lang, body.rows, body.cols, labels))


async def _poll_of(rooms: Rooms, request: Request, code: str, poll_id: str, teacher: bool = False) -> tuple[Room, Poll]:
    """The room (when `teacher`, only for its teacher) and its poll; a poll id not found costs what an unknown code
    does."""
    room = await (rooms.teacher(request, code) if teacher else rooms.room(code, request))
    poll = await rooms.store.poll(room.code, poll_id[:16])
    if poll is None:
        await rooms.missed(request)
        raise RoomError(404, "poll", f"no poll {poll_id[:16]!r} in room {room.code}")
    return room, poll


@router.get(
    "/{code}/polls/lesson",
    summary="Preview a lesson step's prepared poll (teacher)",
    response_model=PollIn,
    responses=TEACHER,
)
async def lesson_poll(code: str, lesson: str, step: AsciiInt, request: Request, rooms: RoomsDep,
                      lang: Literal["en", "zh"] = "en") -> Response:  # fmt: skip
    """A lesson step's prepared question as the poll it would open, key included: for the teacher's remote only."""
    await rooms.teacher(request, code)
    return json_response(prepared_poll(lesson, step, lang, None, None)[0].model_dump())


# GET …/polls/lesson is the lesson poll's own route (declared first): no poll is called "lesson" (ids are hex).
NotLesson = Annotated[str, Path(description="the poll's id", json_schema_extra={"not": {"const": "lesson"}})]


@router.get(
    "/{code}/polls/{poll_id}", summary="A poll's answers counted so far", response_model=PollOut, responses=REFUSALS
)
async def poll_results(code: str, poll_id: NotLesson, request: Request, rooms: RoomsDep) -> Response:
    """The answers counted so far (a student's later answer replaces the earlier) and the key: to everyone once
    the poll is closed; while it is open, to the room's teacher alone (the remote shows them live), and to
    everyone else no counts at all (`counts` empty, `total` null), so that nobody can steer the vote by them."""
    room, poll = await _poll_of(rooms, request, code, poll_id)
    shown = poll.status == "closed" or await rooms.is_teacher(request, room)
    counts = await rooms.store.counts(room.code, poll.id) if shown else {}
    out = poll.public() | {"answer": poll.answer if shown else None, "counts": counts,
                           "total": sum(counts.values()) if shown else None}  # fmt: skip
    return json_response(out)


@router.post("/{code}/polls/{poll_id}/answers", summary="Answer a poll (student)", response_model=AnswerOut, responses=REFUSALS | {
    409: problem_doc("The poll is closed")})  # fmt: skip
async def answer_poll(code: str, poll_id: str, body: AnswerIn, request: Request, rooms: RoomsDep) -> Response:
    return json_response({"answer": (await record_answer(rooms, request, code, poll_id, body))[2]})


async def record_answer(
    rooms: Rooms, request: Request, code: str, poll_id: str, body: AnswerIn
) -> tuple[Room, Poll, str]:
    """A student's answer counted (a later one replaces theirs), within the address's and the student's limits: the
    room, the poll and the answer as counted (an option's text, or "row,col"). Also a poll box's (app/rooms/page.py)."""
    address = client_address(request)
    await rooms.address_answers.check(address, "answer", "too_many_answers_address")
    await rooms.answers.check(f"{address}/{body.student}", "answer", "too_many_answers_student")
    room, poll = await _poll_of(rooms, request, code, poll_id)
    if poll.status != "open":
        raise RoomError(409, "poll", "this poll is closed")
    if poll.kind == "choice":
        if isinstance(body.answer, int) and 0 <= body.answer < len(poll.options):
            value = poll.options[body.answer]  # an option's index, counted from 0
        elif isinstance(body.answer, str) and body.answer in poll.options:
            value = body.answer
        else:
            raise RoomError(422, "answer", "must be one of the poll's options (or its index from 0)")
    else:
        try:
            value = cell_key(body.answer, poll.rows, poll.cols, "answer")
        except ValueError as exc:
            raise RoomError(422, "answer", str(exc).removeprefix("answer: ")) from exc
    nickname = body.nickname.strip() or None if body.nickname else None
    cap = rooms.settings.room_answers_per_address_per_poll
    if not await rooms.store.answer(
        room.code, poll.id, Answer(body.student, value, nickname, time.time()), address, cap
    ):
        raise RoomError(429, "answer", f"{cap} students from this address have answered this poll, its limit "
                        "(ROOM_ANSWERS_PER_ADDRESS_PER_POLL)", {"Retry-After": "60"})  # fmt: skip
    return room, poll, value


@router.post(
    "/{code}/polls/{poll_id}/close",
    summary="Close a poll and reveal its answer (teacher)",
    response_model=PollOut,
    responses=TEACHER,
)
async def close_poll(code: str, poll_id: str, request: Request, rooms: RoomsDep) -> Response:
    """Close the poll and reveal it: the counts and the key go to every follower."""
    room, poll = await _poll_of(rooms, request, code, poll_id, teacher=True)
    closed = await rooms.store.close_poll(room.code, poll.id)
    assert closed is not None
    counts = await rooms.store.counts(room.code, poll.id)
    return json_response(closed.public(counts))


@router.post(
    "/{code}/polls/{poll_id}/clear",
    summary="Take a poll off every screen (teacher)",
    response_model=VersionOut,
    responses=TEACHER,
)
async def clear_poll(code: str, poll_id: str, request: Request, rooms: RoomsDep) -> Response:
    """Take the poll off every screen (the students' phones, the projector, the remote), closing it first if it is
    still open: `event: poll` with `{"id", "status": "cleared"}`. Its answers stay (results, CSV)."""
    room, poll = await _poll_of(rooms, request, code, poll_id, teacher=True)
    if poll.status == "open":
        await rooms.store.close_poll(room.code, poll.id)
    version = await rooms.store.publish(room.code, "poll", {"id": poll.id, "status": "cleared"})
    return json_response({"version": version})


@router.get("/{code}/polls/{poll_id}/answers.csv", summary="A poll's answers as CSV (teacher)", **CSV)
async def poll_csv(code: str, poll_id: str, request: Request, rooms: RoomsDep) -> Response:
    """Every answer (student id, nickname, answer) for the teacher's records (UTF-8 with a byte order mark, as the
    class summary's CSV: Excel opens Chinese answers as written)."""
    room, poll = await _poll_of(rooms, request, code, poll_id, teacher=True)
    rows = [["student", "nickname", "answer", "correct"]]
    for a in sorted(await rooms.store.answers(room.code, poll.id), key=lambda a: a.student):
        correct = "" if poll.answer is None else str(a.answer == poll.answer).lower()
        rows.append([a.student, cell_safe(a.nickname or ""), cell_safe(a.answer), correct])
    return csv_file(rows, f"room-{room.code}-poll-{poll.id}.csv")


@router.get(
    "/{code}/summary",
    summary="The class summary: every poll and its answers (teacher)",
    response_model=SummaryOut,
    responses=TEACHER,
)
async def class_summary(code: str, request: Request, rooms: RoomsDep) -> Response:
    """The class summary, for the teacher (the remote's token): each poll asked — its question, options and key,
    when it opened and closed, the screens following then (`audience`), its counts and every answer with the
    seconds it came after the opening — and participation (students who answered, and how many polls each). The
    running class's; after the end, the one kept for ROOM_IDLE_S."""
    summary = await teachers_summary(rooms, request, code)
    return json_response(summary, headers={"Cache-Control": "no-store"})


@router.get("/{code}/summary.csv", summary="The class summary as CSV (teacher)", **CSV)
async def class_summary_csv(code: str, request: Request, rooms: RoomsDep) -> Response:
    """The class summary as CSV: one row per answer (poll, question, key, opened, closed, audience, student,
    nickname, answer, correct, seconds after the opening); a poll nobody answered has one row with no student. UTF-8
    with a byte order mark (Excel on Windows reads the Chinese as written); the header names do not change."""
    summary = await teachers_summary(rooms, request, code)
    return csv_file(summary_rows(summary), f"class-{summary['code']}-summary.csv", {"Cache-Control": "no-store"})
