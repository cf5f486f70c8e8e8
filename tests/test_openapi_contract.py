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
