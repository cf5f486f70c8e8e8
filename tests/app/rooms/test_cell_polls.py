"""A cell question in class (#42, finding 6): its cells are named by their tokens ("猫→猫", the query's then the key's)
on every screen and in the class summary, from the labels the asking page sent with it, instead of "(0, 0)"; and it
belongs to the matrix it was asked on, so stepping the class back to the mask's matrices closes it (its answers kept)
as moving to another page does — on the in-memory store (one worker) and on Redis (two workers)."""

from __future__ import annotations

import asyncio

import httpx
import orjson
import pytest
from bs4 import BeautifulSoup

from app.rooms.api import view_place
from app.rooms.store import Poll
from tests.rooms_client import Message, Stream, run, stream

from .test_rooms import create, put

TOKENS = ["猫", "坐", "在", "垫子", "上"]


def opened(request: pytest.FixtureRequest, lab: str, query: str) -> tuple[str, dict[str, str]]:
    """A room for one test, ended after it (a server takes ROOM_MAX_PER_ADDRESS open rooms from one address)."""
    code, auth = create(lab, query)
    request.addfinalizer(lambda: httpx.delete(f"{lab}/api/v1/rooms/{code}", headers=auth, timeout=30))
    return code, auth


async def heard(watcher: Stream) -> Message:
    """The stream's next event, or a failure after 60 s (an event that never comes must not hang the suite)."""
    return await asyncio.wait_for(watcher.next(), 60)


def test_a_cell_is_named_by_its_tokens() -> None:
    poll = Poll("p", "?", "cell", (), 5, 5, "0,0", row_labels=tuple(TOKENS), col_labels=tuple(TOKENS))
    assert poll.cell_label("0,0") == "猫→猫" and poll.cell_label("3,1") == "垫子→坐"
    twice = Poll("p", "?", "cell", (), 3, 3, row_labels=("the", "cat", "the"), col_labels=("the", "cat", "the"))
    assert twice.cell_label("2,0") == "the (2)→the (0)" and twice.cell_label("1,1") == "cat→cat"
    assert Poll("p", "?", "cell", (), 5, 5).cell_label("0,0") == "(0, 0)"  # asked without labels
    assert Poll.loads(orjson.dumps(poll)) == poll  # Redis keeps them


def test_the_place_of_a_view_is_its_stage_however_it_is_written() -> None:
    assert view_place("/", "stage=4&mask=causal") == view_place("/", "stage=softmax&cell=weights.0.0.0&mask=none")
    assert view_place("/", "") == view_place("/", "stage=1") != view_place("/", "stage=2")
    assert view_place("/", "stage=4") != view_place("/", "stage=3")
    assert view_place("/decode", "prefill=2&step=2") != view_place("/decode", "prefill=2&step=3")
    assert view_place("/", "stage=4&lesson=row-one&lesson_step=1") != view_place(
        "/", "stage=4&lesson=row-one&lesson_step=2"
    )


