"""The teacher's remote gets a page's controls from the server (`X-Lab-Remote: 1`: app/web/remote.py,
templates/_remote.html), never by reading the page: here, the controls the server lists for a page are the ones the
page shows, found in the page by the selectors the remote once read it with."""

from __future__ import annotations

from urllib.parse import parse_qsl, urljoin, urlsplit

import pytest
from bs4 import BeautifulSoup, Tag
from fastapi.testclient import TestClient

from tests.conftest import make_client

# What a page shows of each of the remote's groups (static/teach.js read the projected page with these).
GROUPS = {
    "stages": "#stage ol.tabs a[href], nav.steps ol.tabs a[href], a[data-block-stage][href]",
    "switches": "a[data-toggle][href]:not([data-toggle=present]):not([data-toggle=hints]), nav.color-modes a[data-role][href]",
    "positions": "table[data-train] thead a[data-pos][href], a[data-rank][href]",
    "heads": "nav.heads a[href], a[data-head-choice][href], ol.top-heads a[data-head][href]",
    "knock": "a[data-knock][href], ol.ranked-heads a[href]",
}
GO = {
    "prev": "a[data-action=prev][href]",
    "next": "a[data-action=next][href]",
    "hints": "a[data-toggle=hints][href]",
    "lesson-prev": "a[data-lesson-step=prev][href]",
    "lesson-next": "a[data-lesson-step=next][href], a[data-lesson-step=next-lesson][href]",
    "cell-close": "#arithmetic .result a[href]",
}
PAGES = [
    "/?stage=softmax",
    "/?stage=projection&cell=k.0.4.3",
    "/?stage=softmax&text=one+two+three+four+five+six+seven+eight+nine+ten",
    "/?stage=4&lesson=five-stages&lesson_step=4",
    "/block",
    "/tiles",
    "/decode",
    "/generate",
    "/heads",
    "/predict",
    "/model?layer=0&head=1",
    "/block?n_heads=2&stage=4",
    "/?n_heads=2&stage=softmax",
]


@pytest.fixture(scope="module")
def lab() -> TestClient:
    return make_client()


def view(href: str, base: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    u = urlsplit(urljoin(base, href))
    return u.path, tuple(
        sorted((k, v) for k, v in parse_qsl(u.query, keep_blank_values=True) if k not in ("lang", "present"))
    )


def announced(b: Tag, base: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    return view(f"{b['data-page']}?{b['data-query']}", base)


def text(el: Tag) -> str:
    return " ".join(el.get_text(" ").split())


@pytest.mark.parametrize("url", PAGES)
def test_the_remote_lists_the_controls_the_page_shows(lab: TestClient, url: str) -> None:
    url += ("&" if "?" in url else "?") + "lang=en"
    path = urlsplit(url).path
    page = BeautifulSoup(lab.get(url).text, "html.parser")
    r = lab.get(url, headers={"X-Lab-Remote": "1", "HX-Request": "true"})
    assert r.status_code == 200
    remote = BeautifulSoup(r.text, "html.parser")
    assert remote.select_one("[data-remote-now]") is not None and remote.select_one("main, header") is None
    assert remote.select_one("[data-now]").get_text() == page.title.get_text()  # type: ignore[union-attr]
    shown = 0
    for group, selector in GROUPS.items():
        links: dict[tuple[str, tuple[tuple[str, str], ...]], str] = {}
        for a in page.select(selector):
            links.setdefault(view(a["href"], path), "" if a.has_attr("data-head-choice") else text(a))
        buttons = remote.select(f"[data-controls={group}] button")
        assert [announced(b, path) for b in buttons] == list(links), group
        assert [text(b) if label else "" for b, label in zip(buttons, links.values(), strict=True)] == list(
            links.values()
        )
        shown += len(buttons)
    for go, selector in GO.items():
        a, b = (
            page.select_one(selector),
            remote.select_one(f"[data-go={go}], [data-cell-close]" if go == "cell-close" else f"[data-go={go}]"),
        )
        assert b is not None, go
        assert (announced(b, path) if b.has_attr("data-page") else None) == (view(a["href"], path) if a else None), go
        shown += a is not None
    # The matrices whose cells open their arithmetic: a button each, and a small one's cells each a button.
    tables = [t for t in page.select(".matrices table[data-matrix]") if t.select_one("td a[href*='cell=']")]
    assert [b["data-cell-matrix"] for b in remote.select("[data-cell-matrices] button")] == [
        t["data-matrix"] for t in tables
    ]
    for t in tables:
        grid = remote.select_one(f"table[data-cell-table={t['data-matrix']}]")
        if grid is None:
            continue
        cells = [view(a["href"], path) for a in t.select("td[data-row][data-col] a[href]")]
        assert [announced(b, path) for b in grid.select("button[data-page]")] == cells
        assert [text(b) for b in grid.select("button")] == [text(td) for td in t.select("td[data-row][data-col]")]
    assert shown  # every page here offers the remote something


def test_the_remote_names_the_lesson_step_and_the_stage_buttons(lab: TestClient) -> None:
    r = lab.get("/?stage=4&lesson=five-stages&lesson_step=4&lang=en", headers={"X-Lab-Remote": "1"})
    remote = BeautifulSoup(r.text, "html.parser")
    box = remote.select_one("[data-remote-now]")
    assert box is not None and box["data-lesson"] == "five-stages" and box["data-step"] == "4"
    assert not remote.select_one("[data-lesson-nav]").has_attr("hidden")  # type: ignore[union-attr]
    assert text(remote.select_one("[data-go=next]")) == "Next stage →"  # type: ignore[arg-type]
    plain = BeautifulSoup(lab.get("/tiles?lang=en", headers={"X-Lab-Remote": "1"}).text, "html.parser")
    assert text(plain.select_one("[data-go=next]")) == "Next →"  # type: ignore[arg-type]
