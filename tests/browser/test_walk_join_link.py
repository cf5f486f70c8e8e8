"""A class walk (stop 61): a student on a phone who opened the lab (its address, before the class began) and was
then shown the class's code had no way to type it: the join form (/r) was linked from nowhere, and a phone's header
hides "Start a class". Every page's header now offers "Join a class" (a laptop's beside "Start a class", a phone's on
the lab's name's row, so the header gains no row); it leads to the join form, and the code typed there follows the
class. It is not on the projector, and not while this screen is in a class (again once the class has ended). A
phone's header shows no presenter switch (the lab's and /predict's are hidden on a phone already): the row has room
for the link."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Browser, Page, expect

from .navigate import click_to_load
from .remote import PHONE, WAIT_MS

pytestmark = pytest.mark.browser

JOIN = "header.top a[data-join-class]"
# The link's box and the header's rows: on screen, inside the phone's width, beside the lab's name.
PLACE = """sel => { const a = document.querySelector(sel).getBoundingClientRect();
  const h1 = document.querySelector('header.top h1').getBoundingClientRect();
  const nav = document.querySelector('header.top nav.links').getBoundingClientRect();
  return {left: a.left, right: a.right, top: a.top, bottom: a.bottom, h1: [h1.top, h1.bottom], nav: nav.top,
          width: innerWidth, scroll: document.documentElement.scrollWidth}; }"""


def on_the_name_row(page: Page) -> None:
    got = page.evaluate(PLACE, JOIN)
    assert got["left"] >= 0 and got["right"] <= got["width"] and got["scroll"] <= got["width"], got
    assert got["top"] < got["h1"][1] and got["bottom"] > got["h1"][0], got  # on the lab's name's row
    assert got["h1"][1] - 2 <= got["nav"] < got["h1"][1] + 15, got  # the menu next, no row of its own between


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_phone_joins_a_class_from_any_page_by_its_code(browser: Browser, live_server: str, lang: str) -> None:
    name = {"en": "Join a class", "zh": "加入课堂"}[lang]
    laptop = browser.new_context(viewport={"width": 1280, "height": 720})
    phone = browser.new_context(viewport=PHONE, is_mobile=True, has_touch=True)
    try:
        tp = laptop.new_page()
        tp.set_default_timeout(WAIT_MS)
        tp.goto(f"{live_server}/lessons?lang={lang}")
        expect(tp.locator(JOIN)).to_have_text(name)  # a laptop's header: beside "Start a class"
        expect(tp.locator(JOIN)).to_be_visible()
        tp.goto(f"{live_server}/?stage=softmax&lang={lang}")
        click_to_load(tp, tp.locator("[data-toggle=present]:visible").first)
        expect(tp.locator(JOIN)).to_be_hidden()  # not on the projector
        tp.click("[data-room-start] button")
        expect(tp.locator("#room [data-room-role=teacher]")).to_be_visible()
        code = tp.locator("[data-room-code-text]").inner_text().strip()

        sp = phone.new_page()
        sp.set_default_timeout(WAIT_MS)
        for path in ("/train", "/lessons", "/"):  # a page whose header had the presenter switch, the lessons, the lab
            sp.goto(f"{live_server}{path}?lang={lang}")
            expect(sp.locator(JOIN)).to_be_visible()
            expect(sp.locator("header.top a.present-toggle")).to_be_hidden()
            on_the_name_row(sp)
        click_to_load(sp, sp.locator(JOIN))
        expect(sp).to_have_url(f"{live_server}/r?lang={lang}")
        expect(sp.locator(JOIN)).to_have_count(0)  # the join form's own page does not offer itself
        sp.locator("input[name=code]").fill(code.lower())
        click_to_load(sp, "form.join-form button[type=submit]")
        expect(sp.locator("#room [data-room-role=student]")).to_be_attached()
        expect(sp.locator("#stage")).to_have_attribute("data-stage", "softmax")  # the teacher's view, followed
        expect(sp).to_have_url(re.compile(rf"[?&]lang={lang}(&|$)"))
        expect(sp.locator(JOIN)).to_be_hidden()  # in a class: no second way in
        tp.once("dialog", lambda d: d.accept())
        tp.click("#room [data-room-end]")  # the class ends: the phone's page stays, and the next code can be typed
        expect(sp.locator("[data-room-ended]")).to_be_visible()
        expect(sp.locator(JOIN)).to_be_visible()
    finally:
        laptop.close()
        phone.close()