def test_a_cell_poll_carries_its_matrixs_tokens_to_every_screen_and_the_summary(request, lab: str) -> None:
    code, auth = opened(request, lab, "stage=softmax&mask=causal")
    api = f"{lab}/api/v1/rooms/{code}"
    body = {"prompt": "Which weight is exactly 1.00?", "kind": "cell", "rows": 5, "cols": 5, "answer": "0,0",
            "row_labels": TOKENS, "col_labels": TOKENS}  # fmt: skip
    short = httpx.post(f"{api}/polls", json=body | {"row_labels": TOKENS[:4]}, headers=auth)
    assert short.status_code == 422 and "row_labels" in short.json()["message"]  # one label per row
    too_long = httpx.post(f"{api}/polls", json=body | {"col_labels": ["x" * 65] * 5}, headers=auth)
    assert too_long.status_code == 422
    choice = httpx.post(f"{api}/polls", json={"prompt": "?", "kind": "choice", "options": ["a", "b"],
                                               "row_labels": TOKENS}, headers=auth)  # fmt: skip
    assert choice.status_code == 201  # a choice poll names no cell: its labels are not kept
    assert "row_labels" not in httpx.get(f"{api}/polls/{choice.json()['id']}").json()

    pid = httpx.post(f"{api}/polls", json=body, headers=auth).json()["id"]
    shown = httpx.get(f"{api}/polls/{pid}").json()  # what a student's screen reads
    assert shown["row_labels"] == TOKENS and shown["col_labels"] == TOKENS and shown["answer"] is None
    for student, cell in (("s1", [0, 0]), ("s2", [3, 1])):
        assert httpx.post(f"{api}/polls/{pid}/answers", json={"student": student, "answer": cell}).status_code == 200

    async def main() -> dict[str, object]:
        async with httpx.AsyncClient(timeout=30) as client, stream(client, lab, code) as watcher:
            assert (await heard(watcher)).event == "state"
            assert (await heard(watcher)).data["row_labels"] == TOKENS  # the open poll, as a phone joining gets it
            assert (await client.post(f"{api}/polls/{pid}/close", headers=auth)).status_code == 200
            return (await heard(watcher)).data

    revealed = run(main())
    assert revealed["status"] == "closed" and revealed["answer"] == "0,0" and revealed["col_labels"] == TOKENS

    summary = httpx.get(f"{api}/summary", headers=auth).json()
    cell = next(p for p in summary["polls"] if p["id"] == pid)
    assert cell["cell_labels"] == {"0,0": "猫→猫", "3,1": "垫子→坐"}
    page = BeautifulSoup(httpx.get(f"{lab}/r/{code}/summary?lang=zh", headers=auth).text, "html.parser")
    poll = page.select_one(f"section[data-poll='{pid}']")
    assert [li.select_one(".label").get_text() for li in poll.select("ol.histogram li")] == ["猫→猫", "垫子→坐"]
    assert "猫→猫" in poll.get_text() and "(0, 0)" not in poll.get_text() and "[0,0]" not in poll.get_text()


def test_a_lesson_cell_question_takes_the_pages_labels(request, lab: str) -> None:
    code, auth = opened(request, lab, "stage=4&mask=causal&lesson=row-one&lesson_step=1")
    api = f"{lab}/api/v1/rooms/{code}"
    asked = httpx.post(f"{api}/polls/lesson", json={"lesson": "row-one", "step": 1, "lang": "zh", "rows": 5,
                                                     "cols": 5, "row_labels": TOKENS, "col_labels": TOKENS},
                       headers=auth)  # fmt: skip
    assert asked.status_code == 201, asked.text
    poll = httpx.get(f"{api}/polls/{asked.json()['id']}", headers=auth).json()
    assert poll["kind"] == "cell" and poll["answer"] == "0,0" and poll["row_labels"] == TOKENS
    wrong = httpx.post(f"{api}/polls/lesson", json={"lesson": "row-one", "step": 1, "rows": 5, "cols": 5,
                                                     "row_labels": TOKENS[:2]}, headers=auth)  # fmt: skip
    assert wrong.status_code == 422 and wrong.json()["detail"][0]["loc"][-1] == "row_labels"


