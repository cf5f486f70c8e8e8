"""A class walk (#43) followed the big-weight lesson on a 390×844 phone: from step 4 (/attribution…#sink) to step 5 (a
lab page, no #anchor) the student landed at scrollY 1423 of the new page, its lesson panel and matrix off screen
above, because the swap kept the old page's scroll. A followed page change lands as a navigation would: at its
anchor if it has one, else at the top. The same walk saw the teacher's bar read "Following: 0" after each page
change until its next 5-second refresh, though the student still followed: the bar arrives with the count."""

from __future__ import annotations

from urllib.parse import parse_qs, urlparse

import pytest
from playwright.sync_api import Browser, Page, Route, expect

from .remote import PHONE, WAIT_MS, until

pytestmark = pytest.mark.browser

# The element's top at the top of the viewport (a section taller than the phone starts there).
SIGHT = """sel => { const r = document.querySelector(sel).getBoundingClientRect();
  return r.top >= -2 && r.top < innerHeight / 4; }"""


def shows(page: Page, path: str, **params: str) -> None:
    """Polls until the page shows the view at `path` with `params` (its address, replaced once swapped in)."""

    def there() -> bool:
        u = urlparse(page.evaluate("location.href"))  # replaced by history.replaceState once swapped in
        q = parse_qs(u.query)
        return u.path == path and all(q.get(k) == [v] for k, v in params.items())

    until(there, lambda: f"never showed {path} {params}: {page.evaluate('location.href')}")


def to_the_foot(page: Page) -> None:
    page.mouse.wheel(0, 5000)
    until(lambda: page.evaluate("scrollY") > 300, lambda: f"no scroll to the foot: {page.evaluate('scrollY')}")


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_followed_page_lands_at_its_anchor_or_its_top_and_the_count_holds(
    browser: Browser, live_server: str, lang: str
) -> None:
    laptop = browser.new_context(viewport={"width": 1280, "height": 720})
    phone = browser.new_context(viewport=PHONE, is_mobile=True, has_touch=True)
    try:
        tp = laptop.new_page()
        tp.set_default_timeout(WAIT_MS)
        tp.goto(f"{live_server}/?lesson=scale&lesson_step=2&stage=4&compare=scale&lang={lang}")
        tp.click("[data-room-start] button")
        expect(tp.locator("#room [data-room-role=teacher]")).to_be_visible()
        code = tp.locator("[data-room-code-text]").inner_text().strip()
        sp = phone.new_page()
        sp.set_default_timeout(WAIT_MS)
        sp.goto(f"{live_server}/r/{code}?lang={lang}")
        expect(sp.locator("#room [data-room-role=student]")).to_be_attached()
        shows(sp, "/", lesson="scale", lesson_step="2")
        expect(tp.locator("#room [data-room-followers]")).to_have_text("1")

        # ---- the next step names its place (/demos#scaling): the phone lands there, from far down -------------------
        to_the_foot(sp)
        tp.goto(f"{live_server}/demos?lesson=scale&lesson_step=3&lang={lang}#scaling")
        shows(sp, "/demos", lesson="scale", lesson_step="3")
        until(lambda: sp.evaluate(SIGHT, "#scaling"), lambda: f"#scaling not in view: scrollY {sp.evaluate('scrollY')}")

        # The teacher's new page: its bar says who follows as it arrives (and from its stream), not "0" until a
        # refresh comes back (were it to ask /followers, it is refused here, as a busy server's can be).
        def refused(route: Route) -> None:
            route.abort()

        tp.route("**/followers", refused)
        # ---- a page without an anchor: the phone, scrolled far down, lands at its top --------------------------------
        to_the_foot(sp)
        tp.goto(f"{live_server}/?stage=2&lang={lang}")
        expect(tp.locator("#room [data-room-followers]")).to_have_text("1")
        shows(sp, "/", stage="2")
        until(lambda: sp.evaluate("scrollY") == 0, lambda: f"the phone stayed at scrollY {sp.evaluate('scrollY')}")
        expect(tp.locator("#room [data-room-followers]")).to_have_text("1")
        sp.screenshot(path=f"/tmp/js43_phone_landed_{lang}.png")
    finally:
        phone.close()
        laptop.close()
