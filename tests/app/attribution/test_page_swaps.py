"""/attribution's htmx swaps keep the page's state everywhere (#44): a head or a key chosen by a partial swap (#head
alone) redraws every other part that carries the state (the flow link, the sort links, the grid's and the tokens'
hidden fields, the form, the title's links) from the same answer, so the next click keeps it. Applied here as htmx
applies them: the target's element replaced by the answer's, then each `hx-select-oob` id. And the encoder's intro
speaks of no next-token logit."""

from __future__ import annotations

import os
from collections.abc import Iterator
from urllib.parse import parse_qs, urlsplit

import pytest
from bs4 import BeautifulSoup, Tag
from fastapi.testclient import TestClient

from tests.conftest import make_client

TEXT = "The cat sat on the mat. The cat"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    pytest.importorskip("transformers")
    from tests.own_models import build

    root = tmp_path_factory.mktemp("attribution-swaps")
    path, _ = build("llama", root / "tiny", seed=6)
    bert, _ = build("bert", root / "tinybert", seed=7)
    with make_client(models=f"tiny={path}{os.pathsep}tinybert={bert}", pretrained=False) as c:
        yield c


def fields(form: Tag) -> dict[str, str]:
    return {i["name"]: i["value"] for i in form.select("input[type=hidden]")}


def swap(c: TestClient, page: BeautifulSoup, form: Tag, **chosen: str) -> BeautifulSoup:
    """Submit `form` (its hidden fields and `chosen`; a link: its own query) as htmx does, and apply its answer to
    `page` in place."""
    if form.name == "a":
        r = c.get(form["hx-get"], headers={"HX-Request": "true"})
    else:
        r = c.get(form["hx-get"], params=fields(form) | chosen, headers={"HX-Request": "true"})
    assert r.status_code == 200, r.headers.get("x-lab-error")
    part = BeautifulSoup(r.text, "html.parser")
    ids = [form["hx-target"], *(form.get("hx-select-oob") or "").split(",")]
    for sel in filter(None, ids):
        new = part.select_one(sel)
        assert new is not None, sel
        page.select_one(sel).replace_with(new)
    return page


def query(href: str) -> dict[str, str]:
    return {k: v[0] for k, v in parse_qs(urlsplit(href).query).items()}


def carriers(page: BeautifulSoup) -> dict[str, dict[str, str]]:
    """Every link and form on the page that carries its state, as the query it would send. The presenter switch is
    the header's (outside what a swap redraws): static/lab.js points it at each URL a swap pushes (`relink`)."""
    assert page.select_one('header a[data-toggle="present"][data-kernel]') is not None
    found = {
        "flow": query(page.select_one('#flow a[data-link="flow"]')["href"]),
        "twin": query(page.select_one('a[data-twin="json"]')["href"]),
        "grid": fields(page.select_one('form[hx-target="#head"]:has(#dla-grid)')),
        "tokens": fields(page.select_one("form.attr-tokens")),
        "form": fields(page.select_one("#attr-form")),
    }
    for a in page.select("#dla-top a[data-sort]"):
        found["sort." + a["data-sort"]] = query(a["href"])
    return found


def test_a_head_and_a_key_chosen_by_htmx_reach_every_link_and_form(tiny: TestClient) -> None:
    page = BeautifulSoup(tiny.get("/attribution", params={"preset": "tiny", "text": TEXT}).text, "html.parser")
    grid = page.select_one('form[hx-target="#head"]:has(#dla-grid)')
    assert grid["hx-select"] == "#head"
    page = swap(tiny, page, grid, head="2.3")
    assert page.select_one("#head table.attr-row")["data-layer"] == "2"
    for name, sent in carriers(page).items():  # the grid's buttons set the head themselves
        assert sent.get("head") == ("2.3" if name != "grid" else None), name  # the flow link once kept the old head
    key_form = page.select_one("#why form")
    page = swap(tiny, page, key_form, key="1")
    assert page.select_one("#why")["data-key"] == "1"
    for name, sent in carriers(page).items():
        assert sent.get("head") == ("2.3" if name != "grid" else None), name
        if name not in ("tokens", "form"):  # a new position or text starts from the new row's own key
            assert sent.get("key") == "1", name
    page = swap(tiny, page, page.select_one("#dla-top a[data-sort=neg]"))  # a link: its hx-get is the whole query
    for name, sent in carriers(page).items():
        if not name.startswith("sort."):
            assert sent.get("sort") == "neg" and sent.get("head") == ("2.3" if name != "grid" else None), name
    # the flow link, followed, keeps the head and the key chosen by the swaps
    flow = page.select_one('#flow a[data-link="flow"]')
    drawn = BeautifulSoup(tiny.get(flow["href"]).text, "html.parser")
    assert drawn.select_one("table[data-flow]") is not None and drawn.select_one("#why")["data-key"] == "1"
    assert drawn.select_one("#head table.attr-row")["data-head"] == "3"


def test_a_new_position_drops_a_key_it_cannot_read(tiny: TestClient) -> None:
    """The tokens' buttons keep the head but not the key: a key past a decoder's new position is no key of its row."""
    page = BeautifulSoup(tiny.get("/attribution", params={"preset": "tiny", "text": TEXT, "head": "1.2",
                                                          "key": "6"}).text, "html.parser")  # fmt: skip
    tokens = page.select_one("form.attr-tokens")
    assert "key" not in fields(tokens) and fields(tokens)["head"] == "1.2"
    r = tiny.get("/attribution", params=fields(tokens) | {"position": "2"})
    assert r.status_code == 200, r.headers.get("x-lab-error")


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_encoders_intro_names_no_next_token_logit(tiny: TestClient, lang: str) -> None:
    enc = BeautifulSoup(tiny.get("/attribution", params={"preset": "tinybert", "text": TEXT, "lang": lang}).text,
                        "html.parser").select_one(".model-intro")  # fmt: skip
    dec = BeautifulSoup(tiny.get("/attribution", params={"preset": "tiny", "text": TEXT, "lang": lang}).text,
                        "html.parser").select_one(".model-intro")  # fmt: skip
    assert enc["data-intro"] == "encoder" and dec["data-intro"] == "decoder"
    next_logit = "下一个词元的 logit" if lang == "zh" else "logit of the next token"
    assert next_logit in dec.text and next_logit not in enc.text and "tinybert" in enc.text
