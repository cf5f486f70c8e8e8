"""A browser that navigates to an address that is no page (a mistyped link in class) gets a page in its language
that says so and offers the lab and the lessons, with the 404 status; an API client keeps the JSON 404."""

from __future__ import annotations

import pytest
from bs4 import BeautifulSoup
from fastapi.testclient import TestClient

from tests.conftest import make_client

NAVIGATE = {"Sec-Fetch-Mode": "navigate", "Sec-Fetch-Dest": "document", "Accept": "text/html"}


@pytest.fixture(scope="module")
def client() -> TestClient:
    return make_client()


@pytest.mark.parametrize(("lang", "title"), [("en", "No such page"), ("zh", "没有这个页面")])
@pytest.mark.parametrize("path", ["/no-such-page", "/lessons/no-such-lesson"])
def test_a_browser_gets_a_page_saying_so(client: TestClient, lang: str, title: str, path: str) -> None:
    r = client.get(f"{path}?lang={lang}&x=<script>", headers=NAVIGATE)
    assert r.status_code == 404 and r.headers["content-type"].startswith("text/html")
    html = BeautifulSoup(r.text, "html.parser")
    assert html.select_one("main h2").get_text() == title
    links = [a["href"] for a in html.select("main a.btn")]
    assert links == [f"/?lang={lang}", f"/lessons?lang={lang}"]
    assert "no-such" not in r.text and "<script>" not in r.text  # the address is not repeated back
    assert not html.select("form[data-room-start]")  # no class is started on a page that is not there


def test_other_clients_keep_the_json_404(client: TestClient) -> None:
    for path, headers in (("/no-such-page", {}), ("/api/v1/nothing", NAVIGATE)):
        r = client.get(path, headers=headers)
        assert r.status_code == 404 and r.json()["message"] == "Not Found"
