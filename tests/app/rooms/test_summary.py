"""The class summary (#32 item 8): after the class something remains. Each poll, its answers and timing, and
participation, as JSON and CSV and a page, for the teacher alone (the remote's token), kept when the class ends —
on the in-memory store (one worker) and on Redis (two workers, a real redis-server)."""

from __future__ import annotations

import csv
import io

import httpx
from bs4 import BeautifulSoup

from app.web import lessons
from tests.rooms_client import run, stream

OPTIONS = ["猫", "坐", "垫子"]


def test_a_class_with_two_polls_leaves_its_summary_for_the_teacher_only(lab: str) -> None:
    teacher = httpx.Client(base_url=lab, timeout=30)
    started = teacher.post("/r", data={"page": "/", "query": "stage=softmax", "lang": "en"}, follow_redirects=False)
    assert started.status_code == 303, started.text[:300]
    code = teacher.cookies["lab_room"]
    api = f"/api/v1/rooms/{code}"
    auth = {"Authorization": "Bearer " + teacher.cookies["lab_teacher"].partition(".")[2]}  # the remote's token
    assert teacher.get(f"/r/{code}/teach?lang=en").status_code == 200
    remote = BeautifulSoup(teacher.get(f"/r/{code}/teach?lang=en").text, "html.parser")
    link = remote.select_one("[data-summary-link] a")["href"]  # the remote links to it (and shows it after the end)
    assert link == f"/r/{code}/summary?lang=en"
    step = lessons.BY_SLUG["why-causal"].steps[0]
    assert step.poll is not None

    async def main() -> tuple[str, str]:
        async with httpx.AsyncClient(base_url=lab, timeout=30) as client, stream(client, lab, code) as a, \
                stream(client, lab, code) as b:  # fmt: skip
            for s in (a, b):
                assert (await s.next()).event == "state"
            own = await client.post(f"{api}/polls", json={"prompt": "坐 reads most?", "kind": "choice",
                                                          "options": OPTIONS, "answer": "猫"}, headers=auth)  # fmt: skip
            assert own.status_code == 201, own.text
            first = own.json()["id"]
            for student, answer in (("s1", "猫"), ("s2", 1)):
                r = await client.post(f"{api}/polls/{first}/answers", json={"student": student, "answer": answer,
                                                                             "nickname": "Ann" if student == "s1" else None})  # fmt: skip
                assert r.status_code == 200, r.text
            assert (await client.post(f"{api}/polls/{first}/close", headers=auth)).status_code == 200
            asked = await client.post(f"{api}/polls/lesson", json={"lesson": "why-causal", "step": 1, "lang": "en"},
                                      headers=auth)  # fmt: skip
            assert asked.status_code == 201, asked.text
            second = asked.json()["id"]
            for student in ("s1", "s2"):
                r = await client.post(f"{api}/polls/{second}/answers", json={"student": student, "answer": 1})
                assert r.status_code == 200, r.text
            # during the class the summary is there too, open poll included
            live = (await client.get(f"{api}/summary", headers=auth)).json()
            assert not live["ended"] and [p["status"] for p in live["polls"]] == ["closed", "open"]
            return first, second

    first, second = run(main())
    ended = teacher.post(f"/r/{code}/end", data={"lang": "en"}, follow_redirects=False)
    assert ended.status_code == 303 and teacher.get(api).status_code == 404  # the class has ended
    assert teacher.cookies.get("lab_teacher", "").startswith(code + ".")  # the teacher keeps the token

    summary = teacher.get(f"{api}/summary")
    assert summary.status_code == 200, summary.text
    doc = summary.json()
    assert doc["code"] == code and doc["ended"] and doc["ended_at"]
    one, two = doc["polls"]
    assert [one["id"], two["id"]] == [first, second] and [one["n"], two["n"]] == [1, 2]
    assert one["prompt"] == "坐 reads most?" and one["key"] == "猫" and one["status"] == "closed"
    assert one["counts"] == {"猫": 1, "坐": 1} and one["total"] == 2 and one["correct"] == 1
    assert one["audience"] == 2 and one["share"] == 1.0  # two phones followed when it opened; both answered
    assert one["opened_at"] <= one["closed_at"] and one["open_s"] >= 0
    assert {a["student"]: (a["answer"], a["correct"], a["nickname"]) for a in one["answers"]} == {
        "s1": ("猫", True, "Ann"), "s2": ("坐", False, None)}  # fmt: skip
    assert all(a["after_s"] is not None and a["after_s"] >= 0 for a in one["answers"] + two["answers"])
    key = step.poll.for_lang(step.text("en")[1], "en")
    assert two["prompt"] == key["prompt"] and two["languages"]["zh"]["prompt"]
    assert two["status"] == "closed" and two["closed_at"]  # ending the class closes the open poll's record
    assert two["counts"] == {key["options"][1]: 2} and two["correct"] == (
        2 if key["answer"] == key["options"][1] else 0
    )
    assert doc["participation"] == {"polls": 2, "students": 2, "answered_all": 2, "by_student": [
        {"student": "s1", "nickname": "Ann", "polls": 2}, {"student": "s2", "nickname": None, "polls": 2}]}  # fmt: skip

    table = teacher.get(f"{api}/summary.csv")
    assert table.status_code == 200 and table.headers["content-type"].startswith("text/csv")
    assert "attachment" in table.headers["content-disposition"]
    # A UTF-8 byte order mark first (Excel on Windows opens the Chinese as written), then the same header names.
    assert table.content[:3] == b"\xef\xbb\xbf"
    assert table.content[3:].decode("utf-8").startswith("poll,prompt,key,opened_at,closed_at,audience,student,")
    assert "坐 reads most?".encode() in table.content  # the Chinese itself in UTF-8, not a code page's
    rows = list(csv.DictReader(io.StringIO(table.content.decode("utf-8-sig"))))
    assert [(r["poll"], r["student"], r["answer"]) for r in rows] == [
        ("1", "s1", "猫"), ("1", "s2", "坐"), ("2", "s1", key["options"][1]), ("2", "s2", key["options"][1])]  # fmt: skip
    assert [r["correct"] for r in rows[:2]] == ["true", "false"] and all(r["opened_at"] for r in rows)

    for lang, words in (("en", "Class summary"), ("zh", "课堂总结")):
        page = teacher.get(f"/r/{code}/summary?lang={lang}")
        assert page.status_code == 200 and words in page.text
        shown = BeautifulSoup(page.text, "html.parser")
        assert shown.select_one("[data-participation]")["data-students"] == "2"
        assert [s["data-total"] for s in shown.select("[data-poll]")] == ["2", "2"]
        assert shown.select_one("[data-summary-csv]")["href"] == f"{api}/summary.csv"
    assert two["languages"]["zh"]["prompt"] in teacher.get(f"/r/{code}/summary?lang=zh").text

    # Only the teacher: no token, a student's id as a token, another class's teacher are refused.
    with httpx.Client(base_url=lab, timeout=30) as student:
        assert student.get(f"{api}/summary").status_code == 401
        assert student.get(f"{api}/summary.csv").status_code == 401
        assert student.get(f"{api}/summary", headers={"Authorization": "Bearer s1"}).status_code == 403
        refused = student.get(f"/r/{code}/summary?lang=en")
        assert refused.status_code == 403 and "Class summary" not in refused.text and "s1" not in refused.text
        other = httpx.post(f"{lab}/api/v1/rooms", json={}).json()
        bearer = {"Authorization": f"Bearer {other['teacher_token']}"}
        assert student.get(f"{api}/summary.csv", headers=bearer).status_code == 403
        assert student.get("/api/v1/rooms/ZZZZZZ/summary", headers=bearer).status_code == 404
    teacher.close()
