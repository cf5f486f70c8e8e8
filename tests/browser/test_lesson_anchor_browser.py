"""A lesson step whose link lands on a place on its page (#head, #why, #rope …: data-anchor on its panel) keeps its
question in view beside that place (#44's walk: the page scrolled the question, "Show the answer" and "Next step" out
of sight): the lesson's panel stays at the top of the screen and the page stops with the place just under it, on every
page beside the lab. On a 390×844 phone only the question and its buttons stay (what to look at is folded away above
the screen's top), so the data keeps most of the screen. At 1280×720, in presenter mode at 1920×1080 (reached by
pressing the page's switch: /attribution's own drops the #fragment, and lab.js scrolls to the panel's place) and on
a phone, en and zh; boxes measured, polled until they hold."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Browser, Error, Page, expect

from app.web.lessons import BY_SLUG, step_url

pytestmark = pytest.mark.browser

SCREENS = [((1280, 720), False), ((1920, 1080), True), ((390, 844), False)]
STEPS = [("big-weight", 2), ("big-weight", 9), ("rope", 2)]  # /attribution#head, /attribution#why, /demos#rope

# The boxes once they hold (null until then): the question and the panel's buttons on screen, the step's place
# starting at or under the panel's foot with its first 150 px (or all of it) on screen.
BOXES = """() => {
  const panel = document.querySelector('.lesson-panel[data-anchor]');
  const place = panel && document.getElementById(panel.dataset.anchor);
  if (!place || document.readyState !== 'complete') return null;
  const box = (el) => { const r = el.getBoundingClientRect(); return {top: r.top, bottom: r.bottom}; };
  const got = {question: box(panel.querySelector('.question')), nav: box(panel.querySelector('.lesson-nav')),
               look: box(panel.querySelector('.question').previousElementSibling),
               panel: box(panel.closest('.lesson-beside')), place: box(place), height: innerHeight};
  const ok = got.question.top >= 0 && got.nav.bottom <= innerHeight && got.place.top >= got.panel.bottom - 1
    && got.place.top + Math.min(got.place.bottom - got.place.top, 150) <= innerHeight;
  return ok ? got : (window.__boxes = got, null);
}"""


@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize(("size", "present"), SCREENS, ids=["1280x720", "present-1920x1080", "phone-390x844"])
@pytest.mark.parametrize(("slug", "k"), STEPS, ids=[f"{s}-{k}" for s, k in STEPS])
def test_a_step_on_a_place_keeps_its_question_beside_it(page: Page, live_server: str, slug: str, k: int,
                                                        size: tuple[int, int], present: bool, lang: str) -> None:  # fmt: skip
    lesson = BY_SLUG[slug]
    anchor = lesson.steps[k - 1].url.partition("#")[2]
    page.set_viewport_size({"width": size[0], "height": size[1]})
    page.goto(f"{live_server}{step_url(lesson, k, lang)}", timeout=300_000)  # SmolLM2's first page is computed
    if present:
        page.locator("a[data-toggle=present]:visible").first.click()
        expect(page.locator("body")).to_have_class(re.compile(r"\bpresent\b"), timeout=300_000)
    panel = page.locator(f'.lesson-panel[data-anchor="{anchor}"]')
    expect(panel.locator(".question")).to_contain_text(lesson.steps[k - 1].text(lang).question[:12])
    try:
        got = page.wait_for_function(BOXES, timeout=60_000).json_value()
    except Error as e:
        raise AssertionError((slug, k, lang, size, page.evaluate("window.__boxes"))) from e
    assert got["panel"]["bottom"] <= 0.45 * size[1], got  # the panel leaves the screen to the data
    if size[0] < 700:  # a phone: only the question and its buttons stay, the rest folded above the top
        assert got["look"]["bottom"] <= 0 and got["panel"]["bottom"] <= 0.35 * size[1], got
    panel.locator("details.answer summary").click()
    expect(panel.locator("details.answer p")).to_be_in_viewport()
    assert page.evaluate("document.documentElement.scrollWidth") <= size[0]


def test_a_student_joining_a_class_on_such_a_step_is_taken_to_its_place(browser: Browser, live_server: str) -> None:
    """A class's link (/r/CODE, which lands on the teacher's page with its own #follow, no place of the page) takes
    a student's phone to the step's place under the question, as the step's own link would (joined mid-lesson, the
    phone once stayed at the page's top), en and zh."""
    lesson = BY_SLUG["big-weight"]
    teacher = browser.new_page(viewport={"width": 1280, "height": 720})
    teacher.goto(f"{live_server}{step_url(lesson, 3, 'en')}", timeout=300_000)  # /attribution#sink
    teacher.click("[data-room-start] button")
    expect(teacher.locator("#room [data-room-role=teacher]")).to_be_visible()
    code = teacher.locator("[data-room-code-text]").inner_text().strip()
    for lang in ("en", "zh"):
        phone = browser.new_page(viewport={"width": 390, "height": 844})
        phone.goto(f"{live_server}/r/{code}?lang={lang}")
        expect(phone.locator(".lesson-panel[data-anchor=sink] .question")).to_contain_text(
            lesson.steps[2].text(lang).question[:12]
        )
        try:
            phone.wait_for_function(BOXES, timeout=60_000)
        except Error as e:
            raise AssertionError((lang, phone.url, phone.evaluate("window.__boxes"))) from e
        phone.close()
    teacher.close()
