"""The rooms' pages: start a class from any lab page, join one by its code, and the bar that follows (students) or
leads (the teacher) on every page while the browser is in a room.

The bar is fetched by static/room.js from /r/<code>/bar, so the lab's pages stay the same for everyone (and stay
in the page cache); which bar a browser gets depends on its teacher cookie. Following is rendering the teacher's
view URL: room.js fetches it and swaps the page in place, keeping the bar and the event stream.
"""

from __future__ import annotations

import hmac
import json
import re
import secrets
from typing import TYPE_CHECKING, Annotated, Any
from urllib.parse import parse_qsl, quote, urlencode, urlsplit

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from pydantic import ValidationError

from ..errors import clean
from ..schemas import query_model, said
from ..templating import LANGS, TEMPLATES, error_message, translator
from ..web.lessons import LESSONS, with_query
from ..web.page import language
from ..web.share import MAX_QR_CHARS, qr_svg, unreachable
from .api import ask, clear_poll, close_poll, prepared_poll, record_answer
from .bodies import AnswerIn, LessonPollIn, PollIn
from .fragments import Role, poll_box
from .service import (
    ROOM_COOKIE,
    STUDENT_COOKIE,
    TEACHER_COOKIE,
    RoomError,
    Rooms,
    RoomsDep,
    check_same_origin,
    check_view,
    client_address,
    join_url,
    presented_token,
    store_errors,
    token_hash,
)
from .store import Poll, Room, normal_code
from .summary import end_class, teachers_summary

router = APIRouter(include_in_schema=False)


def view_url(page: str, query: str, lang: str | None = None, present: bool = False) -> str:
    """The room's view for one screen: its own language, and presenter mode when that screen was in it."""
    extra = "&".join(([f"lang={lang}"] if lang else []) + (["present=1"] if present else []))
    q = "&".join(part for part in (query, extra) if part)
    return page + ("?" + q if q else "")


def _presenting(query: str) -> bool:
    return re.search(r"(?:^|&)present=1(?:&|$)", query) is not None


NO_STORE = {"Cache-Control": "no-store"}
SECRET = NO_STORE | {"Referrer-Policy": "no-referrer"}  # a page whose URL holds a pairing secret


def _page(
    request: Request,
    template: str,
    status: int = 200,
    headers: dict[str, str] | None = None,
    lang: str | None = None,
    **ctx: object,
) -> Response:
    """The join page and its refusals, in `lang` (a form's own, when it posted one) or the request's language. Not
    the page kernel's `serve`: that caches by URL alone, and a refusal of POST /r must never be answered with the
    cached GET /r page (nor a room's state be cached at all)."""
    lang = _lang(lang) or language(request)
    base = {"t": translator(lang), "lang": lang, "langs": LANGS, "page": "room", "json_url": None, "spec": None,
            "lang_urls": {c: f"{request.url.path}?lang={c}" for c in LANGS}}  # fmt: skip
    response = TEMPLATES.TemplateResponse(request, template, base | ctx, status_code=status)
    response.headers.update(headers or {})
    return response


def _lang(raw: str | None) -> str | None:
    """The language a form or link asks for, when the lab has it."""
    return raw if raw in LANGS else None


def _in_room(response: Response, request: Request, rooms: Rooms, code: str, token: str | None = None) -> Response:
    """The response, with the cookies of a browser in room `code`: the room, and (HttpOnly) the teacher token of a
    browser that teaches it."""
    secure = request.url.scheme == "https"  # cookies over HTTPS are Secure: never sent back over plain HTTP
    age = int(rooms.settings.room_idle_s)
    if token is not None:
        response.set_cookie(TEACHER_COOKIE, quote(f"{code}.{token}", safe=".-_"), max_age=age, httponly=True,
                            samesite="strict", secure=secure)  # fmt: skip
    response.set_cookie(ROOM_COOKIE, code, max_age=age, samesite="lax", secure=secure)
    return response


