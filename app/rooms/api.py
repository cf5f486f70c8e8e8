"""/api/v1/rooms: a class following its teacher, and predict-then-reveal polls. The pages use this API; so can
scripts and tests.

A room holds one view (a lab page and its URL query) and a version that grows with every change. Students follow
it over server-sent events: `event: state` on connect and after every change, `event: poll` when a poll opens or
closes, `event: end` when the teacher ends the class. A stream that reconnects with `Last-Event-ID` gets what it
missed.
"""

from __future__ import annotations

import asyncio
import contextlib
import csv
import io
import logging
import random
import re
import secrets
import unicodedata
from collections.abc import AsyncIterator
from typing import Annotated, Any, Literal

import anyio
from fastapi import APIRouter, Depends, FastAPI, Header, Path, Request, Response
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from redis.exceptions import RedisError
from starlette.background import BackgroundTask

from ..render.payload import json_response
from ..schemas import Problem
from ..settings import Settings
from ..web import lessons
from ..web.share import FOLLOWABLE
from .service import (
    SHOWN_WITH,
    RoomError,
    Rooms,
    check_json,
    check_same_origin,
    check_view,
    clean_page,
    clean_query,
    client_address,
    get_rooms,
    join_url,
    query_limit,
    store_down,
)
from .store import RETRY, RETRY_MS, Answer, Event, Poll, Room

LOG = logging.getLogger("attention_lab.rooms")


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


def install(app: FastAPI) -> None:
    """A refusal raised anywhere in a room route is its 4xx/503 answer; a room store that fails (Redis down, its
    pool exhausted past the wait) is a 503 that says so, never a 500."""

    @app.exception_handler(RoomError)
    async def _refused(request: Request, exc: RoomError) -> Response:
        return refused(exc)

    @app.exception_handler(RedisError)
    async def _store_down(request: Request, exc: RedisError) -> Response:
        return refused(store_down(exc))


RoomsDep = Annotated[Rooms, Depends(get_rooms)]
STRICT = ConfigDict(extra="forbid", strict=True)


def _whole(value: Any) -> Any:
    """41.0 as 41: JSON Schema's integer is any number without a fraction (schemathesis sends 41.0), and strict
    pydantic would refuse it. Anything else (41.5, "41", true) is left for the field's own check."""
    return int(value) if type(value) is float and value.is_integer() else value


