"""Helpers for the browser tests that run a class from the teacher's paired phone: the room's state polled (never a
fixed sleep, with a deadline generous enough for a loaded machine), the phone paired from the laptop's remote, and
"no poll left on any screen"."""

from __future__ import annotations

from collections.abc import Callable
from urllib.parse import parse_qs, urlparse

import httpx
from playwright.sync_api import BrowserContext, Page, expect

from tests.wait import NeverHappened, wait_until

PHONE = {"width": 390, "height": 844}
WAIT_S = 60  # the suite runs on a loaded machine: a state is polled for up to this long
WAIT_MS = WAIT_S * 1000


def room_query(live_server: str, code: str) -> dict[str, list[str]]:
    return parse_qs(httpx.get(f"{live_server}/api/v1/rooms/{code}").json()["query"])


def until(check: Callable[[], object], what: Callable[[], str]) -> None:
    """Polls `check` until it is true (up to WAIT_S); the failure says `what()` was there instead."""
    try:
        wait_until(check, WAIT_S, interval=0.1)
    except NeverHappened:
        raise AssertionError(what()) from None


def reaches(live_server: str, code: str, key: str, value: str) -> None:
    """Polls the room's state until the class has moved to `key=value`."""
    until(lambda: room_query(live_server, code).get(key) == [value],
          lambda: f"the class never reached {key}={value}: {room_query(live_server, code)}")  # fmt: skip


def remote_shows(remote: Page, **params: str) -> None:
    """Polls until the teacher's remote has rendered the class's view with `params` (its "Now" link names the view
    it fetched): its buttons are the links of the page it shows, so a press before that acts on the view before (a
    loaded machine's remote lags the room's state by the page's fetch)."""

    def shown() -> dict[str, list[str]]:
        return parse_qs(urlparse(remote.locator("[data-now-link]").get_attribute("href") or "").query)

    until(lambda: all(shown().get(k) == [v] for k, v in params.items()),
          lambda: f"the remote never showed {params}: {shown()}")  # fmt: skip


def fits_the_phone(page: Page) -> None:
    assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"], page.url


def no_poll_on(tp: Page, students: tuple[Page, ...]) -> None:
    expect(tp.locator("#room [data-room-histogram]")).to_be_hidden(timeout=WAIT_MS)
    expect(tp.locator("#room [data-room-question]")).to_be_hidden(timeout=WAIT_MS)
    expect(tp.locator("#room [data-room-results]")).to_be_hidden(timeout=WAIT_MS)
    for sp in students:
        expect(sp.locator("[data-room-question]")).to_be_hidden(timeout=WAIT_MS)
        expect(sp.locator("[data-room-histogram]")).to_be_hidden(timeout=WAIT_MS)


def pair_phone(laptop: BrowserContext, phone: BrowserContext, live_server: str, code: str) -> Page:
    """The teacher's phone, paired from the laptop's remote (never projected): refused the remote before, the remote
    after; the pairing link is used up."""
    ph = phone.new_page()
    assert ph.goto(f"{live_server}/r/{code}/teach?lang=en").status == 403  # type: ignore[union-attr]
    remote = laptop.new_page()
    remote.goto(f"{live_server}/r/{code}/teach?lang=en")
    remote.click("[data-pair]")
    pair_url = remote.locator("[data-pair-url]").get_attribute("href")
    assert pair_url
    # The link names the machine's LAN address for a real phone; this test's phone stays on loopback.
    link = urlparse(pair_url)
    pair = live_server + link.path + (f"?{link.query}" if link.query else "")  # the language the teacher paired in
    ph.goto(pair)
    ph.click("[data-pair-confirm]")
    expect(ph.locator("[data-teach]")).to_be_visible(timeout=WAIT_MS)
    fits_the_phone(ph)
    assert httpx.post(pair).status_code == 410  # single use: the link is spent
    remote.close()
    return ph
