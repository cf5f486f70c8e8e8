"""What the rooms' API and pages share: the store chosen at start-up, teacher tokens, rate limits, and the check that
a view the teacher shares is one the lab would render.

The teacher's token is random, shown once (the API's answer, or an HttpOnly cookie in the teacher's browser), and
stored only as its SHA-256; students never see it, and nothing a student sends can change the room's view.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Annotated
from urllib.parse import unquote, unquote_plus

from fastapi import Depends, Request
from limits import RateLimitItemPerMinute
from limits.aio.storage import MemoryStorage, RedisStorage, Storage
from limits.aio.strategies import MovingWindowRateLimiter
from redis.exceptions import RedisError
from starlette.types import ASGIApp, Message

from ..schemas import LIST_FIELDS, said
from ..settings import Settings
from ..web import lessons
from ..web.origin import foreign
from ..web.share import FOLLOWABLE, public_base
from ..web.state import show
from .store import MemoryStore, Room, Store, new_code, normal_code

# Parameters that belong to one screen, not to the view: each student keeps their own language, and only the
# projector is in presenter mode.
PERSONAL = frozenset({"lang", "present", "room"})
TEACHER_COOKIE = "lab_teacher"  # "<code>.<token>", HttpOnly
ROOM_COOKIE = "lab_room"  # the room this browser is in (the code is no secret: it is on the projector)
STUDENT_COOKIE = "lab_student"  # the random id a student's browser answers with (given by its first bar)


class RoomError(Exception):
    """A refusal with its status, the field it concerns and a message naming it; as text, "field: message"."""

    def __init__(self, status: int, field: str, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(f"{field}: {message}")
        self.status = status
        self.field = field
        self.message = message
        self.headers = headers or {}


def store_down(exc: Exception) -> RoomError:
    """The room store (Redis) failed: a 503 that says so and when to retry, never a 500; pages say "the class is
    briefly unreachable" (field `store`)."""
    return RoomError(503, "store", f"the room store is unreachable ({type(exc).__name__}); retry in a few seconds",
                     {"Retry-After": "5"})  # fmt: skip


@contextmanager
def store_errors() -> Iterator[None]:
    """A room store (Redis) that fails inside is `store_down`'s 503."""
    try:
        yield
    except RedisError as exc:
        raise store_down(exc) from exc


class RateLimit:
    """`per_minute` events per key in any minute (`limits`' moving window): counted in this process, or under
    `--redis` in Redis, so that one limit holds across every worker and machine. A storage that fails is
    `store_down`'s 503."""

    def __init__(self, storage: Storage, name: str, per_minute: int) -> None:
        self.limiter = MovingWindowRateLimiter(storage)
        self.item = RateLimitItemPerMinute(per_minute, namespace=name)

    async def wait(self, key: str) -> float:
        """0 when allowed (and counted), else the seconds until it would be."""
        with store_errors():
            return 0.0 if await self.limiter.hit(self.item, key) else await self.due(key)

    async def due(self, key: str) -> float:
        """Like `wait`, without counting: 0 while the key has an event left, else the seconds until it will."""
        with store_errors():
            if await self.limiter.test(self.item, key):
                return 0.0
            reset, _ = await self.limiter.get_window_stats(self.item, key)
        return max(reset - time.time(), 0.001)

    async def check(self, key: str, field: str, code: str) -> None:
        refuse(await self.wait(key), field, code)


def rate_storage(redis_url: str | None) -> Storage:
    """Where rate limits count: this process's memory, or the lab's Redis (`serve --redis`), as `limits` names it."""
    if not redis_url:
        return MemoryStorage()
    scheme, rest = redis_url.split("://", 1)
    uri = f"async+{'redis+unix' if scheme == 'unix' else scheme}://{rest}"
    return RedisStorage(uri, implementation="redispy", key_prefix="attention-lab:limits")


def refuse(wait: float, field: str, code: str) -> None:
    """A 429 with Retry-After when `wait` (seconds) is not 0, said by its catalogue `code` (too_many_…)."""
    if wait:
        seconds = max(1, int(wait + 0.999))
        raise RoomError(429, field, said(code, seconds=seconds), {"Retry-After": str(seconds)})


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def client_address(request: Request) -> str:
    """The peer's address; behind a proxy, the forwarded one only when `serve --forwarded-allow-ips` trusts it."""
    return request.client.host if request.client else "?"


def check_same_origin(request: Request) -> None:
    """A request that changes a room must come from the lab's own pages, or from a non-browser client, which must
    hold the teacher's token itself (app/web/origin.py)."""
    refused = foreign(request, "change a room")
    if refused is not None:
        raise RoomError(403, *refused)


