"""The JSON API: shapes, values, GET/POST twins, the cache, and every class of bad input."""

from __future__ import annotations

import io
import math

import numpy as np
import pytest

from tests.conftest import make_client

STAGE_KEYS = ["projection", "scores", "mask", "softmax", "weighted_sum"]


def test_presets_lists_dimensions_and_limits(client):
    r = client.get("/api/v1/presets")
    assert r.status_code == 200
    body = r.json()
    assert body["presets"]["gpt2-small"] | {"tokens": None} == {
        "d_model": 768,
        "n_heads": 12,
        "d_k": 64,
        "n_ctx": 1024,
        "max_tokens": 1024,
        "bias": True,
        "init_std": 0.02,
        "tokens": None,
    }
    assert body["presets"]["toy"]["tokens"] == ["猫", "坐", "在", "垫子", "上"]
    assert [s["key"] for s in body["stages"]] == STAGE_KEYS
    assert body["limits"]["max_tokens"] == 1024


def test_unknown_preset_lists_the_known_ones(client):
    r = client.post("/api/v1/attention", json={"preset": "gpt-5"})
    assert r.status_code == 422 and "toy, gpt2-small" in r.json()["message"]


def test_toy_trace_has_every_stage_and_tensor_shape(client):
    r = client.post("/api/v1/attention", json={"mask": "causal"})
    assert r.status_code == 200
    body = r.json()
    assert body["tokens"] == ["猫", "坐", "在", "垫子", "上"]
    assert body["spec"] | {"seed": 0} == body["spec"]
    assert body["spec"]["d_k"] == 4 and body["spec"]["n_tokens"] == 5 and body["spec"]["device"] == "cpu"
    assert body["spec"]["dtype"] == "float32"
    assert [(s["index"], s["key"]) for s in body["stages"]] == list(enumerate(STAGE_KEYS, 1))
    shapes = {k: np.array(v, dtype=float).shape for s in body["stages"] for k, v in s["tensors"].items()}
    assert shapes == {
        "x": (5, 4),
        "q": (1, 5, 4),
        "k": (1, 5, 4),
        "v": (1, 5, 4),
        "raw": (1, 5, 5),
        "scaled": (1, 5, 5),
        "mask": (5, 5),
        "masked": (1, 5, 5),
        "weights": (1, 5, 5),
        "heads": (1, 5, 4),
        "concat": (5, 4),
        "output": (5, 4),
    }
    assert body["checks"]["rows_sum_to_one"] is True
    assert body["checks"]["max_abs_diff_vs_sdpa"] < 1e-6


def test_masked_entries_are_null_and_row_one_is_one(client):
    body = client.get("/api/v1/attention", params={"mask": "causal", "stages": "mask,softmax"}).json()
    mask, softmax = body["stages"]
    assert mask["tensors"]["mask"][0] == [0.0, None, None, None, None]
    assert mask["tensors"]["masked"][0][0][1:] == [None] * 4
    assert softmax["tensors"]["weights"][0][0] == [1.0, 0.0, 0.0, 0.0, 0.0]


def test_values_are_recomputable_from_the_returned_tensors(client):
    """An independent float64 computation from the returned q, k, v reproduces every later stage."""
    body = client.get(
        "/api/v1/attention", params={"tokens": "a b c d", "mask": "causal", "d_model": 8, "n_heads": 2, "seed": 11}
    ).json()
    t = {k: v for s in body["stages"] for k, v in s["tensors"].items()}
    q, k, v = (np.array(t[n], dtype=np.float64) for n in "qkv")
    raw = q @ k.transpose(0, 2, 1)
    np.testing.assert_allclose(np.array(t["raw"]), raw, rtol=1e-5, atol=1e-6)
    scaled = raw / math.sqrt(4)
    scaled[:, np.triu(np.ones((4, 4), bool), 1)] = -np.inf
    w = np.exp(scaled - scaled.max(-1, keepdims=True))
    w /= w.sum(-1, keepdims=True)
    np.testing.assert_allclose(np.array(t["weights"]), w, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.array(t["heads"]), w @ v, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.array(t["concat"]), np.concatenate(list(w @ v), axis=1), rtol=1e-5, atol=1e-6)


