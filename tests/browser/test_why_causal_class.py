"""A class run entirely from the teacher's paired phone, in real browsers: the projector laptop at 1280×720 in
presenter mode, the teacher's phone paired from the laptop's remote, and two students on phones (English and
Chinese). After the pairing only the phone is pressed: it opens the chapter's three experiments (the causal mask,
the first row that is exactly 1, the scale) and "Why the causal mask matters" from the remote's list of lessons, and
steps through every step of them. At every step the projector and both students show the step's page (presenter
mode kept on the projector); the step's poll is asked, answered (one right, one wrong), revealed, and then either
cleared from the phone or left to leave with the next step — and no poll is left on any screen afterwards. On the
way, the phone presses what the steps ask for: the mask switch, the scale switch, a head, a head chosen on the
model view and knocked out, a position of /predict's table, its head ranking and a knock-out from that ranking."""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import parse_qs, urlparse

import httpx
import pytest
from playwright.sync_api import Browser, Page, expect

from app.web.lessons import BY_SLUG, LESSONS

from .remote import PHONE, WAIT_MS, fits_the_phone, no_poll_on, pair_phone, reaches, remote_shows, room_query, until

pytestmark = pytest.mark.browser


@dataclass
class Class:
    live_server: str
    code: str
    tp: Page  # the projector
    ph: Page  # the teacher's paired phone
    se: Page  # a student, English
    sz: Page  # a student, Chinese

    @property
    def students(self) -> tuple[Page, ...]:
        return (self.se, self.sz)


def view(page: Page) -> tuple[str, dict[str, list[str]]]:
    """The page's address now (asked of the page: `page.url` is only brought up to date between Playwright calls)."""
    u = urlparse(page.evaluate("location.href"))
    return u.path, parse_qs(u.query)


def step_view(slug: str, k: int) -> tuple[str, dict[str, list[str]]]:
    """The room's view at step k of a lesson: the step's page and query, with the lesson and its step."""
    page, _, query = BY_SLUG[slug].steps[k - 1].url.partition("#")[0].partition("?")
    return page, parse_qs(query) | {"lesson": [slug], "lesson_step": [str(k)]}


def on_step(c: Class, slug: str, k: int) -> None:
    """The class is at step k: the room's state, the projector (presenter mode kept), both students (each in their
    own language) and the phone's remote (the step's own question prepared)."""
    page, want = step_view(slug, k)

    def room() -> tuple[str, dict[str, list[str]]]:
        r = httpx.get(f"{c.live_server}/api/v1/rooms/{c.code}").json()
        return r["page"], parse_qs(r["query"])

    def at_step(r: tuple[str, dict[str, list[str]]]) -> bool:
        # A step on the toy that names no sentence keeps the class's (rooms/api.py kept_sentence): every screen shows
        # the same numbers, whatever its language's own example.
        kept = {key: v for key, v in r[1].items() if key != "tokens" or "tokens" in want}
        return r[0] == page and kept == want

    until(lambda: at_step(room()), lambda: f"the class is not at {slug} step {k}: {room()}")
    now = room()[1]
    shows = {
        c.tp: now | {"present": ["1"], "lang": ["en"]},
        c.se: now | {"lang": ["en"]},
        c.sz: now | {"lang": ["zh"]},
    }
    for screen, params in shows.items():
        until(
            lambda s=screen, p=params: view(s) == (page, p), lambda s=screen: f"{slug} step {k}, a screen shows {s.url}"
        )  # type: ignore[misc]
        expect(screen.locator(f".lesson-panel[data-lesson='{slug}'][data-step='{k}']")).to_be_attached(timeout=WAIT_MS)
    expect(c.tp.locator("body")).to_have_class(re.compile(r"\bpresent\b"))
    expect(c.ph.locator("[data-prepared-prompt]")).to_have_text(BY_SLUG[slug].steps[k - 1].en[1], timeout=WAIT_MS)


