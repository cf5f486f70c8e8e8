"""The rooms' pages: start a class from any lab page, join one by its code, and the bar that follows (students) or
leads (the teacher) on every page while the browser is in a room.

The bar is fetched by static/room.js from /r/<code>/bar, so the lab's pages stay the same for everyone (and stay
in the page cache); which bar a browser gets depends on its teacher cookie. Following is rendering the teacher's
view URL: room.js fetches it and swaps the page in place, keeping the bar and the event stream.
"""

from __future__ import annotations

import re
from typing import Annotated
from urllib.parse import parse_qsl, quote

from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from ..templating import TEMPLATES
from ..web.i18n import LANGS, translator
from ..web.page import language
from ..web.share import MAX_QR_CHARS, is_loopback, qr_svg
from .service import (
    ROOM_COOKIE,
    TEACHER_COOKIE,
    RoomError,
    Rooms,
    clean_page,
    clean_query,
    client_address,
    get_rooms,
    join_url,
)
from .store import Room, normal_code

router = APIRouter(include_in_schema=False)
RoomsDep = Annotated[Rooms, Depends(get_rooms)]


def view_url(page: str, query: str, lang: str | None = None, present: bool = False) -> str:
    """The room's view for one screen: its own language, and presenter mode when that screen was in it."""
    extra = "&".join(([f"lang={lang}"] if lang else []) + (["present=1"] if present else []))
    q = "&".join(part for part in (query, extra) if part)
    return page + ("?" + q if q else "")


def _presenting(query: str) -> bool:
    return re.search(r"(?:^|&)present=1(?:&|$)", query) is not None


def _page(request: Request, template: str, status: int = 200, **ctx: object) -> Response:
    """The join page and its refusals. Not the page kernel's `serve`: that caches by URL alone, and a refusal of
    POST /r must never be answered with the cached GET /r page (nor a room's state be cached at all)."""
    lang = language(request)
    base = {"t": translator(lang), "lang": lang, "langs": LANGS, "page": "room", "json_url": None, "spec": None,
            "lang_urls": {c: f"{request.url.path}?lang={c}" for c in LANGS}}  # fmt: skip
    return TEMPLATES.TemplateResponse(request, template, base | ctx, status_code=status)


@router.get("/r", response_class=HTMLResponse)
async def join(request: Request, rooms: RoomsDep, code: str | None = None) -> Response:
    """Type the code from the projector (or scan its QR, which opens /r/<code> directly)."""
    if code is not None:
        found = normal_code(code)
        if found:
            return RedirectResponse(f"/r/{found}?lang={language(request)}", 303)
        return _page(request, "room_join.html", 404, error=translator(language(request))("room.bad_code"))
    return _page(request, "room_join.html", 503 if rooms.disabled else 200, disabled=rooms.disabled)


@router.get("/r/{code}", response_class=HTMLResponse)
async def follow(code: str, request: Request, rooms: RoomsDep) -> Response:
    """A student joins: the browser remembers the room and opens the teacher's current view, following it."""
    t = translator(language(request))
    try:
        rooms.joins.check(client_address(request), "join", "joins from this address")
        room = await rooms.room(code)
    except RoomError as exc:
        key = {404: "room.not_found", 429: "room.too_many", 503: "room.off"}.get(exc.status, "room.not_found")
        return _page(request, "room_join.html", exc.status, error=t(key), disabled=rooms.disabled)
    lang = request.query_params.get("lang")
    target = view_url(room.page, room.query, lang if lang in LANGS else None) + "#follow"
    response = RedirectResponse(target, 303)
    response.set_cookie(ROOM_COOKIE, room.code, max_age=int(rooms.settings.room_idle_s), samesite="lax")
    return response


