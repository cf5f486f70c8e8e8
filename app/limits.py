"""Limits and headers every response gets: a request body size limit, enforced before FastAPI reads (and parses)
the body, and the security headers."""

from __future__ import annotations

import contextlib
import logging
import socket
import struct
from urllib.parse import unquote

import anyio
import orjson
from starlette.types import ASGIApp, Message, Receive, Scope, Send

LOG = logging.getLogger("attention_lab")
Headers = tuple[tuple[bytes, bytes], ...]


class HttpMiddleware:
    """ASGI middleware that acts on HTTP requests (`http`); anything else (the lifespan) passes through untouched."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            await self.http(scope, receive, send)
        else:
            await self.app(scope, receive, send)

    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.app(scope, receive, send)


def problem_body(loc: list[str], msg: str, kind: str) -> bytes:
    """A 4xx body in the API's problem shape, for answers sent before the app (and FastAPI's handlers) run: the
    message names the last part of `loc`."""
    return orjson.dumps({"message": f"{loc[-1]}: {msg}", "detail": [{"loc": loc, "msg": msg, "type": kind}]})


async def send_problem(
    send: Send, status: int, where: str, msg: str, kind: str, field: str | None = None, extra: Headers = ()
) -> None:
    """A 4xx in the API's problem shape, sent before the app (and FastAPI's handlers) ever run."""
    body = problem_body([where, field] if field else [where], msg, kind)
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": [*headers, *extra]})
    await send({"type": "http.response.body", "body": body})


class BodyLimit(HttpMiddleware):
    """413 for a body longer than `max_bytes`, whether it declares its length or streams it."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        super().__init__(app)
        self.max_bytes = max_bytes

    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            await self._refuse(send)
            return
        seen = 0
        over = started = False

        async def counted() -> Message:
            nonlocal seen, over
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    over = True
                    raise _TooLong
            return message

        async def tracked(message: Message) -> None:
            # The app may turn the interrupted read into its own error (FastAPI: 400); answer 413 instead.
            nonlocal started
            if over:
                if message["type"] == "http.response.start" and not started:
                    started = True
                    await self._refuse(send)
                return
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, counted, tracked)
        except _TooLong:
            if not started:
                await self._refuse(send)

    async def _refuse(self, send: Send) -> None:
        mib = self.max_bytes / 2**20
        await send_problem(send, 413, "body", f"over the {mib:g} MiB limit", "too_large")


class _TooLong(Exception):
    pass


class QueryLimit(HttpMiddleware):
    """414 for a URL query longer than `max_bytes`, with a message that names it (uvicorn's own refusal, past
    ~64 KB, is a bare 400); 422 for a single-valued parameter given twice (`seed=1&seed=2` would otherwise
    silently mean the last one), naming it. Parameters in `repeatable` are lists and may repeat."""

    def __init__(self, app: ASGIApp, max_bytes: int, repeatable: frozenset[str] = frozenset()) -> None:
        super().__init__(app)
        self.max_bytes = max_bytes
        self.repeatable = repeatable

    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        if len(scope.get("query_string", b"")) > self.max_bytes:
            kib = self.max_bytes / 1024
            msg = f"over the {kib:g} KiB limit; send large inputs as a POST body"
            await send_problem(send, 414, "query", msg, "too_long")
            return
        if scope.get("query_string") and scope["path"].startswith("/api/"):
            seen: set[str] = set()
            for name in query_names(scope["query_string"].decode("latin-1")):
                if name in seen and name not in self.repeatable:
                    shown = name if len(name) <= 40 and name.isprintable() else ascii(name[:40])
                    await send_problem(send, 422, "query", "is given more than once", "duplicate", shown)
                    return
                seen.add(name)
        await self.app(scope, receive, send)


def query_names(query: str) -> list[str]:
    """The parameter names of a query, each as `parse_qsl(query, keep_blank_values=True)` names it, without parsing
    (unquoting) the values: the query is parsed once, by Starlette for the route (`request.query_params`), and a
    model view's is 10 KB of token ids."""
    names = [field.partition("=")[0] for field in query.split("&") if field]
    return [unquote(name.replace("+", " ")) if "%" in name or "+" in name else name for name in names]


CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; font-src 'self'; "
    "connect-src 'self'; object-src 'none'; base-uri 'self'; form-action 'self'; frame-ancestors 'self'"
)
# Swagger UI sets inline styles from JavaScript; only /docs allows them.
CSP_DOCS = CSP.replace("style-src 'self'", "style-src 'self' 'unsafe-inline'")
# /embed exists to be framed by course pages on other sites.
CSP_EMBED = CSP.replace("frame-ancestors 'self'", "frame-ancestors *")


class SecurityHeaders(HttpMiddleware):
    """A Content-Security-Policy with no inline script anywhere, nosniff and a strict referrer policy."""

    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope["path"]
        csp = (CSP_DOCS if path == "/docs" else CSP_EMBED if path == "/embed" else CSP).encode()

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                headers += [(b"content-security-policy", csp), (b"x-content-type-options", b"nosniff")]
                if not any(k.lower() == b"referrer-policy" for k, _ in headers):  # a page may ask for a stricter one
                    headers.append((b"referrer-policy", b"same-origin"))
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, with_headers)


class SendTimeout(HttpMiddleware):
    """Drop a client that stops reading: each chunk of an answer must be taken within `seconds`, or the connection
    is closed and the answer's memory freed (a client that never reads would otherwise hold it for good).

    Closed means aborted, at once and with a reset: a transport's ordinary close waits to flush what the client never
    reads, so the socket stayed open. Under uvicorn the send callable is its request cycle's, whose `transport` it
    aborts; the answer then ends as after any disconnect (a stream's generator is cancelled), with one log line
    instead of a traceback. Under another server the timeout is raised as before."""

    def __init__(self, app: ASGIApp, seconds: float) -> None:
        super().__init__(app)
        self.seconds = seconds

    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        dropped = False

        async def timed(message: Message) -> None:
            nonlocal dropped
            if dropped:
                return  # the connection is gone; the app learns it from receive() (http.disconnect)
            try:
                with anyio.fail_after(self.seconds):
                    await send(message)
            except TimeoutError:
                transport = getattr(getattr(send, "__self__", None), "transport", None)
                if transport is None or not hasattr(transport, "abort"):
                    raise
                dropped = True
                client = scope.get("client") or ("?", 0)
                LOG.info("dropped %s:%s: it took nothing of its answer for %g s", *client, self.seconds)
                sock = transport.get_extra_info("socket")
                with contextlib.suppress(Exception):  # a reset, not a FIN queued behind unread data
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                transport.abort()

        await self.app(scope, receive, timed)


class Head(HttpMiddleware):
    """HEAD wherever GET is: the request runs as its GET and the answer leaves without a body (its status and
    headers, Content-Length included, are GET's). An event stream is answered with its headers and ended at once."""

    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["method"] != "HEAD":
            await self.app(scope, receive, send)
            return
        ended = False

        async def headless(message: Message) -> None:
            nonlocal ended
            if ended:
                return
            if message["type"] == "http.response.start":
                await send(message)
                types = [v for k, v in message.get("headers", []) if k.lower() == b"content-type"]
                if types and types[0].startswith(b"text/event-stream"):  # a stream never ends by itself
                    ended = True
                    await send({"type": "http.response.body", "body": b"", "more_body": False})
            elif message["type"] == "http.response.body" and not message.get("more_body", False):
                ended = True
                await send({"type": "http.response.body", "body": b"", "more_body": False})

        await self.app(dict(scope, method="GET"), receive, headless)
