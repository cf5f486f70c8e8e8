"""Seams of the class's scripts (static/room.js, lab.js, teach.js) found reading them for #43:

1. A followed page is swapped in while the class bar is out of the document (room.js keeps it out of the swap, and
   htmx settles that swap at once): lab.js measured no bar and set --room-h to 0 px, so the page's foot and the
   corner's boxes sat under the bar until some later swap. The bar's height holds across a follow.
2. A student who leaves the class while its next page is on its way: the page came anyway, and with it the bar
   (closed stream, Leave again) and "following". Leaving is leaving.
3. The teacher's remote redraws its live histogram every second: its bars were drawn at length 0 until htmx
   settled the swap (20 ms later) and a script gave them their length. A bar is drawn at its share as it arrives.
4. The projector's bar counts the answers every second while a poll is open: each count was page work to lab.js
   (the "Loading…" corner, a progress poller that replaced a slow page's own, and a refused note when the count was
   turned away). The count is quiet, as a live run's redraw is.
5. A screen in presenter mode scrolled down when the class moved on: the followed page's stage was fitted at the old
   page's scroll (room.js landed at the top only after lab.js's fitters had measured), so its numbers took a larger
   size (42 px for 39) and ran under the class bar. The page lands first, then it is measured."""

from __future__ import annotations

import pytest
from playwright.sync_api import Browser, Page, Route, expect

from .remote import PHONE, WAIT_MS, until

pytestmark = pytest.mark.browser

ROOM_H = """() => [getComputedStyle(document.documentElement).getPropertyValue('--room-h').trim(),
  Math.ceil(document.getElementById('room')?.offsetHeight || 0) + 'px']"""


def start(tp: Page, sp: Page, live_server: str, lang: str) -> str:
    for p in (tp, sp):
        p.set_default_timeout(WAIT_MS)
    tp.goto(f"{live_server}/?stage=2&lang={lang}")
    tp.click("[data-room-start] button")
    expect(tp.locator("#room [data-room-role=teacher]")).to_be_visible()
    code = tp.locator("[data-room-code-text]").inner_text().strip()
    sp.goto(f"{live_server}/r/{code}?lang={lang}")
    expect(sp.locator("#room [data-room-role=student]")).to_be_visible()
    return code


def room_kept(page: Page) -> bool:
    """--room-h (what the page keeps free at its foot, and the corner's boxes sit above) is the bar's height."""
    kept, bar = page.evaluate(ROOM_H)
    return bool(kept == bar != "0px")


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_bar_keeps_its_room_across_a_follow(browser: Browser, live_server: str, lang: str) -> None:
    laptop = browser.new_context(viewport={"width": 1280, "height": 720})
    phone = browser.new_context(viewport=PHONE, is_mobile=True, has_touch=True)
    try:
        tp, sp = laptop.new_page(), phone.new_page()
        start(tp, sp, live_server, lang)
        until(lambda: room_kept(sp), lambda: f"joined: {sp.evaluate(ROOM_H)}")
        tp.goto(f"{live_server}/?stage=4&lang={lang}")
        until(lambda: "stage=4" in sp.evaluate("location.search"), lambda: sp.evaluate("location.href"))
        until(lambda: room_kept(sp), lambda: f"followed: {sp.evaluate(ROOM_H)}")  # not 0 px
    finally:
        phone.close()
        laptop.close()