class Body(BaseModel):
    """A room API body: strict JSON (no strings for numbers, no unknown fields), whole floats read as integers."""

    model_config = STRICT

    @model_validator(mode="before")
    @classmethod
    def _whole_numbers(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        return {k: [_whole(x) for x in v] if isinstance(v, list) else _whole(v) for k, v in data.items()}


# What the schema states of each body is what the code refuses (schemathesis' positive_data_acceptance: a request
# the schema calls valid must not be refused for a rule it does not state). The rules below are checked by the
# models' validators or the route's own `clean_*` with their own messages; the patterns are those checks written
# as JSON Schema. What no schema can say (a view the lab refuses, an answer that is not one of the poll's options, a
# cell outside the poll's matrix, a step past the lesson's last) is a 422 that names it, as a d_model that n_heads
# does not divide is for the lab's own requests.


def _page_pattern() -> str:
    """FOLLOWABLE, with "" (meaning "/") and each lesson's own slug (`clean_page` refuses any other)."""
    pages = FOLLOWABLE.pattern.removeprefix("^").removesuffix("$")
    slugs = sorted(lessons.BY_SLUG)
    if SLUG in pages and all(re.fullmatch(SLUG, slug) for slug in slugs):
        pages = pages.replace(SLUG, "(?:" + "|".join(slugs) + ")")
    return "^(?:" + pages + ")?$"


def _unprintable() -> str:
    """A regex class of the characters `str.isprintable` refuses, as far as a JSON Schema pattern can say it
    plainly: those assigned in the Basic Multilingual Plane (controls, format characters, separators but the
    space, private use). Unassigned and astral ones are refused too; the field's description says so."""
    ranges: list[tuple[int, int]] = []
    for cp in range(0x10000):
        c = chr(cp)
        if c.isprintable() or unicodedata.category(c) in ("Cn", "Cs"):
            continue
        if ranges and ranges[-1][1] == cp - 1:
            ranges[-1] = (ranges[-1][0], cp)
        else:
            ranges.append((cp, cp))
    return "".join(f"\\u{a:04x}" if a == b else f"\\u{a:04x}-\\u{b:04x}" for a, b in ranges)


SLUG = "[a-z0-9-]{1,64}"  # a lesson's slug in FOLLOWABLE
PAGE_PATTERN = _page_pattern()
NICKNAME_PATTERN = f"^[^{_unprintable()}]*$"
QUERY_PATTERN = r"^[^\x00-\x1f\x7f #]*$"  # service.clean_query: no control characters, spaces or '#'
NUMBER_4095 = r"0*(?:[0-9]{1,3}|[0-3][0-9]{3}|40[0-8][0-9]|409[0-5])"  # 0..4095, as int() reads it
CELL_PATTERN = rf"^\s*{NUMBER_4095}\s*,\s*{NUMBER_4095}\s*$"  # cell_key's "row,col" (rows, cols: at most 4096)
MAX_CELL = 4095


def view_limits(schema: dict[str, Any], settings: Settings) -> None:
    """State this server's query limit (from MAX_QUERY_KB, `query_limit`) in its OpenAPI schema."""
    max_query_bytes = query_limit(settings)
    query = schema.get("components", {}).get("schemas", {}).get("ViewIn", {}).get("properties", {}).get("query")
    if query is not None:
        query["maxLength"] = min(query.get("maxLength", max_query_bytes), max_query_bytes)
        spare = len(SHOWN_WITH)
        query["description"] += (
            f"; at most {max_query_bytes:,} bytes (UTF-8) on this server (MAX_QUERY_KB, less "
            f"{spare} for the language a view is shown in)"
        )


class ViewIn(Body):
    query: str = Field("", max_length=65536, description="the lab's URL query, e.g. stage=softmax&mask=causal; a "
                       "leading '?' is dropped; the lab must accept the view (else 422)",
                       json_schema_extra={"pattern": QUERY_PATTERN})  # fmt: skip
    page: str = Field("/", max_length=80, description="the lab page: /, /block, /decode, /lessons/<slug>, …",
                      json_schema_extra={"pattern": PAGE_PATTERN})  # fmt: skip


class RoomOut(BaseModel):
    code: str
    teacher_token: str = Field(description="shown once; send it as Authorization: Bearer <token> to change the room")
    join_url: str
    page: str
    query: str
    version: int


class RoomInfo(BaseModel):
    code: str
    page: str
    query: str
    version: int
    followers: int
    poll: str | None = Field(description="the open poll's id")


class VersionOut(BaseModel):
    version: int


def _poll_kinds(schema: dict[str, Any]) -> None:
    """What `PollIn._consistent` checks of each kind, as JSON Schema: a choice poll's two or more different options,
    a cell poll's none and its key as "row,col". (A choice poll's key must also be one of its options, and a cell's
    inside rows × cols: rules no JSON Schema states; a 422 names them.)"""
    schema["oneOf"] = [
        {"properties": {"kind": {"const": "choice"}, "options": {"minItems": 2, "uniqueItems": True}}},
        {"properties": {"kind": {"const": "cell"}, "options": {"maxItems": 0},
                        "answer": {"anyOf": [{"type": "string", "pattern": CELL_PATTERN}, {"type": "null"}]}}},
    ]  # fmt: skip


class PollIn(Body):
    model_config = ConfigDict(json_schema_extra=_poll_kinds)
    prompt: str = Field(min_length=1, max_length=300)
    kind: Literal["choice", "cell"]
    options: list[Annotated[str, Field(min_length=1, max_length=80)]] = Field([], max_length=12)
    rows: int | None = Field(None, ge=1, le=4096, description="a cell poll's matrix rows (answers are checked)")
    cols: int | None = Field(None, ge=1, le=4096)
    answer: str | None = Field(None, max_length=80, description="the key, revealed when the poll closes: one of the "
                               "options (choice), or 'row,col' inside rows × cols (cell)")  # fmt: skip

    @model_validator(mode="after")
    def _consistent(self) -> PollIn:
        if self.kind == "choice":
            if len(self.options) < 2:
                raise ValueError("options: a choice poll needs at least two")
            if len(set(self.options)) != len(self.options):
                raise ValueError("options: each option must be different")
            if self.answer is not None and self.answer not in self.options:
                raise ValueError("answer: must be one of the options")
        else:
            if self.options:
                raise ValueError("options: a cell poll has none (students click a cell)")
            if self.answer is not None:
                self.answer = cell_key(self.answer, self.rows, self.cols, "answer")
        return self


def cell_key(raw: Any, rows: int | None, cols: int | None, field: str) -> str:
    """[row, col] (or "row,col") as the key "row,col", counting from 0 like the matrices' headers."""
    parts = raw.split(",") if isinstance(raw, str) else raw
    ok = isinstance(parts, list) and len(parts) == 2
    nums: list[int] = []
    for p in parts if ok else []:
        if isinstance(p, bool) or not (isinstance(p, int) or (isinstance(p, str) and p.strip().isascii()
                                                              and p.strip().isdigit())):  # fmt: skip
            ok = False
            break
        nums.append(int(p))
    if not ok or len(nums) != 2:
        raise ValueError(f"{field}: a cell is [row, col], two whole numbers from 0")
    r, c = nums
    if r < 0 or c < 0 or (rows is not None and r >= rows) or (cols is not None and c >= cols) or max(r, c) > 4095:
        raise ValueError(f"{field}: cell [{r}, {c}] is outside the matrix")
    return f"{r},{c}"


def _answer_forms(schema: dict[str, Any]) -> None:
    """The answer's three forms with the bounds `AnswerIn._bounded` checks."""
    schema["anyOf"] = [
        {"type": "string", "minLength": 1, "maxLength": 80},
        {"type": "integer", "minimum": 0},
        {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": MAX_CELL}, "minItems": 2,
         "maxItems": 2},
    ]  # fmt: skip


class AnswerIn(Body):
    student: str = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$", description="a random id the student's browser keeps")
    answer: str | int | list[int] = Field(description="an option or its index from 0 (choice), or [row, col] (cell)",
                                          json_schema_extra=_answer_forms)  # fmt: skip
    nickname: str | None = Field(None, max_length=32, description="printable characters only (no controls, format "
                                 "characters, separators but the space, private-use or unassigned characters)",
                                 json_schema_extra={"pattern": NICKNAME_PATTERN})  # fmt: skip

    @model_validator(mode="after")
    def _bounded(self) -> AnswerIn:
        # Each of these answers would be refused by any poll (no option is empty, no index or cell negative): they
        # are refused here, before the poll is looked up, as the schema says (`_answer_forms`).
        if isinstance(self.answer, str) and not 1 <= len(self.answer) <= 80:
            raise ValueError("answer: 1 to 80 characters")
        if isinstance(self.answer, int) and self.answer < 0:
            raise ValueError("answer: an option's index counts from 0")
        if isinstance(self.answer, list) and (len(self.answer) != 2 or not all(0 <= x <= MAX_CELL
                                                                                for x in self.answer)):  # fmt: skip
            raise ValueError("answer: a cell is [row, col], two whole numbers from 0")
        if self.nickname is not None and any(not c.isprintable() for c in self.nickname):
            raise ValueError("nickname: printable characters only")
        return self


class AnswerOut(BaseModel):
    answer: str = Field(description="the answer as counted: the option's text, or 'row,col'")


LESSON_SLUGS: list[Any] = sorted(lessons.BY_SLUG)  # prepared_poll refuses any other (422)


class LessonPollIn(Body):
    lesson: str = Field(max_length=64, description="a lesson's slug, as in /lessons/<slug>",
                        json_schema_extra={"enum": LESSON_SLUGS})  # fmt: skip
    step: int = Field(ge=1, le=64, description="the step, counting from 1 as the lesson page does")
    lang: Literal["en", "zh"] = Field("en", description="the language of the question and its options")
    rows: int | None = Field(None, ge=1, le=4096, description="a cell poll's matrix rows, as the page shows it")
    cols: int | None = Field(None, ge=1, le=4096)


class PollCreated(BaseModel):
    id: str
    version: int


class PollOut(BaseModel):
    id: str
    prompt: str
    kind: str
    options: list[str]
    rows: int | None
    cols: int | None
    status: str
    answer: str | None = Field(None, description="once the poll is closed")
    counts: dict[str, int] = Field(
        description="answers by value (a cell as 'row,col'); while the poll is open, only the teacher gets them"
    )
    total: int | None = Field(description="answers so far; while the poll is open, null to everyone but the teacher")
    languages: dict[str, Any] | None = Field(
        None, description="a lesson's poll in every language: {lang: {prompt, options}}, options in the same order"
    )


# Where each refused field came from, for `detail[].loc` (the same shape as every other 4xx of the API).
WHERE = {"code": "path", "poll": "path", "authorization": "header", "last-event-id": "header",
         "sec-fetch-site": "header", "origin": "header", "content-type": "header",
         "query": "body", "page": "body", "answer": "body"}  # fmt: skip


def refused(exc: RoomError) -> Response:
    loc = [WHERE.get(exc.field, "request"), exc.field]
    body = {"message": f"{exc.field}: {exc.message}", "detail": [{"loc": loc, "msg": exc.message, "type": "room"}]}
    return json_response(body, exc.status, exc.headers)


@router.post("", status_code=201, response_model=RoomOut, responses=REFUSALS)
async def create_room(request: Request, rooms: RoomsDep, body: ViewIn | None = None) -> Response:
    """Start a room on a view (default: the lab's start). The teacher token in the answer is never shown again."""
    body = body or ViewIn()
    page = clean_page(body.page)  # a body the schema refuses is a 422 whatever this address did before
    query = clean_query(body.query, query_limit(rooms.settings))
    rooms.creates.check(client_address(request), "rooms", "rooms started from this address")
    await check_view(request.app, page, query)
    room, token = await rooms.create(page, query, client_address(request))
    out = {"code": room.code, "teacher_token": token, "join_url": join_url(request, room.code), "page": room.page,
           "query": room.query, "version": room.version}  # fmt: skip
    return json_response(out, 201, {"Location": f"/api/v1/rooms/{room.code}"})


@router.get("/{code}", response_model=RoomInfo, responses=REFUSALS)
async def get_room(code: str, request: Request, rooms: RoomsDep) -> Response:
    room = await rooms.room(code, request)
    followers = await rooms.store.followers(room.code)
    return json_response({"code": room.code, "page": room.page, "query": room.query, "version": room.version,
                          "followers": followers, "poll": room.poll})  # fmt: skip


@router.put("/{code}/state", response_model=VersionOut, responses=TEACHER)
async def put_state(code: str, body: ViewIn, request: Request, rooms: RoomsDep) -> Response:
    """The teacher's new view: checked by the lab (a view it would refuse is a 422), then sent to every follower."""
    room = await rooms.teacher(request, code)
    page = clean_page(body.page)
    query = clean_query(body.query, query_limit(rooms.settings))
    if (page, query) == (room.page, room.query):
        return json_response({"version": room.version})  # nothing changed: no event
    await check_view(request.app, page, query)
    version = await rooms.store.publish(room.code, "state", {"page": page, "query": query}, (page, query))
    return json_response({"version": version})


@router.delete("/{code}", status_code=204, responses=TEACHER)
async def end_room(code: str, request: Request, rooms: RoomsDep) -> Response:
    """End the class: every stream gets `event: end` and closes."""
    room = await rooms.teacher(request, code)
    await rooms.store.delete(room.code)
    return Response(status_code=204)


@router.get(
    "/{code}/events",
    responses=REFUSALS | {200: {"content": {"text/event-stream": {}}, "description": "server-sent events"}},
    response_class=StreamingResponse,
)
async def events(
    code: str,
    request: Request,
    rooms: RoomsDep,
    last_event_id: Annotated[str | None, Header(max_length=20)] = None,
) -> Response:
    """The room as server-sent events: `state` (`{"page", "query", "version"}`, id = version) on connect and on
    every change, `poll` when a poll opens or closes, `end`; a comment every few seconds keeps proxies open. A
    `retry:` hint says when to reconnect; `retry` (no id) says the stream ends because the room store went away:
    reconnect with Last-Event-ID (a 503 with Retry-After while it is still away)."""
    rooms.joins.check(client_address(request), "events", "joins from this address")
    room = await rooms.room(code, request)
    after: int | None = None
    if last_event_id is not None:
        if not (last_event_id.isascii() and last_event_id.isdigit()):
            raise RoomError(422, "last-event-id", "must be a version number from an earlier event")
        after = int(last_event_id)
    store = rooms.store
    await store.listening()  # Redis: not before this process receives the room's events again
    # The teacher's own page listens too (poll events), but is no follower. A follower is counted before its
    # stream starts, in one step with the limit's check.
    follower = None if await rooms.is_teacher(request, room) else secrets.token_hex(8)
    if follower and not await store.follow(room.code, follower, rooms.settings.max_followers):
        raise RoomError(503, "events", f"this room has its limit of {rooms.settings.max_followers} followers",
                        {"Retry-After": "30"})  # fmt: skip
    keepalive = rooms.settings.room_keepalive_s
    retry_ms = random.randint(*RETRY_MS)

    async def unfollow() -> None:
        if follower:
            with anyio.CancelScope(shield=True), contextlib.suppress(Exception):  # Redis may be the reason
                await store.unfollow(room.code, follower)

    async def stream() -> AsyncIterator[bytes]:
        with store.hub.listen(room.code) as queue:  # listening before the snapshot: nothing falls in between
            try:
                yield f"retry: {retry_ms}\n: following room {room.code}\n\n".encode()
                async for chunk in _events(queue):
                    yield chunk
            except (RedisError, OSError) as exc:  # the store went away: say so and end; the client reconnects
                LOG.info("rooms: a stream of %s ends: the store failed (%s)", room.code, type(exc).__name__)
                yield _retry(retry_ms)
            finally:
                await unfollow()

    async def _events(queue: asyncio.Queue[Event | None]) -> AsyncIterator[bytes]:
        sent = 0
        missed = await store.events_after(room.code, after) if after is not None else None
        if missed is not None:
            for old in missed:
                yield old.sse()
                sent = old.id
            sent = max(sent, after or 0)
        else:  # a first connection, one that missed more than the log holds, or a version the room never had
            current = await store.get(room.code)
            if current is None:
                yield Event(room.version + 1, "end", {}).sse()
                return
            state = Event(current.version, "state", {"page": current.page, "query": current.query})
            yield state.sse()
            sent = current.version
            if current.poll and (poll := await store.poll(room.code, current.poll)) is not None:
                yield Event(current.version, "poll", poll.public()).sse(with_id=False)
        while True:
            try:
                event = await asyncio.wait_for(queue.get(), keepalive)
            except TimeoutError:
                yield b": keep-alive\n\n"
                if follower:
                    await store.follow(room.code, follower)  # the heartbeat that keeps it counted
                continue
            if event is None:
                return
            if event is RETRY:
                yield _retry(retry_ms)
                return
            if event.id <= sent:
                continue
            yield event.sse()
            sent = event.id
            if event.kind == "end":
                return

    headers = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}  # no proxy may buffer the stream
    # `unfollow` also runs when the stream never started (its client left at once): it is idempotent.
    return StreamingResponse(stream(), media_type="text/event-stream", headers=headers,
                             background=BackgroundTask(unfollow))  # fmt: skip


