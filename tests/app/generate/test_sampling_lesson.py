"""The lesson "Why the same prompt gives different answers" (#45): every poll's key agrees with the numbers its step's
page shows (the step view's `.json` twin, and the samples block's, for the same URL) on SmolLM2. test_lessons.py
counts these steps as checked (CHECKED)."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs

import pytest
from fastapi.testclient import TestClient

from app.web.lessons import BY_SLUG
from tests.conftest import make_client

SLUG = "same-prompt"
CHECKED = {(SLUG, k) for k in range(1, len(BY_SLUG[SLUG].steps) + 1)}


@pytest.fixture(scope="module")
def client(smollm2) -> TestClient:  # type: ignore[no-untyped-def]
    return make_client()


def key(k: int) -> str:
    step = BY_SLUG[SLUG].steps[k - 1]
    assert step.poll is not None
    return str(step.poll.for_lang(step.text("en").question, "en")["answer"])


def view(client: TestClient, k: int, page: str = "/generate") -> dict[str, Any]:
    """The step's page as JSON: the step view (`/generate.json`) or its samples block (`/generate/samples.json`)."""
    path, _, query = BY_SLUG[SLUG].steps[k - 1].url.partition("#")[0].partition("?")
    assert path == "/generate"
    r = client.get(f"{page}.json", params={k: v[0] for k, v in parse_qs(query).items()})
    assert r.status_code == 200, r.text
    return r.json()  # type: ignore[no-any-return]


def column(v: dict[str, Any], name: str) -> dict[str, Any]:
    return next(f for f in v["filters"] if f["name"] == name)


def check_paris_three_times_in_four(client: TestClient) -> None:  # step 1
    v = view(client, 1)
    assert v["candidates"][0]["token"] == " Paris" and 0.7 < column(v, "logits")["probs"][0] < 0.8
    assert key(1) == "About 3 times in 4"


def check_temperature_001_is_greedy(client: TestClient) -> None:  # step 2
    v = view(client, 2)
    assert column(v, "temperature")["probs"][0] > 0.9999
    samples = view(client, 2, "/generate/samples")
    assert samples["n"] == 8 and samples["distinct"] == 1
    greedy = client.get("/api/v1/generate", params={"text": "The capital of France is", "max_new_tokens": 3}).json()
    assert samples["samples"][0]["text"] == greedy["text"]
    assert key(2) == "All the mass goes to the top token: greedy"


def check_a_confident_step_keeps_one_token(client: TestClient) -> None:  # step 3
    v = view(client, 3)
    assert column(v, "logits")["probs"][0] > 0.9 and column(v, "top_p")["kept"] == 1
    assert key(3) == "Only 1"


def check_an_uncertain_step_keeps_hundreds(client: TestClient) -> None:  # step 4
    v = view(client, 4)
    assert v["step"] == 2 and column(v, "logits")["probs"][0] < 0.2
    assert 200 <= column(v, "top_p")["kept"] < 1000
    assert key(4) == "Hundreds"


def check_few_distinct_at_07(client: TestClient) -> None:  # step 5
    samples = view(client, 5, "/generate/samples")
    assert samples["n"] == 8 and 2 <= samples["distinct"] <= 4
    assert sum(s["text"].startswith(" Paris.") for s in samples["samples"]) >= 5
    assert key(5) == "2 to 4"


def check_all_distinct_at_15(client: TestClient) -> None:  # step 6
    samples = view(client, 6, "/generate/samples")
    assert samples["n"] == 8 and samples["distinct"] == 8
    v = view(client, 6)
    hot = column(v, "temperature")
    assert 0.2 < hot["probs"][0] < 0.3 and 0.55 < hot["rest"] < 0.65  # the numbers the answer quotes
    assert key(6) == "All 8"


def check_min_p_keeps_two(client: TestClient) -> None:  # step 7
    v = view(client, 7)
    assert column(v, "min_p")["kept"] == 2
    kept = [c["token"] for c, p in zip(v["candidates"], column(v, "min_p")["probs"], strict=True) if p > 0]
    assert kept == [" Paris", " the"]
    samples = view(client, 7, "/generate/samples")
    assert samples["distinct"] >= 5 and all(s["text"].startswith((" Paris", " the")) for s in samples["samples"])
    assert key(7) == "2"


CHECKS = {
    1: check_paris_three_times_in_four,
    2: check_temperature_001_is_greedy,
    3: check_a_confident_step_keeps_one_token,
    4: check_an_uncertain_step_keeps_hundreds,
    5: check_few_distinct_at_07,
    6: check_all_distinct_at_15,
    7: check_min_p_keeps_two,
}


def test_every_step_is_checked() -> None:
    assert {(SLUG, k) for k in CHECKS} == CHECKED


@pytest.mark.parametrize("k", list(CHECKS))
def test_the_poll_key_agrees_with_the_numbers(client: TestClient, k: int) -> None:
    CHECKS[k](client)


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_each_step_shows_its_lesson_and_the_samples_block(client: TestClient, lang: str) -> None:
    from bs4 import BeautifulSoup

    from app.web.lessons import step_url

    lesson = BY_SLUG[SLUG]
    assert [k for k, step in enumerate(lesson.steps, 1) if "#" in step.url] == [5, 6]
    for k, step in enumerate(lesson.steps, start=1):
        page = BeautifulSoup(client.get(step_url(lesson, k, lang).partition("#")[0]).text, "html.parser")
        panel = page.select_one(f'.lesson-panel[data-lesson="{SLUG}"][data-step="{k}"]')
        assert panel is not None and step.text(lang).question in panel.get_text()
        slot = page.select_one("[data-samples-slot]")
        assert slot is not None and "lesson" not in slot["hx-get"]  # one block for the page, whatever the lesson
        anchor = step.url.partition("#")[2]  # the steps about the samples open at them
        assert not anchor or page.select_one(f"#{anchor} [data-samples-slot]") is not None
