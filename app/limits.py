"""The lab's outer ASGI layer (`Edge`): what every HTTP request gets before the app and every answer on its way out.

In, in this order: a HEAD runs as its GET; a query over MAX_QUERY_KB is a 414, a single-valued API parameter given
twice a 422, a body over BODY_LIMIT_MB a 413 (declared or streamed, before FastAPI reads and parses it), each naming
the field; the client's `receive` is kept for a computation to see it leave (`CLIENT`, app/lab/cancel.py). Out: the
security headers, HEAD's body dropped, a client that stops reading dropped after SEND_TIMEOUT_S, and the request
counted, timed and logged (app/metrics.py). One layer, outside Starlette's ServerErrorMiddleware, so a 500 gets the
headers and is counted too."""

from __future__ import annotations

import contextlib
import logging
import socket
import struct
import time
from dataclasses import KW_ONLY, dataclass
from typing import TYPE_CHECKING
from urllib.parse import unquote

import anyio
import orjson
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .lab.cancel import CLIENT

if TYPE_CHECKING:
    from .lab import Lab
    from .metrics import Metrics

LOG = logging.getLogger("attention_lab")
Headers = tuple[tuple[bytes, bytes], ...]


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


class _TooLong(Exception):
    """A streamed body went past the limit (raised from the app's `receive`)."""


@dataclass
class Edge:
    """The one ASGI layer around the whole app (see the module's docstring). Each part is off when its setting is
    None: `send_timeout_s`, `max_query_bytes` (`repeatable`: the list parameters, which may repeat),
    `max_body_bytes`, `metrics` (with `lab`, whose gauges are published after each request with several workers)."""

    app: ASGIApp
    _: KW_ONLY
    send_timeout_s: float | None = None
    max_query_bytes: int | None = None
    repeatable: frozenset[str] = frozenset()
    max_body_bytes: int | None = None
    metrics: Metrics | None = None
    lab: Lab | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        head = scope["method"] == "HEAD"  # wherever GET is: runs as its GET, answered without the body
        if head:
            scope = dict(scope, method="GET")
        path = scope["path"]
        csp = (CSP_DOCS if path == "/docs" else CSP_EMBED if path == "/embed" else CSP).encode()
        status, cache, ended, dropped = 500, "", False, False

        async def out(message: Message) -> None:
            nonlocal status, cache, ended, dropped
            if ended or dropped:  # HEAD's answer is whole; or the connection is gone (the app learns it from receive)
                return
            kind = message["type"]
            if kind == "http.response.start":
                headers = list(message.get("headers", []))
                status, cache = message["status"], dict(headers).get(b"x-cache", b"").decode()
                headers += [(b"content-security-policy", csp), (b"x-content-type-options", b"nosniff")]
                if not any(k.lower() == b"referrer-policy" for k, _ in headers):  # a page may ask for a stricter one
                    headers.append((b"referrer-policy", b"same-origin"))
                message = {**message, "headers": headers}
                await timed(message)
                types = [v for k, v in headers if k.lower() == b"content-type"]
                if head and types and types[0].startswith(b"text/event-stream"):  # a stream never ends by itself
                    ended = True
                    await timed({"type": "http.response.body", "body": b"", "more_body": False})
            elif not head:
                await timed(message)
            elif kind == "http.response.body" and not message.get("more_body", False):
                ended = True
                await timed({"type": "http.response.body", "body": b"", "more_body": False})

        async def timed(message: Message) -> None:
            """Drop a client that stops reading: each chunk must be taken within `send_timeout_s`, or the connection
            is aborted at once, with a reset (an ordinary close waits to flush what the client never reads, so the
            socket stayed open), and the answer's memory freed. Under uvicorn the send callable is its request
            cycle's, whose `transport` it aborts; under another server the timeout is raised."""
            nonlocal dropped
            if self.send_timeout_s is None:
                await send(message)
                return
            try:
                with anyio.fail_after(self.send_timeout_s):
                    await send(message)
            except TimeoutError:
                transport = getattr(getattr(send, "__self__", None), "transport", None)
                if transport is None or not hasattr(transport, "abort"):
                    raise
                dropped = True
                client = scope.get("client") or ("?", 0)
                LOG.info("dropped %s:%s: it took nothing of its answer for %g s", *client, self.send_timeout_s)
                sock = transport.get_extra_info("socket")
                with contextlib.suppress(Exception):  # a reset, not a FIN queued behind unread data
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                transport.abort()

        token = CLIENT.set(receive)  # the server's own receive, for `Lab.watching` to see http.disconnect
        try:
            if (refused := self.refusal(scope)) is not None:
                await send_problem(out, *refused)
            else:
                await self.limited(scope, receive, out)
        finally:
            CLIENT.reset(token)
            if self.metrics is not None:
                self.metrics.observe(scope, status, cache, time.perf_counter() - start, self.lab)

    def refusal(self, scope: Scope) -> tuple[int, str, str, str, str | None] | None:
        """A request refused before the app reads it: (status, where, message, kind, field), or None."""
        query: bytes = scope.get("query_string", b"")
        if self.max_query_bytes is not None:
            if len(query) > self.max_query_bytes:  # uvicorn's own refusal, past ~64 KB: app/protocol.py
                kib = self.max_query_bytes / 1024
                return 414, "query", f"over the {kib:g} KiB limit; send large inputs as a POST body", "too_long", None
            if query and scope["path"].startswith("/api/"):  # `seed=1&seed=2` would silently mean the last one
                seen: set[str] = set()
                for name in query_names(query.decode("latin-1")):
                    if name in seen and name not in self.repeatable:
                        shown = name if len(name) <= 40 and name.isprintable() else ascii(name[:40])
                        return 422, "query", "is given more than once", "duplicate", shown
                    seen.add(name)
        if self.max_body_bytes is not None:
            declared = dict(scope["headers"]).get(b"content-length")
            if declared is not None and declared.isdigit() and int(declared) > self.max_body_bytes:
                return 413, "body", self._over_body(), "too_large", None
        return None

    def _over_body(self) -> str:
        return f"over the {(self.max_body_bytes or 0) / 2**20:g} MiB limit"

    async def limited(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The app, its body counted as it streams: past `max_body_bytes` the read fails and the answer is a 413,
        whatever the app made of the interrupted read (FastAPI: a 400)."""
        if self.max_body_bytes is None:
            await self.app(scope, receive, send)
            return
        limit, seen, over, started = self.max_body_bytes, 0, False, False

        async def counted() -> Message:
            nonlocal seen, over
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    over = True
                    raise _TooLong
            return message

        async def tracked(message: Message) -> None:
            nonlocal started
            if over:
                if message["type"] == "http.response.start" and not started:
                    started = True
                    await send_problem(send, 413, "body", self._over_body(), "too_large")
                return
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, counted, tracked)
        except _TooLong:
            if not started:
                await send_problem(send, 413, "body", self._over_body(), "too_large")
