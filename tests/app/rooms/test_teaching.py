"""The first class, as the server sees it: presenter mode kept by every link, the hints switch, the short address
on the projector, prepared lesson polls whose key only the teacher's devices see, the teacher's remote, starting a
class twice, and codes read off a wall."""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

import pytest
from bs4 import BeautifulSoup
from fastapi.testclient import TestClient

from app.rooms.store import normal_code
from app.web import lessons
from tests.conftest import make_client


@pytest.fixture(scope="module")
def lab() -> TestClient:
    return make_client()


def soup(client: TestClient, url: str) -> BeautifulSoup:
    r = client.get(url)
    assert r.status_code == 200, r.text[:400]
    return BeautifulSoup(r.text, "html.parser")


def query(href: str) -> dict[str, list[str]]:
    return parse_qs(urlsplit(href).query)


def test_presenter_mode_is_switched_by_a_full_page_load_and_kept_by_every_link(lab: TestClient) -> None:
    page = soup(lab, "/?stage=4&lesson=five-stages&step=4&lang=en")
    toggle = page.select_one("a[data-toggle=present]")
    assert toggle is not None and toggle["hx-boost"] == "false"  # the whole layout changes, not the panel
    assert query(toggle["href"])["present"] == ["1"]
    shown = soup(lab, toggle["href"])
    assert "present" in shown.body["class"]
    links = [a["href"] for a in shown.select("#stage a[href^='/?']") if "data-toggle" not in a.attrs]
    assert links, "the stage has links"
    for href in links:
        assert query(href).get("present") == ["1"], href
    nxt = shown.select_one("a[data-lesson-step=next]")
    assert query(nxt["href"])["present"] == ["1"] and query(nxt["href"])["lesson_step"] == ["5"]
    leave = shown.select_one("a[data-toggle=present]")
    assert "present" not in query(leave["href"]) and leave["hx-boost"] == "false"


def test_hints_off_hides_what_to_notice_and_the_lessons_answer_and_is_carried_by_the_lesson(lab: TestClient) -> None:
    on = soup(lab, "/?stage=4&mask=causal&lesson=row-one&step=1&lang=en")
    assert on.select_one(".explain .notice") is not None and on.select_one(".lesson-panel details.answer")
    toggle = on.select_one("a[data-toggle=hints]")
    assert toggle["aria-pressed"] == "true" and query(toggle["href"])["hints"] == ["off"]
    off = soup(lab, toggle["href"])
    assert off.select_one(".explain .notice") is None
    assert off.select_one(".lesson-panel details.answer") is None
    assert off.select_one(".lesson-panel [data-hints-off]") is not None
    assert "1.00: the first token" not in off.get_text()  # the answer of experiment ③ is not on the wall
    assert off.select_one("a[data-toggle=hints]")["aria-pressed"] == "false"
    assert query(off.select_one("a[data-lesson-step=next]")["href"])["hints"] == ["off"]
    zh = soup(lab, "/?stage=4&hints=off&lang=zh")
    assert zh.select_one("a[data-toggle=hints]").get_text() == "提示：隐藏"


def test_the_projector_prints_a_short_address_under_the_qr_code(lab: TestClient) -> None:
    page = soup(lab, "/?stage=4&present=1&cell=weights.0.2.1&lang=en")
    code = page.select_one("aside.qr code[data-share-url]")
    assert code is not None
    assert "?" not in code.get_text() and len(code.get_text()) < 40  # host:port, not a 20-line dump
    assert "stage=4" in code["data-share-url"] and "present" not in code["data-share-url"]


@pytest.mark.parametrize("typed", ["yx9e8z", "YX9 E8Z", " yx9-e8z ", "Y X 9 E 8 Z"])
def test_a_code_is_read_as_typed_off_the_wall(typed: str) -> None:
    assert normal_code(typed) == "YX9E8Z"


def test_bad_codes_stay_bad() -> None:
    assert normal_code("YX9E8") is None and normal_code("YX9E8ZZ") is None and normal_code("YX0E8Z") is None


def start(client: TestClient, view: str = "stage=4&mask=causal&lesson=row-one&step=1") -> str:
    r = client.post("/r", data={"page": "/", "query": view + "&present=1", "lang": "en"}, follow_redirects=False)
    assert r.status_code == 303, r.text[:300]
    assert query(r.headers["location"])["present"] == ["1"]  # the projector stays in presenter mode
    code = client.cookies.get("lab_room")
    assert code and normal_code(code) == code
    return code


