"""What a class reaches together is computed once (#25): a missing answer is computed for the first request and the
others wait for it (`single_flight`); a large trace's heat maps are drawn ahead once its page is shown (`DrawAhead`),
byte for byte what the page's <img> would get; the page's 16 × 16 window is written without Jinja's per-cell loop;
a view's links percent-encode each field once. Counters and polled states, no clocks."""

from __future__ import annotations

import asyncio
import re
from types import SimpleNamespace
from typing import Any
from urllib.parse import urlencode

import pytest
from fastapi import Response
from hypothesis import given
from hypothesis import strategies as st

from app.web.page import single_flight
from app.web.state import PageQuery
from tests.conftest import make_client, run_async
from tests.wait import until, wait_until

LARGE = {"preset": "gpt2-small", "tokens": " ".join(f"w{i}" for i in range(40)), "mask": "causal", "stage": "4"}


def _request() -> Any:
    return SimpleNamespace(app=SimpleNamespace(state=SimpleNamespace(flights={})))


def test_concurrent_misses_of_one_key_compute_once() -> None:
    async def main() -> None:
        request, store, calls, looked = _request(), {}, [], []
        release = asyncio.Event()

        def hit() -> Response | None:
            looked.append(1)
            return store.get("k")

        async def compute() -> Response:
            calls.append(1)
            await release.wait()
            store["k"] = Response(b"drawn")
            return store["k"]

        key = ("/x", "q=1")
        runs = [asyncio.create_task(single_flight(request, key, hit, compute)) for _ in range(6)]
        # The first one has started computing; the other five looked in the store, found nothing and wait on it.
        await until(lambda: calls and len(looked) == 6, what="one computing, five waiting")
        assert len(calls) == 1 and key in request.app.state.flights
        release.set()
        answers = await asyncio.gather(*runs)
        assert len(calls) == 1 and {a.body for a in answers} == {b"drawn"}
        assert request.app.state.flights == {}  # nothing left behind

    run_async(main)


def test_a_waiter_computes_itself_when_the_first_request_stored_nothing() -> None:
    async def main() -> None:
        request, calls, looked = _request(), [], []
        release = asyncio.Event()

        def nothing() -> None:  # the store never has it
            looked.append(1)

        async def refused() -> Response:  # e.g. a 503 or a cancelled request: nothing stored for the others
            calls.append("first")
            await release.wait()
            raise RuntimeError("the first request failed")

        async def own() -> Response:
            calls.append("second")
            return Response(b"own answer")

        key = ("/x", "")
        first = asyncio.create_task(single_flight(request, key, nothing, refused))
        await until(lambda: calls, what="the first request computes")
        second = asyncio.create_task(single_flight(request, key, nothing, own))
        await until(lambda: len(looked) == 2, what="the second request waits for the first")
        release.set()
        with pytest.raises(RuntimeError):
            await first
        assert (await second).body == b"own answer" and calls == ["first", "second"]

    run_async(main)


def _wait_drawn(client: Any) -> dict[str, Any]:
    """/healthz once nothing is being drawn ahead (generous: a state is polled, the bound only stops a hang)."""
    health: dict[str, Any] = wait_until(
        lambda: (h := client.get("/healthz").json())["drawing_ahead"] == 0 and h,
        300,
        "every heat map drawn ahead",
        0.05,
    )
    return health


def test_a_large_trace_page_draws_every_stage_and_head_ahead_byte_for_byte() -> None:
    with make_client() as client:
        page = client.get("/?" + urlencode(LARGE))
        assert page.status_code == 200
        assert _wait_drawn(client)["drawing_ahead"] == 0
        drawn = client.app.state.lab.ahead.drawn  # type: ignore[attr-defined]
        assert drawn == 5 * 12 * 2  # every stage: each head's thumbnail and its zoomed view
        # Another stage's page asks for heat maps nobody has requested yet: all are already in the store.
        other = client.get("/?" + urlencode(LARGE | {"stage": "2", "head": "5"}), headers={"HX-Request": "true"})
        images = [
            src.replace("&amp;", "&") for src in re.findall(r'<img[^>]+src="([^"]+heatmap\.png[^"]+)"', other.text)
        ]
        assert len(images) == 13
        hits = [client.get(src) for src in images]
        assert all(r.status_code == 200 and r.headers.get("x-cache") == "hit" for r in hits)
    # The same URLs from a server that draws nothing ahead: the same bytes.
    with make_client(draw_ahead_traces=0) as fresh:
        fresh.get("/?" + urlencode(LARGE))
        assert fresh.get("/healthz").json()["drawing_ahead"] == 0
        assert fresh.app.state.lab.ahead.drawn == 0  # type: ignore[attr-defined]
        for src, hit in zip(images, hits, strict=True):
            r = fresh.get(src)
            assert r.headers.get("x-cache") != "hit" and r.content == hit.content
            assert r.headers["cache-control"] == hit.headers["cache-control"]


def test_the_json_face_and_small_traces_draw_nothing_ahead() -> None:
    with make_client() as client:
        face = client.get("/index.json?" + urlencode(LARGE))
        assert face.status_code == 200 and face.headers["content-type"].startswith("application/json")
        assert client.get("/?mask=causal&stage=4").status_code == 200  # the toy: numbers in cells, no heat maps
        assert _wait_drawn(client)["drawing_ahead"] == 0
        assert client.app.state.lab.ahead.drawn == 0  # type: ignore[attr-defined]


def test_the_window_table_marks_the_chosen_cell_and_escapes_its_labels() -> None:
    with make_client() as client:
        page = client.get("/?" + urlencode({"tokens": "<b> & \"x\" 猫 坐", "mask": "causal", "stage": "2",
                                            "cell": "scaled.0.1.0"}))  # fmt: skip
        assert page.status_code == 200
        assert "<b>" not in page.text and "&lt;b&gt;" in page.text
        cells = re.findall(r'<td data-row="(\d+)" data-col="(\d+)" data-value="([^"]*)" class="([^"]*)"', page.text)
        chosen = [(r, c) for r, c, _, cls in cells if "selected" in cls.split()]
        assert chosen == [("1", "0")]
        values = {(r, c): v for r, c, v, _ in cells}
        answer = client.get("/api/v1/attention?" + urlencode({"tokens": '<b> & "x" 猫 坐', "mask": "causal"})).json()
        scaled = next(s for s in answer["stages"] if s["key"] == "scores")["tensors"]["scaled"][0]
        for i, row in enumerate(scaled):
            for j, v in enumerate(row):
                assert float(values[(str(i), str(j))]) == v  # the same float32 text as the JSON


class Headed(PageQuery):
    head: str = ""


@given(st.dictionaries(st.sampled_from(["tokens", "mask", "seed"]), st.text(max_size=30), max_size=3),
       st.text(max_size=20))  # fmt: skip
def test_links_encode_as_urlencode_does(params: dict[str, str], head: str) -> None:
    state = Headed.of(params, "/", ("tokens", "mask", "seed"))
    for _ in range(2):  # the second time from the state's memo
        p = dict(state.params) | ({"head": head} if head else {})
        ordered = [(k, p[k]) for k in ("tokens", "mask", "seed", "head") if k in p]
        assert state.url(head=head or None) == ("/?" + urlencode(ordered) if ordered else "/")
        assert state.api_query(stage="softmax") == urlencode(
            [*((k, state.params[k]) for k in ("tokens", "mask", "seed") if k in state.params), ("stage", "softmax")]
        )
