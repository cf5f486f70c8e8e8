"""The second class, played whole in real browsers, with the teacher away from the laptop: the projector laptop at
1280×720 in presenter mode, the teacher's own phone paired from the laptop's remote, and two students on phones
(English and Chinese). Everything after the pairing is pressed on the teacher's phone: the lesson's poll asked,
revealed and left behind at the next step (no stale poll on any screen), the mask switch, a head, a knock-out on
the training view, the end — and the class summary opened and downloaded on the phone afterwards."""

from __future__ import annotations

import re
from urllib.parse import parse_qs, urlparse

import pytest
from playwright.sync_api import Browser, expect

from .remote import PHONE, WAIT_MS, fits_the_phone, no_poll_on, pair_phone, reaches, remote_shows, room_query, until

pytestmark = pytest.mark.browser


def test_a_class_run_from_the_teachers_phone(browser: Browser, live_server: str) -> None:
    laptop = browser.new_context(viewport={"width": 1280, "height": 720})
    mine = browser.new_context(viewport=PHONE, is_mobile=True, has_touch=True)  # the teacher's own phone
    en = browser.new_context(viewport=PHONE, is_mobile=True, has_touch=True)
    zh = browser.new_context(viewport=PHONE, is_mobile=True, has_touch=True, locale="zh-CN")
    try:
        tp = laptop.new_page()
        tp.goto(f"{live_server}/?stage=3&mask=causal&lesson=mask-toggle&lesson_step=1&lang=en")
        tp.click("[data-toggle=present]")
        expect(tp.locator("body")).to_have_class("present ")
        tp.click("[data-room-start] button")
        expect(tp.locator("#room [data-room-role=teacher]")).to_be_visible(timeout=WAIT_MS)
        code = tp.locator("[data-room-code-text]").inner_text().strip()
        # The projected page never shows a pairing link: it hands the teacher's role to whoever scans it.
        assert tp.locator("[data-pair], [data-pair-url]").count() == 0

        # Unpaired, the phone is refused the remote; the laptop's remote (never projected) pairs it.
        ph = pair_phone(laptop, mine, live_server, code)

        se, sz = en.new_page(), zh.new_page()
        se.goto(f"{live_server}/r/{code}?lang=en")
        sz.goto(f"{live_server}/r/{code}?lang=zh")
        for sp in (se, sz):
            expect(sp.locator("#stage")).to_have_attribute("data-stage", "mask", timeout=WAIT_MS)
        expect(ph.locator("[data-followers]")).to_have_text("2", timeout=WAIT_MS)

        # The lesson's poll, asked, answered, revealed — all from the phone.
        expect(ph.locator("[data-prepared]")).to_be_visible(timeout=WAIT_MS)
        key = ph.locator("[data-prepared-key]").inner_text()
        ph.click("[data-ask]")
        for sp in (se, sz):
            expect(sp.locator("[data-room-question]")).to_be_visible(timeout=WAIT_MS)
        se.click(f"[data-room-options] button[value='{key}']")
        sz.locator(f"[data-room-options] button:not([value='{key}'])").first.click()
        expect(ph.locator("[data-total]")).to_have_text("2", timeout=WAIT_MS)
        ph.click("[data-reveal]")
        expect(tp.locator("#room [data-room-histogram]")).to_be_visible(timeout=WAIT_MS)
        expect(se.locator("[data-room-key]")).to_have_text(key, timeout=WAIT_MS)

        # The lesson's next step from the phone: the projector moves, and the revealed poll leaves every screen.
        ph.click("[data-go=lesson-next]")
        reaches(live_server, code, "lesson_step", "2")
        expect(tp.locator("#stage")).to_have_attribute("data-stage", "softmax", timeout=WAIT_MS)
        assert parse_qs(urlparse(tp.url).query).get("present") == ["1"]
        no_poll_on(tp, (se, sz))
        remote_shows(ph, lesson_step="2")  # the phone's switches are step 2's (step 1's has a mask switch too)

        # The mask switch, pressed on the phone: the projector and the students follow.
        switches = ph.locator("[data-controls=switches] button")
        expect(switches).not_to_have_count(0, timeout=WAIT_MS)
        switches.first.click()
        reaches(live_server, code, "mask", "none")
        expect(tp).to_have_url(re.compile(r"[?&]mask=none(?:&|$)"), timeout=WAIT_MS)
        for sp in (se, sz):
            expect(sp).to_have_url(re.compile(r"[?&]mask=none(?:&|$)"), timeout=WAIT_MS)

        # A head, chosen on the phone, on a page with two.
        tp.goto(f"{live_server}/?stage=softmax&tokens=a+b+c&d_model=8&n_heads=2&present=1&lang=en")
        heads = ph.locator("[data-controls=heads] button")
        expect(heads).to_have_count(2, timeout=WAIT_MS)
        heads.nth(1).click()
        reaches(live_server, code, "head", "1")
        expect(tp).to_have_url(re.compile(r"[?&]head=1(?:&|$)"), timeout=WAIT_MS)

        # A knock-out on the training view, from the phone's list of the heads the page ranks.
        tp.goto(f"{live_server}/predict?text=The+cat+sat&rank=1&present=1&lang=en", timeout=180_000)
        knock = ph.locator("[data-controls=knock] button")
        expect(knock).not_to_have_count(0, timeout=WAIT_MS)
        knock.first.click()
        until(lambda: room_query(live_server, code).get("ablate"), lambda: str(room_query(live_server, code)))
        expect(tp).to_have_url(re.compile(r"[?&]ablate="), timeout=WAIT_MS)
        fits_the_phone(ph)

        # The end, from the phone; every screen says so.
        ph.once("dialog", lambda d: d.accept())
        ph.click("[data-end] button")
        for page in (tp, se, sz):
            expect(page.locator("[data-room-ended]")).to_be_visible(timeout=WAIT_MS)
        expect(ph.locator("[data-ended]")).to_be_visible(timeout=WAIT_MS)

        # After the class, the summary on the paired phone (its own teacher token): the poll, both answers, the CSV.
        ph.click("[data-summary-link] a")
        expect(ph.locator("[data-summary]")).to_have_attribute("data-ended", "true", timeout=WAIT_MS)
        fits_the_phone(ph)
        assert [p.get_attribute("data-total") for p in ph.locator("[data-poll]").all()] == ["2"]
        table = ph.request.get(f"{live_server}/api/v1/rooms/{code}/summary.csv")
        assert table.status == 200 and len(table.text().strip().splitlines()) == 1 + 2  # a header, a row per answer
        assert se.request.get(f"{live_server}/api/v1/rooms/{code}/summary.csv").status in (401, 403)  # a student
    finally:
        for context in (laptop, mine, en, zh):
            context.close()