def _retry(retry_ms: int) -> bytes:
    """`event: retry` (no id: the client's Last-Event-ID stays its last event), with the reconnect delay."""
    return f"retry: {retry_ms}\n".encode() + RETRY.sse(with_id=False)


@router.post("/{code}/polls", status_code=201, response_model=PollCreated, responses=TEACHER)
async def open_poll(code: str, body: PollIn, request: Request, rooms: RoomsDep) -> Response:
    """Open a poll on the current view (any open one closes): students see it at once and answer once."""
    room = await rooms.teacher(request, code)
    poll = Poll(secrets.token_hex(4), body.prompt, body.kind, tuple(body.options), body.rows, body.cols, body.answer)
    version = await rooms.store.open_poll(room.code, poll)
    return json_response({"id": poll.id, "version": version}, 201)


def prepared_poll(slug: str, k: int, lang: str, rows: int | None, cols: int | None) -> PollIn:
    """Step k (from 1) of a lesson as a poll: its question, options and key, checked like a teacher's own."""
    lesson = lessons.BY_SLUG.get(slug)
    if lesson is None:
        raise RoomError(422, "lesson", f"no lesson {slug[:64]!r}; see /lessons")
    if not 1 <= k <= len(lesson.steps):
        raise RoomError(422, "step", f"lesson {lesson.slug!r} has steps 1..{len(lesson.steps)}, got {k}")
    step = lesson.steps[k - 1]
    if step.poll is None:
        raise RoomError(422, "step", f"step {k} of {lesson.slug!r} has no prepared question")
    prepared = step.poll.for_lang(step.text(lang)[1], lang) | {"rows": rows, "cols": cols}
    try:
        return PollIn.model_validate(prepared)
    except ValidationError as exc:  # the lesson's key against the page's matrix (rows/cols): a 422, not a 500
        raise RoomError(422, "rows", exc.errors()[0]["msg"]) from exc


