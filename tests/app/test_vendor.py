"""htmx 2 and its SSE extension come from npm (package.json), served under /vendor/ beside the math font; every page
loads them from there (no CDN, no PyPI copy)."""

from __future__ import annotations

import json
from pathlib import Path

from fastapi.testclient import TestClient

ROOT = Path(__file__).resolve().parents[2]


def test_htmx_and_its_sse_extension_are_npm_s_pinned_versions(client: TestClient) -> None:
    deps = json.loads((ROOT / "package.json").read_text())["dependencies"]
    assert deps["htmx.org"].startswith("2.0.") and deps["htmx-ext-sse"].startswith("2.")
    htmx = client.get("/vendor/htmx/htmx.min.js")
    assert htmx.status_code == 200 and f'version:"{deps["htmx.org"]}"' in htmx.text
    sse = client.get("/vendor/htmx-sse/sse.min.js")
    assert sse.status_code == 200 and 'defineExtension("sse"' in sse.text


def test_every_page_loads_htmx_then_the_extension_from_vendor(client: TestClient) -> None:
    page = client.get("/?lang=en").text
    htmx, sse = page.index('src="/vendor/htmx/htmx.min.js"'), page.index('src="/vendor/htmx-sse/sse.min.js"')
    assert htmx < sse