def _forget(response: Response, request: Request, token: bool = True) -> Response:
    """The response, with the room forgotten in this browser (and its teacher token, when `token`)."""
    secure = request.url.scheme == "https"
    if token:
        response.delete_cookie(TEACHER_COOKIE, httponly=True, samesite="strict", secure=secure)
    response.delete_cookie(ROOM_COOKIE, samesite="lax", secure=secure)
    return response


@router.get("/r", response_class=HTMLResponse)
async def join(request: Request, rooms: RoomsDep, code: str | None = None) -> Response:
    """Type the code from the projector (or scan its QR, which opens /r/<code> directly)."""
    if code is not None:
        found = normal_code(code)
        if found:
            return RedirectResponse(f"/r/{found}?lang={language(request)}", 303)
        return _page(request, "room_join.html", 404, error=translator(language(request))("room.bad_code"))
    return _page(request, "room_join.html", 503 if rooms.disabled else 200, disabled=rooms.disabled)


REFUSED = {404: "room.not_found", 429: "room.too_many", 503: "room.off"}  # a join's refusal, in the page's words


def _refusal(t: Any, exc: RoomError) -> str:
    """A refusal in the page's words: the room store briefly away is not "rooms are off"."""
    return t("room.unreachable") if exc.field == "store" else t(REFUSED.get(exc.status, "room.not_found"))


def _refused_page(request: Request, rooms: Rooms, exc: RoomError, message: str | None = None,
                  lang: str | None = None) -> Response:  # fmt: skip
    """The join page with the refusal (in the page's words unless `message` is given), its status and its
    Retry-After; while the store is away, a link that tries the same class again."""
    retry = request.url.path if exc.field == "store" and request.method == "GET" else None
    error = message or _refusal(translator(_lang(lang) or language(request)), exc)
    return _page(request, "room_join.html", exc.status, exc.headers | NO_STORE, lang, error=error, retry_url=retry,
                 disabled=rooms.disabled if exc.field != "store" else None)  # fmt: skip


def _said(exc: RoomError, lang: str) -> str:
    """A refusal of the "Start a class" form in the page's language: the field it names and its catalogue message
    (the API's English where it has no code: another site's request, rooms switched off)."""
    t = translator(lang)
    if exc.field == "store":
        return t("room.unreachable")
    return t("error.field", field=exc.field, message=error_message(exc.message, lang))


@router.get("/r/{code}", response_class=HTMLResponse)
async def follow(code: str, request: Request, rooms: RoomsDep) -> Response:
    """A student joins: the browser remembers the room and opens the teacher's current view, following it."""
    try:
        await rooms.joins.check(client_address(request), "join", "too_many_joins")
        room = await rooms.room(code, request)
    except RoomError as exc:
        return _refused_page(request, rooms, exc)
    own = await _own_room(request, rooms)
    if own is not None and own.code != room.code:
        # This browser teaches another class: a link (from anywhere) must not quietly turn its projector into a
        # student's screen. It asks; joining is a button that posts from this page.
        back = view_url(own.page, own.query, language(request), _presenting(own.query))
        return _page(request, "room_switch.html", headers=NO_STORE, room=room, own=own, back=back)
    return _joined(request, rooms, room, request.query_params.get("lang"))


def _joined(request: Request, rooms: Rooms, room: Room, lang: str | None) -> Response:
    target = view_url(room.page, room.query, _lang(lang)) + "#follow"
    return _in_room(RedirectResponse(target, 303), request, rooms, room.code)


@router.post("/r/{code}/join", response_class=HTMLResponse)
async def join_confirmed(code: str, request: Request, rooms: RoomsDep) -> Response:
    """The confirmation's button: this browser follows the room as a student (its own class keeps running; its
    teacher cookie stays, so its remote and its bar still work from there)."""
    form = await _form(request)
    try:
        check_same_origin(request)
        await rooms.joins.check(client_address(request), "join", "too_many_joins")
        room = await rooms.room(code, request)
    except RoomError as exc:
        return _refused_page(request, rooms, exc, str(exc) if exc.status == 403 else None, form.get("lang"))
    return _joined(request, rooms, room, form.get("lang"))


