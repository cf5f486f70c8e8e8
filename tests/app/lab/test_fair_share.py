"""Fair shares of heavy work (#36): one client address holds at most MAX_HEAVY_PER_CLIENT heavy requests at once
(1 by default), refused at once with a 429 that names the setting; a URL already being computed (for anyone) is
free, so a class on one address opening its teacher's view is never refused; another address is not affected."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from app.lab.admission import HeavyWork
from app.web.page import refuse_heavy
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
    """`inner` behind `heavy`'s shares, as the page kernel's layer serves a heavy path (app/web/page.py `Kernel`)."""

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


def test_a_page_load_refused_is_a_page_in_its_language_and_the_api_a_json_problem() -> None:
    """A browser's page load (`Accept: text/html`) met by the cap is answered with a page in the page's language (the
    lab's header, why, and the same page to try again), still a 429 with Retry-After; the API, a `.json` twin's
    `Accept: application/json` and htmx's requests keep the JSON problem."""

    async def main() -> dict[str, httpx.Response]:
        inner, release, seen = blocking_app()
        app = served(inner, HeavyWork(frozenset({"/predict", "/api/v1/predict"}), per_client=1))
        html = {"accept": "text/html,application/xhtml+xml,*/*;q=0.8", "accept-language": "en"}
        async with client(app, "10.0.0.1") as one:
            first = asyncio.create_task(one.get("/predict?text=a"))
            await until(lambda: seen, what="the first request reached the app")
            out = {
                "zh": await one.get("/predict?text=b&lang=zh", headers=html),
                "en": await one.get("/predict?text=b", headers=html),
                "api": await one.get("/api/v1/predict?text=b", headers=html),
                "json": await one.get("/predict?text=b", headers={"accept": "application/json"}),
                "htmx": await one.get("/predict?text=b", headers=html | {"hx-request": "true"}),
            }
            release.set()
            await first
            return out

    out = run_async(main)
    zh, en = out["zh"], out["en"]
    for page in (zh, en):
        assert page.status_code == 429 and page.headers["retry-after"] == "5"
        assert page.headers["content-type"].startswith("text/html")
        assert 'data-view="refused"' in page.text and 'href="/predict?text=b' in page.text
        assert 'href="/predict?text=b&amp;lang=zh"' in page.text  # the same page in the other language
    assert '<html lang="zh-CN">' in zh.text and "同时进行的计算太多" in zh.text and "5 秒" in zh.text
    assert (
        '<html lang="en">' in en.text
        and "Too many computations at once" in en.text
        and "1 heavy computation " in en.text
    )
    for name in ("api", "json", "htmx"):
        r = out[name]
        assert r.status_code == 429 and r.headers["retry-after"] == "5", name
        assert r.headers["content-type"] == "application/json", name
        assert "MAX_HEAVY_PER_CLIENT" in r.json()["message"] and r.json()["detail"][0]["type"] == "too_many_heavy"
