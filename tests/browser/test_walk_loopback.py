"""A class walk (stop 52) saw the loopback warning ("phones cannot reach this server") on the projector's QR aside
beside a real network address (192.0.2.2, the machine's LAN address that replaces 127.0.0.1 in the join link) and
took it for a false alarm. It was not: that server listened on 127.0.0.1 (`serve` without --host), which no phone
reaches at any address, and the app says so from the join address *or* the address it listens on
(app/web/share.py `unreachable`). What holds, on the projector in presenter mode with a class started: the warning
shows while the server listens on loopback, and never where students can reach it (a public URL configured, as
behind a proxy or with --public-url) — before the class starts (under the QR code) and once it has (on the class's
bar alone: walk 6 found it twice on the wall)."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, expect

from tests.browser.test_presenter_browser import present
from tests.servers import wait_healthy

pytestmark = pytest.mark.browser

WARNING = "aside.qr [data-warning=loopback]"


@pytest.fixture(scope="module")
def public_server() -> Iterator[str]:
    """A server on loopback that students reach through a configured public address (a proxy in front). The lab's
    page it serves here reads no pretrained model: without them it starts a fifth sooner."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = os.environ | {"ATTENTION_LAB_DEVICE": "cpu", "ATTENTION_LAB_PUBLIC_URL": f"http://192.0.2.10:{port}",
                        "ATTENTION_LAB_PRETRAINED": "0"}  # fmt: skip
    proc = subprocess.Popen(
        [sys.executable, "-m", "app.cli", "serve", "--host", "127.0.0.1", "--port", str(port)],
        cwd=Path(__file__).resolve().parents[2], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, proc, 60)
        yield url
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_loopback_warning_shows_only_where_phones_cannot_reach(
    browser: Browser, live_server: str, public_server: str, lang: str
) -> None:
    for server, warned in ((live_server, True), (public_server, False)):
        ctx = browser.new_context(viewport={"width": 1280, "height": 720})
        try:
            page = ctx.new_page()
            page.set_default_timeout(120_000)
            present(page, f"{server}/?stage=2&lang={lang}")
            expect(page.locator(WARNING)).to_have_count(1 if warned else 0)
            page.click("[data-room-start] button")
            expect(page.locator("aside.qr[data-room-join] .room-code")).to_be_visible()
            join = page.locator("aside.qr[data-room-join] code").inner_text()
            assert ("192.0.2.10" in join) is not warned, join  # the public address where one is configured
            expect(page.locator(WARNING)).to_have_count(0)  # in a class the bar says it, once (walk 6: it was twice)
            expect(page.locator("#room [data-warning=loopback]")).to_have_count(1 if warned else 0)
            if warned:  # the projector's slim bar says so too, in its short form (#43: it said nothing)
                bar = page.locator("#room [data-warning=loopback]")
                expect(bar.locator(".warning-short")).to_be_visible()
                expect(bar.locator(".warning-short")).to_contain_text("0.0.0.0")
                expect(bar.locator(".warning-long")).to_be_hidden()
                line = page.evaluate("parseFloat(getComputedStyle(document.querySelector('#room .room-bar')).fontSize)")
                assert bar.bounding_box()["height"] < 4 * line, bar.bounding_box()  # compact: one line or two
                page.locator("#room").screenshot(path=f"/tmp/js43_present_bar_{lang}.png")
                page.locator("a[data-toggle=present]:visible").first.click()  # the normal bar: the whole warning
                expect(page.locator("body")).not_to_have_class(re.compile(r"\bpresent\b"))
                expect(bar.locator(".warning-long")).to_be_visible()
                expect(bar.locator(".warning-short")).to_be_hidden()
                page.locator("#room").screenshot(path=f"/tmp/js43_normal_bar_{lang}.png")
        finally:
            ctx.close()
