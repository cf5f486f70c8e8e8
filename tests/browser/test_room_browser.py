"""A live class in two real browsers: the teacher starts a room from the lab page and steps; a student on a phone,
in Chinese, follows, answers a poll, explores on their own and comes back."""

from __future__ import annotations

import re
from urllib.parse import parse_qs, urlparse

import httpx
import pytest
from playwright.sync_api import Browser, expect

from tests.wait import wait_until

pytestmark = pytest.mark.browser


def test_a_student_follows_the_teacher_answers_a_poll_and_explores(browser: Browser, live_server: str) -> None:
    teacher = browser.new_context(viewport={"width": 1280, "height": 720})
    student = browser.new_context(viewport={"width": 390, "height": 844}, is_mobile=True, has_touch=True)
    try:
        tp = teacher.new_page()
        tp.goto(f"{live_server}/?lang=en&stage=scores&mask=causal")
        tp.click("[data-room-start] button")
        expect(tp.locator("#room [data-room-role=teacher]")).to_be_visible()
        code = tp.locator("[data-room-code-text]").inner_text().strip()
        assert len(code) == 6
        assert "lab_teacher" not in tp.url and code not in tp.url  # nothing secret in the teacher's address

        sp = student.new_page()
        sp.goto(f"{live_server}/r/{code}?lang=zh")
        expect(sp.locator("#stage")).to_have_attribute("data-stage", "scores")
        expect(sp.locator("#room [data-room-role=student]")).to_be_visible()
        expect(sp.locator("body")).to_have_attribute("data-room-following", "1")
        expect(tp.locator("[data-room-followers]")).to_have_text("1")

        # The teacher steps; the student's page follows, in the student's language.
        tp.click("[data-action=next]")
        expect(sp.locator("#stage")).to_have_attribute("data-stage", "mask")
        query = parse_qs(urlparse(sp.url).query)
        assert query["stage"] == ["mask"] and query["lang"] == ["zh"]
        assert sp.evaluate("document.documentElement.lang") == "zh-CN"
        room = httpx.get(f"{live_server}/api/v1/rooms/{code}").json()
        assert "lang" not in parse_qs(room["query"]) and parse_qs(room["query"])["stage"] == ["mask"]

        # A poll, written on the teacher's remote (not on the projector): the student answers on the phone, the
        # teacher sees it counted, then reveals.
        remote = teacher.new_page()
        remote.goto(f"{live_server}/r/{code}/teach?lang=en")
        remote.click(".teach-custom summary")
        remote.fill("[data-poll-form] input[name=prompt]", "Which is row 1's largest weight?")
        remote.fill("[data-poll-form] input[name=options]", "猫, 坐")
        remote.fill("[data-poll-form] input[name=answer]", "猫")
        remote.click("[data-poll-form] button[type=submit]")
        expect(sp.locator("[data-room-question]")).to_be_visible()
        expect(sp.locator("[data-room-prompt]")).to_have_text("Which is row 1's largest weight?")
        assert sp.evaluate("document.documentElement.scrollWidth") <= 390  # the bar never pushes the phone sideways
        sp.click("[data-room-options] button[value='猫']")
        expect(sp.locator("[data-room-mine-value]")).to_have_text("猫")
        expect(tp.locator("[data-room-total]")).to_have_text("1")
        tp.click("[data-room-close]")
        expect(sp.locator("[data-room-reveal]")).to_be_visible()
        expect(sp.locator("[data-room-key]")).to_have_text("猫")
        expect(sp.locator("[data-room-reveal] li.key .n")).to_have_text("1")

        # Exploring: the student's own view stays while the teacher moves on; "back" catches up.
        sp.click("[data-room-explore]")
        expect(sp.locator("body")).to_have_attribute("data-room-following", "0")
        # Exploring, the student has the lab's controls, but not presenter mode (a phone never shows it; a student's
        # laptop neither): the projector is the teacher's.
        expect(sp.locator("form#controls")).to_be_visible()
        sp.set_viewport_size({"width": 1280, "height": 720})
        expect(sp.locator("[data-toggle=present]")).to_have_count(1)
        assert sp.locator("[data-toggle=present]").evaluate("e => getComputedStyle(e).display") == "none"
        assert tp.locator("[data-toggle=present]").evaluate("e => getComputedStyle(e).display") != "none"
        sp.set_viewport_size({"width": 390, "height": 844})
        tp.click("[data-action=next]")

        def stepped() -> dict | bool:
            r = httpx.get(f"{live_server}/api/v1/rooms/{code}").json()
            return "stage=softmax" in r["query"] and r

        room = wait_until(stepped, 60, "the teacher's step reached the room", 0.1)
        # The event has reached the exploring student's page (its version applied) and has not moved it.
        expect(sp.locator("#room")).to_have_attribute("data-room-version", str(room["version"]))
        expect(sp.locator("#stage")).to_have_attribute("data-stage", "mask")
        sp.click("[data-room-back]")
        expect(sp.locator("#stage")).to_have_attribute("data-stage", "softmax")

        # The teacher ends the class (after confirming): the student is told, the page stays.
        tp.once("dialog", lambda d: d.accept())
        tp.click("[data-room-end]")
        expect(sp.locator("[data-room-ended]")).to_be_visible()
        expect(tp.locator("[data-room-ended]")).to_be_visible()  # the teacher's page says so too (#32)
        assert httpx.get(f"{live_server}/api/v1/rooms/{code}").status_code == 404
    finally:
        teacher.close()
        student.close()


