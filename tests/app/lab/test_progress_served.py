"""/api/v1/progress for what a page waits for (#42): a count with its unit, in the page's language, and every page
request known to it while it is served, so a page's polls are answered (never the 404s the browser's console showed
for the pages whose computation counts nothing)."""

from __future__ import annotations

import threading

import httpx
from fastapi.responses import RedirectResponse
from starlette.responses import StreamingResponse

from app.lab import progress_key
from app.lab.progress import ANSWERED_S
from tests.conftest import make_client
from tests.wait import wait_until


def poll(client, key: str, lang: str = "en") -> httpx.Response:  # type: ignore[no-untyped-def]
    return client.get("/api/v1/progress", params={"key": key, "lang": lang})


def test_a_count_says_what_it_counts_in_the_pages_language() -> None:
    with make_client() as client:
        lab = client.app.state.lab
        layers, tokens = progress_key("/heads", "text=a+b"), progress_key("/generate", "text=once")
        with lab.tracking(layers) as by_layer, lab.tracking(tokens, "tokens") as by_token:
            assert by_layer is not None and by_token is not None
            by_layer(21, 31)
            by_token(3, 20)
            en, zh = poll(client, layers).json(), poll(client, layers, "zh").json()
            assert (en["done"], en["total"], en["unit"]) == (21, 31, "layers")
            assert en["text"] == f"21 / 31 layers · {en['seconds']} s"
            assert zh["text"] == f"21 / 31 层 · {zh['seconds']} 秒"
            en, zh = poll(client, tokens).json(), poll(client, tokens, "zh").json()
            assert en["unit"] == "tokens" and en["text"] == f"3 / 20 tokens generated · {en['seconds']} s"
            assert zh["text"] == f"已生成 3 / 20 个词元 · {zh['seconds']} 秒"
        assert poll(client, layers).status_code == 404  # done: nothing in progress
        assert poll(client, layers, "fr").status_code == 422


def test_a_page_is_known_to_a_poll_from_its_arrival_until_its_answer() -> None:
    """A page whose computation counts nothing (or has not begun): 0 of 0 and the seconds it has waited while it is
    served, `answered` for a while once its answer has come (a poll that crossed the answer on the wire is told so,
    never a 404 the browser logs), then a 404; a redirect's page keeps waiting (for the page it is sent to); an event
    stream is no answer a page waits for."""
    gate = threading.Event()
    with make_client() as client:

        @client.app.get("/_slow")  # type: ignore[attr-defined]
        def slow(x: str) -> str:
            gate.wait(30)
            return x

        @client.app.get("/_moved")  # type: ignore[attr-defined]
        def moved() -> RedirectResponse:
            return RedirectResponse("/_slow?x=there", 303)

        @client.app.get("/_stream")  # type: ignore[attr-defined]
        def stream() -> StreamingResponse:
            return StreamingResponse(iter([b"data: 1\n\n"]), media_type="text/event-stream")

        key = progress_key("/_slow", "x=%E7%8C%AB+1")  # as the server names it, however the page wrote the query
        answer: list[httpx.Response] = []
        asked = threading.Thread(target=lambda: answer.append(client.get("/_slow?x=猫 1")))
        asked.start()
        r = wait_until(lambda: (r := poll(client, key)).status_code != 404 and r, what="the page known to a poll")
        assert r.status_code == 200, r.text
        p = r.json()
        assert (p["done"], p["total"]) == (0, 0) and p["text"] == f"working · {p['seconds']} s"
        assert poll(client, key, "zh").json()["text"].startswith("计算中 · ")
        gate.set()
        asked.join(30)
        assert answer[0].json() == "猫 1"
        r = poll(client, key)  # the answer has come: nothing to wait for, and said so
        assert r.status_code == 200 and r.json()["answered"] is True, r.text
        assert (r.json()["text"], poll(client, key, "zh").json()["text"]) == ("answered", "已完成")
        lab = client.app.state.lab
        aged = [(t - ANSWERED_S - 1, tracked) for t, tracked in lab.answered]  # answered long ago…
        lab.answered.clear()
        lab.answered.extend(aged)
        assert poll(client, key).status_code == 404  # …forgotten

        assert client.get("/_moved", follow_redirects=False).status_code == 303
        assert poll(client, progress_key("/_moved", "")).status_code == 200  # the page waits on, for where it goes
        assert client.get("/_stream").status_code == 200
        assert poll(client, progress_key("/_stream", "")).status_code == 404
        assert poll(client, progress_key("/api/v1/progress", "")).status_code == 404  # a poll is not a page


def test_a_request_that_names_its_key_is_known_by_it() -> None:
    """An htmx request names its own key (X-Progress-Key, static/lab.js), and a page polls by it while it is served;
    a header that is no key (not 16 hex digits) is ignored: the request is known by its URL's key."""
    gate = threading.Event()
    with make_client() as client:

        @client.app.get("/_named")  # type: ignore[attr-defined]
        def named(x: str) -> str:
            gate.wait(30)
            return x

        for header, key in (("0123456789abcdef", "0123456789abcdef"), ("NOT-A-KEY", progress_key("/_named", "x=1"))):
            gate.clear()
            asked = threading.Thread(target=lambda h=header: client.get("/_named?x=1", headers={"X-Progress-Key": h}))
            asked.start()
            wait_until(lambda k=key: poll(client, k).status_code == 200, what=f"{header}'s request known by its key")
            assert poll(client, key).json()["answered"] is False
            gate.set()
            asked.join(30)
            assert poll(client, key).json()["answered"] is True