@router.get("/r/{code}/bar", response_class=HTMLResponse)
async def bar(code: str, request: Request, rooms: RoomsDep) -> Response:
    """The room bar for this browser: the teacher's (code, QR, followers, polls) or a student's (follow / explore,
    the open poll; its cookie lab_student, the id this browser answers with, so that its poll box shows its own
    answer, given here the first time). 404
    with an empty body when the room is gone, so the page drops its bar."""
    try:
        room = await rooms.room(code, request)
    except RoomError as exc:
        if exc.status in (429, 503):  # the address's budget is spent, or the store is away: say when, keep the room
            return Response(status_code=exc.status, headers=exc.headers)
        return Response(status_code=404)
    teacher = await rooms.is_teacher(request, room)
    lang = language(request)
    url = join_url(request, room.code)
    ctx = {"t": translator(lang), "lang": lang, "room": room, "teacher": teacher, "join_url": url,
           "student": (student := (request.cookies.get(STUDENT_COOKIE) or secrets.token_hex(12))[:64]),
           # the count as the bar arrives (its stream then sends every change: `followers`)
           "followers": await rooms.store.followers(room.code) if teacher else 0,
           "qr": qr_svg(url) if teacher and len(url) <= MAX_QR_CHARS else None,
           "loopback": teacher and unreachable(urlsplit(url).hostname or "", rooms.settings.bind_host,
                                               rooms.settings.public_url)}  # fmt: skip
    response = TEMPLATES.TemplateResponse(request, "room_bar.html", ctx, headers={"Cache-Control": "no-store"})
    if request.cookies.get(STUDENT_COOKIE) != student:  # this browser's id from now on, sent with its poll box
        response.set_cookie(STUDENT_COOKIE, student, max_age=int(rooms.settings.room_idle_s), httponly=True,
                            samesite="lax", secure=request.url.scheme == "https")  # fmt: skip
    return response


@router.get("/r/{code}/followers", response_class=HTMLResponse)
async def followers(code: str, request: Request, rooms: RoomsDep) -> Response:
    """How many screens follow the class, as text (the teacher's screens get each change over the room's stream,
    `followers`; this answers a script or a page that asks); 204 when the room is gone."""
    try:
        room = await rooms.room(code, request)
    except RoomError as exc:
        return Response(status_code=exc.status if exc.status in (429, 503) else 204, headers=exc.headers)
    return HTMLResponse(str(await rooms.store.followers(room.code)), headers=NO_STORE)


@router.get("/r/{code}/poll/{poll_id}/total", response_class=HTMLResponse)
async def poll_total(code: str, poll_id: str, request: Request, rooms: RoomsDep) -> Response:
    """How many answered so far, for the teacher's bar while the poll is open (the count, never the histogram)."""
    try:
        room = await rooms.teacher(request, code)
    except RoomError as exc:
        return Response(status_code=exc.status if exc.status in (429, 503) else 204, headers=exc.headers)
    return HTMLResponse(str(sum((await rooms.store.counts(room.code, poll_id[:64])).values())), headers=NO_STORE)


@router.get("/r/{code}/poll/{poll_id}/live", response_class=HTMLResponse)
async def poll_live(code: str, poll_id: str, request: Request, rooms: RoomsDep) -> Response:
    """The teacher's remote's results (templates/_room_poll.html): the histogram with the key, live while open."""
    return await _poll_box(code, poll_id, request, rooms, None)