def test_get_and_post_are_twins(client):
    params = {
        "tokens": "the cat sat",
        "preset": "gpt2-small",
        "mask": "padding",
        "pad_positions": "2",
        "heads": "0,5",
        "stages": "softmax",
        "decimals": "4",
        "seed": "3",
    }
    got = client.get("/api/v1/attention", params=params | {"stage": "4", "lang": "zh"})  # page-only params ignored
    posted = client.post(
        "/api/v1/attention",
        json={
            "tokens": ["the", "cat", "sat"],
            "preset": "gpt2-small",
            "mask": "padding",
            "pad_positions": [2],
            "heads": [0, 5],
            "stages": ["softmax"],
            "decimals": 4,
            "seed": 3,
        },
    )
    assert got.status_code == posted.status_code == 200
    assert got.json() == posted.json()
    w = np.array(got.json()["stages"][0]["tensors"]["weights"])
    assert w.shape == (2, 3, 3) and (w[:, :, 2] == 0).all()
    assert got.json()["spec"]["heads"] == [0, 5]


def test_explicit_inputs_are_used(client):
    eye = [[1.0, 0.0], [0.0, 1.0]]
    body = client.post(
        "/api/v1/attention",
        json={
            "x": [[1, 0], [0, 1], [1, 1]],
            "w_q": eye,
            "w_k": eye,
            "w_v": [[1, 2], [3, 4]],
            "w_o": eye,
            "mask": "causal",
            "stages": ["projection", "scores", "weighted_sum"],
        },
    ).json()
    assert body["tokens"] == ["x1", "x2", "x3"]
    assert body["spec"]["explicit"] == ["x", "w_q", "w_k", "w_v", "w_o"]
    t = {k: v for s in body["stages"] for k, v in s["tensors"].items()}
    assert t["raw"][0] == [[1, 0, 1], [0, 1, 1], [1, 1, 2]]
    assert t["v"][0] == [[1, 2], [3, 4], [4, 6]]
    assert t["heads"][0][0] == [1, 2]


def test_d_model_is_inferred_from_explicit_matrices(client):
    body = client.post("/api/v1/attention", json={"x": [[1, 2, 3]] * 2, "stages": ["projection"]}).json()
    assert body["spec"]["d_model"] == 3 and body["spec"]["n_heads"] == 1 and body["tokens"] == ["x1", "x2"]


def test_explicit_matrix_as_json_text_in_get(client):
    r = client.get("/api/v1/attention", params={"tokens": "a b", "x": "[[1, 0], [0, 1]]", "stages": "projection"})
    assert r.status_code == 200
    assert r.json()["stages"][0]["tensors"]["x"] == [[1, 0], [0, 1]]


def test_repeated_requests_come_from_the_cache():
    with make_client() as c:
        params = {"tokens": "a b c", "preset": "gpt2-small", "seed": 99}
        first = c.get("/api/v1/attention", params=params | {"stages": "scores"})
        second = c.get("/api/v1/attention", params=params | {"stages": "softmax"})
        assert first.headers["x-cache"] == "miss" and second.headers["x-cache"] == "hit"
        assert c.app.state.lab.cache.misses == 1


def test_npz_has_every_tensor_with_minus_infinity(client):
    r = client.get("/api/v1/attention.npz", params={"mask": "causal"})
    assert r.status_code == 200
    z = np.load(io.BytesIO(r.content))
    assert set(z.files) == {
        "tokens",
        "x",
        "q",
        "k",
        "v",
        "raw",
        "scaled",
        "mask",
        "masked",
        "weights",
        "heads",
        "concat",
        "output",
    }
    assert z["mask"][0, 1] == -np.inf
    assert list(z["tokens"]) == ["猫", "坐", "在", "垫子", "上"]
    assert z["weights"].shape == (1, 5, 5)


def test_too_large_json_is_413_with_advice():
    with make_client(json_limit_mb=0.01) as c:
        r = c.get("/api/v1/attention", params={"preset": "gpt2-small", "tokens": "a b c d e f g h"})
        assert r.status_code == 413
        assert "attention.npz" in r.json()["message"] and "heads" in r.json()["message"]
        ok = c.get(
            "/api/v1/attention",
            params={"preset": "gpt2-small", "tokens": "a b c d e f g h", "stages": "softmax", "heads": "0"},
        )
        assert ok.status_code == 200