def poll(c: Class, slug: str, k: int, *, clear: bool) -> None:
    """The step's prepared poll from the phone: asked, answered right (English) and wrong (Chinese), revealed; then
    cleared from the phone when `clear` (otherwise the next step takes it off every screen)."""
    step = BY_SLUG[slug].steps[k - 1]
    assert step.poll is not None, f"{slug} step {k} has no poll"
    key = c.ph.locator("[data-prepared-key]").inner_text()
    c.ph.click("[data-ask]")
    expect(c.se.locator("[data-room-prompt]")).to_have_text(step.en[1], timeout=WAIT_MS)
    expect(c.sz.locator("[data-room-prompt]")).to_have_text(step.zh[1], timeout=WAIT_MS)
    # The projector shows the question being asked, never the open histogram.
    expect(c.tp.locator("#room [data-room-results]")).to_be_visible(timeout=WAIT_MS)
    expect(c.tp.locator("#room [data-room-histogram]")).to_be_hidden()
    if step.poll.kind == "choice":
        c.se.click(f"[data-room-options] button[value='{key}']")
        c.sz.locator(f"[data-room-options] button:not([value='{key}'])").first.click()
    else:
        row, col = step.poll.answer  # type: ignore[misc]
        table = c.tp.locator("main table[data-matrix]").first  # the cell by its tokens, query→key (#42)
        tokens = (table.locator("tbody tr").nth(row).locator("th"), table.locator("thead th[scope=col]").nth(col))
        assert key == "→".join(t.inner_text().strip() for t in tokens), key
        c.se.locator(f"main td[data-row='{row}'][data-col='{col}']").first.click()
        c.sz.locator(f"main td[data-row][data-col]:not([data-row='{row}'][data-col='{col}'])").first.click()
    expect(c.ph.locator("[data-total]")).to_have_text("2", timeout=WAIT_MS)
    c.ph.click("[data-reveal]")
    expect(c.tp.locator("#room [data-room-histogram]")).to_be_visible(timeout=WAIT_MS)
    expect(c.se.locator("[data-room-key]")).to_have_text(key, timeout=WAIT_MS)
    expect(c.sz.locator("[data-room-key]")).to_be_visible(timeout=WAIT_MS)
    if clear:
        c.ph.click("[data-clear]")
        no_poll_on(c.tp, c.students)


def next_step(c: Class, slug: str, k: int) -> None:
    """The phone's "next step" (at a lesson's last step: the next lesson's first); the revealed poll leaves."""
    c.ph.click("[data-go=lesson-next]")
    on_step(c, slug, k)
    no_poll_on(c.tp, c.students)


def press(c: Class, group: str, label: str | re.Pattern[str]) -> None:
    """A button of the phone's remote among what the projected page offers (its `group`), by its label."""
    button = c.ph.locator(f"[data-controls={group}] button", has_text=label)
    expect(button).to_have_count(1, timeout=WAIT_MS)
    button.click()


def projector_has(c: Class, **params: str) -> None:
    """The room, the projector and both students have moved to `params` (presenter mode kept on the projector), and
    so has the phone's remote: its next press is one of the new view's buttons, not the view before's."""
    for key, value in params.items():
        reaches(c.live_server, c.code, key, value)
    for screen in (c.tp, *c.students):
        until(lambda s=screen: all(view(s)[1].get(k) == [v] for k, v in params.items()),  # type: ignore[misc]
              lambda s=screen: f"{params} not on {s.url}")  # fmt: skip
    assert view(c.tp)[1].get("present") == ["1"]
    remote_shows(c.ph, **params)


# An element wholly inside the viewport, above the class bar at its foot.
SIGHT = """sel => { const r = document.querySelector(sel).getBoundingClientRect();
  const bar = document.querySelector('#room').getBoundingClientRect();
  return r.top >= 0 && r.bottom <= Math.min(innerHeight, bar.top); }"""
WHERE = "sel => [document.querySelector(sel).getBoundingClientRect().top, scrollY, innerHeight]"


