"""app/web/sse.py, the event streams' one helper: events framed as the spec's lines (JSON by orjson, text as it
is, one `data:` line per line), a keep-alive comment while nothing happens, HEAD answered with headers alone."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import orjson
from fastapi import FastAPI
from fastapi.testclient import TestClient

from app.web.sse import RESPONSES, EventSourceResponse, ServerSentEvent, event, stream


def app_of(quiet_s: float) -> FastAPI:
    app = FastAPI()

    async def events() -> AsyncIterator[ServerSentEvent]:
        yield event("state", {"step": 1, "text": "猫"}, 7)
        yield event(None, "<p>one</p>\n<p>two</p>")
        await asyncio.sleep(quiet_s)  # a quiet stream: the keep-alive comes
        yield event("end", {"status": "done"})

    @app.get("/events", response_class=EventSourceResponse, responses=RESPONSES)
    async def follow() -> EventSourceResponse:
        return stream(events(), keepalive_s=0.05, headers={"X-Extra": "1"})

    app.add_api_route("/events", follow, methods=["HEAD"], include_in_schema=False)  # the lab's Head middleware's

    return app


def blocks(text: str) -> list[list[str]]:
    return [block.split("\n") for block in text.split("\n\n") if block]


def test_events_are_framed_as_lines_with_a_keep_alive_while_quiet() -> None:
    with TestClient(app_of(quiet_s=0.5)) as client, client.stream("GET", "/events") as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        assert r.headers["cache-control"] == "no-store" and r.headers["x-accel-buffering"] == "no"
        assert r.headers["x-extra"] == "1"
        got = blocks(r.read().decode())
    assert got[0][:2] == ["id: 7", "event: state"] and orjson.loads(got[0][2].removeprefix("data: ")) == {
        "step": 1, "text": "猫"}  # fmt: skip
    assert got[1] == ["data: <p>one</p>", "data: <p>two</p>"]
    assert [": keep-alive"] in got[2:-1]
    assert got[-1] == ["event: end", 'data: {"status":"done"}']


def test_head_answers_the_headers_alone() -> None:
    with TestClient(app_of(quiet_s=30)) as client:
        r = client.head("/events")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream") and r.content == b""


def test_the_stream_is_documented_as_an_event_stream() -> None:
    with TestClient(app_of(quiet_s=0)) as client:
        answers = client.get("/openapi.json").json()["paths"]["/events"]["get"]["responses"]
    assert "text/event-stream" in answers["200"]["content"]
