"""The OpenAPI contract is as strict as the API (issue #24, item 11): a GET's query parameters carry the bounds of
the body field they mirror (schemathesis called `d_model=0`, `size=0`, `block_q=0` valid requests wrongly refused),
and every operation that takes a body documents the 413 that the body limit answers before any route."""

from __future__ import annotations

from typing import Any

import pytest

from app.main import create_app
from app.schemas import AttentionRequest, BlockRequest, DecodeRequest, TilesRequest, query_parameters
from app.settings import Settings


@pytest.fixture(scope="module")
def schema() -> dict[str, Any]:
    return create_app(Settings(device="cpu")).openapi()


def integer_option(param: dict[str, Any]) -> dict[str, Any]:
    return next(o for o in param["schema"].get("anyOf", [param["schema"]]) if o.get("type") == "integer")


def query_param(schema: dict[str, Any], path: str, name: str) -> dict[str, Any]:
    return next(p for p in schema["paths"][path]["get"]["parameters"] if p["name"] == name)


@pytest.mark.parametrize(
    "path, name, minimum, maximum",
    [
        ("/api/v1/attention", "d_model", 1, None),
        ("/api/v1/attention/tiles", "block_q", 1, 1024),
        ("/api/v1/attention/heatmap.png", "size", 16, 2048),
        ("/api/v1/block/heatmap.png", "size", 16, 2048),
        ("/api/v1/attention/window", "rows", 1, None),
        ("/api/v1/attention/window", "head", 0, None),
    ],
)
def test_query_parameters_state_the_bounds_the_api_enforces(
    schema: dict[str, Any], path: str, name: str, minimum: int, maximum: int | None
) -> None:
    option = integer_option(query_param(schema, path, name))
    assert option.get("minimum") == minimum
    assert option.get("maximum") == maximum


@pytest.mark.parametrize("model", [AttentionRequest, BlockRequest, TilesRequest, DecodeRequest])
def test_every_bounded_field_keeps_its_bounds_as_a_query_parameter(model: Any) -> None:
    props = model.model_json_schema()["properties"]
    for param in query_parameters(model):
        prop = props[param["name"]]
        options = [o for o in prop.get("anyOf", [prop]) if o.get("type") == "integer"]
        if not options or "enum" in param["schema"]:
            continue
        bounds = {k: v for k, v in options[0].items() if k in ("minimum", "maximum", "exclusiveMinimum")}
        documented = integer_option(param)
        assert {k: documented.get(k) for k in bounds} == bounds, param["name"]


def test_the_documented_bounds_are_the_refused_ones() -> None:
    from tests.conftest import make_client

    client = make_client()
    assert client.get("/api/v1/attention", params={"d_model": "0"}).status_code == 422  # documented invalid now
    assert client.get("/api/v1/attention/heatmap.png", params={"size": "15"}).status_code == 422
    assert client.get("/api/v1/attention/heatmap.png", params={"size": "16"}).status_code == 200


def test_every_operation_with_a_body_documents_the_413(schema: dict[str, Any]) -> None:
    with_body = [
        (method, path)
        for path, operations in schema["paths"].items()
        for method, operation in operations.items()
        if method in ("post", "put", "patch")
    ]
    assert len(with_body) > 10
    missing = [f"{m.upper()} {p}" for m, p in with_body if "413" not in schema["paths"][p][m]["responses"]]
    assert not missing
    too_large = schema["paths"]["/api/v1/rooms"]["post"]["responses"]["413"]
    assert too_large["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/Problem"}
    assert "Problem" in schema["components"]["schemas"]


def test_a_url_too_long_to_parse_is_a_json_414_naming_the_parameter() -> None:
    """uvicorn's httptools cannot index a URL past 64 KiB and answered a bare text 400 (`/api/v1/progress?for=…`)."""
    import socket

    from tests.servers import served

    with served({}) as (base, _):
        conn = socket.create_connection(("127.0.0.1", int(base.rsplit(":", 1)[1])), timeout=60)
        request = f"GET /api/v1/progress?for=/x%3F{'a' * 70_000} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        conn.sendall(request.encode())
        answer = b""
        while chunk := conn.recv(65536):
            answer += chunk
        conn.close()
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 414 ")
    assert b"content-type: application/json" in head.lower()
    import orjson

    problem = orjson.loads(body)
    assert problem["detail"][0]["loc"] == ["query", "for"] and problem["message"].startswith("for: ")


# Room and poll bodies (issue #24, item 11): what each body's schema calls valid, the API accepts, and what it calls
# invalid, the API refuses, for every rule a JSON Schema can state (schemathesis' positive_data_acceptance found the
# bodies' own rules unstated: the lab pages a room may show, a query's characters and length, a poll's options by
# kind, an answer's bounds, a lesson's slug, and whole numbers written 3.0).


@pytest.fixture(scope="module")
def rooms_client() -> Any:
    from tests.conftest import make_client

    return make_client(room_unknown_codes_per_minute=10**9, room_creates_per_minute=10**6)


def schema_says(schema: dict[str, Any], component: str, instance: Any) -> bool:
    """The schema's verdict as schemathesis reads it: patterns as ECMA-262 does (`$` is the end of the text; Python's
    `re.search` would also let it match before a final newline), by the Rust validator schemathesis itself uses."""
    jsonschema_rs = pytest.importorskip("jsonschema_rs")
    ref = {"$ref": f"#/components/schemas/{component}", "components": schema["components"]}
    return bool(jsonschema_rs.validator_for(ref).is_valid(instance))