@router.get("/r/{code}/poll/{poll_id}", response_class=HTMLResponse)
async def poll(code: str, poll_id: str, request: Request, rooms: RoomsDep, student: str | None = None) -> Response:
    """The poll box of this browser's bar (templates/_room_poll.html), with a student's own answer after they gave
    it. Empty (204) when the room or the poll is gone."""
    return await _poll_box(code, poll_id, request, rooms, (student or "")[:64])


async def _poll_box(code: str, poll_id: str, request: Request, rooms: Rooms, student: str | None) -> Response:
    """A poll box for this browser's role; the remote's (`student` None: the teacher's alone) shows live counts."""
    remote = student is None
    try:
        room = await (rooms.teacher(request, code) if remote else rooms.room(code, request))
        found = await rooms.store.poll(room.code, poll_id[:64])
    except RoomError as exc:
        return Response(status_code=exc.status if exc.status in (429, 503) else 204, headers=exc.headers)
    if found is None:
        return Response(status_code=204)
    role: Role = "remote" if remote else "teacher" if await rooms.is_teacher(request, room) else "student"
    html = await poll_box(rooms.store, room.code, found, role, language(request), student)
    return HTMLResponse(html, headers=NO_STORE)


@router.post("/r/{code}/poll/{poll_id}/answer", response_class=HTMLResponse)
async def answer(code: str, poll_id: str, request: Request, rooms: RoomsDep) -> Response:
    """A student's answer from their poll box (htmx: `student`, `answer`, `nickname`, as a form), counted as the API
    counts it: the box again, with the answer in it. A refusal (its status) leaves the box as it was."""
    form = await _form(request)
    given = form.get("answer", "")
    try:
        check_same_origin(request)
        body = AnswerIn.model_validate(form | {"answer": int(given) if given.isdigit() else given,
                                               "nickname": form.get("nickname") or None})  # fmt: skip
        room, poll, _ = await record_answer(rooms, request, code, poll_id, body)
    except ValidationError:
        return Response(status_code=422)
    except RoomError as exc:
        return Response(status_code=exc.status, headers=exc.headers)
    html = await poll_box(rooms.store, room.code, poll, "student", language(request), body.student)
    return HTMLResponse(html, headers=NO_STORE)


@router.post("/r/{code}/poll/{poll_id}/{action}", response_class=HTMLResponse)
async def reveal_or_clear(code: str, poll_id: str, action: str, request: Request, rooms: RoomsDep) -> Response:
    """The teacher's Reveal and Clear buttons (the projector's bar, the remote; htmx): the API's close and clear. The
    screens hear of it from the room's stream."""
    if action not in ("close", "clear"):
        return Response(status_code=404)
    check_same_origin(request)  # a refusal (RoomError) is the rooms API's answer: its status and message
    await (close_poll if action == "close" else clear_poll)(code, poll_id, request, rooms)
    return Response(status_code=204)


POLL_FORM = ("prompt", "kind", "options", "answer")  # the remote's own question: its fields, each with its error
SHAPE = ("rows", "cols", "row_labels", "col_labels")  # a cell question's matrix, as the remote's `now` has it


def own_poll(form: dict[str, str]) -> dict[str, Any]:
    """The remote's form as the rooms API's body: a choice question's options split at commas (either width), a cell
    question's matrix from the remote's view of the page (`shape`, templates/_remote.html), the key when given."""
    body: dict[str, Any] = {"prompt": form.get("prompt", ""), "kind": form.get("kind", "")}
    if body["kind"] == "choice":
        body["options"] = [o.strip() for o in re.split("[,，]", form.get("options", "")) if o.strip()]
    else:
        try:
            shape = json.loads(form.get("shape") or "{}")
        except ValueError:
            shape = {}
        body |= {k: shape[k] for k in SHAPE if isinstance(shape, dict) and k in shape}
    if key := form.get("answer", "").strip():
        body["answer"] = key
    return body


