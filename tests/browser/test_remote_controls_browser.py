"""The teacher's paired phone (390 × 844) after the first classes' review (#32): it chooses a cell of the lab's
matrix (a grid of a toy's cells; a row and a column for a 10-token sentence) and a head /heads ranks; while a lesson
runs its steps are the remote's first pair and the page's own buttons say "stage"; a student cannot open a step's
answer before the teacher revealed its poll or moved on; "Unpair them all" asks first and then tells the phone."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Browser, Dialog, Page, expect

from app.web.lessons import BY_SLUG

from .remote import PHONE, WAIT_MS, fits_the_phone, pair_phone, reaches, remote_shows, room_query, until

pytestmark = pytest.mark.browser

TEN = "one two three four five six seven eight nine ten"


def on(screen: Page, **params: str) -> None:
    """The screen's own address (asked of the page) has `params`."""
    until(lambda: all(f"{k}={v}" in screen.evaluate("location.search") for k, v in params.items()),
          lambda: f"{params} not on {screen.evaluate('location.href')}")  # fmt: skip


def test_the_phone_chooses_cells_heads_and_runs_a_lesson_first(browser: Browser, live_server: str) -> None:
    laptop = browser.new_context(viewport={"width": 1280, "height": 720})
    mine = browser.new_context(viewport=PHONE, is_mobile=True, has_touch=True)
    en = browser.new_context(viewport=PHONE, is_mobile=True, has_touch=True)
    try:
        tp = laptop.new_page()
        tp.goto(f"{live_server}/?lang=en&stage=softmax")
        tp.click("[data-room-start] button")
        expect(tp.locator("#room [data-room-role=teacher]")).to_be_visible(timeout=WAIT_MS)
        code = tp.locator("[data-room-code-text]").inner_text().strip()
        ph = pair_phone(laptop, mine, live_server, code)
        se = en.new_page()
        se.goto(f"{live_server}/r/{code}?lang=en")
        expect(ph.locator("[data-followers]")).to_have_text("1", timeout=WAIT_MS)

        # ---- A: a cell of the toy's 5 × 5 weights, from a grid of its cells that fits the phone ------------------
        grid = ph.locator("[data-cell-grid] table[data-cell-table=weights]")
        expect(grid).to_be_visible(timeout=WAIT_MS)
        expect(grid.locator("tbody tr")).to_have_count(5)
        expect(grid.locator("tbody button")).to_have_count(25)
        expect(ph.locator("[data-cell-matrices] button[aria-pressed=true]")).to_have_text("A")
        fits_the_phone(ph)
        box = grid.bounding_box()
        assert box is not None and box["x"] + box["width"] <= PHONE["width"]
        ph.click("[data-cell-grid] button[data-row='2'][data-col='1']")
        reaches(live_server, code, "cell", "weights.0.2.1")
        on(tp, cell="weights.0.2.1")
        expect(tp.locator("#arithmetic")).to_be_visible(timeout=WAIT_MS)  # the projector opened its arithmetic
        expect(ph.locator("[data-cell-grid] button[data-row='2'][data-col='1']")).to_have_attribute(
            "aria-pressed", "true", timeout=WAIT_MS
        )
        ph.click("[data-cell-close]")
        until(
            lambda: "cell" not in room_query(live_server, code),
            lambda: f"cell still open: {room_query(live_server, code)}",
        )
        expect(tp.locator("#arithmetic")).to_have_count(0, timeout=WAIT_MS)

        # The projection stage has three results (Q, K, V): the phone picks the matrix, then its cell.
        ph.locator("[data-controls=stages] button", has_text="Projection").click()
        reaches(live_server, code, "stage", "projection")
        expect(ph.locator("[data-cell-matrices] button")).to_have_count(4, timeout=WAIT_MS)  # X, Q, K, V
        expect(ph.locator("[data-cell-matrices] button[aria-pressed=true]")).to_have_text("X")  # as the page: X first
        ph.click("[data-cell-matrices] button[data-cell-matrix=k]")
        ph.click("[data-cell-grid] table[data-cell-table=k] button[data-row='4'][data-col='3']")
        reaches(live_server, code, "cell", "k.0.4.3")
        on(tp, cell="k.0.4.3")

        # A 10-token sentence's weights: a row and a column to type (no 10 × 10 grid on a phone).
        tp.goto(f"{live_server}/?lang=en&stage=softmax&text={TEN.replace(' ', '+')}")
        form = ph.locator("[data-cell-form]")
        expect(form).to_be_visible(timeout=WAIT_MS)
        expect(ph.locator("[data-cell-grid] table")).to_have_count(0)
        expect(ph.locator("[data-cell-hint=form]")).to_contain_text("counted from 0")
        expect(form.locator("[name=row]")).to_have_attribute("max", "9")
        form.locator("[name=row]").fill("7")
        form.locator("[name=col]").fill("3")
        form.locator("button[type=submit]").click()
        reaches(live_server, code, "cell", "weights.0.7.3")
        on(tp, cell="weights.0.7.3")
        remote_shows(ph, cell="weights.0.7.3")  # the phone rendered the view it asked for (the typed 7 is no proof)
        expect(form.locator("[name=row]")).to_have_value("7", timeout=WAIT_MS)  # the open cell, read back
        form.locator("[name=row]").fill("12")  # past the matrix: refused on the phone, the class stays
        form.locator("button[type=submit]").click()
        assert form.locator("[name=row]").evaluate("e => e.validity.rangeOverflow")
        assert room_query(live_server, code)["cell"] == ["weights.0.7.3"]
        fits_the_phone(ph)

        # ---- A0: a cell poll asked on the softmax stage leaves every screen, the phone's remote too, when the class
        # moves to /heads (the server closes it: no card "Answers: 0" left behind on the phone, #32) ---------------
        ph.click(".teach-custom summary")
        ph.fill("[data-poll-form] input[name=prompt]", "Which cell is largest?")
        ph.select_option("[data-poll-form] select[name=kind]", "cell")
        # Its key, picked on a copy of the matrix the class sees (rendered with the remote's controls).
        expect(ph.locator("[data-key-matrix] table[data-matrix=weights] td[data-row]")).to_have_count(100)
        ph.click("[data-key-matrix] td[data-row='2'][data-col='1']")
        expect(ph.locator("[data-poll-form] [name=answer]")).to_have_value("2,1")
        ph.click("[data-poll-form] button[type=submit]")
        expect(se.locator("[data-room-prompt]")).to_have_text("Which cell is largest?", timeout=WAIT_MS)
        expect(ph.locator("[data-results]")).to_be_visible(timeout=WAIT_MS)
        expect(ph.locator("[data-results-prompt]")).to_have_text("Which cell is largest?")
        # ---- A: /heads' ranked heads on the phone ----------------------------------------------------------------
        tp.goto(f"{live_server}/heads?lang=en")
        expect(se.locator("[data-room-prompt]")).to_be_hidden(timeout=WAIT_MS)
        expect(ph.locator("[data-results]")).to_be_hidden(timeout=WAIT_MS)
        heads = ph.locator("[data-controls=heads] button")
        expect(heads).to_have_count(10, timeout=WAIT_MS)
        expect(heads.first).to_have_attribute("aria-pressed", "true")  # the top head is the one shown
        layer, head = re.findall(r"\d+", heads.nth(2).inner_text())[:2]
        heads.nth(2).click()
        reaches(live_server, code, "head", f"{layer}.{head}")
        on(tp, head=f"{layer}.{head}")
        # The projector scrolled to the chosen head's pattern (below the grids), as the head's own link would (#32).
        expect(tp.locator("#pattern")).to_be_in_viewport(timeout=WAIT_MS)
        expect(tp.locator("#pattern")).to_contain_text(f"{layer}")
        expect(ph.locator("[data-controls=switches] button", has_text="previous token")).to_have_count(1)  # roles
        fits_the_phone(ph)

        # ---- C: a lesson runs: its steps first and large, the page's own buttons named stages --------------------
        ph.click("[data-lessons] summary")
        ph.click("[data-open-lesson=mask-toggle]")
        reaches(live_server, code, "lesson", "mask-toggle")
        expect(ph.locator("[data-lesson-nav]")).to_be_visible(timeout=WAIT_MS)
        expect(ph.locator("[data-lesson-title]")).to_contain_text("1", timeout=WAIT_MS)
        expect(ph.locator("[data-go=lesson-next]")).to_have_text("Next step →")
        expect(ph.locator("[data-go=next]")).to_have_text("Next stage →", timeout=WAIT_MS)
        expect(ph.locator("[data-go=prev]")).to_have_text("← Previous stage")
        lesson_next, stage_next = (
            ph.locator("[data-go=lesson-next]").bounding_box(),
            ph.locator("[data-go=next]").bounding_box(),
        )
        assert lesson_next and stage_next and lesson_next["y"] + lesson_next["height"] <= stage_next["y"]  # above
        assert lesson_next["height"] > stage_next["height"]  # and the larger
        fits_the_phone(ph)

        # ---- E: the student's answer stays shut until the teacher revealed the step's poll ------------------------
        panel = se.locator(".lesson-panel[data-lesson=mask-toggle][data-step='1']")
        expect(panel).to_be_attached(timeout=WAIT_MS)
        expect(panel.locator("details.answer")).to_be_hidden()
        expect(panel.locator("[data-answer-held]")).to_have_text(re.compile("revealed"))
        expect(tp.locator(".lesson-panel details.answer")).to_be_visible()  # the projector's (the teacher's) is there
        expect(ph.locator("[data-prepared]")).to_be_visible(timeout=WAIT_MS)
        expect(panel.locator(".lesson-nav")).to_be_hidden()  # the steps are the teacher's: no dead buttons (#32)
        expect(ph.locator("[data-ask]")).to_have_text("Ask the class")
        ph.click("[data-ask]")
        expect(se.locator("[data-room-prompt]")).to_be_visible(timeout=WAIT_MS)
        expect(panel.locator("details.answer")).to_be_hidden()
        expect(ph.locator("[data-ask]")).to_be_disabled(timeout=WAIT_MS)  # asked: not "Ask the class" again
        expect(ph.locator("[data-ask]")).to_contain_text("answering")
        ph.click("[data-reveal]")
        expect(ph.locator("[data-ask]")).to_be_enabled(timeout=WAIT_MS)
        expect(se.locator("[data-room-key]")).to_be_visible(timeout=WAIT_MS)
        expect(panel.locator("details.answer")).to_be_visible(timeout=WAIT_MS)
        expect(panel.locator("[data-answer-held]")).to_be_hidden()
        ph.click("[data-go=lesson-next]")
        step2 = se.locator(".lesson-panel[data-lesson=mask-toggle][data-step='2']")
        expect(step2).to_be_attached(timeout=WAIT_MS)
        expect(step2.locator("details.answer")).to_be_hidden()  # a new step: shut again
        # The phone's remote at step 2, the lesson's last, before it is pressed: pressed while the remote still drew
        # step 1, the button went to step 2 again (a fresh clone's run; the remote redraws after the students' pages).
        expect(ph.locator("[data-go=lesson-next]")).to_have_text("Next lesson →", timeout=WAIT_MS)
        ph.click("[data-go=lesson-next]")  # moved on (to the next lesson) without asking step 2's question
        reaches(live_server, code, "lesson", "row-one")
        expect(se.locator(".lesson-panel[data-lesson=row-one]")).to_be_attached(timeout=WAIT_MS)
        se.click("[data-room-explore]")
        page, _, query = BY_SLUG["mask-toggle"].steps[1].url.partition("#")[0].partition("?")
        se.goto(f"{live_server}{page}?{query}&lesson=mask-toggle&lesson_step=2&lang=en")  # the step the class left
        expect(se.locator("#room [data-room-role=student]")).to_be_attached(timeout=WAIT_MS)
        expect(se.locator(".lesson-panel[data-step='2'] details.answer")).to_be_visible(timeout=WAIT_MS)
        se.goto(f"{live_server}/r/{code}?lang=en")  # back with the class: row-one's first step, not yet asked
        expect(se.locator(".lesson-panel[data-lesson=row-one] [data-answer-held]")).to_be_visible(timeout=WAIT_MS)
        se.click("[data-room-leave]")  # out of the class: the lab's page as anyone sees it, answer and all
        expect(se.locator(".lesson-panel[data-lesson=row-one] details.answer")).to_be_visible()
        expect(se.locator(".lesson-panel [data-answer-held]")).to_be_hidden()

        # ---- B: "Unpair them all" on the phone asks first, then says so on the phone --------------------------------
        asked: list[str] = []

        def dismiss(d: Dialog) -> None:
            asked.append(d.message)
            d.dismiss()

        ph.once("dialog", dismiss)
        ph.click("[data-unpair]")
        until(lambda: asked, lambda: "no question before unpairing")
        assert "this phone included" in asked[0]
        expect(ph.locator("[data-teach]")).to_be_visible()  # not unpaired: it said no
        ph.once("dialog", lambda d: d.accept())
        ph.click("[data-unpair]")
        expect(ph.locator("[data-unpaired-message]")).to_contain_text("no longer the teacher", timeout=WAIT_MS)
        assert "lang=en" in ph.url
        fits_the_phone(ph)
        assert ph.goto(f"{live_server}/r/{code}/teach?lang=en").status == 403  # type: ignore[union-attr]
    finally:
        for context in (laptop, mine, en):
            context.close()
