"""Server-sent events through sse-starlette: `stream` answers an async iterator of `event`s as `text/event-stream`,
with a keep-alive comment every `keepalive_s`, the stream cancelled when the client leaves (or the server shuts
down), and a HEAD answered with the headers alone. Refusals (404, 503) are raised before `stream` is returned.

(FastAPI 0.165's own `EventSourceResponse` was tried first: its ping interval is fixed at 15 s, and a client that
leaves while an event is pending logs "Exception in ASGI application", fastapi/fastapi discussion #15725.)"""

from __future__ import annotations

from collections.abc import AsyncIterable, Mapping
from typing import Any

import orjson
from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.background import BackgroundTask

__all__ = ["RESPONSES", "EventSourceResponse", "ServerSentEvent", "event", "stream"]

# A route's documented answer: `@router.get(path, response_class=EventSourceResponse, responses=RESPONSES | …)`.
RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {"content": {"text/event-stream": {}}, "description": "server-sent events"}
}


def event(kind: str | None, data: Any, event_id: int | str | None = None) -> ServerSentEvent:
    """One event: `kind` (the browser's `addEventListener` name; None: `message`), its `data` (a str as it is, e.g.
    an HTML fragment for htmx's SSE extension, one `data:` line per line; anything else as JSON, by orjson as the
    API's answers) and its id, which a reconnecting browser sends back as `Last-Event-ID`."""
    raw = data if isinstance(data, str) else orjson.dumps(data).decode()
    return ServerSentEvent(raw, event=kind, id=None if event_id is None else str(event_id), sep="\n")


def keepalive() -> ServerSentEvent:
    return ServerSentEvent(comment="keep-alive", sep="\n")


def stream(
    events: AsyncIterable[ServerSentEvent],
    keepalive_s: float,
    headers: Mapping[str, str] | None = None,
    background: BackgroundTask | None = None,
) -> EventSourceResponse:
    """The events as a response: `Cache-Control: no-store` and `X-Accel-Buffering: no` (no proxy buffers it), a
    `: keep-alive` comment every `keepalive_s` (which also finds a client that left), lines ended by LF; then
    `background` (also when the stream never started)."""
    return EventSourceResponse(events, headers=headers, ping=keepalive_s, ping_message_factory=keepalive, sep="\n",
                               background=background)  # fmt: skip