@router.post("/{code}/polls/lesson", status_code=201, response_model=PollCreated, responses=TEACHER)
async def open_lesson_poll(code: str, body: LessonPollIn, request: Request, rooms: RoomsDep) -> Response:
    """Ask the class a lesson step's own question: its options and its key come from the lesson (never from the
    projected page, which does not hold the key); students see the question at once, the key when it closes."""
    room = await rooms.teacher(request, code)
    poll_in = prepared_poll(body.lesson, body.step, body.lang, body.rows, body.cols)
    step = lessons.BY_SLUG[body.lesson].steps[body.step - 1]
    assert step.poll is not None  # prepared_poll checked it
    languages = {lang: {k: step.poll.for_lang(step.text(lang)[1], lang)[k] for k in ("prompt", "options")}
                 for lang in ("en", "zh")}  # fmt: skip
    poll = Poll(secrets.token_hex(4), poll_in.prompt, poll_in.kind, tuple(poll_in.options), poll_in.rows,
                poll_in.cols, poll_in.answer, languages=languages)  # fmt: skip
    version = await rooms.store.open_poll(room.code, poll)
    return json_response({"id": poll.id, "version": version}, 201)


async def _poll(rooms: Rooms, code: str, poll_id: str, request: Request) -> tuple[Room, Poll]:
    room = await rooms.room(code, request)
    poll = await rooms.store.poll(room.code, poll_id[:16])
    if poll is None:
        rooms.missed(request)
        raise RoomError(404, "poll", f"no poll {poll_id[:16]!r} in room {room.code}")
    return room, poll


