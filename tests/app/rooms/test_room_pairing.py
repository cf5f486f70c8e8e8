"""Pairing the teacher's phone (#32): the remote on the laptop makes a one-time, short-lived link; the phone that
confirms it gets a teacher token of its own and opens the remote; the link works once; the teacher can take the
role back from every paired device. Over real HTTP, against the memory store and against Redis with two workers."""

from __future__ import annotations

import re
from collections.abc import Iterator

import httpx
import pytest

from app.rooms.store import MemoryStore
from tests.conftest import run_async


def browser(base: str) -> httpx.Client:
    """A browser's cookie jar, sending what Chrome sends from the lab's own pages."""
    return httpx.Client(base_url=base, timeout=30, follow_redirects=True,
                        headers={"Sec-Fetch-Site": "same-origin", "Origin": base})  # fmt: skip


@pytest.fixture
def laptop(lab: str) -> Iterator[httpx.Client]:
    with browser(lab) as c:
        yield c


def start_class(laptop: httpx.Client) -> str:
    r = laptop.post("/r", data={"page": "/", "query": "stage=scores", "lang": "en"})
    assert r.status_code == 200 and laptop.cookies.get("lab_teacher"), r.text[:300]
    return str(laptop.cookies.get("lab_room"))


def pairing_link(laptop: httpx.Client, code: str) -> str:
    r = laptop.post(f"/r/{code}/pair?lang=en")
    assert r.status_code == 200 and r.headers["cache-control"] == "no-store", r.text[:300]
    assert r.headers["referrer-policy"] == "no-referrer"
    m = re.search(rf"data-pair-url[^>]*>(https?://[^<]+/r/{code}/pair/[A-Za-z0-9_-]+)(?:\?lang=en)?<", r.text)
    assert m is not None and "<svg" in r.text  # the link and its QR code
    return m.group(1)


def test_the_teachers_phone_pairs_once_and_runs_the_remote(lab: str, laptop: httpx.Client) -> None:
    code = start_class(laptop)
    with browser(lab) as phone:
        assert phone.get(f"/r/{code}/teach").status_code == 403  # not the teacher's browser
        link = pairing_link(laptop, code)
        path = link.split("://", 1)[1].split("/", 1)[1]
        shown = phone.get("/" + path)  # opening the link uses nothing up (a link preview cannot)
        assert shown.status_code == 200 and "data-pair-confirm" in shown.text
        taken = phone.post("/" + path, data={"lang": "en"})
        assert taken.status_code == 200 and taken.url.path == f"/r/{code}/teach", taken.text[:300]
        assert taken.url.params.get("lang") == "en"  # the remote opens in the language the pairing was confirmed in
        assert "data-teach" in taken.text and phone.cookies.get("lab_teacher", "").startswith(code + ".")
        assert phone.cookies.get("lab_teacher") != laptop.cookies.get("lab_teacher")  # a token of its own
        # The phone drives the class with its own token, as the laptop does.
        put = phone.put(f"/api/v1/rooms/{code}/state", json={"page": "/", "query": "stage=softmax"})
        assert put.status_code == 200, put.text
        assert httpx.get(f"{lab}/api/v1/rooms/{code}").json()["query"] == "stage=softmax"
        with browser(lab) as stranger:  # the link works once
            again = stranger.post("/" + path, data={"lang": "en"})
            assert again.status_code == 410 and "already used or has expired" in again.text
            assert not stranger.cookies.get("lab_teacher")
        # The teacher takes the role back: the phone is a teacher no more, the laptop still is.
        assert laptop.post(f"/r/{code}/unpair").status_code == 200
        assert phone.get(f"/r/{code}/teach").status_code == 403
        assert phone.put(f"/api/v1/rooms/{code}/state", json={"query": "stage=mask"}).status_code == 403
        assert laptop.get(f"/r/{code}/teach").status_code == 200