def test_starting_a_class_twice_keeps_the_first_room() -> None:
    teacher = make_client()
    code = start(teacher)
    again = teacher.post("/r", data={"page": "/", "query": "stage=2", "lang": "en"}, follow_redirects=False)
    assert again.status_code == 303 and teacher.cookies.get("lab_room") == code
    assert query(again.headers["location"])["stage"] == ["2"]
    assert teacher.get(f"/api/v1/rooms/{code}").status_code == 200
    joined = TestClient(teacher.app).get(f"/r?code={code[:3]}+{code[3:]}", follow_redirects=False)
    assert joined.status_code == 303 and joined.headers["location"].endswith(f"/r/{code}?lang=en")


def test_a_lessons_prepared_poll_opens_with_its_key_which_only_the_teacher_sees() -> None:
    teacher = make_client()
    code = start(teacher)
    student = TestClient(teacher.app)  # the same server, another browser
    api = f"/api/v1/rooms/{code}/polls/lesson"
    assert student.post(api, json={"lesson": "row-one", "step": 1}).status_code == 401
    preview = teacher.get(api, params={"lesson": "row-one", "step": 1, "lang": "zh"})
    assert preview.status_code == 200, preview.text
    expected = lessons.BY_SLUG["row-one"].steps[0]
    assert preview.json()["prompt"] == expected.text("zh")[1]
    assert student.get(api, params={"lesson": "row-one", "step": 1}).status_code == 401
    made = teacher.post(api, json={"lesson": "row-one", "step": 1, "lang": "en", "rows": 5, "cols": 5})
    assert made.status_code == 201, made.text
    poll_id = made.json()["id"]
    key = preview.json()["answer"]
    # While the class votes the key goes to the teacher's devices only.
    assert student.get(f"/api/v1/rooms/{code}/polls/{poll_id}").json()["answer"] is None
    assert teacher.get(f"/api/v1/rooms/{code}/polls/{poll_id}").json()["answer"] == key
    closed = teacher.post(f"/api/v1/rooms/{code}/polls/{poll_id}/close")
    assert closed.status_code == 200 and closed.json()["answer"] == key
    assert student.get(f"/api/v1/rooms/{code}/polls/{poll_id}").json()["answer"] == key


@pytest.mark.parametrize(
    ("body", "field"),
    [({"lesson": "nope", "step": 1}, "lesson"), ({"lesson": "row-one", "step": 9}, "step"),
     ({"lesson": "row-one", "step": 0}, "step"), ({"lesson": "row-one", "step": 1, "lang": "fr"}, "lang")],
)  # fmt: skip
def test_a_bad_lesson_poll_is_a_422_naming_its_field(body: dict[str, object], field: str) -> None:
    teacher = make_client()
    code = start(teacher)
    r = teacher.post(f"/api/v1/rooms/{code}/polls/lesson", json=body)
    assert r.status_code == 422, r.text
    assert field in str(r.json())


@pytest.mark.parametrize("raw", [" 2 ", "2_0", "+2", "2.0", "٢", "abc"])
def test_a_lesson_poll_previews_step_is_ascii_digits(raw: str) -> None:
    """The preview's `step` query is an integer as every query's is (ASCII digits; pydantic's lax int took " 2 ")."""
    teacher = make_client()
    code = start(teacher)
    r = teacher.get(f"/api/v1/rooms/{code}/polls/lesson", params={"lesson": "row-one", "step": raw})
    assert r.status_code == 422, r.text
    assert r.json()["detail"][0]["loc"][-1] == "step"
    assert (
        teacher.get(f"/api/v1/rooms/{code}/polls/lesson", params={"lesson": "row-one", "step": "2"}).status_code == 200
    )


def test_every_lesson_step_can_be_asked_as_a_poll() -> None:
    teacher = make_client()
    code = start(teacher)
    for lesson in lessons.LESSONS:
        for k in range(1, len(lesson.steps) + 1):
            for lang in ("en", "zh"):
                r = teacher.get(f"/api/v1/rooms/{code}/polls/lesson",
                                params={"lesson": lesson.slug, "step": k, "lang": lang})  # fmt: skip
                assert r.status_code == 200, (lesson.slug, k, lang, r.text)


def test_the_teachers_remote_is_the_teachers_alone() -> None:
    teacher = make_client()
    code = start(teacher)
    remote = teacher.get(f"/r/{code}/teach?lang=zh")
    assert remote.status_code == 200 and remote.headers["cache-control"] == "no-store"
    page = BeautifulSoup(remote.text, "html.parser")
    assert page.select_one("[data-teach]")["data-code"] == code
    for hook in ("[data-go=next]", "[data-go=prev]", "[data-go=hints]", "[data-ask]", "[data-poll-form]",
                 "[data-reveal]", "[data-end]"):  # fmt: skip
        assert page.select_one(hook) is not None, hook
    assert TestClient(teacher.app).get(f"/r/{code}/teach").status_code == 403
    assert TestClient(teacher.app).get("/r/ZZZZZZ/teach").status_code == 404


