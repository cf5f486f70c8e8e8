"""Guided lessons: every step opens a working lab view, in both languages, with a question and an answer."""

from __future__ import annotations

import pytest
from bs4 import BeautifulSoup

from app.lessons.content import LESSONS


def test_there_are_the_chapters_three_experiments_and_at_least_five_more():
    slugs = [lesson.slug for lesson in LESSONS]
    assert slugs[:3] == ["five-stages", "mask-toggle", "row-one"]
    assert {"scale", "positions", "rope", "padding-vs-causal", "kv-cache"} <= set(slugs)


@pytest.mark.parametrize("lesson", LESSONS, ids=lambda lesson: lesson.slug)
@pytest.mark.parametrize("lang", ["en", "zh"])
def test_every_step_opens_a_working_view(client, lesson, lang):
    page = BeautifulSoup(client.get(f"/lessons/{lesson.slug}?lang={lang}").text, "html.parser")
    steps = page.select("li.lesson-step")
    assert len(steps) == len(lesson.steps)
    for li in steps:
        href = li.select_one("a[data-open=lab]")["href"]
        assert f"lang={lang}" in href
        assert client.get(href.split("#")[0]).status_code == 200, href
        assert li.select_one(".question").text.strip() and li.select_one("details.answer p").text.strip()


def test_lesson_index_and_unknown_lesson(client):
    page = BeautifulSoup(client.get("/lessons?lang=zh").text, "html.parser")
    assert len(page.select("a[data-lesson]")) == len(LESSONS) and "引导式课程" in page.text
    assert client.get("/lessons/nope").status_code == 404