@router.get("/{code}/polls/lesson", response_model=PollIn, responses=TEACHER)
async def lesson_poll(code: str, lesson: str, step: int, request: Request, rooms: RoomsDep,
                      lang: Literal["en", "zh"] = "en") -> Response:  # fmt: skip
    """A lesson step's prepared question as the poll it would open, key included: for the teacher's remote only."""
    await rooms.teacher(request, code)
    return json_response(prepared_poll(lesson, step, lang, None, None).model_dump())


# GET …/polls/lesson is the lesson poll's own route (declared first): no poll is called "lesson" (ids are hex).
NotLesson = Annotated[str, Path(description="the poll's id", json_schema_extra={"not": {"const": "lesson"}})]


@router.get("/{code}/polls/{poll_id}", response_model=PollOut, responses=REFUSALS)
async def poll_results(code: str, poll_id: NotLesson, request: Request, rooms: RoomsDep) -> Response:
    """The answers counted so far (a student's later answer replaces the earlier) and the key: to everyone once
    the poll is closed; while it is open, to the room's teacher alone (the remote shows them live), and to
    everyone else no counts at all (`counts` empty, `total` null), so that nobody can steer the vote by them."""
    room, poll = await _poll(rooms, code, poll_id, request)
    shown = poll.status == "closed" or await rooms.is_teacher(request, room)
    counts = await rooms.store.counts(room.code, poll.id) if shown else {}
    out = poll.public() | {"answer": poll.answer if shown else None, "counts": counts,
                           "total": sum(counts.values()) if shown else None}  # fmt: skip
    return json_response(out)