def test_the_pairing_link_opens_in_the_teachers_language(lab: str, laptop: httpx.Client) -> None:
    """The class walk: a teacher working in Chinese paired a phone whose browser asks for English, and the phone's
    confirmation and remote came in English (the link carried no `lang`). The link (and its QR code) carries the
    language the teacher paired in; the confirmation and the remote it opens speak it."""
    code = start_class(laptop)
    r = laptop.post(f"/r/{code}/pair?lang=zh")
    m = re.search(r"data-pair-url[^>]*>(https?://[^<]+)<", r.text)
    assert r.status_code == 200 and m is not None, r.text[:300]
    link = httpx.URL(m.group(1).replace("&amp;", "&"))
    assert link.params.get("lang") == "zh", link
    with httpx.Client(base_url=lab, timeout=30, follow_redirects=True,
                      headers={"Accept-Language": "en-US,en;q=0.9", "Origin": lab}) as phone:  # fmt: skip
        shown = phone.get(link.raw_path.decode())
        assert shown.status_code == 200 and '<html lang="zh-CN"' in shown.text and "data-pair-confirm" in shown.text
        assert 'name="lang" value="zh"' in shown.text
        taken = phone.post(link.raw_path.decode(), data={"lang": "zh"})
        assert taken.status_code == 200 and taken.url.params.get("lang") == "zh" and "data-teach" in taken.text


def test_only_the_teacher_makes_a_pairing_link_and_never_from_another_site(lab: str, laptop: httpx.Client) -> None:
    code = start_class(laptop)
    with browser(lab) as student:
        assert student.post(f"/r/{code}/pair").status_code == 403
    cross = laptop.post(f"/r/{code}/pair", headers={"Sec-Fetch-Site": "cross-site", "Origin": "https://evil.example"})
    assert cross.status_code == 403 and "data-pair-url" not in cross.text
    link = pairing_link(laptop, code)
    path = "/" + link.split("://", 1)[1].split("/", 1)[1]
    with browser(lab) as phone:  # another site's page cannot confirm a pairing in the phone's browser either
        evil = phone.post(path, headers={"Sec-Fetch-Site": "cross-site", "Origin": "https://evil.example"})
        assert evil.status_code == 403 and not phone.cookies.get("lab_teacher")
        assert phone.post(path.rsplit("/", 1)[0] + "/not-the-secret").status_code == 410


def test_a_pairing_expires_and_paired_devices_are_bounded() -> None:
    clock = [0.0]
    store = MemoryStore(idle_s=3600, clock=lambda: clock[0])

    async def main() -> tuple[bool, bool, bool, tuple[str, ...]]:
        await store.create("ABCDEF", "teacher", "/", "")
        await store.add_pairing("ABCDEF", "p1", ttl_s=120)
        await store.add_pairing("ABCDEF", "p2", ttl_s=120)
        clock[0] = 60.0
        first = await store.take_pairing("ABCDEF", "p1")
        twice = await store.take_pairing("ABCDEF", "p1")
        clock[0] = 121.0
        late = await store.take_pairing("ABCDEF", "p2")
        await store.set_devices("ABCDEF", ("d1", "d2"))
        await store.publish("ABCDEF", "state", {"page": "/", "query": "x"}, ("/", "x"))  # a change keeps them
        room = await store.get("ABCDEF")
        assert room is not None
        return first, twice, late, room.devices

    assert run_async(main) == (True, False, False, ("d1", "d2"))


def test_a_full_set_of_paired_devices_is_refused_with_the_reason(memory_rooms_lab: str) -> None:
    with browser(memory_rooms_lab) as laptop:
        code = start_class(laptop)
        phones = []
        for i in range(5):  # ROOM_MAX_DEVICES is 4 by default
            link = pairing_link(laptop, code)
            phone = browser(memory_rooms_lab)
            phones.append(phone)
            r = phone.post("/" + link.split("://", 1)[1].split("/", 1)[1])
            assert r.status_code == (200 if i < 4 else 409), (i, r.text[:200])
        assert "already has 4 paired devices" in r.text
        for phone in phones:
            phone.close()