def test_a_revealed_poll_leaves_every_screen_at_the_next_step_or_when_cleared(browser: Browser,
                                                                              live_server: str) -> None:  # fmt: skip
    teacher = browser.new_context(viewport={"width": 1280, "height": 720})
    student = browser.new_context(viewport={"width": 390, "height": 844}, is_mobile=True, has_touch=True)
    try:
        tp = teacher.new_page()
        tp.goto(f"{live_server}/?lang=en&stage=scores&mask=causal&present=1")
        tp.click("[data-room-start] button")
        expect(tp.locator("#room [data-room-role=teacher]")).to_be_visible()
        code = tp.locator("[data-room-code-text]").inner_text().strip()
        auth_cookie = {c["name"]: c["value"] for c in teacher.cookies()}["lab_teacher"]
        token = auth_cookie.split(".", 1)[1]
        auth = {"Authorization": f"Bearer {token}"}
        sp = student.new_page()
        sp.goto(f"{live_server}/r/{code}?lang=zh")
        expect(sp.locator("#room [data-room-role=student]")).to_be_visible()
        polls = f"{live_server}/api/v1/rooms/{code}/polls"

        def ask_and_reveal() -> str:
            pid = httpx.post(polls, json={"prompt": "Which?", "kind": "choice", "options": ["猫", "坐"],
                                          "answer": "猫"}, headers=auth).json()["id"]  # fmt: skip
            expect(sp.locator("[data-room-question]")).to_be_visible()
            sp.click("[data-room-options] button[value='猫']")
            expect(tp.locator("[data-room-total]")).to_have_text("1")
            tp.click("[data-room-close]")
            expect(sp.locator("[data-room-reveal]")).to_be_visible()
            expect(tp.locator("[data-room-histogram]")).to_be_visible()
            return pid

        # The next step takes the revealed poll off the projector and the phone.
        ask_and_reveal()
        tp.click("[data-action=next]")
        expect(sp.locator("#stage")).to_have_attribute("data-stage", "mask")
        expect(sp.locator("[data-room-question]")).to_be_hidden()
        expect(tp.locator("[data-room-results]")).to_be_hidden()

        # A student may dismiss a revealed result on their own phone; the teacher's Clear takes it off the rest.
        pid = ask_and_reveal()
        sp.click("[data-room-dismiss]")
        expect(sp.locator("[data-room-question]")).to_be_hidden()
        expect(tp.locator("[data-room-clear]")).to_be_visible()
        tp.click("[data-room-clear]")
        expect(tp.locator("[data-room-results]")).to_be_hidden()
        assert httpx.get(f"{polls}/{pid}").json()["counts"] == {"猫": 1}  # the answers stay
        tp.once("dialog", lambda d: d.accept())
        tp.click("[data-room-end]")
        # The projector stays on its page, in presenter mode, and says the class has ended (#32), as when the phone
        # ends it.
        expect(tp.locator("#room [data-room-ended]")).to_be_visible()
        assert "present=1" in tp.url
        expect(tp.locator("body")).to_have_class(re.compile(r"\bpresent\b"))
        # The next class starts from the same view, still in presenter mode, with a new code; the student's bar
        # offers nothing of the kind.
        expect(sp.locator("#room [data-room-ended]")).to_be_visible()
        assert sp.locator("[data-room-restart]").count() == 0
        expect(tp.locator("aside.qr[data-room-join]")).to_be_hidden()  # the ended class's code leaves the wall
        tp.click("#room [data-room-restart] button")
        expect(tp.locator("#room [data-room-role=teacher]")).to_be_visible()
        again = tp.locator("[data-room-code-text]").inner_text().strip()
        assert again != code and "present=1" in tp.url and "stage=mask" in tp.url
        assert httpx.get(f"{live_server}/api/v1/rooms/{again}").json()["page"] == "/"
    finally:
        teacher.close()
        student.close()


