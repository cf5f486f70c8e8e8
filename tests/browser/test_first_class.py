"""The first class, played whole in real browsers: a teacher projecting at 1280×720 in presenter mode, the teacher's
remote on a phone, and two students on phones (English and Chinese). The chapter's three experiments through the
lessons (the causal mask, the scale, the first row that is exactly 1), a prepared choice poll and a cell poll,
hints, reveal, end. What a projector may never show (the key, the open histogram) is checked at every step, and so
is what it must show (the matrix and the open cell's arithmetic, on screen, numbers ≥ 24 px)."""

from __future__ import annotations

import contextlib
import re
from urllib.parse import parse_qs, quote, urlparse

import httpx
import pytest
from playwright.sync_api import Browser, Page, expect
from playwright.sync_api import TimeoutError as PlaywrightTimeout

pytestmark = pytest.mark.browser

PHONE = {"width": 390, "height": 844}
FITS = """() => {
  const room = document.getElementById('room');
  const bottom = innerHeight - (room ? room.getBoundingClientRect().height : 0);
  const parts = [...document.querySelectorAll('.stage-data > .matrices, .stage-data > .arithmetic, .stage-data > .compare-view, .stage-data table[data-matrix]')]
    .filter(e => e.offsetParent !== null).map(e => e.getBoundingClientRect());
  // The stage's own result: the last matrix of the stage (its inputs beside it may be smaller).
  const cells = [...document.querySelectorAll('.stage-data > .matrices > :last-child table[data-matrix] td')]
    .filter(e => e.offsetParent !== null);
  return {bottom, width: innerWidth, parts: parts.map(r => [r.left, r.top, r.right, r.bottom]),
          smallest: Math.min(...cells.map(td => parseFloat(getComputedStyle(td).fontSize)))};
}"""


def query(page: Page) -> dict[str, list[str]]:
    return parse_qs(urlparse(page.url).query)


def projector(tp: Page, *, numbers: bool = True) -> None:
    """Presenter mode held, and the stage's numbers (and the open cell's arithmetic) fully on screen, ≥ 24 px."""
    assert query(tp).get("present") == ["1"], tp.url
    expect(tp.locator("body")).to_have_class(re.compile(r"(^|\s)present(\s|$)"))
    tp.wait_for_selector("#stage[data-fit]", state="attached")  # lab.js has sized the numbers for this panel
    # The class's bar can appear after that sizing (a class just started): lab.js sizes again on the new layout, so
    # poll for the fitted state (a loaded machine lags), then assert on it.
    settled = (
        f"() => {{ const g = ({FITS})(); return g.parts.length > 0 && g.parts.every(p => p[3] <= g.bottom + 1); }}"
    )
    with contextlib.suppress(PlaywrightTimeout):
        tp.wait_for_function(settled)
    got = tp.evaluate(FITS)
    assert got["parts"], "the stage shows its matrices"
    for left, top, right, bottom in got["parts"]:
        assert left >= 0 and top >= 0 and right <= got["width"] + 1 and bottom <= got["bottom"] + 1, (got, tp.url)
    if numbers:
        assert got["smallest"] >= 24, (got["smallest"], tp.url)


def nothing_secret_on(tp: Page, key: str | None) -> None:
    """While the class votes: no histogram, no key, no "what to notice", no lesson answer on the projector."""
    expect(tp.locator("#room [data-room-histogram]")).to_be_hidden()
    expect(tp.locator(".explain .notice:visible")).to_have_count(0)
    assert tp.locator("td[data-votes]").count() == 0 and tp.locator("td.poll-key").count() == 0
    if key:
        assert key not in tp.locator("body").inner_text()


def fits_the_phone(sp: Page) -> None:
    assert sp.evaluate("document.documentElement.scrollWidth") <= PHONE["width"], sp.url


def follows(sp: Page, stage: str, **params: str) -> None:
    expect(sp.locator("#stage")).to_have_attribute("data-stage", stage)
    for k, v in params.items():
        expect(sp).to_have_url(re.compile(rf"[?&]{k}={re.escape(quote(v))}(?:&|$)"))


