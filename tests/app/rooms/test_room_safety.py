"""A class that nobody can break (#24): another site's pages cannot start, end, step or answer anything with a
teacher's cookies; guessing codes, filling the server with rooms and stuffing a poll from one address are bounded
and refused with the reason; every page a class can be on renders for the room's check; a reconnect gets exactly
the events it missed, and a Last-Event-ID the room never reached gets the room as it is."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import httpx
import pytest
from fastapi.testclient import TestClient

from app.rooms.store import Answer, MemoryStore, Poll
from app.web.share import FOLLOWABLE
from tests.app.rooms.test_rooms import SETTINGS, create, put
from tests.conftest import make_client
from tests.rooms_client import run, stream
from tests.servers import served

BROWSER = {"Sec-Fetch-Site": "same-origin", "Origin": "http://testserver"}  # the lab's own page, as Chrome sends it
CROSS_SITE = {"Sec-Fetch-Site": "cross-site", "Origin": "https://evil.example"}
SAME_SITE = {"Sec-Fetch-Site": "same-site", "Origin": "http://testserver:8081"}  # another port of the same host


def start(client: TestClient, query: str = "stage=scores", page: str = "/", **headers: str) -> str:
    r = client.post("/r", data={"page": page, "query": query, "lang": "en"}, headers=BROWSER | headers,
                    follow_redirects=False)  # fmt: skip
    assert r.status_code == 303, r.text[:400]
    code = client.cookies.get("lab_room")
    assert code
    return code


def set_cookies(r: httpx.Response) -> list[str]:
    return r.headers.get_list("set-cookie")


# ---- (8) no 500s --------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    with make_client() as c:
        yield c


def test_every_page_a_class_can_be_on_renders_for_htmx(client: TestClient) -> None:
    """A room checks every shared view by rendering it as htmx: /sinks raised KeyError 'stage' there (a 500 on
    every step of a class on /sinks)."""
    for path in ("/", "/block", "/decode", "/lessons", "/lessons/row-one", "/sinks", "/tiles", "/demos", "/params"):
        assert FOLLOWABLE.fullmatch(path)
        r = client.get(path, headers={"HX-Request": "true"})
        assert r.status_code == 200, (path, r.status_code, r.text[:300])


def test_a_class_on_the_sinks_page_starts_and_steps() -> None:
    teacher = make_client()
    made = teacher.post("/api/v1/rooms", json={"page": "/sinks", "query": ""})
    assert made.status_code == 201, made.text
    auth = {"Authorization": f"Bearer {made.json()['teacher_token']}"}
    stepped = teacher.put(f"/api/v1/rooms/{made.json()['code']}/state", json={"page": "/sinks", "query": "head=1"},
                          headers=auth)  # fmt: skip
    assert stepped.status_code == 200 and stepped.json() == {"version": 2}


def test_room_forms_with_many_fields_are_read_never_a_500() -> None:
    teacher = make_client()
    extra = {f"x{i}": "1" for i in range(12)}  # 15 fields: parse_qsl(max_num_fields=8) raised ValueError
    r = teacher.post("/r", data={"page": "/", "query": "stage=mask", "lang": "en"} | extra, follow_redirects=False)
    assert r.status_code == 303, r.text[:300]
    code = teacher.cookies["lab_room"]
    ended = teacher.post(f"/r/{code}/end", data={"lang": "en"} | extra, follow_redirects=False)
    assert ended.status_code == 303
    assert teacher.get(f"/api/v1/rooms/{code}").status_code == 404


# ---- (2) only the lab's own pages change a room -------------------------------------------------------------------


def test_another_sites_form_cannot_end_the_class_or_drop_its_cookies() -> None:
    teacher = make_client()
    code = start(teacher)
    for headers, field in ((CROSS_SITE, "sec-fetch-site"), (SAME_SITE, "sec-fetch-site"),
                           ({"Origin": "https://evil.example"}, "origin"),
                           ({"Origin": "http://testserver:8081"}, "origin"), ({"Origin": "null"}, "origin")):  # fmt: skip
        r = teacher.post(f"/r/{code}/end", data={"lang": "en"}, headers=headers, follow_redirects=False)
        assert r.status_code == 403 and field in r.text, (headers, r.status_code)
        assert set_cookies(r) == [], headers  # the teacher's cookies stay
        assert teacher.get(f"/api/v1/rooms/{code}").status_code == 200  # and so does the class
    ended = teacher.post(f"/r/{code}/end", data={"lang": "en"}, headers=BROWSER, follow_redirects=False)
    assert ended.status_code == 303 and teacher.get(f"/api/v1/rooms/{code}").status_code == 404


def test_ending_a_class_forgets_the_teachers_token_only_for_someone_else() -> None:
    """The teacher keeps the token after the end (for the class summary), even when the class's view is the bare
    lab ("/", no query, no language: the redirect's target is "/"); a browser that is not the room's teacher
    forgets the room and any token it holds."""
    teacher = make_client()
    code = start(teacher, query="")
    ended = teacher.post(f"/r/{code}/end", data={}, headers=BROWSER, follow_redirects=False)
    assert ended.status_code == 303 and ended.headers["location"] == "/"
    forgotten = [c.partition("=")[0] for c in set_cookies(ended)]
    assert forgotten == ["lab_room"] and teacher.cookies.get("lab_teacher", "").startswith(code + ".")
    stranger = make_client()
    other = start(stranger)
    r = stranger.post(f"/r/{code}/end", data={}, headers=BROWSER, follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/"
    assert sorted(c.partition("=")[0] for c in set_cookies(r)) == ["lab_room", "lab_teacher"]
    assert stranger.get(f"/api/v1/rooms/{other}").status_code == 200  # only forgotten here: its own class goes on


def test_another_sites_form_cannot_replace_the_teachers_room() -> None:
    teacher = make_client()
    code = start(teacher)
    secret = teacher.cookies["lab_teacher"]
    for headers in (CROSS_SITE, SAME_SITE, {"Origin": "https://evil.example"}):
        r = teacher.post("/r", data={"page": "/", "query": ""}, headers=headers, follow_redirects=False)
        assert r.status_code == 403 and set_cookies(r) == [], headers
    assert teacher.cookies["lab_teacher"] == secret and teacher.cookies["lab_room"] == code
    # A browser with no class gets none from another site either.
    other = TestClient(teacher.app)
    r = other.post("/r", data={"page": "/", "query": ""}, headers=CROSS_SITE, follow_redirects=False)
    assert r.status_code == 403 and "lab_teacher" not in other.cookies


def test_the_rooms_api_takes_changes_only_from_its_own_pages_and_as_json() -> None:
    teacher = make_client()
    code = start(teacher)
    api = f"/api/v1/rooms/{code}"
    poll = teacher.post(f"{api}/polls", json={"prompt": "?", "kind": "choice", "options": ["a", "b"]}, headers=BROWSER)
    assert poll.status_code == 201, poll.text
    pid = poll.json()["id"]
    changes = [("PUT", f"{api}/state", {"query": "stage=mask"}), ("POST", f"{api}/polls/{pid}/answers",
               {"student": "s", "answer": "a"}), ("POST", f"{api}/polls/{pid}/close", None),
               ("POST", f"{api}/polls/lesson", {"lesson": "row-one", "step": 1}), ("DELETE", api, None),
               ("POST", "/api/v1/rooms", {})]  # fmt: skip
    for method, url, body in changes:
        for headers, field in ((CROSS_SITE, "sec-fetch-site"), (SAME_SITE, "sec-fetch-site"),
                               ({"Origin": "http://testserver:8081"}, "origin")):  # fmt: skip
            r = teacher.request(method, url, json=body, headers=headers)
            assert r.status_code == 403, (method, url, headers, r.text)
            assert r.json()["detail"][0]["loc"] == ["header", field] and field in r.json()["message"]
        # A text/plain form or a no-cors fetch (no preflight) of a browser that sends neither header.
        r = teacher.request(method, url, content=b'{"query": "stage=mask"}', headers={"Content-Type": "text/plain"})
        assert r.status_code == 415 and r.json()["detail"][0]["loc"] == ["header", "content-type"], (method, url)
    form = teacher.post(f"{api}/polls/{pid}/close", data={"x": "1"})  # an empty-looking form, with the cookie
    assert form.status_code == 415
    assert teacher.get(f"{api}/polls/{pid}", headers=BROWSER).json()["status"] == "open"  # nothing changed
    assert teacher.get(api).json()["version"] == 2  # the poll's opening only
    # The lab's own pages (Sec-Fetch-Site: same-origin, JSON) and scripts (no browser headers) change it.
    assert teacher.put(f"{api}/state", json={"query": "stage=mask"}, headers=BROWSER).status_code == 200
    assert teacher.post(f"{api}/polls/{pid}/close", headers=BROWSER).status_code == 200
    assert teacher.post(f"{api}/polls/{pid}/close", headers={"Sec-Fetch-Site": "none"}).status_code == 200
    assert teacher.delete(api).status_code == 204


def test_a_link_to_another_class_asks_a_teacher_before_it_follows() -> None:
    teacher = make_client()
    mine = start(teacher, "stage=softmax")
    theirs = start(TestClient(teacher.app), "stage=mask")  # the same server, another teacher's browser
    # Another site links the teacher's projector to a class of its own: the browser asks, and changes nothing.
    asked = teacher.get(f"/r/{theirs}?lang=en", headers={"Sec-Fetch-Site": "cross-site"}, follow_redirects=False)
    assert asked.status_code == 200 and "data-room-switch" in asked.text and set_cookies(asked) == []
    assert f'action="/r/{theirs}/join"' in asked.text and mine in asked.text
    assert teacher.cookies["lab_room"] == mine
    refused = teacher.post(f"/r/{theirs}/join", data={"lang": "en"}, headers=CROSS_SITE, follow_redirects=False)
    assert refused.status_code == 403 and set_cookies(refused) == []
    joined = teacher.post(f"/r/{theirs}/join", data={"lang": "en"}, headers=BROWSER, follow_redirects=False)
    assert joined.status_code == 303 and joined.headers["location"] == "/?stage=mask&lang=en#follow"
    assert teacher.cookies["lab_room"] == theirs
    assert teacher.get(f"/api/v1/rooms/{mine}").status_code == 200  # the teacher's own class runs on
    # Its own code, and a browser that teaches nothing, join at once as before.
    assert teacher.get(f"/r/{mine}", follow_redirects=False).status_code == 303
    student = TestClient(teacher.app)
    assert student.get(f"/r/{theirs}", follow_redirects=False).headers["location"] == "/?stage=mask#follow"


def test_cookies_are_secure_over_https_only() -> None:
    plain = make_client()
    start(plain)
    secure = TestClient(plain.app, base_url="https://testserver")
    r = secure.post("/r", data={"page": "/", "query": ""}, headers={"Sec-Fetch-Site": "same-origin"},
                    follow_redirects=False)  # fmt: skip
    cookies = set_cookies(r)
    assert r.status_code == 303 and len(cookies) == 2 and all("Secure" in c for c in cookies), cookies
    code = secure.cookies["lab_room"]
    joined = secure.get(f"/r/{code}", follow_redirects=False)
    assert set_cookies(joined) and all("Secure" in c for c in set_cookies(joined)), set_cookies(joined)
    ended = secure.post(f"/r/{code}/end", data={}, follow_redirects=False)
    assert ended.status_code == 303 and all("Secure" in c for c in set_cookies(ended))
    http = plain.post("/r/ZZZZZZ/end", data={}, follow_redirects=False)
    assert not any("Secure" in c for c in set_cookies(http))


# ---- (5) one address cannot stuff a poll; open counts are the teacher's ---------------------------------------------


def test_one_address_answers_a_poll_for_a_bounded_number_of_students() -> None:
    teacher = make_client(room_answers_per_address_per_poll=5)
    code = start(teacher)
    made = teacher.post(f"/api/v1/rooms/{code}/polls", json={"prompt": "?", "kind": "choice", "options": ["a", "b"]})
    url = f"/api/v1/rooms/{code}/polls/{made.json()['id']}/answers"
    for i in range(5):
        assert teacher.post(url, json={"student": f"s{i}", "answer": "a"}).status_code == 200
    stuffed = teacher.post(url, json={"student": "s5", "answer": "b"})
    assert stuffed.status_code == 429 and "ROOM_ANSWERS_PER_ADDRESS_PER_POLL" in stuffed.json()["message"]
    assert stuffed.headers["retry-after"]
    assert teacher.post(url, json={"student": "s0", "answer": "b"}).status_code == 200  # changing one's mind is fine
    counts = teacher.get(url.removesuffix("/answers")).json()
    assert counts["total"] == 5 and counts["counts"] == {"a": 4, "b": 1}


def test_one_address_answers_at_a_bounded_rate() -> None:
    teacher = make_client(room_answers_per_address_per_minute=4)
    code = start(teacher)
    made = teacher.post(f"/api/v1/rooms/{code}/polls", json={"prompt": "?", "kind": "choice", "options": ["a", "b"]})
    url = f"/api/v1/rooms/{code}/polls/{made.json()['id']}/answers"
    got = [teacher.post(url, json={"student": f"s{i}", "answer": "a"}).status_code for i in range(6)]
    assert got == [200] * 4 + [429] * 2  # every student different: the address is what is counted


def test_open_poll_counts_are_the_teachers_alone() -> None:
    teacher = make_client()
    code = start(teacher)
    student = TestClient(teacher.app)
    poll = teacher.post(f"/api/v1/rooms/{code}/polls", json={"prompt": "?", "kind": "choice",
                                                            "options": ["a", "b"], "answer": "b"})  # fmt: skip
    url = f"/api/v1/rooms/{code}/polls/{poll.json()['id']}"
    for i in range(3):
        assert student.post(f"{url}/answers", json={"student": f"s{i}", "answer": "a"}).status_code == 200
    seen = student.get(url).json()
    assert seen["status"] == "open" and seen["counts"] == {} and seen["total"] is None and seen["answer"] is None
    live = teacher.get(url).json()  # the teacher's cookie
    assert live["counts"] == {"a": 3} and live["total"] == 3 and live["answer"] == "b"
    made = student.post("/api/v1/rooms", json={})  # a script's room: its teacher is the Bearer token
    bearer = {"Authorization": f"Bearer {made.json()['teacher_token']}"}
    api = f"/api/v1/rooms/{made.json()['code']}/polls"
    pid = student.post(api, json={"prompt": "?", "kind": "choice", "options": ["a", "b"]}, headers=bearer).json()["id"]
    assert student.post(f"{api}/{pid}/answers", json={"student": "s", "answer": 1}).status_code == 200
    assert student.get(f"{api}/{pid}").json()["counts"] == {}
    assert student.get(f"{api}/{pid}", headers=bearer).json()["counts"] == {"b": 1}
    assert teacher.post(f"{url}/close").status_code == 200
    shown = student.get(url).json()
    assert shown["counts"] == {"a": 3} and shown["total"] == 3 and shown["answer"] == "b"


@pytest.mark.parametrize("kind", ["memory", "redis"])
def test_the_stores_cap_students_per_address_and_count_rooms_per_address(kind: str,
                                                                         request: pytest.FixtureRequest) -> None:  # fmt: skip
    async def main() -> None:
        if kind == "memory":
            store = MemoryStore(idle_s=60)
        else:
            from app.rooms.redis_store import RedisStore

            store = RedisStore(request.getfixturevalue("redis_url"), idle_s=60)
        try:
            assert await store.create("CAPABC", "h", "/", "", "10.0.0.1")
            assert await store.create("CAPDEF", "h", "/", "", "10.0.0.1")
            assert await store.create("CAPGHJ", "h", "/", "", "10.0.0.2")
            assert await store.rooms_of("10.0.0.1") == 2 and await store.rooms_of("10.0.0.2") == 1
            await store.delete("CAPDEF")
            assert await store.rooms_of("10.0.0.1") == 1
            await store.open_poll("CAPABC", Poll("p1", "?", "choice", ("a", "b")))
            assert await store.answer("CAPABC", "p1", Answer("s1", "a", None), "10.0.0.1", 2)
            assert await store.answer("CAPABC", "p1", Answer("s2", "a", None), "10.0.0.1", 2)
            assert not await store.answer("CAPABC", "p1", Answer("s3", "a", None), "10.0.0.1", 2)
            assert await store.answer("CAPABC", "p1", Answer("s1", "b", None), "10.0.0.1", 2)  # a change
            assert await store.answer("CAPABC", "p1", Answer("s3", "a", None), "10.0.0.9", 2)  # another address
            assert await store.counts("CAPABC", "p1") == {"a": 2, "b": 1}
        finally:
            for code in ("CAPABC", "CAPGHJ"):
                await store.delete(code)
            await store.close()

    run(main())


# ---- (6)/(7) guessing codes and filling the server ----------------------------------------------------------------


def test_guessing_codes_is_one_slow_budget_for_every_code_endpoint() -> None:
    server = make_client(room_unknown_codes_per_minute=4)
    code = start(server)
    student = TestClient(server.app)
    assert student.get("/api/v1/rooms/ZZZZZZ").status_code == 404
    assert student.get("/r/ZZZZZY/bar").status_code == 404
    assert student.get("/api/v1/rooms/ZZZZZX/events").status_code == 404
    assert student.get(f"/api/v1/rooms/{code}/polls/nosuch").status_code == 404  # a poll id that is not there
    assert student.get(f"/api/v1/rooms/{code}").status_code == 429  # spent: even a code that exists says nothing
    for url in (f"/api/v1/rooms/{code}", f"/r/{code}/bar", "/api/v1/rooms/ZZZZZW/events",
                f"/api/v1/rooms/{code}/polls/x"):  # fmt: skip
        r = student.get(url)
        assert r.status_code == 429 and int(r.headers["retry-after"]) >= 1, (url, r.status_code)
    page = student.get(f"/r/{code}", follow_redirects=False)
    assert page.status_code == 429 and "data-room-error" in page.text


def test_open_rooms_per_address_are_capped_and_said_so() -> None:
    server = make_client(room_max_per_address=2)
    first = server.post("/api/v1/rooms", json={})
    assert server.post("/api/v1/rooms", json={}).status_code == 201
    third = server.post("/api/v1/rooms", json={})
    assert third.status_code == 429 and "ROOM_MAX_PER_ADDRESS" in third.json()["message"]
    assert int(third.headers["retry-after"]) >= 1
    page = TestClient(server.app).post("/r", data={"page": "/", "query": ""}, follow_redirects=False)
    assert page.status_code == 429 and "ROOM_MAX_PER_ADDRESS" in page.text and "data-rooms-off" not in page.text
    auth = {"Authorization": f"Bearer {first.json()['teacher_token']}"}
    assert server.delete(f"/api/v1/rooms/{first.json()['code']}", headers=auth).status_code == 204
    assert server.post("/api/v1/rooms", json={}).status_code == 201  # an ended room no longer counts


def test_a_full_server_says_it_is_full_not_that_rooms_are_off() -> None:
    server = make_client(max_rooms=1)
    assert server.post("/api/v1/rooms", json={}).status_code == 201
    page = TestClient(server.app).post("/r", data={"page": "/", "query": ""}, follow_redirects=False)
    assert page.status_code == 503 and "1 open rooms" in page.text
    assert "data-rooms-off" not in page.text and "several worker" not in page.text


def test_forwarded_headers_are_believed_only_from_the_proxies_named() -> None:
    spoof = {"X-Forwarded-For": "10.1.2.3"}
    with served(SETTINGS | {"ROOM_MAX_PER_ADDRESS": "1"}) as (base, _):
        assert httpx.post(f"{base}/api/v1/rooms", json={}).status_code == 201
        again = httpx.post(f"{base}/api/v1/rooms", json={}, headers=spoof)
        assert again.status_code == 429, "X-Forwarded-For picked the address the limit counts"
    with served(SETTINGS | {"ROOM_MAX_PER_ADDRESS": "1"}, "--forwarded-allow-ips", "127.0.0.1") as (base, _):
        assert httpx.post(f"{base}/api/v1/rooms", json={}).status_code == 201
        assert httpx.post(f"{base}/api/v1/rooms", json={}, headers=spoof).status_code == 201  # a trusted proxy's


# ---- (11) the page refuses what the API refuses; (12) replay against snapshot ---------------------------------------


def test_start_a_class_on_a_view_the_lab_refuses_is_a_422_on_the_page() -> None:
    teacher = make_client()
    r = teacher.post("/r", data={"page": "/", "query": "stage=99", "lang": "en"}, headers=BROWSER,
                     follow_redirects=False)  # fmt: skip
    assert r.status_code == 422 and "stage" in r.text and "data-room-error" in r.text
    assert "lab_teacher" not in teacher.cookies and "lab_room" not in teacher.cookies


def test_a_refused_start_or_join_is_said_in_the_forms_language() -> None:
    """The "Start a class" button and the switch page's join post their page's language in the form (`lang`), not in
    the URL: a refusal was an English page (its words the API's: "query: the lab refuses this view (Problem with
    “stage”…", "rooms: this address has 1 open rooms…") on a Chinese page. Now the page is in the form's language,
    the refusal said from the catalogue; the API keeps its English, byte for byte."""
    from bs4 import BeautifulSoup

    def said(r: httpx.Response) -> tuple[str, str]:
        page = BeautifulSoup(r.text, "html.parser")
        return page.html["lang"], page.select_one("[data-room-error]").get_text(" ", strip=True)

    teacher = make_client(room_max_per_address=1)
    r = teacher.post("/r", data={"page": "/", "query": "stage=99", "lang": "zh"}, headers=BROWSER,
                     follow_redirects=False)  # fmt: skip
    lang, words = said(r)
    assert r.status_code == 422 and lang.startswith("zh"), words
    assert words.startswith("“query” 有误：实验室拒绝了这个视图（") and "未知的阶段 '99'" in words, words
    r = teacher.post("/r", data={"page": "/nope", "query": "", "lang": "zh"}, headers=BROWSER, follow_redirects=False)
    assert said(r) == (
        "zh-CN",
        "“page” 有误：必须是实验室的页面：/、/block、/decode、/lessons[/slug]、/model、/tiles 等",
    )
    assert teacher.post("/api/v1/rooms", json={}).status_code == 201  # the address's one room
    other = TestClient(teacher.app)  # a second browser on the same address
    r = other.post("/r", data={"page": "/", "query": "", "lang": "zh"}, headers=BROWSER, follow_redirects=False)
    assert r.status_code == 429 and said(r)[1] == (
        "“rooms” 有误：此地址已开着 1 个课堂，达到上限（ROOM_MAX_PER_ADDRESS）；请结束其中一个，或等它过期"
    ), said(r)
    r = other.post("/r/ZZZZZZ/join", data={"lang": "zh"}, headers=BROWSER, follow_redirects=False)
    assert r.status_code == 404 and said(r)[0].startswith("zh") and "没有使用这个代码的课堂" in said(r)[1], said(r)
    # the API's words, unchanged
    api = other.post("/api/v1/rooms", json={"page": "/nope"})
    assert (
        api.json()["detail"][0]["msg"] == "must be a lab page: /, /block, /decode, /lessons[/slug], /model, /tiles, …"
    )
    api = other.post("/api/v1/rooms", json={})
    assert api.json()["detail"][0]["msg"] == (
        "this address has 1 open rooms, its limit (ROOM_MAX_PER_ADDRESS); end one, or wait until one expires"
    ), api.text


def test_a_last_event_id_the_room_never_reached_gets_the_room_as_it_is(lab: str) -> None:
    code, auth = create(lab, "stage=scores")
    assert put(lab, code, auth, "stage=mask").json() == {"version": 2}

    async def main() -> None:
        async with httpx.AsyncClient(timeout=30) as client, stream(client, lab, code, last_id="1000") as s:
            m = await asyncio.wait_for(s.next(), 60)  # before: nothing, and every later event skipped too
            assert (m.event, m.id, m.data["query"]) == ("state", "2", "stage=mask")
            assert (await client.put(f"{lab}/api/v1/rooms/{code}/state", json={"query": "stage=softmax"},
                                     headers=auth)).json() == {"version": 3}  # fmt: skip
            m = await asyncio.wait_for(s.next(), 60)
            assert (m.event, m.id, m.data["query"]) == ("state", "3", "stage=softmax")

    run(main())


def test_a_reconnect_replays_each_missed_event_not_a_snapshot(lab: str) -> None:
    """Each missed event arrives as itself, with its own id, in order: a snapshot would send only the current
    state (id 5) and the open poll without an id. Fails if the replay takes events from `>=` the last id."""
    code, auth = create(lab, "stage=scores")
    assert put(lab, code, auth, "stage=mask").json() == {"version": 2}
    assert put(lab, code, auth, "stage=softmax").json() == {"version": 3}
    r = httpx.post(f"{lab}/api/v1/rooms/{code}/polls", headers=auth,
                   json={"prompt": "Row 2?", "kind": "choice", "options": ["a", "b"]})  # fmt: skip
    assert r.json()["version"] == 4
    assert put(lab, code, auth, "stage=weighted_sum").json() == {"version": 5}

    async def main() -> None:
        async with httpx.AsyncClient(timeout=30) as client:
            async with stream(client, lab, code, last_id="2") as s:  # saw version 2, the logged "stage=mask"
                missed = [("state", "3", "stage=softmax"), ("poll", "4", None), ("state", "5", "stage=weighted_sum")]
                for want in missed:
                    m = await asyncio.wait_for(s.next(), 60)
                    got = (m.event, m.id, m.data.get("query"))
                    assert got == want, f"{got}: the room as it is now (a snapshot), not the missed event {want}"
                    assert m.event != "poll" or m.data["prompt"] == "Row 2?"
                assert put(lab, code, auth, "stage=mask&seed=1").json() == {"version": 6}
                m = await asyncio.wait_for(s.next(), 60)
                assert (m.event, m.id) == ("state", "6")  # then live, nothing repeated
            async with stream(client, lab, code, last_id="4") as s:
                got = [await asyncio.wait_for(s.next(), 60) for _ in range(2)]
                assert [(m.event, m.id) for m in got] == [("state", "5"), ("state", "6")]

    run(main())


@pytest.mark.parametrize("body", [{"query": 5}, {"query": "a b"}, {"query": ["stage=1"]}])
def test_a_bad_view_query_is_refused_naming_query(client: TestClient, body: dict[str, object]) -> None:
    # the error cleaner took the field `query` for the location and named the field "request" instead
    r = client.post("/api/v1/rooms", json=body)
    assert r.status_code == 422
    assert r.json()["detail"][0]["loc"] == ["body", "query"] and r.json()["message"].startswith("query: "), r.text
