"""A request read from a query (`query_model`): the GET twin takes it from FastAPI, a page makes its request with
it; the same fields, checks and errors as the POST body, each named as the user typed it."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from app.schemas import AttentionRequest, BlockRequest, query_model


def test_the_query_model_reads_query_text_into_the_requests_values() -> None:
    model = query_model(BlockRequest)
    req = model.model_validate({"tokens": "a b c", "seed": "3", "heads": ["0", "1 2"], "x": "", "stage": "4",
                                "pad_positions": "0,1", "rope_base": "1e4", "d_ff": ["5", "8"]})  # fmt: skip
    assert isinstance(req, BlockRequest) and query_model(BlockRequest) is model
    assert (req.seed, req.heads, req.pad_positions, req.rope_base, req.d_ff) == (3, [0, 1, 2], [0, 1], 1e4, 8)
    assert req.x is None and req.model_fields_set == {"tokens", "seed", "heads", "pad_positions", "rope_base", "d_ff"}
    assert query_model(AttentionRequest).model_validate({"x": "[[1, 0]]"}).x == [[1.0, 0.0]]


@pytest.mark.parametrize(("given", "field", "kind"), [
    ({"seed": "²"}, "seed", "int_type"), ({"seed": "1_1"}, "seed", "int_type"), ({"heads": "0,x"}, "heads", "int_type"),
    ({"x": "[[1"}, "x", "value_error"), ({"mask": "bogus"}, "mask", "literal_error"),
])  # fmt: skip
def test_a_bad_value_is_refused_naming_its_field(given: dict[str, str], field: str, kind: str) -> None:
    with pytest.raises(ValidationError) as err:
        query_model(AttentionRequest).model_validate(given)
    first = err.value.errors()[0]
    assert (first["loc"][0], first["type"]) == (field, kind)


def test_the_get_twin_refuses_as_the_post_does_in_the_users_words(client: Any) -> None:
    r = client.get("/api/v1/attention?tokens=a+b&x=[[1")
    assert r.status_code == 422
    assert r.json()["detail"] == [{"loc": ["query", "x"], "msg": "must be JSON text, e.g. [[1, 0], [0, 1]]",
                                   "type": "value_error"}]  # fmt: skip
    for lang, said in (("en", "Input should be a valid integer"), ("zh", "应为整数")):
        page = client.get(f"/?tokens=a+b&seed=%C2%B2&lang={lang}")  # a page reads its request with the same model
        assert page.status_code == 422 and said in page.text and "seed" in page.text
    nested = client.post("/api/v1/attention", content=b'{"tokens": "a b", "heads": [0], "x": null, "x": null}',
                         headers={"content-type": "application/json"})  # fmt: skip
    assert nested.status_code == 422 and nested.json()["detail"][0]["loc"] == ["body", "x"]
