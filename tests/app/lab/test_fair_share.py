"""Fair shares of heavy work (#36): one client address holds at most MAX_HEAVY_PER_CLIENT heavy requests at once
(1 by default), refused at once with a 429 that names the setting; a URL already being computed (for anyone) is
free, so a class on one address opening its teacher's view is never refused; another address is not affected."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from app.lab.admission import HeavyWork
from app.web.cache import refuse_heavy
from tests.conftest import run_async
from tests.wait import until


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


def served(inner: Any, heavy: HeavyWork) -> Any:
    """`inner` behind `heavy`'s shares, as the page kernel's layer serves a heavy path (app/web/cache.py `Kernel`)."""

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["path"] in heavy.paths:
            await heavy.serve(inner, scope, receive, send, refuse_heavy)
        else:
            await inner(scope, receive, send)

    return app


def client(app: Any, address: str) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app, client=(address, 1234)), base_url="http://lab")


def test_one_address_gets_one_heavy_computation_at_a_time_and_a_shared_url_is_free() -> None:
    async def main() -> dict[str, Any]:
        inner, release, seen = blocking_app()
        heavy = HeavyWork(frozenset({"/api/v1/predict", "/api/v1/model_view"}), per_client=1)
        app = served(inner, heavy)
        async with client(app, "10.0.0.1") as one, client(app, "10.0.0.2") as other:
            first = asyncio.create_task(one.get("/api/v1/predict?text=a"))
            await until(lambda: seen, what="the first request reached the app")
            refused = await one.get("/api/v1/model_view?text=b")  # a second computation from the same address
            same = asyncio.create_task(one.get("/api/v1/predict?text=a"))  # the URL in flight: it waits, free
            elsewhere = asyncio.create_task(other.get("/api/v1/model_view?text=b"))  # another address
            light = asyncio.create_task(one.get("/healthz"))  # not heavy: never counted
            await until(lambda: len(seen) == 4, what="4 requests reached the app")
            release.set()
            done = [await t for t in (first, same, elsewhere, light)]
            after = await one.get("/api/v1/model_view?text=b")  # the address's computation ended: its turn again
            return {"refused": refused, "done": done, "after": after, "left": (dict(heavy.running), dict(heavy.urls))}

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
        app = served(inner, HeavyWork(frozenset({"/api/v1/predict"}), per_client=0))
        async with client(app, "10.0.0.1") as one:
            tasks = [asyncio.create_task(one.get(f"/api/v1/predict?text={i}")) for i in range(3)]
            await until(lambda: len(seen) == 3, what="3 requests reached the app")
            release.set()
            return [(await t).status_code for t in tasks]

    assert run_async(main) == [200, 200, 200]


def test_a_class_on_one_address_shares_its_teachers_view_in_every_language_and_on_the_projector() -> None:
    """A room's screens open the same view each in its own language, the projector in presenter mode: one
    computation in flight, so none of them is refused (#32: a class run from the teacher's phone on /predict)."""

    async def main() -> dict[str, int]:
        inner, release, seen = blocking_app()
        app = served(inner, HeavyWork(frozenset({"/predict"}), per_client=1))
        async with client(app, "10.0.0.1") as nat:
            first = asyncio.create_task(nat.get("/predict?text=a&lesson=x&lang=en"))
            await until(lambda: seen, what="the first request reached the app")
            others = {
                "zh": asyncio.create_task(nat.get("/predict?text=a&lesson=x&lang=zh")),
                "projector": asyncio.create_task(nat.get("/predict?lesson=x&text=a&lang=en&present=1")),
            }
            refused = await nat.get("/predict?text=b&lesson=x&lang=zh")  # another view: the cap holds
            await until(lambda: len(seen) == 3, what="3 requests reached the app")
            release.set()
            done = {k: (await t).status_code for k, t in others.items()}
            return done | {"first": (await first).status_code, "other view": refused.status_code}

    assert run_async(main) == {"first": 200, "zh": 200, "projector": 200, "other view": 429}


def test_with_redis_the_share_holds_across_web_workers() -> None:
    """--redis: two web workers (two HeavyWork over one Redis) count one address's heavy requests together; a URL in
    flight on one is free on the other; every share is given back (nothing left in Redis)."""
    import pytest

    from app.lab.admission import SharedShares
    from app.lab.jobs import LoopRedis
    from tests.redis_server import available, redis_server

    if not available():
        pytest.skip("redis-server is not installed")

    async def main(url: str) -> dict[str, Any]:
        inner, release, seen = blocking_app()
        paths = frozenset({"/api/v1/predict", "/api/v1/model_view"})
        a = HeavyWork(paths, per_client=1, shared=SharedShares(LoopRedis(url)))
        b = HeavyWork(paths, per_client=1, shared=SharedShares(LoopRedis(url)))
        on = served(inner, a), served(inner, b)
        async with (
            client(on[0], "10.0.0.1") as on_a,
            client(on[1], "10.0.0.1") as on_b,
            client(on[1], "10.0.0.2") as other,
        ):
            first = asyncio.create_task(on_a.get("/api/v1/predict?text=a"))
            while not seen:
                await asyncio.sleep(0.01)
            refused = await on_b.get("/api/v1/model_view?text=b")  # the same address on the other worker
            same = asyncio.create_task(on_b.get("/api/v1/predict?lang=zh&text=a"))  # the URL in flight: free
            elsewhere = asyncio.create_task(other.get("/api/v1/model_view?text=b"))
            while len(seen) < 3:
                await asyncio.sleep(0.01)
            release.set()
            done = [(await t).status_code for t in (first, same, elsewhere)]
            after = await on_b.get("/api/v1/model_view?text=b")
            assert a.shared is not None
            left = await a.shared.client().keys("lab:heavy:*")
            return {"refused": refused, "done": done, "after": after.status_code, "left": left,
                    "local": (a.running, b.running)}  # fmt: skip

    with redis_server() as url:
        out = run_async(lambda: main(url))
    assert out["refused"].status_code == 429 and out["refused"].headers["retry-after"] == "5"
    assert "MAX_HEAVY_PER_CLIENT" in out["refused"].json()["message"]
    assert out["done"] == [200, 200, 200] and out["after"] == 200
    assert out["left"] == [] and out["local"] == ({}, {})