def check_json(request: Request) -> None:
    """The room API's bodies are JSON: a form or a text/plain body (which any site can send without asking) is
    refused, even where the endpoint reads no body at all."""
    kind = request.headers.get("content-type")
    has_body = request.headers.get("content-length", "0") not in ("0", "") or "transfer-encoding" in request.headers
    if kind is None and not has_body:
        return
    media = (kind or "").split(";", 1)[0].strip().lower()
    if media != "application/json" and not (media.startswith("application/") and media.endswith("+json")):
        raise RoomError(415, "content-type", f"must be application/json, not {(kind or 'none')[:60]!r}")


def clean_query(raw: str, max_bytes: int) -> str:
    """The view's URL query as given, without a leading "?" and without the per-screen parameters; the rest is
    kept byte for byte. 422 for control characters, a repeated parameter or an oversized query."""
    raw = raw.removeprefix("?")
    if len(raw.encode()) > max_bytes:
        raise RoomError(422, "query", said("query_over", limit=max_bytes))
    if any(ord(c) < 0x20 or ord(c) == 0x7F or c in "# " for c in raw):
        raise RoomError(422, "query", said("query_chars"))
    kept, seen = [], set()
    for part in raw.split("&"):
        if not part:
            continue
        name = unquote_plus(part.split("=", 1)[0])
        if name in PERSONAL:
            continue
        if name in seen and name not in LIST_FIELDS:  # the same rule as the API's (limits.QueryLimit)
            raise RoomError(422, "query", said("given_twice", name=name))
        seen.add(name)
        kept.append(part)
    return "&".join(kept)


def clean_page(raw: str) -> str:
    page = raw or "/"
    if not FOLLOWABLE.fullmatch(page):
        raise RoomError(422, "page", said("lab_page"))
    if page.startswith("/lessons/") and page.removeprefix("/lessons/") not in lessons.BY_SLUG:
        raise RoomError(422, "page", said("no_lesson", slug=show(page.removeprefix("/lessons/"), 30)))
    return page


# What a view's query gets added when it is shown (check_view asks the lab for it in English; a student's page adds
# its own language): a room's query is shorter than MAX_QUERY_KB by this much, so that its view is never a 414.
SHOWN_WITH = "&lang=en"


def query_limit(settings: Settings) -> int:
    """The bytes a room's query may have (`clean_query`): the server's URL query limit, less `SHOWN_WITH`."""
    return int(settings.max_query_kb * 1024) - len(SHOWN_WITH)


async def check_view(app: ASGIApp, page: str, query: str, lang: str = "en") -> None:
    """Ask the lab itself for the view (the panel alone, in `lang`: the API's English, or the language of the page
    whose button started the class) and refuse it with the lab's own message when the lab would: exactly the rules a
    student's browser will meet. It also warms the page cache for the class."""
    shown = f"&lang={lang}"  # as long as SHOWN_WITH: every language's code has two letters
    scope = {
        "type": "http", "asgi": {"version": "3.0", "spec_version": "2.4"}, "http_version": "1.1", "method": "GET",
        "scheme": "http", "path": page, "raw_path": page.encode(), "root_path": "",
        "query_string": ((query + shown) if query else shown[1:]).encode(),
        "headers": [(b"host", b"127.0.0.1"), (b"hx-request", b"true"), (b"accept-language", b"en")],
        "client": ("127.0.0.1", 0), "server": ("127.0.0.1", 80),
    }  # fmt: skip
    status = 500
    reason = ""

    async def receive() -> Message:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Message) -> None:
        nonlocal status, reason
        if message["type"] == "http.response.start":
            status = message["status"]
            headers = dict(message.get("headers", []))
            reason = unquote(headers.get(b"x-lab-error", b"").decode("latin-1"))

    await app(scope, receive, send)
    if status == 200:
        return
    if status == 503:
        raise RoomError(503, "query", said("view_busy"), {"Retry-After": "5"})
    raise RoomError(422, "query", said("view_refused", reason=reason or f"HTTP {status}"))


