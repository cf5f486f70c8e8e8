"""The poll box a class's screens swap in (app/rooms/fragments.py, templates/_room_poll.html), and which poll a
screen's event stream says it shows (app/rooms/stream.py `Follow.track`)."""

from __future__ import annotations

from bs4 import BeautifulSoup

from app.rooms.fragments import render, step_of
from app.rooms.store import Event, MemoryStore, Poll
from app.rooms.stream import Follow

LESSON = Poll("p1", "Which?", "choice", ("yes", "no"), answer="yes",
              languages={"zh": {"prompt": "哪个？", "options": ["是", "否"]}})  # fmt: skip


def box(html: str) -> BeautifulSoup:
    return BeautifulSoup(html, "html.parser")


def test_a_students_box_is_in_their_language_with_their_answer_and_no_key_before_the_reveal() -> None:
    shown = box(render(LESSON, "student", "zh", {"yes": 2, "no": 1}, "no", "ABCDEF"))
    assert shown.select_one("[data-room-prompt]").text == "哪个？"
    assert [b.text for b in shown.select("[data-room-options] button")] == ["是", "否"]
    assert [b["value"] for b in shown.select("[data-room-options] button[aria-pressed=true]")] == ["no"]
    assert shown.select_one("[data-room-mine-value]").text == "否"
    assert shown.select_one("[data-room-reveal]") is None and "yes" not in shown.select_one("[data-poll]").get(
        "data-poll-answer", ""
    )
    assert shown.select_one("[data-poll]")["data-poll-counts"] == "{}"  # nobody steers the vote by the counts
    cell = Poll("p2", "Which cell?", "cell", (), 2, 2, languages={"zh": {"prompt": "哪个单元格？", "options": []}})
    assert (
        box(render(cell, "student", "zh", {}, None, "ABCDEF")).select_one("[data-room-prompt]").text == "哪个单元格？"
    )


def test_a_revealed_box_shows_the_key_and_the_histogram_on_every_screen() -> None:
    closed = Poll(**(LESSON.__dict__ | {"status": "closed"}))
    student = box(render(closed, "student", "en", {"yes": 2, "no": 1}, None, "ABCDEF"))
    assert student.select_one("[data-room-key]").text == "yes"
    assert [(li.select_one(".label").text, li.select_one(".n").text) for li in student.select("li")] == [
        ("yes", "2"), ("no", "1")]  # fmt: skip
    assert student.select_one("li.key .bar")["data-share"] == "1.0"
    teacher = box(render(closed, "teacher", "zh", {"yes": 2, "no": 1}, None, "ABCDEF"))
    assert teacher.select_one("[data-room-prompt]").text == "哪个？ → 是"
    assert not teacher.select_one("[data-room-histogram]").has_attr("hidden")
    assert teacher.select_one("[data-room-total]").text == "3" and teacher.select_one("[data-room-close]").has_attr(
        "hidden"
    )
    assert box(render(None, "student", "en", {}, None, "ABCDEF")).select_one("[data-room-poll]").has_attr("hidden")
    remote = box(render(LESSON, "remote", "en", {"yes": 2, "no": 1}, None, "ABCDEF"))  # open: live, on the remote
    assert remote.select_one("[data-histogram] li.key .n").text == "2" and remote.select_one("[data-total]").text == "3"


def test_a_screen_shows_a_revealed_poll_until_it_is_cleared_or_the_class_moves_on() -> None:
    follow = Follow(MemoryStore(idle_s=60), "ABCDEF", 1, None, None, 5.0)

    def state(query: str) -> Event:
        return Event(1, "state", {"page": "/", "query": query})

    follow.track(state("stage=4"))
    follow.track(Event(2, "poll", {"id": "p1", "status": "open"}))
    assert follow.shown == "p1"
    follow.track(state("stage=4&mask=none"))  # the same step: an open poll stays
    follow.track(Event(3, "poll", {"id": "p1", "status": "closed"}))
    follow.track(state("stage=4&head=1"))
    assert follow.shown == "p1"
    follow.track(state("stage=5"))  # another step: the revealed poll leaves
    assert follow.shown is None
    follow.track(Event(4, "poll", {"id": "p2", "status": "open"}))
    follow.track(Event(5, "poll", {"id": "p1", "status": "cleared"}))  # another poll's clearing
    assert follow.shown == "p2"
    follow.track(Event(6, "poll", {"id": "p2", "status": "cleared"}))
    assert follow.shown is None
    assert step_of("/", "lesson=row-one&lesson_step=2&stage=4") == "row-one:2" != step_of("/", "stage=4")
