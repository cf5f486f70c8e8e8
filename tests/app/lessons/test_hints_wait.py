"""A lesson step asks before it tells (#42): on every step of every lesson, in both languages, what its page shows
before the answer is opened holds neither the step's answer nor any of the page's own explanations — the lab's
"what happens" and "what to notice", /decode's words, /demos' conclusions, /predict's guide and verdict, /heads' loss
lines, /train's introduction — which wait, marked `data-hint`, for "Show the answer" (static/lab.css hides them
while the lesson panel's answer is shut; tests/browser/test_hints_wait_browser.py sees it on a phone). The lesson's
own words name no answer, and the page outlines none of the question's choices.

"Shown before the answer" is the page less the lesson panel's answer (`details.answer`), the held explanations
(`[data-hint]`) and what is hidden (`[hidden]`, scripts, styles)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from bs4 import BeautifulSoup

import app.web
from app.web.lessons import LESSONS, Lesson, step_url

LOCALES = Path(app.web.__file__).with_name("locales")
CATALOGUES = {lang: json.loads((LOCALES / f"{lang}.json").read_text(encoding="utf-8")) for lang in ("en", "zh")}

# The catalogue's explanations a page may show beside a lesson step: each waits for the answer.
HINTS = re.compile(
    r"^(?:explain\.\w+|notice\.(?!unk$|random_weights)[\w.]+|decode\.(?:intro|prefill_text|step_text|equal|stale"
    r"|stale_last|history)|demo\.\w+_notice|predict\.(?:intro|masks|why\.\w+|retargeted)"
    r"|heads\.(?:probe\.loss|knock\.result|prune\.says)|train\.intro)$"
)
# A fragment this long is a sentence of its own, not a word the numbers or the labels happen to share with it.
LONG = {"en": 20, "zh": 8}

STEPS = [(lesson, k) for lesson in LESSONS for k in range(1, len(lesson.steps) + 1)]


def words(text: str) -> str:
    return " ".join(text.split())


def fragments(text: str, lang: str, split: str) -> list[str]:
    """The pieces of `text` between the characters of `split` that are long enough to be told apart."""
    return [p for p in (words(f) for f in re.split(split, text)) if len(p) >= LONG[lang]]


def hint_fragments(lang: str) -> dict[str, list[str]]:
    """Each explanation of the catalogue, as its fixed text between the placeholders."""
    return {k: fragments(v, lang, r"\{[^{}]*\}") for k, v in CATALOGUES[lang].items() if HINTS.match(k)}


def answer_fragments(answer: str, lang: str) -> list[str]:
    return fragments(answer, lang, r"[.;:!?,()。；：！？，（）]")


HELD = ("details.answer", "[data-hint]", "[hidden]", "script", "style", "template", "noscript", "head")


def shown(html: str) -> tuple[str, BeautifulSoup]:
    """The page's text before the answer is opened, and the page: its text (`get_text`'s strings) less every string
    inside an element that is held or hidden (`HELD`). The page is parsed once and left whole (parsing it a second
    time to cut the held parts out was half of this file's time)."""
    page = BeautifulSoup(html, "html.parser")
    held = {id(el) for sel in HELD for el in page.select(sel)}
    types = page.interesting_string_types  # what get_text joins: text and CDATA, not comments or declarations
    kept = (s for s in page.descendants if type(s) in types and not any(id(p) in held for p in s.parents))
    return words(" ".join(kept)), page


@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize(("lesson", "k"), STEPS, ids=[f"{lesson.slug}-{k}" for lesson, k in STEPS])
def test_no_step_shows_its_answer_or_a_hint_before_the_answer(client, lesson: Lesson, k: int, lang: str) -> None:
    url = step_url(lesson, k, lang).split("#")[0]
    r = client.get(url)
    assert r.status_code == 200, url
    text, page = shown(r.text)
    panel = page.select_one(".lesson-panel")
    assert panel is not None and panel.select_one("details.answer") is not None, url
    _, question, answer = lesson.steps[k - 1].text(lang)
    assert words(question) in text, url  # the question is asked…
    for piece in answer_fragments(answer, lang):  # …and its answer is not given with it
        assert piece not in text, (url, piece)
    for key, pieces in hint_fragments(lang).items():
        for piece in pieces:
            assert piece not in text, (url, key, piece)
    if url.startswith("/?"):  # the lab's explanations are on the page, waiting for the answer
        assert page.select_one(".explain p.notice[data-hint]") is not None, url


@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize(("lesson", "k"), STEPS, ids=[f"{lesson.slug}-{k}" for lesson, k in STEPS])
def test_the_lessons_own_words_name_no_answer(lesson: Lesson, k: int, lang: str) -> None:
    """What to look at says where to look: never the key of the step's question, nor a sentence of its answer."""
    step = lesson.steps[k - 1]
    look, question, answer = step.text(lang)
    said = words(f"{look} {question}").casefold()
    for piece in answer_fragments(answer, lang):
        assert piece.casefold() not in said, (lesson.slug, k, piece)
    if step.poll and step.poll.kind == "choice":
        assert isinstance(step.poll.answer, int)
        key = words(step.poll.options[lang][step.poll.answer]).casefold()
        assert len(key) < 6 or key not in said, (lesson.slug, k, key)


@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize("lesson", LESSONS, ids=[lesson.slug for lesson in LESSONS])
def test_a_lessons_own_page_keeps_every_answer_folded(client, lesson: Lesson, lang: str) -> None:
    _, page = shown(client.get(f"/lessons/{lesson.slug}?lang={lang}").text)
    items = page.select("li.lesson-step")
    assert len(items) == len(lesson.steps)
    for li, step in zip(items, lesson.steps, strict=True):
        text, _ = shown(str(li))
        for piece in answer_fragments(step.text(lang)[2], lang):
            assert piece not in text, (lesson.slug, li.get("data-step"), piece)


HEAD = re.compile(r"Layer (\d+) · head (\d+)")


def offered(lesson: Lesson, k: int) -> set[tuple[int, int]]:
    """The heads among step k's choices ("Layer 16 · head 0")."""
    poll = lesson.steps[k - 1].poll
    options = poll.options.get("en", ()) if poll else ()
    return {(int(m[1]), int(m[2])) for o in options if (m := HEAD.search(o))}


HEAD_STEPS = [(lesson, k) for lesson, k in STEPS if offered(lesson, k)]


@pytest.mark.parametrize(("lesson", "k"), HEAD_STEPS, ids=[f"{lesson.slug}-{k}" for lesson, k in HEAD_STEPS])
def test_a_step_outlines_none_of_its_questions_heads(client, lesson: Lesson, k: int) -> None:
    """/heads step 1 asks which head is the strongest previous-token head; its grid outlined layer 18 head 6 (the
    head the page draws below, one of the wrong choices) in orange. A page outlines only the head its view names."""
    url = step_url(lesson, k, "en").split("#")[0]
    page = BeautifulSoup(client.get(url).text, "html.parser")
    assert page.select(".model-grid td[data-layer]"), "the grid is drawn"
    outlined = {(int(td["data-layer"]), int(td["data-head"])) for td in page.select(".model-grid td.chosen")}
    outlined |= {tuple(map(int, a["data-head"].split("."))) for a in page.select("ol.top-heads a[aria-current]")}
    assert not outlined & offered(lesson, k), (url, outlined)
    # A head the view names is outlined, on a lesson step too (the teacher, or the remote, picked it).
    chosen = BeautifulSoup(client.get(url + "&head=16.0").text, "html.parser")
    assert [(td["data-layer"], td["data-head"]) for td in chosen.select(".model-grid td.chosen")] == [("16", "0")]


def test_heads_jobs_offers_heads_to_choose_from() -> None:
    assert [(lesson.slug, k) for lesson, k in HEAD_STEPS] == [("heads-jobs", 1)]
