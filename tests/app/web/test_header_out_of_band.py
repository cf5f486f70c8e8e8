"""What sits outside the blocks an htmx step swaps follows the URL the step pushes (#43): the language links, the
presenter switch and "Start a class" come with the step's answer, out of band (`hx-swap-oob`), drawn by the server
for that URL, where static/lab.js once rewrote them from the address. They keep presenter mode, hints off and the
lesson; the language links leave the toy's example to the language (#42), and "Start a class" names it. A whole
page (a navigation, a history restore) carries no out-of-band mark: htmx would take its header out of the page."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qsl, urlsplit

import pytest
from bs4 import BeautifulSoup, Tag

HX = {"HX-Request": "true"}
EN_EXAMPLE = "cat sat on the mat"


def query(href: str) -> dict[str, str]:
    return dict(parse_qsl(urlsplit(href).query, keep_blank_values=True))


def answer(client: Any, url: str, headers: dict[str, str] | None = None) -> BeautifulSoup:
    r = client.get(url, headers=headers or {})
    assert r.status_code == 200, r.text[:300]
    return BeautifulSoup(r.text, "html.parser")


def out_of_band(page: BeautifulSoup) -> dict[str, Tag]:
    return {str(el["id"]): el for el in page.select("[hx-swap-oob]")}


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_an_htmx_step_brings_the_header_for_its_url(client: Any, lang: str) -> None:
    url = f"/?stage=softmax&mask=causal&present=1&hints=off&lesson=row-one&lesson_step=1&lang={lang}"
    step = answer(client, url, HX)
    assert step.select_one("#stage") is not None and step.select_one("header") is None  # the blocks, no page
    oob = out_of_band(step)
    assert {"controls", "lang-en", "lang-zh", "view-links"} <= set(oob), set(oob)
    assert all(oob[k]["hx-swap-oob"] == "true" for k in ("lang-en", "lang-zh", "view-links"))
    for code in ("en", "zh"):  # the same view in each language: presenter mode, hints off, the lesson kept
        assert query(oob[f"lang-{code}"]["href"]) == query(url) | {"lang": code}
        assert oob[f"lang-{code}"]["data-lang"] == code
    start = oob["view-links"].select_one("form[data-room-start]")
    assert start is not None and start.select_one("input[name=page]")["value"] == "/"
    example = step.select_one("form#controls input[name=tokens]")["value"]  # the page's language's example
    assert query("?" + start.select_one("input[name=query]")["value"]) == query(url) | {"tokens": example}
    # The page itself (a navigation, and a history restore, which htmx asks for whole) draws the same links in the
    # same places, unmarked.
    for headers in ({}, HX | {"HX-History-Restore-Request": "true"}):
        page = answer(client, url, headers)
        assert page.select("[hx-swap-oob]") == []
        for key in ("lang-en", "lang-zh"):
            assert page.select_one(f"header #{key}")["href"] == oob[key]["href"]
        assert (
            page.select_one("header #view-links").select_one("input[name=query]")["value"]
            == start.select_one("input[name=query]")["value"]
        )


def test_the_language_links_leave_the_example_to_the_language(client: Any) -> None:
    """A step from the form names the tokens it shows: the example of the page's language is left out of the
    language links (each language shows its own), any other tokens are kept; "Start a class" names them."""
    named = out_of_band(answer(client, "/?stage=softmax&tokens=cat+sat+on+the+mat&lang=en", HX))
    assert "tokens" not in query(named["lang-zh"]["href"]) and "tokens" not in query(named["lang-en"]["href"])
    start = named["view-links"].select_one("input[name=query]")["value"]
    assert query("?" + start)["tokens"] == EN_EXAMPLE
    other = out_of_band(answer(client, "/?stage=softmax&tokens=a+b+c&lang=en", HX))
    assert query(other["lang-zh"]["href"])["tokens"] == "a b c"
    # The English example on a Chinese page is no example of its language: kept (a class's numbers).
    kept = out_of_band(answer(client, "/?stage=softmax&tokens=cat+sat+on+the+mat&lang=zh", HX))
    assert query(kept["lang-en"]["href"])["tokens"] == EN_EXAMPLE


def test_the_presenter_switch_follows_the_step(client: Any) -> None:
    """/block's switch is the header's: an htmx step brings it for the URL it pushes, in and out of presenter mode."""
    for url, present in (("/block?stage=ln2&lang=en", "1"), ("/block?stage=ln2&lang=en&present=1", None)):
        switch = out_of_band(answer(client, url, HX))["view-links"].select_one("a[data-toggle=present][data-kernel]")
        assert switch is not None
        assert query(switch["href"]) == {k: v for k, v in (query(url) | {"present": present or ""}).items() if v}


def test_a_page_without_the_header_gets_its_blocks_alone(client: Any) -> None:
    step = answer(client, "/embed?stage=softmax&lang=en", HX)
    assert step.select_one("#stage") is not None
    assert set(out_of_band(step)) <= {"controls"}