def said_under(errors: list[dict[str, Any]], lang: str) -> dict[str, str]:
    """The API's refusals (`clean`ed) by the form's field, in `lang`: a refusal of the poll as a whole names its
    field (app/rooms/bodies.py `refused`), an option its number; one of a field the form does not show, under "".
    The English is the catalogue's (the API's words without the field that the form shows beside them)."""
    t, out = translator(lang), dict[str, str]()
    for e in errors:
        msg, loc = e["msg"], e["loc"]
        params = dict(getattr(msg, "params", {}))
        field = str(params.pop("field", None) or (loc[1] if len(loc) > 1 else "body"))
        if "field" in getattr(msg, "params", {}):
            msg = said(msg.code, **params)
        words = error_message(msg, lang)
        if field == "options" and len(loc) > 2 and str(loc[2]).isdigit():
            words = f"{t('room.poll_option_n', n=int(loc[2]) + 1)}: {words}"
        if field not in POLL_FORM:
            field, words = "", t("error.field", field=field, message=words)
        out[field] = f"{out[field]}; {words}" if field in out else words
    return out


@router.post("/r/{code}/ask", response_class=HTMLResponse)
async def ask_own(code: str, request: Request, rooms: RoomsDep) -> Response:
    """The remote's own question (htmx; templates/room_teach.html `poll_fields`): opened as the rooms API opens it
    (POST /api/v1/rooms/<code>/polls), and its fields again: refused (422), each refusal under its field in the
    page's language, the values as typed. A refusal of the room itself is the rooms API's (its status)."""
    form = await _form(request)
    lang = _lang(form.get("lang")) or language(request)
    typed = {k: form.get(k, "")[:600] for k in POLL_FORM}
    check_same_origin(request)
    room = await rooms.teacher(request, code)
    status, errors = 201, {}
    try:
        body = PollIn.model_validate(own_poll(form))
    except ValidationError as exc:
        status, errors = 422, said_under(clean(exc.errors(), "body"), lang)
    else:
        await ask(rooms, room, body)
    ctx = {"t": translator(lang), "lang": lang, "typed": typed, "field_errors": errors}
    return TEMPLATES.TemplateResponse(request, "room_teach.html", ctx, status_code=status, headers=NO_STORE,
                                      block_name="poll_fields")  # fmt: skip


FORM_FIELDS = 8  # the lab's forms send three (page, query, lang); any past the first 8 are ignored


async def _form(request: Request) -> dict[str, str]:
    """The form's fields; a body with more than FORM_FIELDS of them is read up to that many (parse_qsl's own
    max_num_fields raises ValueError, a 500)."""
    raw = (await request.body()).decode("utf-8", "replace")
    fields = raw.split("&", FORM_FIELDS)[:FORM_FIELDS]
    return dict(parse_qsl("&".join(fields), keep_blank_values=True))


@router.post("/r", response_class=HTMLResponse)
async def start(request: Request, rooms: RoomsDep) -> Response:
    """The teacher's "Start a class" button: a room on the current view; the teacher token goes into an HttpOnly
    cookie (never into a URL), and the teacher goes back to the same view, now with the room's bar."""
    form = await _form(request)
    lang = _lang(form.get("lang"))
    try:
        check_same_origin(request)  # another site's form must not replace this browser's class
    except RoomError as exc:
        return _page(request, "room_join.html", exc.status, lang=lang, error=str(exc))
    current = await _own_room(request, rooms)
    # A class already runs in this browser: keep it (its students follow this view), never a second room.
    if current is not None:
        try:
            page, query = rooms.view(form.get("page", "/"), form.get("query", ""))
        except RoomError:
            page, query = current.page, current.query
        return RedirectResponse(view_url(page, query, lang, _presenting(form.get("query", ""))), 303)
    try:
        await rooms.creates.check(client_address(request), "rooms", "too_many_starts")
        page, query = rooms.view(form.get("page", "/"), form.get("query", ""))
        await rooms.ready()  # rooms that are off say so before anything is rendered
        shown = lang or language(request)
        await check_view(request.app, page, query, shown)  # a view the lab refuses is refused here too, as by the API
        room, token = await rooms.create(page, query, client_address(request))
    except RoomError as exc:
        # "Rooms are off" only when they are (several workers without Redis); a full server, an address at its
        # limit or a refused view say what they are, in the page's language.
        said_ = None if rooms.disabled else _said(exc, lang or language(request))  # off: the warning says so
        return _page(request, "room_join.html", exc.status, lang=lang, error=said_, disabled=rooms.disabled)
    response = RedirectResponse(view_url(page, query, lang, _presenting(form.get("query", ""))), 303)
    return _in_room(response, request, rooms, room.code, token)


