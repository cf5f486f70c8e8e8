"""Integers are ASCII digits only, on every route (app/web/state.py `digits`, app/schemas ASCII_INT): the query and
body models that pydantic reads itself (/api/v1/params, /api/v1/demo/*, POST /api/v1/train, /cost, /architectures and
/cross) refuse
" 3 ", "3_0", "+3", "3.0" and "٣" with a 422 naming the field, as every other integer of the lab does; pydantic's
lax int took the first four. A page's query is stripped before it is read (PageQuery.of), so " 3 " on a page is 3."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from tests.conftest import make_client

LENIENT = [" 3 ", "3_0", "+3", "3.0", "٣", ""]


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    with make_client() as c:
        yield c


@pytest.mark.parametrize("raw", LENIENT)
@pytest.mark.parametrize(("path", "base", "field"), [
    ("/api/v1/params", {"preset": "gpt2-small"}, "n_layer"),
    ("/api/v1/params", {"preset": "gpt2-small"}, "d_ff"),
    ("/api/v1/params", {"preset": "llama-2-7b"}, "n_kv_heads"),
    ("/api/v1/demo/rope", {}, "m"),
    ("/api/v1/demo/rope", {}, "d_k"),
    ("/api/v1/demo/rope", {}, "seed"),
    ("/api/v1/demo/permutation", {}, "seed"),
    ("/cost.json", {}, "n_max"),
    ("/architectures.json", {}, "pad"),
    ("/architectures.json", {}, "pos"),
    ("/cross.json", {}, "snap"),
    ("/cross.json", {}, "head"),
    ("/cross.json", {}, "nl_layer"),
    ("/cross.json", {}, "nl_head"),
])  # fmt: skip
def test_a_query_integer_is_ascii_digits(client: TestClient, path: str, base: dict[str, str], field: str,
                                         raw: str) -> None:  # fmt: skip
    r = client.get(path, params=base | {field: raw})
    if not path.startswith("/api/") and raw != raw.strip():  # a page strips its query first (PageQuery.of)
        assert r.status_code == client.get(path, params=base | {field: raw.strip()}).status_code
        return
    if raw == "" and not path.startswith("/api/"):  # a page's empty field is an untouched one: not given
        assert r.status_code == 200, r.text[:300]
        return
    assert r.status_code == 422, (path, field, raw, r.text[:300])
    assert r.json()["detail"][0]["loc"][-1] == field, r.text[:300]


def test_digits_are_still_read(client: TestClient) -> None:
    assert client.get("/api/v1/params", params={"preset": "gpt2-small", "n_layer": "3"}).json()["shape"]["n_layer"] == 3
    assert client.get("/api/v1/demo/rope", params={"m": "5", "n": "9"}).status_code == 200
    assert client.get("/cost.json", params={"n_max": "128"}).json()["n_max"] == 128


def test_a_page_strips_its_query_but_keeps_the_rule(client: TestClient) -> None:
    r = client.get("/params", params={"preset": "gpt2-small", "n_layer": " 3 "})
    assert r.status_code == 200 and "/api/v1/params?preset=gpt2-small&amp;n_layer=3" in r.text
    r = client.get("/params", params={"preset": "gpt2-small", "n_layer": "3_0", "lang": "zh"})
    assert r.status_code == 422 and "数字 0-9" in r.text


@pytest.mark.parametrize("raw", [" 3 ", "3_0", "+3", "3.0", "٣"])
def test_a_training_bodys_integer_is_a_number_or_ascii_digits(client: TestClient, raw: str) -> None:
    r = client.post("/api/v1/train", json={"steps": raw})  # refused before any run starts
    assert r.status_code == 422, r.text[:300]
    assert r.json()["detail"][0]["loc"][-1] == "steps"