# Set once room.js has had the followed page's text: its next step runs before this timer.
LANDED = """() => { const text = Response.prototype.text;
  Response.prototype.text = function () {
    return text.call(this).then((t) => { if (this.url.includes('stage=4')) setTimeout(() => { window.labLanded = true; }); return t; });
  }; }"""


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_student_who_leaves_while_the_next_page_is_on_its_way_stays_out(
    browser: Browser, live_server: str, lang: str
) -> None:
    laptop = browser.new_context(viewport={"width": 1280, "height": 720})
    phone = browser.new_context(viewport=PHONE, is_mobile=True, has_touch=True)
    try:
        tp, sp = laptop.new_page(), phone.new_page()
        sp.add_init_script(script=f"({LANDED})()")
        start(tp, sp, live_server, lang)
        held: list[Route] = []
        sp.route(lambda url: "stage=4" in url, lambda route: held.append(route))
        tp.goto(f"{live_server}/?stage=4&lang={lang}")
        until(lambda: sp.evaluate("1") and held, lambda: "the phone never asked for the class's next page")
        sp.click("[data-room-leave]")
        expect(sp.locator("#room")).to_have_count(0)
        held[0].continue_()
        until(lambda: sp.evaluate("window.labLanded === true"), lambda: "the held page never reached room.js")
        assert sp.locator("#room").count() == 0  # no bar back, with its Leave
        assert sp.evaluate("document.body.getAttribute('data-room-following')") is None
        assert "stage=2" in sp.evaluate("location.search")  # the page the student left the class on
    finally:
        phone.close()
        laptop.close()


# Each redraw of the remote's live histogram, as htmx puts it in (before it settles): each bar's drawn share.
DRAWN = """() => { window.labDrawn = [];
  document.addEventListener('htmx:afterSwap', (e) => {
    const bars = e.target.querySelectorAll('[data-histogram] .bar');
    if (bars.length) window.labDrawn.push([...bars].map((b) => [b.getAttribute('data-share'),
      b instanceof HTMLMeterElement ? b.value / b.max : b.getBoundingClientRect().width / b.offsetWidth]));
  }); }"""


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_remotes_live_histogram_is_drawn_as_it_arrives(browser: Browser, live_server: str, lang: str) -> None:
    laptop = browser.new_context(viewport={"width": 1280, "height": 720})
    phone = browser.new_context(viewport=PHONE, is_mobile=True, has_touch=True)
    try:
        tp, sp = laptop.new_page(), phone.new_page()
        code = start(tp, sp, live_server, lang)
        remote = laptop.new_page()
        remote.set_default_timeout(WAIT_MS)
        remote.add_init_script(script=f"({DRAWN})()")
        remote.goto(f"{live_server}/r/{code}/teach?lang={lang}")
        poll = {"prompt": "Which?", "kind": "choice", "options": ["yes", "no", "maybe"], "answer": "yes"}
        r = tp.request.post(f"{live_server}/api/v1/rooms/{code}/polls", data=poll, headers={"Origin": live_server})
        assert r.status == 201, r.text()
        sp.locator("[data-room-options] button").first.click()
        expect(remote.locator("[data-histogram] li.key .n")).to_have_text("1")
        until(
            lambda: len(remote.evaluate("window.labDrawn")) >= 3,
            lambda: f"redraws: {remote.evaluate('window.labDrawn')}",
        )
        for bars in remote.evaluate("window.labDrawn"):
            assert [abs(float(share) - drawn) < 1e-6 for share, drawn in bars] == [True] * len(bars), bars
        assert ["1.0", 1] in remote.evaluate("window.labDrawn")[-1]  # the key, answered by the one student
    finally:
        phone.close()
        laptop.close()


