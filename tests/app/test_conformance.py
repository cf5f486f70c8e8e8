"""HTTP conformance (#36 item 7): HEAD wherever GET is, a 405 that fills Allow, an empty body named as the body, and
echoes of a bad value bounded as every field's are."""

from __future__ import annotations

from typing import Any

import pytest


@pytest.mark.parametrize("path", ["/healthz", "/", "/api/v1/models", "/api/v1/attention?tokens=a+b", "/lessons",
                                  "/static/lab.css", "/index.json"])  # fmt: skip
def test_head_is_answered_wherever_get_is_with_gets_headers_and_no_body(client: Any, path: str) -> None:
    got, head = client.get(path), client.head(path)
    assert got.status_code == head.status_code == 200
    assert head.content == b"" and head.headers["content-type"] == got.headers["content-type"]
    assert head.headers["content-length"] == got.headers["content-length"]


@pytest.mark.parametrize(("method", "path", "allowed"), [
    ("POST", "/healthz", "GET, HEAD"), ("PUT", "/api/v1/attention", "GET, HEAD, POST"),
    ("DELETE", "/", "GET, HEAD"), ("GET", "/api/v1/rooms", "POST"),
])  # fmt: skip
def test_a_405_says_which_methods_the_path_takes(client: Any, method: str, path: str, allowed: str) -> None:
    r = client.request(method, path)
    assert r.status_code == 405 and r.headers["allow"] == allowed


@pytest.mark.parametrize("path", ["/api/v1/attention", "/api/v1/block", "/api/v1/predict"])
def test_an_empty_body_is_named_as_the_body(client: Any, path: str) -> None:
    r = client.post(path, content=b"", headers={"content-type": "application/json"})
    assert r.status_code == 422
    assert r.json()["detail"][0]["loc"] == ["body"] and "body was empty" in r.json()["message"]


def test_an_unknown_lesson_is_echoed_bounded(client: Any) -> None:
    page = client.get("/", params={"lesson": "x" * 30_000})
    assert page.status_code == 422 and len(page.headers["x-lab-error"]) < 300
    assert "x" * 31 not in page.text
    api = client.get("/api/v1/lessons/" + "y" * 20_000)
    assert api.status_code == 404 and len(api.text) < 400 and "y" * 31 not in api.text


def test_a_repeated_field_is_refused_by_both_twins(client: Any) -> None:
    twice = client.post("/api/v1/attention", content=b'{"tokens": ["a", "b"], "seed": 1, "seed": 2}',
                        headers={"content-type": "application/json"})  # fmt: skip
    assert twice.status_code == 422 and twice.json()["detail"][0]["loc"] == ["body", "seed"]
    assert "more than once" in twice.json()["message"]
    get_twice = client.get("/api/v1/attention?tokens=a+b&seed=1&seed=2")
    assert get_twice.status_code == 422 and "more than once" in get_twice.json()["message"]


@pytest.mark.parametrize(("path", "limit"), [("/api/v1/predict", 1024), ("/api/v1/head_ranking", 256)])
def test_a_long_text_is_told_the_limit_that_applies(client: Any, path: str, limit: int) -> None:
    r = client.post(path, json={"token_ids": [300] * 7500})
    assert r.status_code == 422 and f"at most {limit} input tokens" in r.json()["message"]
    assert r.json()["detail"][0]["loc"] == ["body", "token_ids"]


def test_the_lens_reads_a_single_token(client: Any) -> None:
    one = client.post("/api/v1/logit_lens", json={"text": "hello", "bos": False})
    assert one.status_code == 200 and one.json()["tokens"] == ["hello"] and len(one.json()["final"]) == 1