def test_the_lessons_run_from_the_teachers_phone(browser: Browser, live_server: str) -> None:
    laptop = browser.new_context(viewport={"width": 1280, "height": 720})
    mine = browser.new_context(viewport=PHONE, is_mobile=True, has_touch=True)  # the teacher's own phone
    en = browser.new_context(viewport=PHONE, is_mobile=True, has_touch=True)
    zh = browser.new_context(viewport=PHONE, is_mobile=True, has_touch=True, locale="zh-CN")
    try:
        tp = laptop.new_page()
        tp.goto(f"{live_server}/?lang=en")
        tp.click("[data-toggle=present]")
        expect(tp.locator("body")).to_have_class(re.compile(r"\bpresent\b"))
        tp.click("[data-room-start] button")
        expect(tp.locator("#room [data-room-role=teacher]")).to_be_visible(timeout=WAIT_MS)
        code = tp.locator("[data-room-code-text]").inner_text().strip()
        ph = pair_phone(laptop, mine, live_server, code)
        se, sz = en.new_page(), zh.new_page()
        se.goto(f"{live_server}/r/{code}?lang=en")
        sz.goto(f"{live_server}/r/{code}?lang=zh")
        expect(ph.locator("[data-followers]")).to_have_text("2", timeout=WAIT_MS)
        c = Class(live_server, code, tp, ph, se, sz)

        # ---- the chapter's three experiments, opened from the phone's list of lessons ----------------------------
        ph.click("[data-lessons] summary")
        expect(ph.locator("[data-open-lesson]")).to_have_count(len(LESSONS))
        fits_the_phone(ph)  # the list open: still the phone's width
        ph.click("[data-open-lesson=mask-toggle]")
        on_step(c, "mask-toggle", 1)
        poll(c, "mask-toggle", 1, clear=False)
        # The experiment itself: the mask switched off from the phone, within the step (its poll stays, revealed).
        press(c, "switches", re.compile("mask", re.I))
        projector_has(c, mask="none", lesson="mask-toggle", lesson_step="1")
        expect(tp.locator("#room [data-room-histogram]")).to_be_visible()
        next_step(c, "mask-toggle", 2)
        poll(c, "mask-toggle", 2, clear=True)

        next_step(c, "row-one", 1)  # the next lesson, from the last step's "next"
        poll(c, "row-one", 1, clear=False)  # a cell poll: the students click a cell of the matrix
        next_step(c, "row-one", 2)
        poll(c, "row-one", 2, clear=True)

        next_step(c, "scale", 1)
        # The scale switched back on and a head chosen, from the phone.
        press(c, "switches", re.compile("scale", re.I))
        projector_has(c, scale="dk", lesson="scale", lesson_step="1")
        press(c, "heads", re.compile(r"^3$"))
        projector_has(c, head="3", scale="dk", lesson_step="1")
        poll(c, "scale", 1, clear=False)
        next_step(c, "scale", 2)
        poll(c, "scale", 2, clear=True)
        next_step(c, "scale", 3)
        # The step's place on /demos (its link's #scaling; a room's view has none): every screen scrolled there.
        for screen in (tp, *c.students):
            expect(screen.locator("#scaling h3, #scaling h2").first).to_be_in_viewport(timeout=WAIT_MS)
        poll(c, "scale", 3, clear=False)
        fits_the_phone(ph)

        # ---- "Why the causal mask matters", all seven steps --------------------------------------------------------
        ph.click("[data-lessons] summary")
        ph.click("[data-open-lesson=why-causal]")
        on_step(c, "why-causal", 1)
        no_poll_on(tp, c.students)  # the revealed poll of the last lesson left with it
        for k in range(1, 8):
            if k > 1:
                next_step(c, "why-causal", k)
            poll(c, "why-causal", k, clear=k % 2 == 0 or k == 7)
            if k == 6:
                # The model view: layer 1's head 0 chosen among the ranked heads, then knocked out, from the phone.
                press(c, "heads", re.compile(r"\b1\b.*\b0$"))
                projector_has(c, layer="1", head="0", lesson_step="6")
                press(c, "knock", re.compile(r"\b1\b.*\b0\b"))
                projector_has(c, ablate="L1 H0", lesson_step="6")
                expect(tp.locator("section#compare")).to_be_visible(timeout=WAIT_MS)  # the run without it, beside
        # Step 7: position 6 chosen on the phone, its heads ranked, and the second head of the ranking knocked out.
        press(c, "positions", re.compile(r"^6$"))
        projector_has(c, pos="6", lesson_step="7")
        press(c, "positions", re.compile("rank", re.I))
        projector_has(c, pos="6", rank="1", lesson_step="7")
        # The ranking is computed below the table: the projector scrolled to it (#32), its top head in sight above
        # the class bar (not merely some pixel of it behind the bar).
        expect(tp.locator("#ranking ol.ranked-heads li").first).to_be_visible(timeout=WAIT_MS)
        until(lambda: tp.evaluate(SIGHT, "#ranking ol.ranked-heads li"),
              lambda: f"the ranking is out of sight on the projector: {tp.evaluate(WHERE, '#ranking')}")  # fmt: skip
        # Read from the back of the room at 1280×720: the heads (and their losses) no smaller than the table's words.
        sizes = tp.eval_on_selector_all("#ranking ol.ranked-heads :is(li > a, small)",
                                        "els => els.map(e => parseFloat(getComputedStyle(e).fontSize))")  # fmt: skip
        assert sizes and min(sizes) >= 16, sizes
        expect(tp.locator("#ranking > p.hint:not([data-rank-cost])")).to_be_visible()  # why a knock-out leaves it
        knock = ph.locator("[data-controls=knock] button")
        expect(knock).not_to_have_count(0, timeout=WAIT_MS)
        second = knock.nth(1).inner_text()
        layer, head = re.findall(r"\d+", second)[:2]
        knock.nth(1).click()
        # The ranking stays on the projector (#32): the phone still offers its heads, the next one a press away.
        projector_has(c, ablate=f"L{layer} H{head}", rank="1", lesson_step="7")
        expect(tp.locator("table[data-train]")).to_be_visible(timeout=WAIT_MS)
        expect(tp.locator("#ranking ol.ranked-heads li")).not_to_have_count(0, timeout=WAIT_MS)
        expect(knock).not_to_have_count(0, timeout=WAIT_MS)
        fits_the_phone(ph)
        no_poll_on(tp, c.students)  # step 7's poll, cleared from the phone, stays off every screen
        assert room_query(live_server, code)["lesson"] == ["why-causal"]
    finally:
        for context in (laptop, mine, en, zh):
            context.close()