# What the page does while the projector's bar counts the answers: "Loading…" shown, a progress poller started.
WORK = """() => { window.labWork = {loading: 0, polling: 0, counts: 0};
  new MutationObserver((changes) => { for (const c of changes) {
    if (c.target.id === 'loading' && c.target.classList.contains('htmx-request')) window.labWork.loading++;
    if (c.attributeName === 'data-polling' && c.target.hasAttribute('data-polling')) window.labWork.polling++;
  } }).observe(document, {attributes: true, subtree: true, attributeFilter: ['class', 'data-polling']});
  document.addEventListener('htmx:afterRequest', (e) => {
    if (e.detail.elt.matches('[data-room-total]')) window.labWork.counts++; }); }"""


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_projectors_answer_count_is_no_page_work(browser: Browser, live_server: str, lang: str) -> None:
    laptop = browser.new_context(viewport={"width": 1280, "height": 720})
    phone = browser.new_context(viewport=PHONE, is_mobile=True, has_touch=True)
    try:
        tp, sp = laptop.new_page(), phone.new_page()
        tp.add_init_script(script=f"({WORK})()")
        code = start(tp, sp, live_server, lang)
        tp.goto(f"{live_server}/?stage=2&present=1&lang={lang}")
        expect(tp.locator("#room [data-room-role=teacher]")).to_be_visible()
        poll = {"prompt": "Which?", "kind": "choice", "options": ["yes", "no"], "answer": "yes"}
        r = tp.request.post(f"{live_server}/api/v1/rooms/{code}/polls", data=poll, headers={"Origin": live_server})
        assert r.status == 201, r.text()
        until(lambda: tp.evaluate("window.labWork.counts") >= 3, lambda: f"counts: {tp.evaluate('window.labWork')}")
        assert tp.evaluate("window.labWork") | {"counts": 0} == {"loading": 0, "polling": 0, "counts": 0}
        # a count turned away (a busy server) leaves no note on the projected page: the next one comes in a second
        tp.route("**/total", lambda route: route.fulfill(status=429, headers={"Retry-After": "5"}, body=""))
        seen = tp.evaluate("window.labWork.counts")
        until(lambda: tp.evaluate("window.labWork.counts") >= seen + 2, lambda: f"{tp.evaluate('window.labWork')}")
        assert tp.locator("#refused").is_hidden()  # the note comes with the refusal (htmx:responseError), before these
        expect(tp.locator("#room [data-room-total]")).to_have_text("0")
    finally:
        phone.close()
        laptop.close()


# The stage on a projected page: where its numbers and words end, where the screen ends above the bar, their size.
STAGE = """() => [scrollY, Math.max(...[...document.querySelectorAll('#stage :is(.stage-data, .stage-text)')].map(
    (el) => el.getBoundingClientRect().bottom)),
  innerHeight - document.getElementById('room').getBoundingClientRect().height - 4,
  document.getElementById('stage').getAttribute('data-fit')]"""


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_followed_projected_page_is_fitted_where_it_lands(browser: Browser, live_server: str, lang: str) -> None:
    laptop = browser.new_context(viewport={"width": 1280, "height": 720})
    screen = browser.new_context(viewport={"width": 1280, "height": 720})
    try:
        tp, sp = laptop.new_page(), screen.new_page()
        start(tp, sp, live_server, lang)
        sp.goto(f"{live_server}/?stage=2&present=1&lang={lang}")  # this screen projects, following the class
        expect(sp.locator("#stage[data-fit]")).to_be_attached()
        sp.mouse.wheel(0, 5000)
        until(lambda: sp.evaluate("scrollY") > 0, lambda: "the page does not scroll")
        tp.goto(f"{live_server}/?stage=4&lang={lang}")
        until(lambda: "stage=4" in sp.evaluate("location.search"), lambda: sp.evaluate("location.href"))
        until(lambda: sp.evaluate(STAGE)[0] == 0, lambda: f"not at the top: {sp.evaluate(STAGE)}")
        _, end, bottom, fit = sp.evaluate(STAGE)
        assert end <= bottom + 0.5, (end, bottom, fit)  # the stage ends above the bar
        fresh = screen.new_page()  # the same view loaded: the same size
        fresh.goto(sp.url)
        expect(fresh.locator("#stage[data-fit]")).to_be_attached()
        expect(fresh.locator("#room")).to_be_attached()  # the class bar comes after the load: STAGE measures it
        until(lambda: fresh.evaluate(STAGE)[3] == fit, lambda: f"followed {fit}, loaded: {fresh.evaluate(STAGE)}")
    finally:
        screen.close()
        laptop.close()