def test_unpairing_on_the_phone_asks_first_and_tells_that_phone_in_its_language(lab: str, laptop: httpx.Client) -> None:
    """#32 B: "Unpair them all" asks first (the phone's question says it is one of them), keeps the language on its
    redirect, and the phone that pressed it is told, in its language, that it is no longer the remote: it forgets
    the class (both cookies), never silently turned into a student's screen. On the laptop it stays on the remote."""
    code = start_class(laptop)
    with browser(lab) as phone:
        path = pairing_link(laptop, code).split("://", 1)[1].split("/", 1)[1]
        assert phone.post("/" + path, data={"lang": "zh"}).status_code == 200
        on_phone = phone.get(f"/r/{code}/teach?lang=zh").text
        on_laptop = laptop.get(f"/r/{code}/teach?lang=en").text
        assert 'hx-confirm="取消所有设备的配对（包括这部手机）？' in on_phone  # the phone is told it is one of them
        assert 'hx-confirm="Unpair every paired device? None of them' in on_laptop
        assert '<input type="hidden" name="lang" value="zh">' in on_phone.split("data-unpair-form")[1][:400]

        gone = phone.post(f"/r/{code}/unpair", data={"lang": "zh"})
        assert gone.status_code == 200 and gone.url.path == f"/r/{code}/unpaired" and gone.url.params["lang"] == "zh"
        assert "这部手机已不再是教师遥控器" in gone.text and 'lang="zh"' in gone.text
        assert f'href="/r/{code}?lang=zh" data-unpaired-follow' in gone.text  # following as a student is a choice
        assert gone.history[0].status_code == 303
        assert not phone.cookies.get("lab_teacher") and not phone.cookies.get("lab_room")  # it forgot the class
        assert phone.get(f"/r/{code}/teach").status_code == 403
        assert laptop.get(f"/r/{code}/teach").status_code == 200  # the laptop still teaches
        english = phone.get(f"/r/{code}/unpaired?lang=en")
        assert english.status_code == 200 and "This phone is no longer the teacher" in english.text

        # Unpaired from the laptop: its remote again, in its language.
        path = pairing_link(laptop, code).split("://", 1)[1].split("/", 1)[1]
        assert phone.post("/" + path, data={"lang": "en"}).status_code == 200
        back = laptop.post(f"/r/{code}/unpair", data={"lang": "zh"})
        assert back.status_code == 200 and back.url.path == f"/r/{code}/teach" and back.url.params["lang"] == "zh"
        assert "data-teach" in back.text and 'lang="zh"' in back.text
        assert phone.get(f"/r/{code}/teach").status_code == 403


@pytest.mark.parametrize(("lang", "lesson_next", "stage_next", "cell"), [
    ("en", "Next step →", "Next stage →", "Cell"), ("zh", "课程下一步 →", "下一阶段 →", "格子")])  # fmt: skip
def test_the_remote_puts_a_lessons_steps_first_and_names_the_stages(
    lab: str, laptop: httpx.Client, lang: str, lesson_next: str, stage_next: str, cell: str
) -> None:
    """#32 C: two "Next" buttons told apart, in both languages: the lesson's step pair comes first in the remote
    (shown while a lesson runs), the page's own Previous / Next carry a "stage" label for the lab's stages; and the
    cell picker (#32 A) is there for the lab's matrices."""
    code = start_class(laptop)
    page = laptop.get(f"/r/{code}/teach?lang={lang}").text
    assert page.index("data-lesson-nav") < page.index('data-go="lesson-next"') < page.index('data-go="next"')
    # The labels come with the page the class sees, rendered for the remote (app/web/remote.py).
    shown = laptop.get(f"/?stage=4&lesson=five-stages&lesson_step=3&lang={lang}", headers={"X-Lab-Remote": "1"}).text
    assert 'data-go="lesson-next" data-page' in shown and f">{lesson_next}</button>" in shown
    assert f">{stage_next}</button>" in shown and "data-lesson-nav hidden" not in shown
    assert "data-cells hidden" in page and f'<span class="teach-label">{cell}:</span>' in page
    assert 'data-cell-matrix="weights"' in shown and 'data-cell-table="weights"' in shown  # a toy's grid of cells
