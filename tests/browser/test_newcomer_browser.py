"""What a newcomer meets first (#42): a click on a number shows its arithmetic on screen, the home page says where to
begin and shows numbers above the fold, the pages load without a failed request, the toy speaks the page's
language."""

from __future__ import annotations

import uuid

import pytest
from playwright.sync_api import Browser, Page, expect

pytestmark = pytest.mark.browser

ON_SCREEN = """(sel) => {
  const r = document.querySelector(sel).getBoundingClientRect();
  return {top: r.top, bottom: r.bottom, left: r.left, right: r.right, height: innerHeight, width: innerWidth};
}"""


def on_screen(page: Page, selector: str) -> dict[str, float]:
    return page.evaluate(ON_SCREEN, selector)


def intersects(r: dict[str, float]) -> bool:
    return r["bottom"] > 0 and r["top"] < r["height"] and r["right"] > 0 and r["left"] < r["width"]


def fully(r: dict[str, float]) -> bool:
    return r["top"] >= 0 and r["bottom"] <= r["height"]


# Resolves true once no htmx swap is under way and `selector`'s box and the page's scroll have not moved for five
# animation frames (a smooth scroll moves them every frame): the layout has settled.
STILL = """selector => new Promise(done => {
  const where = () => { const r = document.querySelector(selector)?.getBoundingClientRect();
    return JSON.stringify([r && [r.top, r.left, r.width, r.height], scrollX, scrollY]); };
  const busy = () => document.querySelector('.htmx-request, .htmx-swapping, .htmx-settling');
  let last = where(), still = 0;
  const tick = () => { const now = where(); still = now === last && !busy() ? still + 1 : 0; last = now;
    if (still >= 5) done(true); else requestAnimationFrame(tick); };
  requestAnimationFrame(tick);
})"""


def settled(page: Page, selector: str) -> None:
    """Returns once the page's layout around `selector` has stopped moving (`STILL`)."""
    page.wait_for_function(STILL, arg=selector)


@pytest.mark.parametrize(
    ("width", "height", "present"), [(1280, 720, False), (1280, 720, True), (1920, 1080, True), (390, 844, False)]
)
def test_a_clicked_number_shows_its_arithmetic_on_screen(
    browser: Browser, live_server: str, width: int, height: int, present: bool
) -> None:
    """The box "How this number is computed" was put above the matrix, off the top of the screen at 1280×720 (its
    top at −250 px): the reader saw only the cell's outline. Now it is under the matrices, and the page scrolls no
    further than it needs to show it whole, the clicked number still on screen."""
    page = browser.new_page(viewport={"width": width, "height": height})
    try:
        page.goto(f"{live_server}/?stage=softmax&mask=causal&lang=en{'&present=1' if present else ''}")
        cell = page.locator("table[data-matrix=weights] td[data-row='3'][data-col='1']")
        value = cell.get_attribute("data-value") or ""
        cell.scroll_into_view_if_needed()  # as a reader does: the matrix is below the fold at 1280×720
        cell.locator("a").click()
        box = page.locator("#arithmetic")
        expect(box.locator(".result strong")).to_have_text(value)
        page.wait_for_function("() => !document.querySelector('#loading.htmx-request')")
        settled(page, "#arithmetic")  # the swap's layout settled (the fitter, the reveal)
        r = on_screen(page, "#arithmetic")
        assert intersects(r) and fully(r), r
        assert fully(on_screen(page, "#stage td.selected")), "the clicked number left the screen"
        expect(box).to_contain_text("∑")  # the arithmetic itself: the row's sum of exponentials, then the weight
        expect(box.locator("li math")).to_have_count(3)
    finally:
        page.close()


MAIN_PAGES = ["/", "/block", "/decode", "/lessons", "/lessons/five-stages", "/model", "/sinks", "/generate",
              "/predict", "/lens", "/heads", "/patch", "/train", "/tiles", "/demos", "/params", "/models", "/docs"]  # fmt: skip


def watch(page: Page) -> list[str]:
    """Every failed request (4xx, 5xx) and console error of `page` from now on."""
    bad: list[str] = []
    page.on("response", lambda r: bad.append(f"{r.status} {r.url[:160]}") if r.status >= 400 else None)
    page.on("console", lambda m: bad.append(f"console: {m.text[:160]}") if m.type == "error" else None)
    page.on("pageerror", lambda e: bad.append(f"script: {e}"))
    return bad


def follow(page: Page, href: str) -> None:
    """A plain link to `href` (outside any htmx swap, as the header's menu and a lesson's links are), clicked."""
    page.evaluate(
        "href => { const a = document.createElement('a'); a.href = href; a.textContent = 'go';"
        " a.setAttribute('data-test-link', ''); document.body.prepend(a); }",
        href,
    )
    with page.expect_navigation(timeout=120_000):
        page.click("a[data-test-link]")