def test_the_remote_offers_what_the_projected_page_offers(browser: Browser, live_server: str) -> None:
    """Stage tabs, the mask and scale switches and the heads of the page on the projector, as buttons on a 390 px
    phone: each press moves the class there."""
    teacher = browser.new_context(viewport={"width": 1280, "height": 720})
    try:
        tp = teacher.new_page()
        tp.goto(f"{live_server}/?lang=en&stage=scores&mask=causal&tokens=a+b+c&d_model=8&n_heads=2")
        tp.click("[data-room-start] button")
        expect(tp.locator("#room [data-room-role=teacher]")).to_be_visible()
        code = tp.locator("[data-room-code-text]").inner_text().strip()
        phone = teacher.new_page()  # the remote, as on the teacher's own (paired) phone
        phone.set_viewport_size({"width": 390, "height": 844})
        phone.goto(f"{live_server}/r/{code}/teach?lang=zh")
        stages = phone.locator("[data-controls=stages] button")
        expect(stages).to_have_count(5)
        expect(phone.locator("[data-controls=stages] button[aria-pressed=true]")).to_contain_text("2")
        room = f"{live_server}/api/v1/rooms/{code}"

        def wait_for(part: str) -> None:
            wait_until(lambda: part in httpx.get(room).json()["query"], 60, f"{part} reached the room", 0.1)

        stages.nth(3).click()
        wait_for("stage=softmax")
        expect(tp.locator("#stage")).to_have_attribute("data-stage", "softmax")  # the projector follows
        expect(phone.locator("[data-controls=switches] button")).not_to_have_count(0)
        phone.locator("[data-controls=switches] button").first.click()  # the mask switch: causal -> none
        wait_for("mask=none")
        expect(phone.locator("[data-controls=heads] button")).to_have_count(2)
        phone.locator("[data-controls=heads] button").nth(1).click()
        wait_for("head=1")
        assert phone.evaluate("document.documentElement.scrollWidth") <= 390
    finally:
        teacher.close()