class Rooms:
    """The store and the rules around it; one per app (`app.state.rooms`)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.disabled: str | None = None
        self.store: Store
        if settings.redis_url:
            from .redis_store import RedisStore

            self.store = RedisStore(settings.redis_url, settings.room_idle_s)
        else:
            self.store = MemoryStore(settings.room_idle_s)
            if settings.workers > 1:
                self.disabled = (
                    f"rooms are off: this server runs {settings.workers} workers without --redis, and a room kept in "
                    "one worker's memory would be invisible to the others; start it with --redis redis://HOST:PORT/0 "
                    "or with one worker"
                )
        rates = rate_storage(settings.redis_url)
        self.joins = RateLimit(rates, "room-joins", settings.room_joins_per_minute)
        self.answers = RateLimit(rates, "room-answers", settings.room_answers_per_minute)
        self.creates = RateLimit(rates, "room-creates", settings.room_creates_per_minute)
        self.address_answers = RateLimit(rates, "room-address-answers", settings.room_answers_per_address_per_minute)
        # One budget per address for every lookup that finds nothing (a code, a poll): guessing codes is slow.
        self.misses = RateLimit(rates, "room-misses", settings.room_unknown_codes_per_minute)
        self.started = False

    def view(self, page: str, query: str) -> tuple[str, str]:
        """The view as a room keeps it: a lab page (`clean_page`) and its query (`clean_query`, within this server's
        limit)."""
        return clean_page(page), clean_query(query, query_limit(self.settings))

    async def ready(self) -> Store:
        if self.disabled:
            raise RoomError(503, "rooms", self.disabled)
        if not self.started:
            try:
                await self.store.start()
            except Exception as exc:  # Redis unreachable: a 503 that says so, not a 500
                raise store_down(exc) from exc
            self.started = True
        return self.store

    async def create(self, page: str, query: str, address: str) -> tuple[Room, str]:
        store = await self.ready()
        with store_errors():
            if await store.count() >= self.settings.max_rooms:
                raise RoomError(503, "rooms", said("rooms_full", limit=self.settings.max_rooms), {"Retry-After": "60"})
            cap = self.settings.room_max_per_address
            if await store.rooms_of(address) >= cap:
                raise RoomError(429, "rooms", said("rooms_per_address", cap=cap), {"Retry-After": "60"})
            token = secrets.token_urlsafe(24)
            for _ in range(16):
                code = new_code()
                if await store.create(code, token_hash(token), page, query, address):
                    room = await store.get(code)
                    assert room is not None
                    return room, token
        raise RoomError(503, "rooms", said("no_room_code"))

    async def checked_code(self, raw_code: str, request: Request) -> str | None:
        """The code as stored (None when it cannot be one), once the client's address may still look codes up: every
        lookup that finds nothing counts against it (ROOM_UNKNOWN_CODES_PER_MINUTE); past it, every lookup from there
        is a 429 (found or not, so that the answers tell a guesser nothing) until the budget refills."""
        await self.ready()
        refuse(await self.misses.due(client_address(request)), "code", "too_many_lookups")
        return normal_code(raw_code)

    async def room(self, raw_code: str, request: Request) -> Room:
        """The open room with this code (`checked_code` says what a lookup that finds nothing costs)."""
        code = await self.checked_code(raw_code, request)
        with store_errors():
            room = await self.store.get(code) if code else None
        if room is None:
            await self.missed(request)
            raise RoomError(404, "code", f"no open room {raw_code[:12]!r}; check the code on the projector")
        return room

    async def missed(self, request: Request) -> None:
        """Count a lookup that found nothing under a room (a poll id) against the same budget as codes."""
        await self.misses.wait(client_address(request))

    async def teacher(self, request: Request, raw_code: str) -> Room:
        """The room, when the request carries its teacher token (Authorization: Bearer, or the teacher's cookie)."""
        room = await self.room(raw_code, request)
        if not await self.is_teacher(request, room):
            raise not_teacher(presented_token(request, room.code))
        return room

    async def is_teacher(self, request: Request, room: Room) -> bool:
        return teaches(presented_token(request, room.code), room.teachers)


def teaches(token: str | None, hashes: Iterable[str]) -> bool:
    """The token is one of the teacher tokens with these hashes: the room's own or a paired device's (every hash
    compared, in constant time each)."""
    if token is None:
        return False
    digest = token_hash(token)
    return any([hmac.compare_digest(digest, h) for h in hashes])


def not_teacher(token: str | None) -> RoomError:
    """The refusal of a request that does not hold a teacher token: a 401 without a token, a 403 with another."""
    if token is None:
        return RoomError(401, "authorization", "the teacher's token is required (Authorization: Bearer <token>)",
                         {"WWW-Authenticate": "Bearer"})  # fmt: skip
    return RoomError(403, "authorization", "this token is not the room's teacher token")


def presented_token(request: Request, code: str) -> str | None:
    auth = request.headers.get("authorization", "")
    if auth[:7].lower() == "bearer ":
        return auth[7:].strip() or None
    cookie = request.cookies.get(TEACHER_COOKIE, "")
    cookie_code, _, token = cookie.partition(".")
    return token if cookie_code == code and token else None


def get_rooms(request: Request) -> Rooms:
    rooms: Rooms = request.app.state.rooms
    return rooms


RoomsDep = Annotated[Rooms, Depends(get_rooms)]  # the app's Rooms, as a route's parameter


def join_url(request: Request, code: str) -> str:
    """The address students open: the public one (presenter mode's rule), then /r/<code>."""
    return public_base(str(request.base_url), request.app.state.settings.public_url) + "/r/" + code