async def _own_room(request: Request, rooms: Rooms) -> Room | None:
    """The open room this browser teaches (its teacher cookie), if any."""
    code = request.cookies.get(TEACHER_COOKIE, "").partition(".")[0]
    if not code:
        return None
    try:
        return await rooms.teacher(request, code)
    except RoomError:
        return None


# ---- pairing: the teacher's role handed to a second device (the teacher's phone) ---------------------------------


@router.post("/r/{code}/pair", response_class=HTMLResponse)
async def pair(code: str, request: Request, rooms: RoomsDep) -> Response:
    """A one-time link (and its QR code) that hands the teacher's role to another device: shown on the teacher's
    remote only, valid for ROOM_PAIR_S seconds, used up by the first device that confirms it."""
    try:
        check_same_origin(request)
        room = await rooms.teacher(request, code)
    except RoomError as exc:
        return _page(request, "room_join.html", exc.status if exc.status != 401 else 403, error=str(exc))
    secret = secrets.token_urlsafe(16)
    ttl = rooms.settings.room_pair_s
    await rooms.store.add_pairing(room.code, token_hash(secret), ttl)
    # The link speaks the teacher's language: the phone that opens it may ask for another (its Accept-Language).
    url = join_url(request, room.code) + "/pair/" + secret + "?lang=" + language(request)
    return _page(request, "room_pair.html", headers=SECRET, room=room, pair_url=url, qr=qr_svg(url),
                 minutes=max(1, round(ttl / 60)), paired=len(room.devices))  # fmt: skip


@router.get("/r/{code}/pair/{secret}", response_class=HTMLResponse)
async def pair_confirm(code: str, secret: str, request: Request, rooms: RoomsDep) -> Response:
    """The paired device's first page: a button to confirm (a GET uses nothing up, so a link preview cannot)."""
    try:
        room = await rooms.room(code, request)
    except RoomError as exc:
        return _refused_page(request, rooms, exc)
    return _page(request, "room_pair.html", headers=SECRET, room=room, confirm=f"/r/{room.code}/pair/{secret[:64]}")


@router.post("/r/{code}/pair/{secret}", response_class=HTMLResponse)
async def pair_take(code: str, secret: str, request: Request, rooms: RoomsDep) -> Response:
    """Confirmed on the device: the pairing is used up, the device gets a teacher token of its own (an HttpOnly
    cookie, as the teacher's browser has) and opens the remote."""
    t = translator(language(request))
    try:
        check_same_origin(request)
        room = await rooms.room(code, request)
        if not await rooms.store.take_pairing(room.code, token_hash(secret[:64])):
            await rooms.missed(request)  # guessing pairing secrets costs what guessing codes does
            raise RoomError(410, "pair", t("room.pair_used"))
        if len(room.devices) >= rooms.settings.room_max_devices:
            raise RoomError(409, "pair", t("room.pair_full", n=rooms.settings.room_max_devices))
    except RoomError as exc:
        return _page(request, "room_join.html", exc.status, error=exc.message if exc.field == "pair" else str(exc))
    token = secrets.token_urlsafe(24)
    await rooms.store.set_devices(room.code, (*room.devices, token_hash(token)))
    form = await _form(request)
    lang = f"?lang={form['lang']}" if _lang(form.get("lang")) else ""
    return _in_room(RedirectResponse(f"/r/{room.code}/teach{lang}", 303), request, rooms, room.code, token)


