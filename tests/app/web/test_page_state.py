"""The page query (app/web/state.py `PageQuery`): the URL read once into a pydantic model holding what every page
shares (presenter mode, hints, the lesson beside it, the language) and each page's own typed fields; one spelling
of a key in the links, its older spellings read as aliases, and an error that names the key the user typed."""

from __future__ import annotations

from typing import Annotated, Any, ClassVar

import pytest
from bs4 import BeautifulSoup
from pydantic import AliasChoices, BeforeValidator, Field

from app.attention.view import LabQuery
from app.schemas import FieldError, head_within
from app.web.state import Cell, PageQuery, digits, within


class Counted(PageQuery):
    reads: ClassVar[list[str]] = []

    n: Annotated[int, BeforeValidator(lambda raw: Counted.reads.append(raw) or digits(raw))] = Field(
        3, validation_alias=AliasChoices("n", "old")
    )
    word: str = ""


def state(query: dict[str, str]) -> Counted:
    return Counted.of(query, "/x", ("preset",))


def test_a_pages_parameters_are_read_once_and_typed() -> None:
    Counted.reads.clear()
    s = state({"n": " 7 ", "word": "cat", "unknown": "dropped"})
    assert (s.n, s.word) == (7, "cat")
    assert Counted.reads == ["7"]  # stripped, read once
    assert "unknown" not in s.params
    assert (state({}).n, state({}).word) == (3, "")  # a missing key is the field's default


def test_an_alias_is_read_as_its_key_and_links_write_the_key() -> None:
    s = state({"old": "5", "lang": "zh"})
    assert s.n == 5 and s.spelled == {"n": "old"}
    assert s.url(word="x") == "/x?n=5&word=x&lang=zh"
    both = state({"old": "5", "n": "6"})  # the key itself wins over an alias
    assert both.n == 6 and both.spelled == {}


def test_an_error_names_the_key_the_user_typed() -> None:
    with pytest.raises(FieldError) as e:
        state({"old": "x"}).check()
    assert e.value.field == "old" and "digits 0-9" in e.value.message
    with pytest.raises(FieldError) as e:
        state({"n": "-1"}).check()
    assert e.value.field == "n" and e.value.message == "must be at least 0, got -1"
    with pytest.raises(FieldError, match="digits 0-9"):
        state({"n": "²"}).check()  # int() would take it
    kept = state({"n": "x", "present": "1"})
    assert kept.present and kept.url() == "/x?n=x&present=1"  # the rest read, the text kept for the links


def test_common_parameters_every_page_shares() -> None:
    s = state({"present": "1", "hints": "off", "lesson": "five-stages", "lesson_step": "2"})
    assert s.present and not s.hints
    assert (s.lesson, s.lesson_step) == ("five-stages", 2)
    plain = state({"present": "yes"})
    assert not plain.present and plain.hints and plain.lesson == "" and plain.lesson_step is None
    # the shared keys come after the page's own, `lang` last: every page's links are written in one order
    assert state({}).page_keys == ("preset", "n", "word", "present", "hints", "lesson", "lesson_step", "lang")


def test_bounds_known_after_computing_say_what_digits_says() -> None:
    assert within("step", 3, 0, 5) == 3
    with pytest.raises(FieldError, match="must be between 0 and 5, got 9"):
        within("step", 9, 0, 5)
    with pytest.raises(FieldError, match=r"head 4 does not exist: this trace has heads 0..3"):
        head_within(4, 4)


def test_the_labs_parameters() -> None:
    p = LabQuery.of({"stage": "4", "head": "1", "cell": "weights.1.2.0", "tile": "16,32", "step": "2"}, "/")
    assert (p.stage, p.head, p.tile, p.lesson_step) == ("softmax", 1, (16, 32), 2)
    assert p.cell == Cell("weights", 1, 2, 0)
    assert p.url() == "/?stage=4&head=1&cell=weights.1.2.0&tile=16%2C32&lesson_step=2"  # as typed, in one spelling


