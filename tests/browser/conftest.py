"""Browser tests: the real page in Debian's Chromium, driven by Playwright, against a real server on loopback.

Without /usr/bin/chromium they skip (apt-get install -y chromium fonts-wqy-microhei); `.ci/run` installs it, so in
CI they run.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import expect

from tests.servers import wait_healthy

CHROMIUM = "/usr/bin/chromium"
FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]
# Playwright's `expect` waits 5 s by default (a page's set_default_timeout does not reach it): on CI's loaded 2-core
# machine a room bar fetched after the load, an SSE event or an htmx swap can take longer, and a check that would
# have passed a moment later failed. Every `expect` polls for its state up to a minute unless it names its own
# bound; one that holds returns at once, so this costs a passing test nothing, and a state that never comes still
# fails.
EXPECT_MS = 60_000
expect.set_options(timeout=EXPECT_MS)


# pytest-timeout's 300 s (pyproject.toml) counts a test's fixtures too: a class played whole in four browsers took
# 226 s under load, after 46 s starting the session's server (its file runs first on a worker), 272 s in all. A
# browser test gets twice that; one that hangs is still stopped.
TIMEOUT_S = 600


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    browser = [item for item in items if "tests/browser" in str(item.path)]
    for item in browser:
        if item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(TIMEOUT_S))
    if os.path.exists(CHROMIUM):
        return
    skip = pytest.mark.skip(reason="no /usr/bin/chromium: apt-get install -y chromium fonts-wqy-microhei")
    for item in browser:
        item.add_marker(skip)


@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args: dict) -> dict:
    return {**browser_type_launch_args, "executable_path": CHROMIUM, "args": FLAGS, "headless": True}


@pytest.fixture(scope="session")
def live_server() -> Iterator[str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    # Each training step at least 0.02 s (app/train/child.py MIN_STEP_S; here a step takes more than that already):
    # test_train_browser's 300-step runs then last 6 s or more on any machine, several of the page's redraws (one a
    # second at most), and a fast machine cannot end a run between two of them before the page has shown it training.
    # Every class this worker's browser tests start comes from 127.0.0.1 to this one server and stays open until it
    # expires: past ROOM_MAX_PER_ADDRESS (20 by default) the next "Start a class" was refused ("this address has 20
    # open rooms"), so the class tests run last on a worker failed by their order. One address standing for many
    # teachers, the server takes as many rooms as the browser suite starts; the limit itself is tested on its own
    # servers (tests/app/rooms/test_room_safety.py).
    env = os.environ | {"ATTENTION_LAB_DEVICE": "cpu", "ATTENTION_LAB_TEST_TRAIN_MIN_STEP_S": "0.02",
                        "ATTENTION_LAB_ROOM_MAX_PER_ADDRESS": "500"}  # fmt: skip
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.Popen(
        [sys.executable, "-m", "app.cli", "serve", "--host", "127.0.0.1", "--port", str(port)],
        cwd=root,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, proc)
        yield url
    finally:
        proc.terminate()
        proc.wait(10)
