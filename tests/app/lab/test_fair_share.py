"""Fair shares of heavy work (#36): one client address holds at most MAX_HEAVY_PER_CLIENT heavy requests at once
(1 by default), refused at once with a 429 that names the setting; a URL already being computed (for anyone) is
free, so a class on one address opening its teacher's view is never refused; another address is not affected."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from app.lab.admission import HeavyWork
from tests.conftest import run_async


def blocking_app() -> tuple[Any, asyncio.Event, list[str]]:
    """An ASGI app whose every request waits for `release` (a heavy computation in progress)."""
    release = asyncio.Event()
    seen: list[str] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        seen.append(scope["path"])
        await release.wait()
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
        await send({"type": "http.response.body", "body": b"done"})

    return app, release, seen


def client(app: Any, address: str) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app, client=(address, 1234)), base_url="http://lab")


def test_one_address_gets_one_heavy_computation_at_a_time_and_a_shared_url_is_free() -> None:
    async def main() -> dict[str, Any]:
        inner, release, seen = blocking_app()
        app = HeavyWork(inner, frozenset({"/api/v1/predict", "/api/v1/model_view"}), per_client=1)
        async with client(app, "10.0.0.1") as one, client(app, "10.0.0.2") as other:
            first = asyncio.create_task(one.get("/api/v1/predict?text=a"))
            while not seen:
                await asyncio.sleep(0.01)
            refused = await one.get("/api/v1/model_view?text=b")  # a second computation from the same address
            same = asyncio.create_task(one.get("/api/v1/predict?text=a"))  # the URL in flight: it waits, free
            elsewhere = asyncio.create_task(other.get("/api/v1/model_view?text=b"))  # another address
            light = asyncio.create_task(one.get("/healthz"))  # not heavy: never counted
            while len(seen) < 4:
                await asyncio.sleep(0.01)
            release.set()
            done = [await t for t in (first, same, elsewhere, light)]
            after = await one.get("/api/v1/model_view?text=b")  # the address's computation ended: its turn again
            return {"refused": refused, "done": done, "after": after, "left": (dict(app.running), dict(app.urls))}

    out = run_async(main)
    refused = out["refused"]
    assert refused.status_code == 429 and refused.headers["retry-after"] == "5"
    assert "MAX_HEAVY_PER_CLIENT" in refused.json()["message"] and refused.json()["detail"][0]["loc"] == ["request"]
    assert [r.status_code for r in out["done"]] == [200, 200, 200, 200]
    assert out["after"].status_code == 200
    assert out["left"] == ({}, {})  # every count given back


def test_no_cap_when_the_setting_is_zero() -> None:
    async def main() -> list[int]:
        inner, release, seen = blocking_app()
        app = HeavyWork(inner, frozenset({"/api/v1/predict"}), per_client=0)
        async with client(app, "10.0.0.1") as one:
            tasks = [asyncio.create_task(one.get(f"/api/v1/predict?text={i}")) for i in range(3)]
            while len(seen) < 3:
                await asyncio.sleep(0.01)
            release.set()
            return [(await t).status_code for t in tasks]

    assert run_async(main) == [200, 200, 200]


@pytest.mark.xfail(
    strict=True,
    reason="#32 review: the admission key is the raw URL, so lang=/present= (personal to "
    "each screen, added by static/room.js) make a class's followers on one address look like new work",
)
def test_the_same_view_in_another_language_or_presenter_mode_is_free_too() -> None:
    """A class behind one address follows its teacher: the projector asks for the view with present=1, an English
    phone with lang=en, a Chinese phone with lang=zh (static/room.js adds both). Measured on the served app: of
    /predict?text=X&lang=en&present=1, ...&lang=en, ...&lang=zh sent together, the last two got 429 and room.js
    swapped the 429's JSON into the page (projector, students and the teacher's remote)."""

    async def main() -> list[int]:
        inner, release, seen = blocking_app()
        app = HeavyWork(inner, frozenset({"/predict"}), per_client=1)
        async with client(app, "10.0.0.1") as one:
            first = asyncio.create_task(one.get("/predict?text=a&lang=en&present=1"))  # the projector
            while not seen:
                await asyncio.sleep(0.01)
            others = [asyncio.create_task(one.get(u)) for u in ("/predict?text=a&lang=en", "/predict?text=a&lang=zh")]
            await asyncio.sleep(0.05)
            release.set()
            return [(await t).status_code for t in (first, *others)]

    assert run_async(main) == [200, 200, 200]