def soup(client: Any, url: str) -> BeautifulSoup:
    r = client.get(url)
    assert r.status_code == 200, (url, r.headers.get("x-lab-error"))
    return BeautifulSoup(r.text, "html.parser")


def test_the_labs_older_lesson_step_spelling_still_opens_the_step(client: Any) -> None:
    page = soup(client, "/?stage=3&lesson=five-stages&step=3&lang=en")
    assert page.select_one('.lesson-panel[data-lesson="five-stages"][data-step="3"]') is not None
    nxt = page.select_one("a[data-lesson-step=next]")["href"]
    assert "lesson_step=4" in nxt and "&step=" not in nxt  # one spelling in every link
    assert "lesson_step=3" in page.select_one("[data-action=next]")["href"]  # the lab's own links keep the step


@pytest.mark.parametrize(
    ("query", "field"),
    [("lesson=nope", "lesson"), ("lesson=five-stages&lesson_step=9", "lesson_step"),
     ("lesson=five-stages&step=9", "step"), ("lesson=five-stages&lesson_step=x", "lesson_step")],
)  # fmt: skip
@pytest.mark.parametrize("path", ["/", "/block", "/params"])
def test_a_bad_lesson_is_the_requests_error_on_every_page(client: Any, path: str, query: str, field: str) -> None:
    if path != "/" and field == "step":
        query = query.replace("step=", "lesson_step=")
        field = "lesson_step"
    r = client.get(f"{path}?{query}&lang=en")
    assert r.status_code == 422 and field in r.headers["x-lab-error"], (path, query, r.headers.get("x-lab-error"))


@pytest.mark.parametrize(
    ("path", "twin"),
    [("/heads", "/api/v1/head_roles?"), ("/patch", "/api/v1/patch?"), ("/model", "/api/v1/model_view?"),
     ("/decode", "/api/v1/decode?"), ("/generate", "/api/v1/generate?"), ("/predict", None), ("/lens", None)],
)  # fmt: skip
def test_a_page_refused_before_its_view_keeps_its_form(client: Any, path: str, twin: str | None) -> None:
    """An unknown lesson is refused before the page's View is built (its lesson panel comes first): the 422 page
    still offers its form's models and its JSON twin, to correct the request from (page_route's `form`)."""
    r = client.get(f"{path}?lesson=nope&lang=en")
    assert r.status_code == 422 and "lesson" in r.headers["x-lab-error"]
    page = BeautifulSoup(r.text, "html.parser")
    if path != "/generate":  # generation's form has no model to choose
        assert page.select("select[name=preset] option"), path
    link = page.select_one('link[rel=alternate][type="application/json"]')
    if twin:
        assert link is not None and link["href"].startswith(twin), (path, link)
    else:
        assert link is None, (path, link)  # /predict and /lens link the API from their View: none before it


def test_a_lesson_beside_another_page_stays_in_its_links(client: Any) -> None:
    page = soup(client, "/block?stage=2&lesson=five-stages&lesson_step=2&lang=en")
    assert page.select_one(".lesson-beside .lesson-panel[data-step='2']") is not None
    stage_links = [a["href"] for a in page.select("a[data-block-stage]")]
    assert stage_links and all("lesson=five-stages" in u and "lesson_step=2" in u for u in stage_links)


def test_the_knockout_field_is_spelled_ablate_and_heads_still_reads(client: Any) -> None:
    old = client.get("/predict.json", params={"text": "The cat sat on the mat.", "heads": "1.0"}).json()
    new = client.get("/predict.json", params={"text": "The cat sat on the mat.", "ablate": "1.0"}).json()
    assert old["switches"]["ablate"] == new["switches"]["ablate"] == [[1, 0]]
    assert old["columns"] == new["columns"]
    assert "ablate=1.0" in new["columns"][0]["url"] and "heads=" not in new["columns"][0]["url"]
    json_pairs = client.get("/model.json", params={"preset": "smollm2", "text": "a b c", "ablate": "[[1,0]]"})
    assert json_pairs.status_code == 200 and "ablate=%5B%5B1%2C0%5D%5D" in json_pairs.json()["json_url"]
