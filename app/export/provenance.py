"""The provenance block on every JSON answer that needs one, added in one place: an ASGI middleware (main.py adds
it outside the response cache, so a cached answer carries it too) that appends `"provenance": {…}` to

- every page's JSON twin (`/lens.json?…`, or a page asked for `Accept: application/json`), and
- every /api/v1 answer about a real model (a preset this server loaded from files: SmolLM2, MiniLM…),

built by `cite.block`, the one function /api/v1/cite and the figures' metadata use too. The model is the one the
answer itself names: its first `"preset"` key, which every answer of the lab writes near its start (the View's
`preset` or `summary.preset`, an API answer's `preset` or `spec.preset`), so the route's own defaults apply; else
(a window of numbers) its query's `preset`. The answer is not parsed: the block is spliced before its closing
brace. The weights' sha256 is computed once per file (cite.sha256), off the event loop.
"""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import parse_qsl

import anyio
import orjson
from starlette.types import Message, Receive, Scope, Send

from ..limits import HttpMiddleware
from . import cite

# Answers that are not about one model's numbers: the exports (which carry the block their own way), the rooms,
# training runs, documentation.
SKIP = ("/api/v1/figure", "/api/v1/code", "/api/v1/cite", "/api/v1/notebook", "/api/v1/rooms", "/api/v1/train",
        "/static/", "/vendor/", "/openapi.json", "/metrics")  # fmt: skip
SNIFF = 8192  # the bytes of an answer searched for its model's name
PRESET = re.compile(rb'"preset":"((?:[^"\\]|\\.){1,64})"')  # a JSON string cannot hold a bare quote: a real key
SEED = re.compile(rb'"seed":(\d{1,20})[,}]')


def model_of(head: bytes) -> tuple[str | None, int | None]:
    """The preset (and a random preset's seed) an answer names first, read from its first bytes."""
    found = PRESET.search(head)
    seed = SEED.search(head)
    preset = orjson.loads(b'"' + found.group(1) + b'"') if found else None
    return preset, int(seed.group(1)) if seed else None


def splice(body: bytes, block: dict[str, object]) -> bytes | None:
    """`body` (a JSON object) with `"provenance": block` as its last key; None if it is no object, or has one."""
    body = body.rstrip()
    if not (body.startswith(b"{") and body.endswith(b"}")) or b'"provenance":' in body:
        return None
    stamp = b'"provenance":' + orjson.dumps(block)
    return body[:-1] + (stamp if body[1:-1].strip() == b"" else b"," + stamp) + b"}"


def permalink(scope: Scope, public_url: str | None) -> str:
    """The address of what was asked: the server's PUBLIC_URL (or the request's host) and the path and query."""
    if public_url:
        base = public_url.rstrip("/")
    else:
        host = dict(scope["headers"]).get(b"host", b"").decode("latin-1")
        base = f"{scope.get('scheme', 'http')}://{host}" if host else ""
    query = scope.get("query_string", b"").decode("latin-1")
    return base + scope["path"] + (f"?{query}" if query else "")


class Provenance(HttpMiddleware):
    """ASGI middleware: stamps the provenance block on the JSON answers named above (200s only; a refusal, an
    HTML page, a PNG or an archive passes through untouched, as does everything else)."""

    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope["path"]
        api = path.startswith("/api/")
        if scope["method"] not in ("GET", "POST", "HEAD") or path.startswith(SKIP):
            await self.app(scope, receive, send)
            return
        if not api:
            accept = dict(scope["headers"]).get(b"accept", b"")
            hx = dict(scope["headers"]).get(b"hx-request")
            if b"application/json" not in accept or b"text/html" in accept or hx:
                await self.app(scope, receive, send)
                return
        started: Message | None = None
        chunks: list[bytes] = []

        async def stamped(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                headers = dict(message.get("headers", []))
                if message["status"] == 200 and headers.get(b"content-type", b"").startswith(b"application/json"):
                    started = message  # held until the body is whole
                    return
                await send(message)
                return
            if started is None or message["type"] != "http.response.body":
                await send(message)
                return
            chunks.append(message.get("body", b""))
            if message.get("more_body"):
                return
            body = b"".join(chunks)
            body = await self.stamp(scope, body, api) or body
            kept = [(k, v) for k, v in started.get("headers", []) if k != b"content-length"]
            await send({**started, "headers": [*kept, (b"content-length", str(len(body)).encode())]})
            await send({"type": "http.response.body", "body": body})

        await self.app(scope, receive, stamped)

    async def stamp(self, scope: Scope, body: bytes, api: bool) -> bytes | None:
        app = scope["app"]
        preset, seed = model_of(body[:SNIFF])
        if preset is None:  # an answer that names no model (a window of numbers): the one its query asked for
            asked = dict(parse_qsl(scope.get("query_string", b"").decode("latin-1"))).get("preset")
            preset = asked
        model = app.state.lab.models.get(preset) if preset else None
        if api and model is None:  # an API answer about a random preset or no model: as it was
            return None
        # A page's twin names the page; an API answer none (its GET and its POST give the same answer, block and all).
        link = None if api else permalink(scope, app.state.settings.public_url)
        path = Path(model.path) if model is not None else None
        if path is not None:  # the weights' sha256: read once per file, off the event loop
            block = await anyio.to_thread.run_sync(lambda: cite.block(preset, path, link))
        else:
            block = cite.block(preset, None, link, seed)
        return splice(body, block)