# What one of our pages asks for once loaded has all come back: the load itself, then the favicon (asked for after
# the load event; its entry is written once it is answered, whatever its status), no htmx request, swap or settle
# under way (a `load`-triggered request starts while htmx processes the page or a swap, before those classes go, so
# none slips between), no deferred shell waiting for its page (/heads, /patch), the progress poller stopped. It
# replaced `networkidle`, which waited 500 ms of silence after each load (#43): on every page, waited for beside it,
# no request came after this state. /docs is Swagger UI's page (no htmx, no poller; its script asks for
# /openapi.json and keeps the page's thread busy drawing it, where a script's state would wait for the drawing): it
# keeps networkidle.
SETTLED = """() => document.readyState === 'complete'
  && !document.querySelector('.htmx-request, .htmx-swapping, .htmx-settling, [data-deferred]')
  && !document.documentElement.hasAttribute('data-polling')
  && performance.getEntriesByType('resource').some(e => e.name === document.querySelector('link[rel~=icon]')?.href)"""


def no_poll_left(page: Page) -> None:
    """Returns once the page's progress poller (static/lab.js `progress`, the one thing that asks the server on its
    own after a click) has stopped: it stops at the first answer that is not "still working" (a 404 among them) or
    when its request ends, so every poll it made has been answered (or aborted with its request) by then. It sets
    <html data-polling> while it polls, from the moment a click or a request starts it. This replaced fixed waits of
    3 s and 6 s, "the span in which a wrong poll would fail", which waited the same whether a poll came or not."""
    page.wait_for_function("() => !document.documentElement.hasAttribute('data-polling')")


def test_the_main_pages_load_without_a_failed_request(page: Page, live_server: str) -> None:
    """The console logged 404s for /api/v1/progress?key=… on many pages: the page polls for every page it waits
    for, and the server knew only the requests whose computation counts (a slow page that counts nothing, a
    download, was 404 after 404). Every page, in both languages, reached as a reader does (typed, or a link), with a
    download, a step and a click on a number: no 4xx, no 5xx, no console error."""
    bad = watch(page)
    for path in MAIN_PAGES:
        for lang in ("en", "zh"):
            page.goto(f"{live_server}{path}?lang={lang}", timeout=120_000)
            if path == "/docs":  # and what the page asks for once loaded
                page.wait_for_load_state("networkidle", timeout=120_000)
            else:
                page.wait_for_function(SETTLED, timeout=120_000)
            assert not bad, (path, lang, bad)
    page.goto(f"{live_server}/?lang=en")
    fresh = uuid.uuid4().hex[:8]  # a text no cache holds: the page is computed, a second or more, counting nothing
    follow(page, f"/sinks?lang=en&text=A+page+that+counts+nothing+it+computes+{fresh}")
    assert not bad, bad
    follow(page, "/?lang=en&stage=softmax")
    with page.expect_download():
        page.click("a[href*='attention.npz']")  # the .npz: a download, the page stays
    no_poll_left(page)  # a poll the download started (a wrong one) has been answered: a 404 would be in `bad`
    page.click("[data-action=next]")
    expect(page.locator("#stage")).to_have_attribute("data-stage", "weighted_sum")
    page.click("table[data-matrix=output] td[data-row='1'][data-col='0'] a")
    expect(page.locator("#arithmetic")).to_be_visible()
    no_poll_left(page)  # the step's and the click's polls are over, answered or aborted: none is left to fail
    assert not bad, bad


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_home_page_says_where_to_begin_and_shows_numbers(browser: Browser, live_server: str, lang: str) -> None:
    """At 1280×720 the home page showed an 18-item menu in two rows, no number above the fold and no "start here":
    now one row of menu (the rest under "More"), a line pointing to the first lesson, and the matrix on screen."""
    page = browser.new_page(viewport={"width": 1280, "height": 720})
    try:
        page.goto(f"{live_server}/?lang={lang}")
        start = page.locator("[data-start-here] a[data-start-lesson]")
        expect(start).to_be_visible()
        assert (start.get_attribute("href") or "").startswith("/lessons/five-stages")
        assert fully(on_screen(page, "[data-start-here] a[data-start-lesson]"))
        first = "table[data-matrix] td[data-row='0'][data-col='0']"
        assert fully(on_screen(page, first)), "no number above the fold"
        assert page.locator(first).first.get_attribute("data-value")
        nav = page.locator("header.top nav.links")
        assert nav.evaluate("n => n.getBoundingClientRect().height") < 60  # one row
        expect(nav.locator("a:visible")).to_have_count(4)  # two languages, the lab and the lessons, as on every page
        page.click("details.more-nav > summary")
        expect(page.locator("details.more-nav .more-menu a[href^='/heads']")).to_be_visible()
        page.keyboard.press("Escape")
        expect(page.locator("details.more-nav .more-menu")).to_be_hidden()
        start.click()
        expect(page).to_have_url(f"{live_server}/lessons/five-stages?lang={lang}")
    finally:
        page.close()