def test_the_teacher_opens_a_page_the_class_cannot_follow_and_stays_there(browser: Browser, live_server: str) -> None:
    """A class walk (stop 55): the teacher opened /models during a class; its announcement was refused (the class
    follows no model list) and the projector went back to the class's view, as if the remote had stepped it."""
    teacher = browser.new_context(viewport={"width": 1280, "height": 720})
    # every URL this screen's scripts fetch, recorded in the page as they are asked for (room.js follows with fetch)
    teacher.add_init_script("""{ const f = window.fetch; window.fetched = [];
      window.fetch = (u, o) => { window.fetched.push(String(u)); return f(u, o); }; }""")
    try:
        tp = teacher.new_page()
        tp.goto(f"{live_server}/?lang=en&stage=scores")
        tp.click("[data-room-start] button")
        expect(tp.locator("#room [data-room-role=teacher]")).to_be_visible()
        code = tp.locator("[data-room-code-text]").inner_text().strip()
        tp.click("[data-action=next]")  # a step the class follows
        wait_until(lambda: "stage=mask" in httpx.get(f"{live_server}/api/v1/rooms/{code}").json()["query"], 60)
        tp.goto(f"{live_server}/models?lang=en")
        expect(tp.locator("#room")).to_have_attribute("data-room-version", re.compile(r"\d+"))  # the class's state came
        expect(tp.locator("#room")).to_have_class(re.compile(r"\brefused\b"))  # /models announced: refused (422)
        tp.evaluate("() => new Promise(r => setTimeout(r, 0))")  # what the refusal's handlers start has started
        assert not [u for u in tp.evaluate("window.fetched") if urlparse(u).path == "/"]  # no way back to the class
        assert urlparse(tp.url).path == "/models"
        expect(tp.locator("table.models").first).to_be_visible()
        room = httpx.get(f"{live_server}/api/v1/rooms/{code}").json()
        assert room["page"] == "/" and "stage=mask" in room["query"]  # the class stays where it was
    finally:
        teacher.close()


@pytest.mark.parametrize(("lang", "words"), [("en", "at most 80 characters"), ("zh", "最多 80 个字符")])
def test_the_remote_says_why_its_own_question_was_refused(
    browser: Browser, live_server: str, lang: str, words: str
) -> None:
    """An option too long on the teacher's remote (a phone): the refusal is said under the options, in the remote's
    language, the form stays open with what was typed; fixed, the poll opens and the form folds (it used to be only
    a red outline, no words)."""
    teacher = browser.new_context(viewport={"width": 1280, "height": 720})
    try:
        tp = teacher.new_page()
        tp.goto(f"{live_server}/?lang={lang}")
        tp.click("[data-room-start] button")
        expect(tp.locator("#room [data-room-role=teacher]")).to_be_visible()
        code = tp.locator("[data-room-code-text]").inner_text().strip()
        tp.set_viewport_size({"width": 390, "height": 844})  # the remote on a phone-sized screen
        tp.goto(f"{live_server}/r/{code}/teach?lang={lang}")
        tp.click(".teach-custom summary")
        tp.fill("[data-poll-form] input[name=prompt]", "Which?")
        tp.fill("[data-poll-form] input[name=options]", "A, " + "B" * 81)
        tp.click("[data-poll-form] button[type=submit]")
        said = tp.locator("[data-poll-form] [data-field-error=options]")
        expect(said).to_be_visible()
        expect(said).to_contain_text(words)
        expect(tp.locator("[data-poll-form] input[name=options]")).to_have_attribute("aria-invalid", "true")
        expect(tp.locator("[data-poll-form] input[name=prompt]")).to_have_value("Which?")
        assert tp.evaluate("document.documentElement.scrollWidth") <= 390
        tp.fill("[data-poll-form] input[name=options]", "A, B")
        tp.click("[data-poll-form] button[type=submit]")
        expect(tp.locator("details.teach-custom")).not_to_have_attribute("open", "")
        wait_until(lambda: httpx.get(f"{live_server}/api/v1/rooms/{code}").json()["poll"] is not None)
        expect(tp.locator("[data-poll-form] [data-field-error]")).to_have_count(0)
    finally:
        teacher.close()
