"""The toy's example speaks the page's language (#42): a page whose URL names no tokens shows the course's sentence
in Chinese and its English counterpart in English; tokens given are kept; the API's default stays the Chinese one."""

from __future__ import annotations

from typing import Any

import pytest
from bs4 import BeautifulSoup

EN, ZH = ["cat", "sat", "on", "the", "mat"], ["猫", "坐", "在", "垫子", "上"]


def rows(client: Any, url: str) -> list[str]:
    """The row labels of the page's first matrix: its tokens."""
    page = BeautifulSoup(client.get(url).text, "html.parser")
    return [th.get_text() for th in page.select_one("table[data-matrix]").select("tbody th")]


@pytest.mark.parametrize("path", ["/", "/embed", "/block"])
def test_a_page_shows_the_example_of_its_language(client: Any, path: str) -> None:
    assert rows(client, f"{path}?lang=en") == EN
    assert rows(client, f"{path}?lang=zh") == ZH
    assert rows(client, f"{path}?lang=en&tokens=a+b+c") == ["a", "b", "c"]  # tokens given are the tokens shown
    assert rows(client, f"{path}?lang=zh&tokens=a+b+c") == ["a", "b", "c"]


def test_the_example_is_the_pages_own_default_and_the_api_keeps_its_own(client: Any) -> None:
    assert client.get("/.json", params={"lang": "en"}).json()["tokens"] == EN  # the twin shows what the page shows
    assert client.get("/.json", params={"lang": "zh"}).json()["tokens"] == ZH
    assert client.get("/api/v1/attention").json()["tokens"] == ZH  # the API: stable, whatever the language
    assert client.get("/api/v1/attention", headers={"Accept-Language": "en"}).json()["tokens"] == ZH
    twin = client.get("/.json", params={"lang": "en"}).json()["json_url"]  # the page's link to the API names them
    assert client.get(twin).json()["tokens"] == EN
    page = BeautifulSoup(client.get("/?lang=en&stage=softmax").text, "html.parser")
    assert page.select_one('meta[name="lab-example"]')["content"] == "cat sat on the mat"
    assert page.select_one("form#controls input[name=tokens]")["value"] == "cat sat on the mat"
    # Its links to the API name the tokens it shows; its own links leave them to the language.
    svg = page.select_one("a[data-export=svg]")["href"]
    assert "tokens=cat+sat+on+the+mat" in svg
    assert "tokens=" not in page.select_one("[data-action=next]")["href"]
    assert "tokens=" not in page.select_one("a[data-lang=zh]")["href"]
    given = BeautifulSoup(client.get("/?lang=en&tokens=a+b").text, "html.parser")
    assert given.select_one('meta[name="lab-example"]') is None  # tokens given: nothing to name


def test_tiles_and_decode_show_the_example_of_their_language(client: Any) -> None:
    for lang, words in (("en", EN), ("zh", ZH)):
        tiles = BeautifulSoup(client.get(f"/tiles?lang={lang}&qb=2&kb=2").text, "html.parser")
        assert tiles.select_one("[data-table=output] th").get_text().endswith(words[4])
        decode = client.get(f"/decode.json?lang={lang}").json()
        assert words[0] in str(decode)


def test_the_students_address_names_the_example(client: Any) -> None:
    """A class follows the teacher's screen each in its own language: the QR code's address names the tokens, so
    a phone in Chinese shows the English view's numbers."""
    page = BeautifulSoup(client.get("/?lang=en&present=1").text, "html.parser")
    assert "tokens=cat+sat+on+the+mat" in page.select_one("[data-share-url]")["data-share-url"]