def _paired_device(request: Request, room: Room) -> bool:
    """The request comes from a paired device (its own token), not from the browser that started the class."""
    token = presented_token(request, room.code)
    return token is not None and not hmac.compare_digest(token_hash(token), room.token_hash)


@router.post("/r/{code}/unpair", response_class=HTMLResponse)
async def unpair(code: str, request: Request, rooms: RoomsDep) -> Response:
    """Take the teacher's role back from every paired device (the browser that started the class keeps it). Pressed
    on the laptop, the remote comes back (in its language); pressed on a paired phone, that phone is one of them: it
    is told so, in its language, and forgets the class (no silent turn into a student's screen)."""
    form = await _form(request)
    lang = _lang(form.get("lang"))
    suffix = f"?lang={lang}" if lang else ""
    try:
        check_same_origin(request)
        room = await rooms.teacher(request, code)
    except RoomError as exc:
        return _page(request, "room_join.html", exc.status if exc.status != 401 else 403, error=str(exc))
    await rooms.store.set_devices(room.code, ())
    if not _paired_device(request, room):
        return RedirectResponse(f"/r/{room.code}/teach{suffix}", 303)
    return _forget(RedirectResponse(f"/r/{room.code}/unpaired{suffix}", 303), request)


@router.get("/r/{code}/unpaired", response_class=HTMLResponse)
async def unpaired(code: str, request: Request) -> Response:
    """What a paired phone shows once it unpaired every device, itself included: it is no longer the remote; the
    screen that started the class still runs it; a link follows the class as a student instead."""
    return _page(request, "room_unpaired.html", headers=NO_STORE, code=normal_code(code))


def lesson_starts(lang: str) -> list[dict[str, str]]:
    """Every lesson's first step as a room view (page, query), for the remote's "Open a lesson": the class starts a
    lesson from the teacher's phone. The query is percent-encoded (a step's URL may hold Chinese text); a step's
    #fragment is the page's own scrolling, which a room's view does not carry."""
    starts = []
    for lesson in LESSONS:
        url = with_query(lesson.steps[0].url, lesson=lesson.slug, lesson_step=1).partition("#")[0]
        page, _, query = url.partition("?")
        title = lesson.title.get(lang) or lesson.title["en"]
        starts.append({"slug": lesson.slug, "title": title, "page": page,
                       "query": urlencode(parse_qsl(query, keep_blank_values=True))})  # fmt: skip
    return starts


@router.get("/r/{code}/teach", response_class=HTMLResponse)
async def teach(code: str, request: Request, rooms: RoomsDep) -> Response:
    """The teacher's remote, for the teacher's own screen or phone (never the projector): step the class, ask a
    lesson's prepared question or one's own, watch the answers come in, reveal, end. Only the teacher's browser
    may open it."""
    lang = language(request)
    t = translator(lang)
    try:
        room = await rooms.teacher(request, code)
    except RoomError as exc:
        if exc.field == "store":
            return _refused_page(request, rooms, exc)
        status = exc.status if exc.status in (404, 503) else 403
        message = t("room.remote_only_teacher") if status == 403 else t("room.not_found")
        return _page(request, "room_join.html", status, error=message, disabled=rooms.disabled)
    return _page(request, "room_teach.html", headers=NO_STORE, room=room, join_url=join_url(request, room.code),
                 followers=await rooms.store.followers(room.code), lessons=lesson_starts(lang), paired_here=_paired_device(request, room),
                 lang_urls={c: f"/r/{room.code}/teach?lang={c}" for c in LANGS})  # fmt: skip


if TYPE_CHECKING:
    ASK = LessonPollIn
else:
    ASK = query_model(LessonPollIn)  # the lesson poll's body, read from a GET query


