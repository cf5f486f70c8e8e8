"""Guided lessons: every step opens a working lab view, in both languages, with a question and an answer."""

from __future__ import annotations

import pytest
from bs4 import BeautifulSoup

from app.web.lessons import LESSONS


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


def test_every_lesson_step_opens_and_lab_steps_show_the_panel(client):
    from bs4 import BeautifulSoup

    from app.web.lessons import LESSONS, on_the_lab, step_url

    for lesson in LESSONS:
        for k, step in enumerate(lesson.steps, start=1):
            for lang in ("en", "zh"):
                url = step_url(lesson, k, lang)
                r = client.get(url)
                assert r.status_code == 200, url
                if on_the_lab(step.url):
                    panel = BeautifulSoup(r.text, "html.parser").select_one(".lesson-panel")
                    assert panel is not None and panel["data-step"] == str(k), url
                    assert step.text(lang)[1] in panel.get_text()


def test_the_lesson_panel_follows_the_lab_and_leads_on(client):
    from bs4 import BeautifulSoup

    page = BeautifulSoup(client.get("/?stage=3&lesson=five-stages&step=3&lang=zh").text, "html.parser")
    nxt = page.select_one("[data-lesson-step=next]")["href"]
    assert "step=4" in nxt and "stage=4" in nxt and "lesson=five-stages" in nxt
    # stepping the lab keeps the lesson's question on screen
    assert "lesson=five-stages" in page.select_one("[data-action=next]")["href"]
    assert client.get("/?lesson=nope&lang=en").status_code == 422
    assert client.get("/?lesson=five-stages&step=6&lang=en").status_code == 422


def test_walk_the_five_stages_has_five_steps_one_per_stage():
    from app.web.lessons import BY_SLUG

    steps = BY_SLUG["five-stages"].steps
    assert [s.url for s in steps] == [f"/?stage={i}" for i in range(1, 6)]