@pytest.mark.parametrize(
    "body",
    [
        {"page": "/block"},
        {"page": ""},
        {"page": "/lessons/scale"},
        {"page": "/lessons/no-such-lesson"},
        {"page": "/nowhere"},
        {"query": "?stage=softmax&mask=causal"},
        {"query": "x" * 32_760},
        {"query": "x" * 32_761},
        {"query": "a b"},
        {"query": "a#b"},
        {"query": "a\tb"},
    ],
)
def test_a_room_body_is_accepted_exactly_when_its_schema_says_so(
    schema: dict[str, Any], rooms_client: Any, body: dict[str, Any]
) -> None:
    r = rooms_client.post("/api/v1/rooms", json=body)
    assert r.status_code in (201, 422), r.text
    assert (r.status_code == 201) == schema_says(schema, "ViewIn", body), r.text[:200]


def test_the_query_limit_stated_is_this_servers() -> None:
    from app.rooms.service import SHOWN_WITH

    small = create_app(Settings(device="cpu", max_query_kb=4)).openapi()
    assert small["components"]["schemas"]["ViewIn"]["properties"]["query"]["maxLength"] == 4096 - len(SHOWN_WITH)


POLLS = [
    {"prompt": "Q", "kind": "choice", "options": ["a", "b"], "answer": "a"},
    {"prompt": "Q", "kind": "choice", "options": ["a"]},
    {"prompt": "Q", "kind": "choice", "options": ["a", "a"]},
    {"prompt": "Q", "kind": "cell", "rows": 4, "cols": 4, "answer": " 3 , 0 "},
    {"prompt": "Q", "kind": "cell", "answer": "4095,0"},
    {"prompt": "Q", "kind": "cell", "answer": "4096,0"},
    {"prompt": "Q", "kind": "cell", "answer": "3;0"},
    {"prompt": "Q", "kind": "cell", "options": ["a", "b"]},
    {"prompt": "Q", "kind": "cell", "rows": 4.0, "cols": 2},
    {"prompt": "Q", "kind": "cell", "rows": 4.5},
]


@pytest.mark.parametrize("body", POLLS)
def test_a_poll_is_accepted_exactly_when_its_schema_says_so(
    schema: dict[str, Any], rooms_client: Any, body: dict[str, Any]
) -> None:
    room = rooms_client.post("/api/v1/rooms", json={}).json()
    auth = {"Authorization": f"Bearer {room['teacher_token']}"}
    r = rooms_client.post(f"/api/v1/rooms/{room['code']}/polls", json=body, headers=auth)
    assert r.status_code in (201, 422), r.text
    assert (r.status_code == 201) == schema_says(schema, "PollIn", body), r.text[:200]


ANSWERS = [
    {"student": "s1", "answer": 1},
    {"student": "s1", "answer": 1.0},
    {"student": "s1", "answer": -1},
    {"student": "s1", "answer": ""},
    {"student": "s1", "answer": [1, 2]},
    {"student": "s1", "answer": [1]},
    {"student": "s1", "answer": [1, -2]},
    {"student": "s1", "answer": [1, 2, 3]},
    {"student": "s1", "answer": "b", "nickname": "Ada 🐱"},
    {"student": "s1", "answer": "b", "nickname": "Ada\n"},
    {"student": "s1", "answer": "b", "nickname": "Ada\u200b"},
]


@pytest.mark.parametrize("body", ANSWERS)
def test_an_answer_the_schema_refuses_is_refused_before_the_poll_is_looked_up(
    schema: dict[str, Any], rooms_client: Any, body: dict[str, Any]
) -> None:
    """No room has this code: a schema-valid answer is a 404 (no such room), a schema-invalid one a 422 at once."""
    r = rooms_client.post("/api/v1/rooms/ZZZZZZ/polls/0000/answers", json=body)
    assert r.status_code == (404 if schema_says(schema, "AnswerIn", body) else 422), r.text[:200]


def test_a_lesson_poll_names_the_lessons_and_poll_ids_are_never_lesson(schema: dict[str, Any]) -> None:
    from app.web import lessons

    lesson = schema["components"]["schemas"]["LessonPollIn"]["properties"]["lesson"]
    assert set(lesson["enum"]) == set(lessons.BY_SLUG)
    poll_id = query_param(schema, "/api/v1/rooms/{code}/polls/{poll_id}", "poll_id")
    assert poll_id["schema"]["not"] == {"const": "lesson"}  # GET …/polls/lesson is the lesson poll's own route


def test_every_operation_has_a_summary_written_for_a_reader(schema: dict[str, Any]) -> None:
    """/docs lists operations by summary; FastAPI's fallback is the function's name in title case ("Attention Get",
    "Export Csv"), which says nothing to a newcomer (issue #42, item 7). Every operation names what it does."""
    generated = []
    for path, operations in schema["paths"].items():
        for method, op in operations.items():
            summary = op.get("summary", "")
            fallback = op["operationId"].split("_api_v1")[0].split("__")[0].replace("_", " ").title()
            if not summary or summary == fallback or summary.istitle():
                generated.append(f"{method.upper()} {path}: {summary!r}")
    assert not generated, "operations without a written summary:\n" + "\n".join(generated)


def test_the_api_explains_itself_where_it_is_read(schema: dict[str, Any]) -> None:
    """/docs opens on what a newcomer needs first: the pages' JSON twins, masked entries as null, the Python client,
    and each tag's purpose (issue #42, item 7)."""
    said = schema["info"]["description"]
    for needed in ("/index.json", "Accept: application/json", "`null`", ".npz", "attention_lab", "LabView"):
        assert needed in said, needed
    used = {tag for ops in schema["paths"].values() for op in ops.values() for tag in op.get("tags", [])}
    described = {t["name"] for t in schema.get("tags", []) if t.get("description")}
    assert used <= described, f"tags without a description: {sorted(used - described)}"