def _assert_422(r, field):
    assert r.status_code == 422, r.text
    body = r.json()
    assert any(field == e["loc"][1] for e in body["detail"]), body
    assert field in body["message"]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"tokens": 5}, "tokens"),
        ({"tokens": []}, "tokens"),
        ({"tokens": ["a"] * 1025}, "tokens"),
        ({"text": ""}, "text"),  # a built-in preset reads `text` as its tokens: its errors name `text`, not `tokens`
        ({"text": "a " * 1025}, "text"),
        ({"text": "x" * 10_001}, "text"),
        ({"d_model": "wide"}, "d_model"),
        ({"d_model": 10, "n_heads": 3}, "n_heads"),
        ({"d_model": 8192}, "d_model"),
        ({"n_heads": 0}, "n_heads"),
        ({"mask": "diagonal"}, "mask"),
        ({"scale": 2}, "scale"),
        ({"preset": "gpt-5"}, "preset"),
        ({"mask": "padding", "pad_positions": [7]}, "pad_positions"),
        ({"mask": "padding", "pad_positions": ["x"]}, "pad_positions"),
        ({"mask": "document", "segment_ids": [0, 1]}, "segment_ids"),
        ({"d_model": 4, "x": [[1, 2, 3]] * 5}, "x"),
        ({"tokens": "a b c d e", "x": [[1, 2, 3, 4]] * 4}, "x"),
        ({"x": [[1, 2, 3, 4]] * 5, "w_q": [[1, 2], [3, 4]]}, "w_q"),
        ({"x": [[1, 2, 3, 4]] * 5, "w_o": [[1, 2, 3, 4]] * 3}, "w_o"),
        ({"w_v": [[1, 2, 3, 4]] * 4 + [[1]]}, "w_v"),
        ({"b_k": [1, 2, 3]}, "b_k"),
        ({"x": [[1e30, 0, 0, 0]] * 5}, "x"),
        ({"stages": ["attention"]}, "stages"),
        ({"heads": [1]}, "heads"),
        ({"heads": [-1]}, "heads"),
        ({"decimals": 40}, "decimals"),
        ({"seed": -1}, "seed"),
        ({"dtype": "float16"}, "dtype"),
        ({"dtype": "int8"}, "dtype"),
        ({"colour": "red"}, "colour"),
        ({"preset": "gpt2-small", "d_model": 128, "x": [[0.0] * 128] * 5}, "x"),
    ],
)
def test_bad_input_is_422_naming_the_field(client, body, field):
    _assert_422(client.post("/api/v1/attention", json=body), field)


@pytest.mark.parametrize(
    ("path", "field", "value"),
    [
        ("/api/v1/attention", "stages", [0] * 100_000),
        ("/api/v1/attention", "heads", ["a"] * 100_000),
        ("/api/v1/attention", "kv_tokens", [0] * 100_000),
        ("/api/v1/attention", "pad_positions", ["a"] * 100_000),
        ("/api/v1/attention", "segment_ids", ["a"] * 100_000),
        ("/api/v1/attention", "token_ids", ["a"] * 100_000),
        ("/api/v1/block", "stages", [0] * 100_000),
        ("/api/v1/decode", "segment_ids", ["a"] * 100_000),
        ("/api/v1/attention/tiles", "heads", ["a"] * 100_000),
        ("/api/v1/attribution", "tokens", [0] * 100_000),
        ("/api/v1/predict", "mask_off_layers", ["a"] * 100_000),
        ("/api/v1/predict", "drop_sink_layers", ["a"] * 100_000),
        ("/api/v1/model_view", "ablate", [["a"] * 100_000]),
        ("/api/v1/attention", "x", [["a"] * 1000] * 1000),  # was a 136 MB answer after 78 s
        ("/api/v1/attention", "w_o", [[0.5] * 1000] * 999 + [[0.5] * 999 + ["a"]]),
        ("/api/v1/attention", "b_k", ["a"] * 4000),
        ("/api/v1/block", "mask_matrix", [[2] * 1000] * 1000),
    ],
)
def test_a_long_list_of_bad_entries_is_one_short_422(client, path, field, value):
    # Every entry used to be an error of its own: 100,000 wrong `stages` were an 8 s, 23 MB answer (and an 8 MB
    # body holds millions). A list's length is checked before its entries: one error, whatever the entries.
    r = client.post(path, json={field: value})
    _assert_422(r, field)
    assert len(r.content) < 2000 and len(r.json()["detail"]) <= 2, len(r.content)


