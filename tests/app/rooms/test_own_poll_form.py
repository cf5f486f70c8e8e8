"""The teacher's own question on the remote (/r/<code>/teach): a refused value is said under its field, in the page's
language (it used to be a red outline and no words), while the rooms API's answer to the same body stays its English,
byte for byte."""

from __future__ import annotations

import pytest
from bs4 import BeautifulSoup
from fastapi.testclient import TestClient

from tests.conftest import make_client

HTMX = {"HX-Request": "true", "Origin": "http://testserver", "Sec-Fetch-Site": "same-origin"}


@pytest.fixture()
def teacher() -> tuple[TestClient, str]:
    """A browser that started a class (its teacher cookie) and the class's code."""
    client = make_client()
    r = client.post("/r", data={"page": "/", "query": "", "lang": "en"}, headers=HTMX, follow_redirects=False)
    assert r.status_code in (204, 303), r.text[:300]
    code = client.cookies.get("lab_room")
    assert code
    return client, code


def said(client: TestClient, code: str, form: dict[str, str]) -> tuple[int, dict[str, str], BeautifulSoup]:
    r = client.post(f"/r/{code}/ask", data=form, headers=HTMX)
    page = BeautifulSoup(r.text, "html.parser")
    return r.status_code, {e["data-field-error"]: e.get_text() for e in page.select("[data-field-error]")}, page


# (form, field, English, Chinese): each refusal as the remote says it under its field
REFUSALS = [
    ({"prompt": "Which?", "kind": "choice", "options": ",".join("ABCDEFGHIJKLM")}, "options",
     "at most 12 items", "最多 12 项，收到 13 项"),
    ({"prompt": "Which?", "kind": "choice", "options": "A, " + "B" * 81}, "options",
     "Option 2: String should have at most 80 characters", "第 2 个选项: 最多 80 个字符"),
    ({"prompt": "Which?", "kind": "choice", "options": "A"}, "options",
     "a choice poll needs at least two", "选择题至少需要两个选项"),
    ({"prompt": "Which?", "kind": "choice", "options": "A, A"}, "options",
     "each option must be different", "每个选项都必须不同"),
    ({"prompt": "Which?", "kind": "choice", "options": "A, B", "answer": "C"}, "answer",
     "must be one of the options", "必须是其中一个选项"),
    ({"prompt": "Which?", "kind": "cell", "shape": '{"rows": 3, "cols": 3}', "answer": "5,5"}, "answer",
     "cell [5, 5] is outside the matrix", "单元格 [5, 5] 在矩阵之外"),
    ({"prompt": "", "kind": "choice", "options": "A, B"}, "prompt",
     "String should have at least 1 character", "至少 1 个字符"),
]  # fmt: skip


@pytest.mark.parametrize(("form", "field", "en", "zh"), REFUSALS)
def test_a_refused_question_says_why_under_its_field(
    teacher: tuple[TestClient, str], form: dict[str, str], field: str, en: str, zh: str
) -> None:
    client, code = teacher
    for lang, words in (("en", en), ("zh", zh)):
        status, errors, page = said(client, code, form | {"lang": lang})
        assert status == 422, (lang, page.text[:300])
        assert set(errors) == {field}, (lang, errors)
        assert words in errors[field], (lang, errors)
        typed = page.select_one(f"[name={field}]")
        assert typed is not None and typed.get("aria-invalid") == "true"  # the field marked, its value as typed
        if field != "kind" and form.get(field):
            assert typed.get("value") == form[field][:600]
    assert client.get(f"/api/v1/rooms/{code}").json()["poll"] is None  # nothing was opened


def test_the_api_keeps_its_english_for_the_same_refusals(teacher: tuple[TestClient, str]) -> None:
    """The API's words are unchanged by the catalogue codes its refusals now carry."""
    client, code = teacher
    body = {"prompt": "Which?", "kind": "choice", "options": ["A"]}
    r = client.post(f"/api/v1/rooms/{code}/polls", json=body, headers=HTMX)
    assert r.status_code == 422
    assert r.content == (
        b'{"message":"request: options: a choice poll needs at least two","detail":[{"loc":["body",'
        b'"request"],"msg":"options: a choice poll needs at least two","type":"value_error"}]}'
    )
    r = client.post(f"/api/v1/rooms/{code}/polls", json=body | {"kind": "cell", "options": [], "rows": 2, "cols": 2,
                                                                "answer": "2,0"}, headers=HTMX)  # fmt: skip
    assert r.json()["message"] == "request: answer: cell [2, 0] is outside the matrix"


def test_an_accepted_question_opens_the_poll(teacher: tuple[TestClient, str]) -> None:
    client, code = teacher
    status, errors, _ = said(client, code, {"prompt": "Which?", "kind": "choice", "options": "猫，坐, sat",
                                            "answer": "猫", "lang": "zh"})  # fmt: skip
    assert status == 201 and not errors
    poll_id = client.get(f"/api/v1/rooms/{code}").json()["poll"]
    poll = client.get(f"/api/v1/rooms/{code}/polls/{poll_id}").json()
    assert poll["options"] == ["猫", "坐", "sat"] and poll["prompt"] == "Which?"


def test_the_remote_posts_its_question_by_htmx(teacher: tuple[TestClient, str]) -> None:
    client, code = teacher
    page = BeautifulSoup(client.get(f"/r/{code}/teach?lang=zh").text, "html.parser")
    form = page.select_one("form[data-poll-form]")
    assert form is not None and form["hx-post"] == f"/r/{code}/ask"
    assert form.select_one("[data-poll-fields] [name=prompt]") is not None
    assert page.select_one("[data-remote-now] input[name=shape]") is not None  # a cell question's matrix


def test_another_sites_form_opens_no_question(teacher: tuple[TestClient, str]) -> None:
    client, code = teacher
    r = client.post(f"/r/{code}/ask", data={"prompt": "Which?", "kind": "choice", "options": "A, B"},
                    headers={"Origin": "https://elsewhere.example", "Sec-Fetch-Site": "cross-site"})  # fmt: skip
    assert r.status_code == 403 and client.get(f"/api/v1/rooms/{code}").json()["poll"] is None
