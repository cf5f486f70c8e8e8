"""HTTP conformance (#36 item 7): HEAD wherever GET is, a 405 that fills Allow, an empty body named as the body, and
echoes of a bad value bounded as every field's are."""

from __future__ import annotations

import contextlib
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


@pytest.mark.parametrize(("path", "get", "post"), [
    ("/api/v1/attention", {"tokens": "a b", "txet": "a"}, {"tokens": ["a", "b"], "txet": "a"}),
    ("/api/v1/predict", {"text": "hello", "txet": "a"}, {"text": "hello", "txet": "a"}),
    ("/api/v1/head_ranking", {"text": "hello", "txet": "a"}, {"text": "hello", "txet": "a"}),
])  # fmt: skip
def test_a_key_no_view_reads_is_refused_by_both_twins(client: Any, path: str, get: Any, post: Any) -> None:
    typo = client.get(path, params=get)
    assert typo.status_code == 422 and typo.json()["detail"][0]["loc"] == ["query", "txet"]
    assert "no field of any view" in typo.json()["message"] and "text" in typo.json()["message"]
    posted = client.post(path, json=post)
    assert posted.status_code == 422 and posted.json()["detail"][0]["loc"] == ["body", "txet"]


def test_an_odd_unknown_key_is_named_bounded(client: Any) -> None:
    long = client.get("/api/v1/attention", params={"tokens": "a b", "k" * 5000: "1"})
    assert long.status_code == 422 and len(long.json()["detail"][0]["loc"][1]) < 40 and "k" * 41 not in long.text
    empty = client.get("/api/v1/attention?tokens=a+b&=1")
    assert empty.status_code == 422 and empty.json()["detail"][0]["loc"] == ["query", "''"]


def test_another_views_query_rides_along_on_a_get_twin(client: Any) -> None:
    """A page's query pasted onto an operation's GET: the lab's stage and comparison, the tiles' block sizes, the
    model views' knock-outs, /predict's form words, what every page carries: read by some view, so not refused."""
    base = client.get("/api/v1/attention", params={"tokens": "a b"})
    pasted = client.get("/api/v1/attention", params={
        "tokens": "a b", "stage": "4", "lang": "zh", "present": "1", "lesson": "scale", "lesson_step": "1",
        "compare_text": "c d", "block_q": "2", "qb": "1", "ablate": "0.0", "replace_at": "1", "form": "1",
        "step": "2", "knock": "3"})  # fmt: skip
    assert pasted.status_code == 200 and pasted.json() == base.json()