@pytest.mark.parametrize(
    ("path", "body", "errors"),
    [
        ("/api/v1/attention", {"stages": [{"x": 1}] * 4096}, 4096),  # 4096 entries, each wrong: within MAX_ITEMS
        ("/api/v1/predict", {"ablate": [["a", "b"]] * 4096}, 8192),  # 4096 bad pairs: two errors a pair
    ],
)
def test_an_error_answer_lists_at_most_max_errors_and_counts_the_rest(client, path, body, errors):
    # Every error was listed: 4096 bad pairs were an answer of 8192 errors (~0.7 MB). Now the first 50 (the
    # max_errors setting) and how many were left out.
    r = client.post(path, json=body)
    assert r.status_code == 422
    answer = r.json()
    assert len(answer["detail"]) == 50 and answer["omitted"] == errors - 50, (
        len(answer["detail"]),
        answer.get("omitted"),
    )
    assert answer["message"].count(": ") == 50 and answer["message"].endswith(f"; and {errors - 50} more errors")
    assert len(r.content) < 20_000, len(r.content)
    assert "omitted" not in client.post(path, json={"stages": ["nope"]}).json()  # a few errors: all, and no count


def test_max_errors_is_a_setting():
    with make_client(max_errors=3) as c:
        answer = c.post("/api/v1/attention", json={"stages": [{"x": 1}] * 5}).json()
        assert (
            len(answer["detail"]) == 3 and answer["omitted"] == 2 and answer["message"].endswith("; and 2 more errors")
        )
        answer = c.post("/api/v1/attention", json={"stages": [{"x": 1}] * 4}).json()
        assert (
            len(answer["detail"]) == 3 and answer["omitted"] == 1 and answer["message"].endswith("; and 1 more error")
        )
        assert "omitted" not in c.post("/api/v1/attention", json={"stages": [{"x": 1}] * 3}).json()


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity"])
def test_non_finite_numbers_are_422_not_500(client, literal):
    raw = '{"x": [[' + literal + ", 0, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0]]}"
    r = client.post("/api/v1/attention", content=raw, headers={"content-type": "application/json"})
    _assert_422(r, "x")
    r = client.post(
        "/api/v1/attention", content='{"b_o": [' + literal + ", 1, 2, 3]}", headers={"content-type": "application/json"}
    )
    _assert_422(r, "b_o")


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"d_model": "abc"}, "d_model"),
        ({"mask": "padding", "pad_positions": "1,x"}, "pad_positions"),
        ({"x": "[[1, 2"}, "x"),
        ({"x": "[[NaN, 1, 2, 3]]", "tokens": "a"}, "x"),
        ({"stages": "softmax,bogus"}, "stages"),
        ({"heads": "3"}, "heads"),
    ],
)
def test_bad_query_is_422_naming_the_field(client, params, field):
    r = client.get("/api/v1/attention", params=params)
    _assert_422(r, field)
    assert r.json()["detail"][0]["loc"][0] == "query"


def test_malformed_json_body_is_422(client):
    r = client.post("/api/v1/attention", content="{not json", headers={"content-type": "application/json"})
    assert r.status_code == 422


def test_memory_budget_gives_422():
    with make_client(memory_budget_mb=20) as c:
        r = c.post("/api/v1/attention", json={"preset": "gpt2-small", "tokens": ["a"] * 512})
        _assert_422(r, "tokens")
        assert "budget" in r.json()["message"]


def test_healthz_and_offline_docs(client):
    assert client.get("/healthz").json()["status"] == "ok"
    docs = client.get("/docs")
    assert docs.status_code == 200
    assert "https://" not in docs.text and "cdn" not in docs.text.lower()
    assert "/vendor/swagger/swagger-ui-bundle.js" in docs.text
    assert client.get("/vendor/swagger/swagger-ui-bundle.js").status_code == 200
    schema = client.get("/openapi.json").json()
    assert "/api/v1/attention" in schema["paths"]
    assert "null" in schema["paths"]["/api/v1/attention"]["post"]["description"]


def test_request_body_over_the_limit_is_413():
    with make_client(body_limit_mb=0.001) as c:
        r = c.post("/api/v1/attention", json={"tokens": ["a"] * 500})
        assert r.status_code == 413 and "limit" in r.json()["message"]

        def chunks():
            yield b'{"tokens": ['
            for _ in range(300):
                yield b'"abc",'
            yield b'"z"]}'

        r = c.post("/api/v1/attention", content=chunks(), headers={"content-type": "application/json"})
        assert r.status_code == 413
        assert c.post("/api/v1/attention", json={"tokens": "a b"}).status_code == 200


