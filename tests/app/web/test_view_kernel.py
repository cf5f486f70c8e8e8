"""The View kernel (#21): the lab page's JSON face holds every number, notice and link the page shows (the other
pages: tests/app/web/test_three_faces.py and test_json_faces.py), /openapi.json describes every View, and any View renders in a
notebook from its own template."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest
from bs4 import BeautifulSoup
from fastapi.testclient import TestClient
from pydantic import PydanticSchemaGenerationError, create_model

from app.params.view import ParamsQuery, ParamsView, params_view
from app.templating import translator
from app.web.view import View, all_views
from tests.app.web.test_json_faces import walk

GPT2_LONG = " ".join(["the", "cat", "sat", "on", "a", "mat"] * 6)
LAB = [
    pytest.param({"stage": "projection"}, id="toy-projection"),
    pytest.param({"stage": "mask", "cell": "masked.0.2.1", "compare": "mask"}, id="toy-mask-cell-compare"),
    pytest.param({"stage": "softmax", "lang": "zh", "hints": "off"}, id="toy-softmax-zh-hints-off"),
    pytest.param({"stage": "weighted_sum", "preset": "gpt2-small", "tokens": "The cat sat"}, id="gpt2-small"),
    pytest.param({"stage": "softmax", "preset": "gpt2-small", "tokens": GPT2_LONG, "tile": "16,0"}, id="gpt2-large"),
    pytest.param({"stage": "mask", "mask": "document", "segment_ids": "0,0,1,1,1", "compare": "leak"}, id="leak"),
    pytest.param({"stage": "scores", "lesson": "five-stages", "step": "2", "present": "1"}, id="lesson-present"),
]


def page_and_twin(client: TestClient, params: dict[str, str]) -> tuple[BeautifulSoup, dict[str, Any]]:
    page = client.get("/", params=params)
    assert page.status_code == 200, page.text[:300]
    twin = client.get("/index.json", params=params)
    assert twin.status_code == 200 and twin.json()["view"] == "lab"
    return BeautifulSoup(page.text, "html.parser"), twin.json()


def text(el: Any) -> str:
    return re.sub(r"\s+", " ", el.get_text(" ")).strip()


@pytest.mark.parametrize("params", LAB)
def test_the_lab_page_shows_nothing_its_twin_lacks(client: TestClient, params: dict[str, str]) -> None:
    page, doc = page_and_twin(client, params)
    numbers, strings = walk(doc)
    as_f32 = {np.float32(v) for v in numbers}
    stage = page.select_one("#stage")
    assert stage is not None
    cells = stage.select("td[data-value]")
    assert cells, "the stage shows numbers"
    for td in cells:
        value = td["data-value"]
        if value in ("-inf", "inf", "nan"):
            assert None in _nulls(doc), value  # JSON writes −∞ as null
            continue
        assert np.float32(float(value)) in as_f32, value
    joined = "\n".join(strings)
    for p in stage.select(".explain p.notice, .explain p:not(.notice)"):
        body = text(p).split(":", 1)[-1].strip()  # without the bold label ("What to notice:")
        assert body[:40] in re.sub(r"\s+", " ", joined), body[:80]
    for a in stage.select("nav.steps a[href], nav.heads a[href], nav.toggles a[href]"):
        href = a["href"]
        assert href in strings, href
    if page.select_one("aside.lesson-panel"):
        assert doc["lesson"]["question"] in strings
        assert "poll" not in doc["lesson"]  # it holds the key: never in a face anyone can read


def test_hints_off_keeps_the_lessons_answer_out_of_the_json_face_too(client: TestClient) -> None:
    params = {"stage": "softmax", "lesson": "five-stages", "step": "4"}
    assert client.get("/index.json", params=params).json()["lesson"]["answer"]
    hidden = client.get("/index.json", params=params | {"hints": "off"}).json()
    assert hidden["lesson"]["answer"] is None and hidden["lesson"]["question"]


def _nulls(doc: Any) -> list[Any]:
    out: list[Any] = []
    stack = [doc]
    while stack:
        v = stack.pop()
        if v is None:
            out.append(v)
        elif isinstance(v, dict):
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)
    return out


def test_a_bad_field_is_the_apis_422_on_the_json_face_and_inline_on_the_page(client: TestClient) -> None:
    twin = client.get("/index.json", params={"stage": "softmax", "head": "7"})
    assert twin.status_code == 422
    assert twin.json()["detail"][0]["loc"] == ["query", "head"]
    page = client.get("/", params={"stage": "softmax", "head": "7"})
    assert page.status_code == 422 and "head" in page.text


def test_the_twin_address_is_only_for_pages(client: TestClient) -> None:
    assert "paths" in client.get("/openapi.json").json()  # not taken for a page called /openapi
    assert client.get("/api/v1/presets.json").status_code == 404
    assert client.get("/nothing.json").status_code == 404


def test_openapi_describes_every_view(client: TestClient) -> None:
    schemas = client.get("/openapi.json").json()["components"]["schemas"]
    kinds = {cls.kind for cls in all_views()}
    assert {"lab", "block", "decode", "generate", "tiles", "sinks", "model", "params", "demos", "lessons",
            "lesson"} <= kinds  # fmt: skip
    for cls in all_views():
        schema = schemas[cls.__name__]
        assert schema["properties"]["view"]["const"] == cls.kind
        hidden = {name for name, f in cls.model_fields.items() if f.exclude}
        assert not hidden & set(schema["properties"]), cls.__name__
    lab = schemas["LabView"]["properties"]
    assert {"matrices", "notice", "formula", "checks", "stage_urls"} <= set(lab)
    assert "spec" not in lab and "qr" not in lab  # template-only


def test_views_hold_data_only() -> None:
    with pytest.raises(PydanticSchemaGenerationError):  # a field pydantic cannot write is refused where declared
        create_model("Holding", __config__=View.model_config, thing=(np.ndarray, None))
    view = ParamsView(total_millions=float("-inf"), misses=("a", "b"))
    assert view.to_json()["total_millions"] is None and view.to_json()["misses"] == ["a", "b"]  # −∞ as null


def test_every_nested_type_of_a_view_is_typed_in_openapi(client: TestClient) -> None:
    """No `Any` in a View's schema: each nested type (a matrix, a cell, a link, a lesson panel) has its own."""
    schemas = client.get("/openapi.json").json()["components"]["schemas"]
    seen: set[str] = set()
    todo = [cls.__name__ for cls in all_views()]

    def visit(node: Any, where: str) -> None:
        if isinstance(node, dict):
            assert node != {}, f"an untyped value at {where}"
            for k, v in node.items():
                if k == "$ref":
                    todo.append(v.rsplit("/", 1)[1])
                else:
                    visit(v, f"{where}.{k}")
        elif isinstance(node, list):
            for i, v in enumerate(node):
                visit(v, f"{where}[{i}]")

    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            visit(schemas[name], name)
    assert {"Matrix", "Panel", "Arithmetic", "LessonLink", "HeadLink", "ComparedCells", "RowStats"} <= seen
    lab = schemas["LabView"]["properties"]
    assert lab["matrices"]["anyOf"][0]["items"] == {"$ref": "#/components/schemas/Matrix"}
    assert schemas["Matrix"]["properties"]["values"]["items"]["items"]["anyOf"][1] == {"type": "null"}


def test_any_view_renders_in_a_notebook_from_its_own_template() -> None:
    view = params_view(ParamsQuery.model_validate({"preset": "gpt2-small"}), translator("zh"), "/api/v1/params")
    assert isinstance(view, View)
    html = view._repr_html_()
    assert "124,439,808" in html and "<pre>" not in html  # the page's own table, not the JSON fallback
    assert view._repr_json_()["view"] == "params"
