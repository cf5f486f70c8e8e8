"""Every JSON answer says where the text begins in its tokens (#45): /api/v1/predict and /api/v1/logit_lens put a
BOS before a text, /api/v1/attention and /api/v1/generate do not, and MiniLM's tokenizer puts [CLS] first: the same
text's position i is tokens[text_start + i] in each."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from tests.conftest import make_client

TEXT = "The cat sat on the mat"


@pytest.fixture(scope="module")
def api(smollm2) -> TestClient:  # type: ignore[no-untyped-def]
    return make_client()


def text_tokens(doc: dict[str, object]) -> list[str]:
    return doc["tokens"][doc["text_start"] :]  # type: ignore[index,misc]


def test_smollm2s_answers_say_where_the_text_begins(api: TestClient) -> None:
    attention = api.get("/api/v1/attention", params={"preset": "smollm2", "text": TEXT, "layer": 0}).json()
    predict = api.post("/api/v1/predict", json={"preset": "smollm2", "text": TEXT}).json()
    lens = api.post("/api/v1/logit_lens", json={"preset": "smollm2", "text": TEXT}).json()
    generate = api.post("/api/v1/generate", json={"text": TEXT, "max_new_tokens": 1}).json()
    assert (attention["text_start"], predict["text_start"], lens["text_start"], generate["text_start"]) == (0, 1, 1, 0)
    assert predict["tokens"][0] == "<|im_start|>" and predict["positions"][0]["input"] == "<|im_start|>"
    words = text_tokens(attention)
    assert text_tokens(generate) == words and text_tokens(lens) == words
    assert text_tokens(predict) == words[: len(predict["tokens"]) - 1]  # predict's inputs: all but the last target
    plain = api.post("/api/v1/predict", json={"preset": "smollm2", "text": TEXT, "bos": False}).json()
    assert plain["text_start"] == 0 and plain["tokens"][0] == "The"
    given = api.post("/api/v1/predict", json={"preset": "smollm2", "token_ids": predict["token_ids"]}).json()
    assert given["text_start"] == 1  # a BOS given among the ids is a BOS too


def test_minilms_cls_comes_before_the_text(api: TestClient) -> None:
    doc = api.get("/api/v1/attention", params={"preset": "minilm", "text": TEXT, "layer": 0}).json()
    assert doc["tokens"][0] == "[CLS]" and doc["text_start"] == 1 and doc["spec"]["text_start"] == 1
    assert text_tokens(doc)[:6] == ["the", "cat", "sat", "on", "the", "mat"]


def test_the_toy_has_no_special_token(api: TestClient) -> None:
    doc = api.get("/api/v1/attention", params={"tokens": "猫 坐 在"}).json()
    assert doc["text_start"] == 0 and doc["tokens"] == ["猫", "坐", "在"]