def test_a_repeated_url_is_served_from_the_response_cache():
    with make_client() as c:
        url = "/api/v1/attention?tokens=a+b+c&mask=causal&seed=77"
        first, second = c.get(url), c.get(url)
        assert first.headers["x-cache"] == "miss" and second.headers["x-cache"] == "hit"
        assert first.content == second.content
        assert c.app.state.lab.cache.misses == 1
        bad = c.get("/api/v1/attention?tokens=a+b&n_heads=3")
        assert bad.status_code == 422 and c.get("/api/v1/attention?tokens=a+b&n_heads=3").status_code == 422
    with make_client(response_cache_mb=0) as c:
        c.get(url)
        assert c.get(url).headers["x-cache"] == "hit"  # the trace cache still answers, the body is rebuilt
        assert len(c.app.state.lab.responses) == 0


def test_concurrent_work_over_the_memory_budget_waits_then_gets_503():
    with make_client(memory_budget_mb=64, compute_wait_s=0.3) as c:
        budget = c.app.state.lab.budget
        # Another request holds all of the budget that is free (a model an earlier test loaded in this process
        # already holds its bytes in every new app's budget).
        held = budget.in_use
        with budget.reserve(budget.limit - held):
            r = c.get("/api/v1/attention", params={"tokens": "a b c", "seed": 4242})
            assert r.status_code == 503 and r.headers["retry-after"] == "1"
            assert "busy" in r.json()["message"]
            page = c.get("/", params={"tokens": "a b c", "seed": 4242, "lang": "en"})
            assert page.status_code == 503 and "busy" in page.text
            assert page.headers["retry-after"] == "1"  # the page's refusal says when to come back, as the API's
        assert budget.in_use == held
        assert c.get("/api/v1/attention", params={"tokens": "a b c", "seed": 4242}).status_code == 200


def test_the_budget_never_holds_more_than_its_limit():
    import threading
    import time

    from engine.budget import MemoryBudget

    budget, peak, lock = MemoryBudget(100, wait_s=5), [0], threading.Lock()
    done: list[int] = []
    errors: list[BaseException] = []

    def work(i: int) -> None:
        try:
            with budget.reserve(40):
                with lock:
                    peak[0] = max(peak[0], budget.in_use)
                time.sleep(0.02)  # the work, holding its reservation while others ask: contention under test
            done.append(i)
        except BaseException as exc:  # a thread's exception only warns: record it, so the test fails on it
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and sorted(done) == list(range(12))
    assert 80 <= peak[0] <= 100 and budget.in_use == 0  # two at a time did run together


def samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Prometheus text as {(sample name, labels): value}, whatever the label order."""
    from prometheus_client.parser import text_string_to_metric_families

    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_metrics_count_requests_cache_hits_and_stage_times():
    with make_client() as c:
        url = "/api/v1/attention?tokens=m+e+t&seed=31337"
        c.get(url), c.get(url), c.get("/api/v1/attention?n_heads=3")
        got = samples(c.get("/metrics").text)
        route = {("route", "/api/v1/attention"), ("method", "GET")}
        assert got[("attention_lab_requests_total", frozenset(route | {("status", "200")}))] == 2
        assert got[("attention_lab_requests_total", frozenset(route | {("status", "422")}))] == 1
        assert got[("attention_lab_cache_hits_total", frozenset({("cache", "response")}))] == 1
        assert got[("attention_lab_cache_misses_total", frozenset({("cache", "trace")}))] == 1
        for stage in ("projection", "scores", "mask", "softmax", "weighted_sum"):
            assert got[("attention_lab_stage_seconds_count", frozenset({("stage", stage)}))] == 1, stage


def test_access_log_is_one_json_object_per_request(caplog):
    import json
    import logging

    with make_client() as c, caplog.at_level(logging.INFO, logger="attention_lab.access"):
        c.get("/api/v1/attention?tokens=a+b&stages=softmax")
    lines = [json.loads(r.getMessage()) for r in caplog.records if r.name == "attention_lab.access"]
    assert lines and lines[-1]["path"] == "/api/v1/attention" and lines[-1]["status"] == 200
    assert lines[-1]["ms"] > 0 and "tokens" not in json.dumps(lines[-1])  # no user text in the log


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"n_heads": True}, "n_heads"),
        ({"x": [[True, 0, 0, 0]] * 5}, "x"),
        ({"x": [[0.5, 1, 2.0, 3]] * 4 + [[0.0, 0.0, 0.0, False]]}, "x"),  # past rows of plain numbers, skipped at once
        ({"mask": "padding", "pad_positions": [False]}, "pad_positions"),
    ],
)
def test_json_booleans_are_not_numbers(client, body, field):
    _assert_422(client.post("/api/v1/attention", json=body), field)
    _assert_422(client.post("/api/v1/block", json=body), field)