def test_the_menu_works_on_a_phone(browser: Browser, live_server: str) -> None:
    page = browser.new_page(viewport={"width": 390, "height": 844})
    try:
        page.goto(f"{live_server}/?lang=en")
        nav = page.locator("header.top nav.links")
        assert nav.evaluate("n => n.scrollWidth <= n.clientWidth + 1")  # nothing of it off the side
        expect(nav.locator("a[data-nav-wide]").first).to_be_hidden()  # the first pages are in "More" on a phone
        page.click("details.more-nav > summary")
        block = page.locator("details.more-nav .more-menu a[href^='/block']")
        expect(block).to_be_visible()
        r = block.evaluate("a => { const r = a.getBoundingClientRect(); return [r.left, r.right]; }")
        assert r[0] >= 0 and r[1] <= 390
        block.click()
        expect(page).to_have_url(f"{live_server}/block?lang=en&tokens=cat+sat+on+the+mat")  # its example named
        expect(page.locator("table[data-matrix] tbody th").first).to_have_text("cat")
    finally:
        page.close()


def test_the_toy_speaks_the_pages_language(page: Page, live_server: str) -> None:
    """The toy's example was Chinese in the English interface. Now each language shows its own (the course's
    sentence, its English counterpart); the address names the tokens shown, so a class started from it (or a link
    copied) shows the same numbers in either language; tokens given are kept, and the language links leave the
    example to the language."""
    page.goto(f"{live_server}/?lang=en&stage=softmax")
    labels = page.locator("table[data-matrix=weights] tbody th")
    expect(labels).to_have_text(["cat", "sat", "on", "the", "mat"])
    expect(page.locator("form#controls input[name=tokens]")).to_have_value("cat sat on the mat")
    assert "tokens=cat+sat+on+the+mat" in page.url  # named in the address (replaced, not a new history entry)
    expect(page.locator("form[data-room-start] input[name=query]")).to_have_value(
        "lang=en&stage=softmax&tokens=cat+sat+on+the+mat"
    )
    page.click("[data-action=next]")
    expect(page.locator("#stage")).to_have_attribute("data-stage", "weighted_sum")
    assert "tokens=cat+sat+on+the+mat" in page.url
    page.click("[data-lang=zh]")
    expect(page.locator("html")).to_have_attribute("lang", "zh-CN")
    expect(page.locator("table[data-matrix] tbody th").first).to_have_text("猫")
    assert "tokens=%E7%8C%AB" in page.url  # the Chinese example, named
    page.goto(f"{live_server}/?lang=en&tokens=a+b+c&stage=softmax")
    expect(labels).to_have_text(["a", "b", "c"])
    assert page.url == f"{live_server}/?lang=en&tokens=a+b+c&stage=softmax"  # given: unchanged
    page.click("[data-lang=zh]")
    expect(page.locator("table[data-matrix=weights] tbody th")).to_have_text(["a", "b", "c"])


@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize("path", ["/lessons/train-your-own", "/train", "/lessons"])
def test_the_header_is_one_row_at_1280_with_presenter_mode_and_a_class(
    browser: Browser, live_server: str, lang: str, path: str
) -> None:
    """A page whose header holds the presenter switch and "Start a class" wrapped "Start a class" onto a second row
    at 1280×720 (the class walk): its header is one row, both buttons in it, and every page of the menu is still
    reachable (in the row or under "More")."""
    page = browser.new_page(viewport={"width": 1280, "height": 720})
    try:
        page.goto(f"{live_server}{path}?lang={lang}")
        header = page.locator("header.top")
        expect(header.locator("form.start-class button")).to_be_visible()
        expect(header.locator("a.present-toggle")).to_be_visible()
        assert header.evaluate("h => h.getBoundingClientRect().height") < 60  # one row
        tops = header.evaluate(
            "h => ['h1', 'a.present-toggle', 'form.start-class button'].map(s => h.querySelector(s).getBoundingClientRect().top)"
        )
        assert max(tops) - min(tops) < 30, tops
        page.click("details.more-nav > summary")
        for href in ("/block", "/decode", "/model", "/heads", "/train"):
            link = page.locator(f"header.top a[href^='{href}?']:visible")
            expect(link.first).to_be_visible()
    finally:
        page.close()


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_more_names_a_first_page_only_while_it_is_under_more(browser: Browser, live_server: str, lang: str) -> None:
    """On a phone the first pages (/block, /decode, /model) live under "More", which did not say the page shown was
    one of them; on a laptop, where the page's own link is in the row, "More" names nothing."""
    name = {"en": "Whole block", "zh": None}[lang]
    for viewport, named in (({"width": 390, "height": 844}, True), ({"width": 1920, "height": 1080}, False)):
        page = browser.new_page(viewport=viewport)
        try:
            page.goto(f"{live_server}/block?lang={lang}")
            here = page.locator("details.more-nav > summary .more-here")
            if named:
                expect(here).to_be_visible()
                if name:
                    expect(here).to_contain_text(name)
            else:
                expect(here).to_be_hidden()
                expect(page.locator("header.top nav.links > a[aria-current=page]")).to_be_visible()
        finally:
            page.close()