def test_the_projected_bar_has_no_poll_form_and_no_open_histogram() -> None:
    teacher = make_client()
    code = start(teacher)
    bar = BeautifulSoup(teacher.get(f"/r/{code}/bar?lang=en").text, "html.parser")
    assert bar.select_one("form[data-room-poll-form]") is None  # written on the remote, not on the wall
    assert bar.select_one("a[data-room-remote]")["href"] == f"/r/{code}/teach?lang=en"
    assert bar.select_one("form[data-room-end-form]")["hx-confirm"]
    # The poll box the server renders for the projector (templates/_room_poll.html): an open poll's count, its
    # histogram hidden and no key, even with an answer in.
    body = {"prompt": "Which?", "kind": "choice", "options": ["A", "B"], "answer": "A"}
    pid = teacher.post(f"/api/v1/rooms/{code}/polls", json=body, headers={"Origin": str(teacher.base_url)}).json()["id"]
    assert (
        teacher.post(f"/api/v1/rooms/{code}/polls/{pid}/answers", json={"student": "s1", "answer": 1}).status_code
        == 200
    )
    box = BeautifulSoup(teacher.get(f"/r/{code}/poll/{pid}?lang=en").text, "html.parser")
    assert box.select_one("[data-room-histogram]").has_attr("hidden") and box.select_one("li.key") is None
    assert box.select_one("[data-room-prompt]").text == "Which?" and "data-poll-answer" not in str(box)
    assert teacher.get(f"/r/{code}/poll/{pid}/total").text == "1"


@pytest.mark.parametrize(("lang", "label", "warns"), [("en", "Remote", "shows the answers"), ("zh", "遥控器", "作答")])
def test_the_projected_bar_offers_the_remote_after_a_warning(lang: str, label: str, warns: str) -> None:
    """Presenter mode hides the plain remote link (#32); its compact "Remote" opens on a warning that this screen is
    projected, then the pairing (a new tab: the teacher's phone gets the remote) or the remote itself."""
    teacher = make_client()
    code = start(teacher)
    bar = BeautifulSoup(teacher.get(f"/r/{code}/bar?lang={lang}").text, "html.parser")
    menu = bar.select_one("details[data-room-remote-menu]")
    assert menu is not None and not menu.has_attr("open") and menu.select_one("summary").text == label
    assert warns in menu.select_one("[data-room-remote-note]").text
    pair = menu.select_one("form:has(button[data-room-pair])")
    assert (pair["method"], pair["action"], pair["target"]) == ("post", f"/r/{code}/pair?lang={lang}", "_blank")
    remote = menu.select_one("a[data-room-remote-open]")
    assert remote["href"] == f"/r/{code}/teach?lang={lang}" and remote["target"] == "_blank"
    paired = teacher.post(pair["action"], headers={"Origin": str(teacher.base_url)})
    assert paired.status_code == 200 and "/pair/" in paired.text  # the form pairs, as the remote's own does


def test_the_last_step_of_a_lesson_leads_to_the_next_lesson_in_presenter_mode(lab: TestClient) -> None:
    last = len(lessons.BY_SLUG["mask-toggle"].steps)
    page = soup(lab, f"/?stage=4&mask=causal&lesson=mask-toggle&step={last}&present=1&hints=off&lang=en")
    nxt = page.select_one("a[data-lesson-step=next-lesson]")
    assert nxt is not None
    got = query(nxt["href"])
    following = lessons.LESSONS[lessons.LESSONS.index(lessons.BY_SLUG["mask-toggle"]) + 1]
    assert got["lesson"] == [following.slug] and got["lesson_step"] == ["1"]
    assert got["present"] == ["1"] and got["hints"] == ["off"]  # the projector stays as the teacher set it


def test_a_server_on_loopback_warns_that_phones_cannot_reach_it() -> None:
    from app.web.share import unreachable

    assert unreachable("127.0.0.1", None, None)
    assert unreachable("192.0.2.2", "127.0.0.1", None)  # the LAN address, but nothing listens there
    assert not unreachable("192.0.2.2", "0.0.0.0", None)
    assert not unreachable("lab.school.example", "127.0.0.1", "http://lab.school.example")  # a proxy in front
    local = make_client(bind_host="127.0.0.1")
    page = BeautifulSoup(local.get("/?stage=4&present=1&lang=zh").text, "html.parser")
    assert page.select_one("aside.qr [data-warning=loopback]") is not None
    assert "0.0.0.0" in page.select_one("aside.qr [data-warning=loopback]").get_text()
