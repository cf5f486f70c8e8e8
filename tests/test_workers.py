"""A real server with two worker processes: one scrape of /metrics counts the requests of both."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from .test_api import samples

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def two_workers():
    port = free_port()
    env = os.environ | {"ATTENTION_LAB_PRETRAINED": "false", "ATTENTION_LAB_DEVICE": "cpu"}
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    cmd = [sys.executable, "-m", "app.cli", "serve", "--host", "127.0.0.1", "--port", str(port), "--workers", "2"]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        try:
            if httpx.get(base + "/healthz", timeout=2).status_code == 200:
                break
        except httpx.HTTPError:
            time.sleep(0.3)
    else:
        proc.kill()
        raise RuntimeError("the server did not start: " + proc.stderr.read().decode()[-2000:] if proc.stderr else "")
    yield base
    proc.terminate()
    proc.wait(timeout=30)


def test_one_scrape_counts_every_worker(two_workers: str) -> None:
    n = 80
    with httpx.Client(base_url=two_workers, timeout=30) as c:
        # Fresh connections spread the requests over both workers.
        for i in range(n):
            assert httpx.get(f"{two_workers}/api/v1/presets", headers={"connection": "close"}).status_code == 200, i
        for _ in range(3):  # whichever worker answers the scrape, it reports the sum
            got = samples(c.get("/metrics").text)
            key = ("attention_lab_requests_total",
                   frozenset({("route", "/api/v1/presets"), ("method", "GET"), ("status", "200")}))  # fmt: skip
            assert got[key] == n
