"""A class walk (walk 6): on the teacher's phone (the paired remote, 390×844) "Computing…" came up over the remote's
buttons, as on the lab's pages: the page's busy sign is fixed at the screen's bottom right, where the remote has the
matrix's cells and its steps, and the remote's own polling (who follows, the live answers) raised it every few
seconds. Now the remote's busy sign sits in its status line, in the flow, and its polling raises none (who follows
is no longer polled at all: the room's stream pushes the count)."""

from __future__ import annotations

import pytest
from playwright.sync_api import Browser, expect

from tests.browser.remote import PHONE, WAIT_MS, pair_phone, remote_shows

pytestmark = pytest.mark.browser

# Every htmx request of the remote: the busy signs it raised, and the visible buttons each one covers.
RECORD = """() => {
  window.busy = [];
  document.addEventListener('htmx:beforeSend', (e) => {
    const signs = [...document.querySelectorAll('.htmx-request.htmx-indicator, .htmx-request .htmx-indicator')];
    const buttons = [...document.querySelectorAll('button, a.btn')].filter(b => b.checkVisibility());
    const covered = signs.flatMap(s => { const r = s.getBoundingClientRect();
      return buttons.filter(b => { const q = b.getBoundingClientRect();
        return r.left < q.right && q.left < r.right && r.top < q.bottom && q.top < r.bottom; }).map(b => b.textContent.trim()); });
    window.busy.push({path: e.detail.requestConfig.path, signs: signs.map(s => s.id), covered: covered});
  });
}"""


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_remotes_busy_sign_covers_no_button(browser: Browser, live_server: str, lang: str) -> None:
    laptop = browser.new_context(viewport={"width": 1280, "height": 720})
    phone = browser.new_context(viewport=PHONE, is_mobile=True, has_touch=True)
    try:
        tp = laptop.new_page()
        tp.set_default_timeout(WAIT_MS)
        tp.goto(f"{live_server}/?stage=mask&lang={lang}")
        tp.click("[data-room-start] button")
        code = tp.locator("[data-room-code-text]").inner_text().strip()
        # Recorded from the remote's load on: who follows comes over its stream, so it asks /followers for nothing.
        phone.add_init_script(f"({RECORD})()")
        remote = pair_phone(laptop, phone, live_server, code)
        remote.set_default_timeout(WAIT_MS)
        remote_shows(remote, stage="mask")
        pressed = remote.evaluate("window.busy.length")
        remote.locator("[data-go=next]").tap()
        remote_shows(remote, stage="softmax")
        expect(remote.locator("[data-followers]")).to_have_text("0")
        busy = remote.evaluate("window.busy")
        after = busy[pressed:]
        assert after, busy  # the new view's controls were fetched
        assert all(not b["covered"] for b in busy), busy
        assert not any("/followers" in b["path"] for b in busy), busy  # the count is pushed, never polled
        assert all(not b["signs"] for b in busy if "/live" in b["path"]), busy
    finally:
        laptop.close()
        phone.close()