def test_a_whole_first_class(browser: Browser, live_server: str) -> None:
    teacher = browser.new_context(viewport={"width": 1280, "height": 720})
    en = browser.new_context(viewport=PHONE, is_mobile=True, has_touch=True)
    zh = browser.new_context(viewport=PHONE, is_mobile=True, has_touch=True, locale="zh-CN")
    try:
        tp = teacher.new_page()
        tp.goto(f"{live_server}/?stage=3&mask=causal&lesson=mask-toggle&step=1&lang=en")
        tp.click("[data-toggle=present]")  # a full page load: the whole layout changes
        expect(tp.locator("body")).to_have_class(re.compile(r"(^|\s)present(\s|$)"))
        expect(tp.locator("form#controls")).to_be_hidden()
        tp.click("[data-room-start] button")
        expect(tp.locator("#room [data-room-role=teacher]")).to_be_visible()
        code = tp.locator("[data-room-code-text]").inner_text().strip()
        expect(tp.locator("aside.qr[data-room-join] .room-code")).to_have_text(code)  # the QR and code of the class
        expect(tp.locator("[data-room-start]")).to_be_hidden()  # no second class by accident
        projector(tp)

        se, sz = en.new_page(), zh.new_page()
        se.goto(f"{live_server}/r/{code}?lang=en")
        sz.goto(f"{live_server}/r?code={code[:3].lower()}+{code[3:]}&lang=zh")  # typed with a space, in lower case
        for sp in (se, sz):
            follows(sp, "mask", lesson="mask-toggle")
            fits_the_phone(sp)
            # The lesson's question first, then the numbers it asks about, both on the first screen (a class walk:
            # the question sat under every matrix, 850–1,600 px down).
            asked = sp.locator("#stage .lesson-panel").bounding_box()
            first = sp.locator(".stage-data table[data-matrix]").first.bounding_box()
            assert asked is not None and first is not None
            assert asked["y"] < first["y"] < PHONE["height"] * 0.75, (asked, first)
        expect(tp.locator("[data-room-followers]")).to_have_text("2")

        remote = teacher.new_page()
        remote.set_viewport_size(PHONE)
        remote.goto(f"{live_server}/r/{code}/teach?lang=en")
        fits_the_phone(remote)

        # Experiment ①, the causal mask: the lesson's prepared question, asked from the remote.
        expect(remote.locator("[data-prepared]")).to_be_visible()
        key = remote.locator("[data-prepared-key]").inner_text()
        remote.click("[data-ask]")
        for sp in (se, sz):
            expect(sp.locator("[data-room-question]")).to_be_visible()
            fits_the_phone(sp)
        se.click(f"[data-room-options] button[value='{key}']")
        # The Chinese phone reads the lesson's question in Chinese (the remote asked it in English).
        expect(sz.locator("[data-room-question] .room-prompt")).to_contain_text("对角线")
        sz.locator(f"[data-room-options] button:not([value='{key}'])").first.click()
        expect(remote.locator("[data-total]")).to_have_text("2")
        expect(remote.locator("[data-histogram] li.key .n")).to_have_text("1")  # the teacher sees it live
        expect(tp.locator("[data-room-total]")).to_have_text("2")
        nothing_secret_on(tp, key)
        remote.click("[data-reveal]")
        expect(tp.locator("#room [data-room-histogram]")).to_be_visible()
        expect(tp.locator("#room [data-room-histogram] li.key .label")).to_have_text(key)
        expect(se.locator("[data-room-key]")).to_have_text(key)
        expect(sz.locator("[data-room-key]")).to_have_text("对角线以上：词元可以读自己")  # in Chinese

        # The lesson's next step, pressed on the projector: presenter mode holds; the students follow.
        tp.click("a[data-lesson-step=next]")
        expect(tp.locator("#stage")).to_have_attribute("data-stage", "softmax")
        projector(tp)
        for sp in (se, sz):
            follows(sp, "softmax", lesson_step="2")
        tp.click("[data-toggle=mask]")  # switch the mask off: the first row spreads out
        expect(tp.locator("[data-toggle=mask]")).to_have_attribute("aria-pressed", "false")
        projector(tp)
        for sp in (se, sz):
            follows(sp, "softmax", mask="none")
            fits_the_phone(sp)

        # Experiment ②, the scale, side by side; steps taken from the remote.
        tp.goto(f"{live_server}/?stage=4&compare=scale&lesson=scale&step=2&present=1&lang=en")
        projector(tp, numbers=False)  # two matrices side by side: on screen, sized to fit
        for sp in (se, sz):
            follows(sp, "softmax", compare="scale")
            fits_the_phone(sp)

        # Experiment ③, the first row is exactly 1: a cell poll, answered and keyed by clicking cells.
        tp.goto(f"{live_server}/?stage=4&mask=causal&lesson=row-one&step=1&present=1&lang=en")
        projector(tp)
        for sp in (se, sz):
            follows(sp, "softmax", lesson="row-one")
        key00 = "{}→{}".format(*(tp.locator(f"table[data-matrix=weights] {s}").first.inner_text().strip()
                                 for s in ("tbody th", "thead th[scope=col]")))  # fmt: skip
        expect(remote.locator("[data-prepared-key]")).to_have_text(key00)  # the tokens (#42)
        remote.click("[data-ask]")
        expect(se.locator("[data-room-cell-hint]")).to_be_visible()
        expect(sz.locator("[data-room-cell-hint]")).to_be_visible()
        se.locator("table[data-matrix=weights] td[data-row='0'][data-col='0']").tap()
        sz.locator("table[data-matrix=weights] td[data-row='1'][data-col='1']").tap()
        expect(remote.locator("[data-total]")).to_have_text("2")
        expect(remote.locator("[data-histogram] li[data-answer='0,0'] .n")).to_have_text("1")
        nothing_secret_on(tp, None)
        projector(tp)  # the open poll's bar does not push the numbers off the projector
        remote.click("[data-reveal]")
        expect(tp.locator("td.poll-key[data-row='0'][data-col='0']")).to_have_count(1)
        expect(se.locator("[data-room-key]")).to_have_text(key00)

        # Hints off from the remote: "what to notice" leaves every screen.
        remote.click("[data-go=hints]")
        expect(tp).to_have_url(re.compile(r"[?&]hints=off(?:&|$)"))
        expect(tp.locator(".explain .notice")).to_have_count(0)
        assert query(tp).get("present") == ["1"]
        for sp in (se, sz):
            follows(sp, "softmax", hints="off")
            expect(sp.locator(".explain .notice")).to_have_count(0)
        # ... and a step from the remote: the projector follows, still in presenter mode.
        remote.click("[data-go=next]")
        expect(tp.locator("#stage")).to_have_attribute("data-stage", "weighted_sum")
        projector(tp)
        for sp in (se, sz):
            follows(sp, "weighted_sum")
            fits_the_phone(sp)

        # The end, confirmed on the remote: every bar says so in one line; nothing is left to press but, on the
        # teacher's own screen, the button that starts the next class.
        remote.once("dialog", lambda d: d.accept())
        remote.click("[data-end] button")
        for page in (tp, se, sz):
            expect(page.locator("[data-room-ended]")).to_be_visible()
            pressable = page.locator("#room button:visible, #room a:visible, #room input:visible")
            if page is tp:
                expect(pressable).to_have_count(1)
                expect(pressable.first).to_have_text("Start a new class")
            else:
                assert pressable.count() == 0
            assert page.locator("td.pollable").count() == 0
        assert httpx.get(f"{live_server}/api/v1/rooms/{code}").status_code == 404
        # ... and the remote is no dead end: the class summary (#32 item 8), the teacher's alone, kept after the end.
        expect(remote.locator("[data-ended]")).to_be_visible()
        remote.click("[data-summary-link] a")
        expect(remote.locator("[data-summary]")).to_have_attribute("data-ended", "true")
        fits_the_phone(remote)
        assert [p.get_attribute("data-total") for p in remote.locator("[data-poll]").all()] == ["2", "2"]
        table = remote.request.get(f"{live_server}/api/v1/rooms/{code}/summary.csv")  # the teacher's cookie
        assert table.status == 200 and len(table.text().strip().splitlines()) == 1 + 2 + 2  # a row per answer
        assert httpx.get(f"{live_server}/api/v1/rooms/{code}/summary.csv").status_code == 401
    finally:
        teacher.close()
        en.close()
        zh.close()