@router.get("/r/{code}/bar", response_class=HTMLResponse)
async def bar(code: str, request: Request, rooms: RoomsDep) -> Response:
    """The room bar for this browser: the teacher's (code, QR, followers, polls) or a student's (follow / explore,
    the open poll). 404 with an empty body when the room is gone, so the page drops its bar."""
    try:
        room = await rooms.room(code)
    except RoomError:
        return Response(status_code=404)
    teacher = await rooms.is_teacher(request, room)
    lang = language(request)
    url = join_url(request, room.code)
    ctx = {"t": translator(lang), "lang": lang, "room": room, "teacher": teacher, "join_url": url,
           "qr": qr_svg(url) if teacher and len(url) <= MAX_QR_CHARS else None,
           "loopback": is_loopback(url.split("/")[2].rsplit(":", 1)[0]) if teacher else False}  # fmt: skip
    return TEMPLATES.TemplateResponse(request, "room_bar.html", ctx, headers={"Cache-Control": "no-store"})


async def _form(request: Request) -> dict[str, str]:
    raw = (await request.body()).decode("utf-8", "replace")
    return dict(parse_qsl(raw, keep_blank_values=True, max_num_fields=8))


@router.post("/r", response_class=HTMLResponse)
async def start(request: Request, rooms: RoomsDep) -> Response:
    """The teacher's "Start a class" button: a room on the current view; the teacher token goes into an HttpOnly
    cookie (never into a URL), and the teacher goes back to the same view, now with the room's bar."""
    t = translator(language(request))
    form = await _form(request)
    lang = form.get("lang") if form.get("lang") in LANGS else None
    current = await _own_room(request, rooms)
    # A class already runs in this browser: keep it (its students follow this view), never a second room.
    if current is not None:
        limit = int(rooms.settings.max_query_kb * 1024)
        try:
            page, query = clean_page(form.get("page", "/")), clean_query(form.get("query", ""), limit)
        except RoomError:
            page, query = current.page, current.query
        return RedirectResponse(view_url(page, query, lang, _presenting(form.get("query", ""))), 303)
    try:
        rooms.creates.check(client_address(request), "rooms", "rooms started from this address")
        page = clean_page(form.get("page", "/"))
        query = clean_query(form.get("query", ""), int(rooms.settings.max_query_kb * 1024))
        room, token = await rooms.create(page, query)
    except RoomError as exc:
        return _page(request, "room_join.html", exc.status, error=f"{exc.field}: {exc.message}",
                     disabled=rooms.disabled or (t("room.off") if exc.status == 503 else None))  # fmt: skip
    response = RedirectResponse(view_url(page, query, lang, _presenting(form.get("query", ""))), 303)
    response.set_cookie(TEACHER_COOKIE, quote(f"{room.code}.{token}", safe=".-_"),
                        max_age=int(rooms.settings.room_idle_s), httponly=True, samesite="strict")  # fmt: skip
    response.set_cookie(ROOM_COOKIE, room.code, max_age=int(rooms.settings.room_idle_s), samesite="lax")
    return response


async def _own_room(request: Request, rooms: Rooms) -> Room | None:
    """The open room this browser teaches (its teacher cookie), if any."""
    code = request.cookies.get(TEACHER_COOKIE, "").partition(".")[0]
    if not code:
        return None
    try:
        room = await rooms.room(code)
    except RoomError:
        return None
    return room if await rooms.is_teacher(request, room) else None


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
        status = exc.status if exc.status in (404, 503) else 403
        message = t("room.remote_only_teacher") if status == 403 else t("room.not_found")
        return _page(request, "room_join.html", status, error=message, disabled=rooms.disabled)
    url = join_url(request, room.code)
    response = _page(request, "room_teach.html", room=room, join_url=url,
                     lang_urls={c: f"/r/{room.code}/teach?lang={c}" for c in LANGS})  # fmt: skip
    response.headers["Cache-Control"] = "no-store"
    return response


@router.post("/r/{code}/end", response_class=HTMLResponse)
async def end(code: str, request: Request, rooms: RoomsDep) -> Response:
    """The teacher ends the class (every follower is told); a student's "leave" only forgets the room here."""
    form = await _form(request)
    try:
        room = await rooms.teacher(request, code)
        await rooms.store.delete(room.code)
        target = view_url(room.page, room.query, form.get("lang") if form.get("lang") in LANGS else None)
    except RoomError:
        target = "/"
    response = RedirectResponse(target, 303)
    response.delete_cookie(TEACHER_COOKIE)
    response.delete_cookie(ROOM_COOKIE)
    return response