@router.post("/{code}/polls/{poll_id}/answers", response_model=AnswerOut, responses=REFUSALS | {
    409: problem_doc("The poll is closed")})  # fmt: skip
async def answer_poll(code: str, poll_id: str, body: AnswerIn, request: Request, rooms: RoomsDep) -> Response:
    address = client_address(request)
    rooms.address_answers.check(address, "answer", "answers from this address")
    rooms.answers.check(f"{address}/{body.student}", "answer", "answers from this student")
    room, poll = await _poll(rooms, code, poll_id, request)
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
    if not await rooms.store.answer(room.code, poll.id, Answer(body.student, value, nickname), address, cap):
        raise RoomError(429, "answer", f"{cap} students from this address have answered this poll, its limit "
                        "(ROOM_ANSWERS_PER_ADDRESS_PER_POLL)", {"Retry-After": "60"})  # fmt: skip
    return json_response({"answer": value})


@router.post("/{code}/polls/{poll_id}/close", response_model=PollOut, responses=TEACHER)
async def close_poll(code: str, poll_id: str, request: Request, rooms: RoomsDep) -> Response:
    """Close the poll and reveal it: the counts and the key go to every follower."""
    room = await rooms.teacher(request, code)
    _, poll = await _poll(rooms, room.code, poll_id, request)
    closed = await rooms.store.close_poll(room.code, poll.id)
    assert closed is not None
    counts = await rooms.store.counts(room.code, poll.id)
    return json_response(closed.public(counts))


@router.get("/{code}/polls/{poll_id}/answers.csv", responses=TEACHER | {200: {"content": {"text/csv": {}}}},
            response_class=Response)  # fmt: skip
async def poll_csv(code: str, poll_id: str, request: Request, rooms: RoomsDep) -> Response:
    """Every answer (student id, nickname, answer) for the teacher's records."""
    room = await rooms.teacher(request, code)
    _, poll = await _poll(rooms, room.code, poll_id, request)
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["student", "nickname", "answer", "correct"])
    for a in sorted(await rooms.store.answers(room.code, poll.id), key=lambda a: a.student):
        correct = "" if poll.answer is None else str(a.answer == poll.answer).lower()
        writer.writerow([a.student, _cell_safe(a.nickname or ""), _cell_safe(a.answer), correct])
    name = f"room-{room.code}-poll-{poll.id}.csv"
    return Response(out.getvalue(), media_type="text/csv; charset=utf-8",
                    headers={"Content-Disposition": f'attachment; filename="{name}"'})  # fmt: skip


def _cell_safe(text: str) -> str:
    """A spreadsheet runs a cell that starts with = + - @ as a formula: such a nickname is quoted."""
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text
