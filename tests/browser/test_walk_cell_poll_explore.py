"""A class walk (stop 61): a student answered the lesson's cell question (which weight of A is exactly 1.00), the
teacher revealed it, and the student, exploring on their own, stepped to stage 5: its matrix head0 = A·V showed the
revealed key and the vote on its cell [0, 0] (1.60, "·1"), a number nobody was asked about. While the question was
open a tap on that other stage's matrix answered it with the wrong matrix's cell (and did not open the cell). A cell
poll's marks and taps belong to the class's matrix: on another stage they are not shown, and a tap there opens the
cell's arithmetic as it does outside a poll; back on the asked stage both return."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Browser, Page, expect

from .remote import PHONE, WAIT_MS

pytestmark = pytest.mark.browser

WEIGHTS = "table[data-matrix=weights]"


def to_stage(sp: Page, stage: str) -> None:
    sp.locator(f"ol.tabs a[href*='stage={stage}']").click()
    expect(sp.locator("#stage")).to_have_attribute("data-stage", stage)


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_cell_poll_marks_only_its_own_matrix(browser: Browser, live_server: str, lang: str) -> None:
    laptop = browser.new_context(viewport={"width": 1280, "height": 720})
    phone = browser.new_context(viewport=PHONE, is_mobile=True, has_touch=True)
    try:
        tp = laptop.new_page()
        tp.set_default_timeout(WAIT_MS)
        tp.goto(f"{live_server}/?stage=4&mask=causal&lesson=row-one&lesson_step=1&lang={lang}")
        tp.click("[data-room-start] button")
        expect(tp.locator("#room [data-room-role=teacher]")).to_be_visible()
        code = tp.locator("[data-room-code-text]").inner_text().strip()
        sp = phone.new_page()
        sp.set_default_timeout(WAIT_MS)
        sp.goto(f"{live_server}/r/{code}?lang={lang}")
        expect(sp.locator("#room [data-room-role=student]")).to_be_attached()
        expect(sp.locator("#stage")).to_have_attribute("data-stage", "softmax")

        tp.locator(".lesson-panel [data-room-ask]").click()  # the lesson's cell question, asked of the class
        expect(sp.locator(f"{WEIGHTS} td.pollable").first).to_be_visible()
        sp.locator("[data-room-explore]").click()
        to_stage(sp, "weighted_sum")
        expect(sp.locator("td.pollable")).to_have_count(0)  # another stage's matrix is not the question's
        other = sp.locator("table[data-matrix] td[data-row='0'][data-col='0'] a").first
        other.click()  # opens the cell's arithmetic, answers nothing
        expect(sp).to_have_url(re.compile(r"[?&]cell="))
        expect(sp.locator(".stage-data > .arithmetic")).to_be_visible()
        expect(tp.locator("[data-room-total]")).to_have_text("0")

        to_stage(sp, "softmax")  # back on the asked stage (still exploring): the question's cells again
        expect(sp.locator(f"{WEIGHTS} td.pollable").first).to_be_visible()
        sp.locator(f"{WEIGHTS} td[data-row='0'][data-col='0']").click()
        expect(sp.locator(f"{WEIGHTS} td.voted[data-row='0'][data-col='0']")).to_have_count(1)
        expect(tp.locator("[data-room-total]")).to_have_text("1")
        tp.locator("#room [data-room-close]").click()  # the bar's "Close and reveal"
        expect(sp.locator(f"{WEIGHTS} td.poll-key[data-row='0'][data-col='0']")).to_have_count(1)
        expect(sp.locator(f"{WEIGHTS} td[data-votes='1']")).to_have_count(1)

        to_stage(sp, "weighted_sum")  # the revealed key and votes stay with their matrix
        expect(sp.locator("td.poll-key")).to_have_count(0)
        expect(sp.locator("td[data-votes]")).to_have_count(0)
        expect(sp.locator("td.voted")).to_have_count(0)
        to_stage(sp, "softmax")
        expect(sp.locator(f"{WEIGHTS} td.poll-key[data-row='0'][data-col='0']")).to_have_count(1)
    finally:
        laptop.close()
        phone.close()