@router.get("/r/{code}/prepared", response_class=HTMLResponse)
async def prepared(code: str, request: Request, rooms: RoomsDep, ask: Annotated[ASK, Query()]) -> Response:
    """A lesson step's prepared question on the teacher's remote (templates/_room_prepared.html): its options, its
    key (a cell named by the tokens of the matrix the class sees, `row_labels` and `col_labels` as the page has them)
    and "Ask the class" with the body it posts. The teacher's alone; 204 (no card) for a step without a question."""
    try:
        await rooms.teacher(request, code)
        poll, _ = prepared_poll(ask.lesson, ask.step, ask.lang, None, None)
    except RoomError as exc:
        return Response(status_code=exc.status if exc.status in (429, 503) else 204, headers=exc.headers)
    labelled = Poll("", "", poll.kind, row_labels=tuple(ask.row_labels or ()), col_labels=tuple(ask.col_labels or ()))
    key = labelled.cell_label(poll.answer) if poll.answer is not None else "—"
    return _page(request, "_room_prepared.html", headers=NO_STORE, poll=poll, key=key,
                 ask=ask.model_dump(exclude_none=True))  # fmt: skip


@router.post("/r/{code}/end", response_class=HTMLResponse)
async def end(code: str, request: Request, rooms: RoomsDep) -> Response:
    """The teacher ends the class (every follower is told); a student's "leave" only forgets the room here."""
    form = await _form(request)
    not_teacher = False
    try:
        check_same_origin(request)  # another site's form must neither end the class nor drop its cookies
        room = await rooms.teacher(request, code)
        with store_errors():
            await end_class(rooms, room)
        present = form.get("present") == "1"  # the projector stays in presenter mode
        target = view_url(room.page, room.query, _lang(form.get("lang")), present)
    except RoomError as exc:
        if exc.status not in (401, 403, 404) or exc.field in ("sec-fetch-site", "origin"):
            return _page(request, "room_join.html", exc.status, error=str(exc), disabled=rooms.disabled)
        target, not_teacher = "/", True  # not this room's teacher, or no such room: only forget it here
    # Not this room's teacher: forget the room here. Its teacher keeps the token (it expires with the room's
    # lifetime): it opens the class summary (/r/<code>/summary) after the end. A screen that ended it by htmx (the
    # projector's bar, the remote) stays where it is: the room's `end` event says so there.
    done = Response(status_code=204) if request.headers.get("hx-request") else RedirectResponse(target, 303)
    return _forget(done, request, token=not_teacher)


# ---- after the class: its summary, for the teacher ----------------------------------------------------------------


@router.get("/r/{code}/summary", response_class=HTMLResponse)
async def summary(code: str, request: Request, rooms: RoomsDep) -> Response:
    """The class summary for its teacher (the remote's token), during the class and for ROOM_IDLE_S after its end:
    each poll, its answers over time and participation, with the JSON and CSV to download."""
    lang = language(request)
    t = translator(lang)
    try:
        found = await teachers_summary(rooms, request, code)
    except RoomError as exc:
        if exc.field == "store":
            return _refused_page(request, rooms, exc)
        status = exc.status if exc.status in (404, 429, 503) else 403
        message = t("room.summary_only_teacher") if status == 403 else _refusal(t, exc)
        return _page(request, "room_join.html", status, exc.headers if status != 403 else {}, error=message,
                     disabled=rooms.disabled)  # fmt: skip
    api = f"/api/v1/rooms/{found['code']}/summary"
    return _page(request, "room_summary.html", headers=NO_STORE, summary=found, json_href=api, csv_href=api + ".csv",
                 remote_url=f"/r/{found['code']}/teach?lang={lang}",
                 keep_hours=f"{rooms.settings.room_idle_s / 3600:.3g}",
                 lang_urls={c: f"/r/{found['code']}/summary?lang={c}" for c in LANGS})  # fmt: skip