@pytest.mark.parametrize("same", ["stage=softmax&mask=causal&cell=weights.0.0.0", "stage=4&mask=none"])
def test_a_cell_poll_closes_when_the_class_steps_to_another_stage(request, lab: str, same: str) -> None:
    """#42: asked on the weights (stage 4), still answerable on the mask's matrices (stage 3) — where a tap answers
    with a cell of another matrix. Another stage closes it and clears it off every screen, as another page does; the
    same stage (a cell opened, the mask switched) keeps it open."""
    code, auth = opened(request, lab, "stage=softmax&mask=causal")
    polls = f"{lab}/api/v1/rooms/{code}/polls"
    pid = httpx.post(polls, json={"prompt": "Which weight is 1.00?", "kind": "cell", "rows": 5, "cols": 5,
                                  "answer": "0,0"}, headers=auth).json()["id"]  # fmt: skip
    assert httpx.post(f"{polls}/{pid}/answers", json={"student": "s1", "answer": [0, 0]}).status_code == 200
    assert put(lab, code, auth, same).status_code == 200
    assert httpx.get(f"{lab}/api/v1/rooms/{code}").json()["poll"] == pid  # the same matrix: still open

    async def main() -> list[tuple[str, dict[str, object]]]:
        async with httpx.AsyncClient(timeout=30) as client, stream(client, lab, code) as watcher:
            assert (await heard(watcher)).event == "state"
            assert (await heard(watcher)).data["status"] == "open"
            back = await client.put(f"{lab}/api/v1/rooms/{code}/state", json={"page": "/", "query": "stage=mask"},
                                    headers=auth)  # fmt: skip
            assert back.status_code == 200, back.text
            return [((e := await heard(watcher)).event, e.data) for _ in range(3)]

    (k1, closed), (k2, cleared), (k3, state) = run(main())
    assert (k1, closed["status"], closed["counts"]) == ("poll", "closed", {"0,0": 1})
    assert (k2, cleared) == ("poll", {"id": pid, "status": "cleared", "reason": "stage"})
    assert k3 == "state" and state["query"] == "stage=mask"
    assert httpx.get(f"{lab}/api/v1/rooms/{code}").json()["poll"] is None
    late = httpx.post(f"{polls}/{pid}/answers", json={"student": "s2", "answer": [2, 1]})
    assert late.status_code == 409  # a tap on the mask's matrix answers nothing
    assert httpx.get(f"{polls}/{pid}").json()["counts"] == {"0,0": 1}  # the answers stay

    # A choice question is about no matrix: it stays open from stage to stage.
    cid = httpx.post(polls, json={"prompt": "?", "kind": "choice", "options": ["a", "b"]}, headers=auth).json()["id"]
    assert put(lab, code, auth, "stage=softmax").status_code == 200
    assert httpx.get(f"{lab}/api/v1/rooms/{code}").json()["poll"] == cid


def test_a_class_on_the_toy_keeps_its_sentence_when_the_remote_opens_a_lesson_step() -> None:
    """A class started on the toy names its sentence (the page pins its example); a lesson step opened from the
    remote names none, and without the class's `tokens` each screen would show its own language's example: a
    Chinese phone other numbers than the English projector (found by the class walk, #42)."""
    from fastapi.testclient import TestClient

    from app.main import create_app
    from app.settings import Settings

    with TestClient(create_app(Settings(pretrained=False))) as c:
        made = c.post("/api/v1/rooms", json={"page": "/", "query": "tokens=cat+sat+on+the+mat&stage=1"})
        assert made.status_code == 201, made.text
        code, token = made.json()["code"], made.json()["teacher_token"]
        headers = {"Authorization": f"Bearer {token}"}
        put = c.put(f"/api/v1/rooms/{code}/state", json={"page": "/", "query": "stage=4&mask=causal"}, headers=headers)
        assert put.status_code == 200, put.text
        query = c.get(f"/api/v1/rooms/{code}").json()["query"]
        assert query == "stage=4&mask=causal&tokens=cat+sat+on+the+mat"
        # Another sentence named, or another page, is kept as the teacher gave it.
        c.put(f"/api/v1/rooms/{code}/state", json={"page": "/", "query": "tokens=a+b&stage=2"}, headers=headers)
        assert c.get(f"/api/v1/rooms/{code}").json()["query"] == "tokens=a+b&stage=2"
        c.put(f"/api/v1/rooms/{code}/state", json={"page": "/lessons", "query": ""}, headers=headers)
        assert c.get(f"/api/v1/rooms/{code}").json()["query"] == ""