def test_every_key_a_page_reads_is_a_view_key(client: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """What a GET twin lets ride along is computed from what the app declares: every key each page asks its view
    state for (its request fields, its own parameters, their aliases) is in it."""
    from fastapi.routing import APIRoute, iter_route_contexts

    from app.web import state
    from app.web.answer import view_keys

    asked: dict[str, set[str]] = {}

    class Seen(Exception):
        pass

    query_of = state.PageQuery.of.__func__  # type: ignore[attr-defined]

    def recording_query(cls: Any, query: Any, path: str, api_keys: tuple[str, ...] = ()) -> Any:
        done = query_of(cls, query, path, api_keys)
        asked[path] = {*done.page_keys, *cls.keys()}
        raise Seen

    monkeypatch.setattr(state.PageQuery, "of", classmethod(recording_query))
    pages = [c.original_route.path for c in iter_route_contexts(client.app.routes)
             if isinstance(c.original_route, APIRoute) and not c.original_route.path.startswith("/api/")
             and "GET" in c.original_route.methods and "{" not in c.original_route.path]  # fmt: skip
    for path in pages:
        with contextlib.suppress(Seen):
            client.get(path)
    pages_seen = {"/", "/embed", "/block", "/decode", "/tiles", "/predict", "/lens", "/heads", "/patch", "/train"}
    assert pages_seen <= set(asked)
    known = view_keys(client.app)
    assert {path: keys - known for path, keys in asked.items() if keys - known} == {}


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


@pytest.mark.parametrize(("path", "counted"), [("/api/v1/predict", "input tokens"), ("/api/v1/logit_lens", "tokens")])
def test_too_many_token_ids_are_counted_not_called_a_text(client: Any, path: str, counted: str) -> None:
    """Past even a long context's bound, token_ids were refused with "the text is longer", though no text was given;
    the ids are counted as a shorter excess is (with the BOS, and for predict the EOS, put around them: 7501 either
    way, predict counting its inputs)."""
    r = client.post(path, json={"token_ids": [300] * 7500})
    assert r.status_code == 422 and r.json()["message"] == f"token_ids: at most 1024 {counted} here, got 7501"
    short = client.post(path, json={"token_ids": [300] * 1100})
    assert short.json()["message"] == f"token_ids: at most 1024 {counted} here, got 1101"


def test_the_lens_reads_a_single_token(client: Any) -> None:
    one = client.post("/api/v1/logit_lens", json={"text": "hello", "bos": False})
    assert one.status_code == 200 and one.json()["tokens"] == ["hello"] and len(one.json()["final"]) == 1


def test_every_integer_bound_in_openapi_is_the_one_the_api_applies(client: Any) -> None:
    """FastAPI writes /openapi.json's bounds as floats: a seed's `le=2**63 - 1` was documented as ≤ 2**63
    (9223372036854775808, in docs/api.md too), a value every such field refused. Each request body's integer bounds,
    as /openapi.json documents them, are exactly pydantic's (the ones applied); the largest seed documented is taken
    and the next refused."""
    from app.attribution.api import AttributionRequest
    from app.generate.view import GenerateRequest
    from app.schemas import AttentionRequest, BlockRequest, DecodeRequest, TilesRequest

    schemas = client.get("/openapi.json").json()["components"]["schemas"]
    models = (AttentionRequest, BlockRequest, DecodeRequest, TilesRequest, AttributionRequest, GenerateRequest)
    checked = 0
    for model in models:
        documented = schemas[model.__name__]["properties"]
        for field, prop in model.model_json_schema()["properties"].items():
            for branch, shown in zip(
                [prop, *prop.get("anyOf", [])], [documented[field], *documented[field].get("anyOf", [])], strict=True
            ):
                for key in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
                    if branch.get("type") == "integer" and key in branch:
                        assert shown[key] == branch[key], (
                            f"{model.__name__}.{field}: {key} {shown[key]} is not {branch[key]}"
                        )
                        checked += 1
    assert checked > 20
    for name, path, body in (("GenerateRequest", "/api/v1/generate", {"text": "a b", "max_new_tokens": 1}),
                             ("AttentionRequest", "/api/v1/attention", {"tokens": "a b"})):  # fmt: skip
        bound = schemas[name]["properties"]["seed"]["exclusiveMaximum"]
        refused = client.post(path, json=body | {"seed": int(bound)})
        assert refused.status_code == 422 and "seed" in refused.json()["message"]
    assert client.post("/api/v1/attention", json={"tokens": "a b", "seed": 2**63 - 1}).status_code == 200


@pytest.mark.parametrize(
    ("path", "body", "inner"),
    [
        ("/api/v1/predict", {"text": "The cat"}, lambda d: [d["positions"][0], d["positions"][0]["top"][0]]),
        ("/api/v1/logit_lens", {"text": "The cat"}, lambda d: [d["layers"][0][0], d["layers"][0][0]["top"][0]]),
        ("/api/v1/decode", {"tokens": "a b c"}, lambda d: [d["prefill"], d["steps"][0], d["checks"]]),
    ],
)
def test_every_field_of_an_answer_is_named_in_its_documentation(client: Any, path: str, body: Any, inner: Any) -> None:
    """The operations' descriptions in /openapi.json left fields of their answers unnamed (predict: token_ids,
    target_ids, text_start, input_id…; the lens: final_ids, switches, before, changed…; decode: k_new, v_new,
    k_cache, cache_len, checks…)."""
    import re

    doc = client.post(path, json=body).json()
    said = client.get("/openapi.json").json()["paths"][path]["post"]["description"]
    keys = {*doc, *(k for part in inner(doc) for k in part)} - {"provenance"}
    assert sorted(k for k in keys if not re.search(rf"(?<![\w.]){k}(?!\w)", said)) == []
