"""Opening a page on the suite's shared server as a patient user would: a 429 or 503 (the address's heavy work or the
server's queue is taken, here often by work an earlier test left behind) is asked again after its Retry-After,
until the page itself answers. And a click that loads a new page, returning once that page has loaded."""

from __future__ import annotations

import time

from playwright.sync_api import Locator, Page, Response


def goto_when_free(page: Page, url: str, timeout_s: float = 120) -> Response | None:
    deadline = time.monotonic() + timeout_s
    while True:
        response = page.goto(url)
        if response is None or response.status not in (429, 503):
            return response
        assert time.monotonic() < deadline, f"{url} still answered {response.status} after {timeout_s} s"
        retry = response.headers.get("retry-after", "1")
        # The server's own Retry-After, as a patient reader waits it (behaviour under test), not synchronisation.
        page.wait_for_timeout(1000 * min(5.0, float(retry) if retry.isdigit() else 1.0))


def click_to_load(page: Page, target: Locator | str, timeout: float | None = None) -> None:
    """Clicks `target`, a plain link or form that loads a new document (the presenter switch, a lesson's link to the
    lab), and returns once that document has fired its load event. Playwright's click returns as soon as the
    navigation has committed, when the new document may have no <body> yet or be parsed halfway: a read of the page
    right after it (an evaluate, a count, a box, a wait_for_function that dereferences an element) met a half-built
    page (CI, stop 59: `document.body` was null). `timeout` bounds the navigation (the page's default if None)."""
    with page.expect_navigation(timeout=timeout):
        (page.locator(target) if isinstance(target, str) else target).click()
