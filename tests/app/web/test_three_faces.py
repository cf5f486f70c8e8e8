"""Every page's three faces (#21): the HTML page, its htmx fragment and its JSON twin come from one View, so the JSON
holds every number, notice and link the page shows, and a bad field is the same refusal on both faces."""

from __future__ import annotations

import inspect
import math
from typing import Any

import pytest
from bs4 import BeautifulSoup

from app.attention.sinks import SinksView
from app.attention.tiles import TilesView
from app.block.view import BlockView
from app.decode.view import DecodeView
from app.generate.view import GenerateView
from app.web.page import page_route

# The kernel's own names in a template's context (app/web/page.py `serve`): no View field may shadow them.
BASE = {"page", "t", "lang", "langs", "state", "lang_urls", "error", "status", "fragment", "request", "view"}
# data-* attributes whose value is a number the page shows (not an index or a hook): each must be in the JSON.
NUMBERS = ("data-value", "data-share", "data-change", "data-relative", "data-cache-len", "data-cache-bytes",
           "data-memory-staged", "data-memory-tiled", "data-token-id")  # fmt: skip

# (page, kind, queries that render, whether htmx swaps blocks of it)
PAGES = [
    ("/block", "block", ["stage=ln1", "n_heads=2&stage=softmax&head=1", "ffn=swiglu&norm=rmsnorm&stage=ffn_hidden",
                         "placement=post&stage=residual1", "preset=gpt2-small&stage=softmax",
                         "preset=gpt2-small&stage=output"], True),
    ("/decode", "decode", ["step=0", "prefill=2&step=2", "n_heads=2&n_kv_heads=1&step=3&head=1",
                           "positions=rope&step=1", "preset=gpt2-small&step=1"], True),
    ("/generate", "generate", ["max_new_tokens=3&step=2", "text=Hello&max_new_tokens=2&layer=2"], True),
    ("/tiles", "tiles", ["", "qb=1&kb=0", "qb=0&kb=1", "mask=none&block_q=3&block_k=2"], False),
    ("/sinks", "sinks", ["text=The+cat+sat+on+the+mat.", "layer=3&head=2"], False),
]  # fmt: skip
CASES = [(path, kind, q, swaps) for path, kind, queries, swaps in PAGES for q in queries]
# (page, a bad query, the field it names)
BAD = [
    ("/block", "n_heads=0", "n_heads"),
    ("/block", "stage=bogus", "stage"),
    ("/decode", "step=99", "step"),
    ("/decode", "prefill=0", "prefill"),
    ("/generate", "layer=999&max_new_tokens=2", "layer"),
    ("/generate", "max_new_tokens=0", "max_new_tokens"),
    ("/tiles", "block_q=0", "block_q"),
    ("/tiles", "qb=99", "qb"),
    ("/sinks", "preset=toy", "preset"),
    ("/sinks", "head=99", "head"),
]


def url(path: str, query: str, json: bool = False) -> str:
    return path + (".json" if json else "") + "?" + "&".join(p for p in ("lang=en", query) if p)


def numbers(value: Any) -> list[float | None]:
    """Every number in a JSON document (null too: −∞ is null there), recursively."""
    if isinstance(value, bool) or value is None:
        return [None] if value is None else []
    if isinstance(value, int | float):
        return [value]
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, list):
        return [n for v in value for n in numbers(v)]
    return []


def strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [" ".join(value.split())]
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, list):
        return [s for v in value for s in strings(v)]
    return []


def same(shown: float, v: float | None) -> bool:
    """A number the page shows is the JSON's number: equal to float32 rounding (a non-finite one is JSON's null)."""
    if not math.isfinite(shown):
        return v is None or not math.isfinite(v)
    return v is not None and math.isclose(shown, v, rel_tol=1e-6, abs_tol=1e-9)


def unmatched(shown: list[float], have: list[float | None]) -> tuple[int, float] | None:
    """Where the page's numbers (in document order) stop being found, one after the other, in the JSON's numbers
    (in document order): (index, value) of the first one not found after its predecessor's match, else None. Each
    number is matched at its own position, so a 0 or a 1 is not found merely because some 0 or 1 is somewhere."""
    j = 0
    for i, value in enumerate(shown):
        while j < len(have) and not same(value, have[j]):
            j += 1
        if j == len(have):
            return i, value
        j += 1
    return None


def said(element: Any) -> str:
    """An element's text without its bold label ("Notice:", "What it does:"), a heading's number and quoted token
    (each a field of its own)."""
    for label in element.select("strong, .num, q"):
        label.decompose()
    return " ".join(element.get_text(" ").split()).removeprefix(": ").strip()


@pytest.mark.parametrize(("path", "kind", "query", "swaps"), CASES)
def test_the_json_twin_holds_every_number_and_notice_the_page_shows(client, path, kind, query, swaps) -> None:
    page = client.get(url(path, query))
    assert page.status_code == 200, page.headers.get("x-lab-error")
    twin = client.get(url(path, query, json=True))
    assert twin.status_code == 200 and twin.headers["content-type"].startswith("application/json")
    data = twin.json()
    assert data["view"] == kind and data["lang"] == "en"
    assert "spec" not in data  # a hidden field stays the template's
    soup = BeautifulSoup(page.text, "html.parser")
    have = numbers(data)
    for attr in NUMBERS:  # each attribute's numbers, in the page's order, are the JSON's in its order
        shown = [float(str(el[attr])) for el in soup.select(f"[{attr}]")]
        missing = unmatched(shown, have)
        assert missing is None, (attr, missing, shown[max(0, missing[0] - 2) : missing[0] + 3])
    texts = strings(data)
    notices = soup.select(".notice, .explain > p, .explain > h2, .cache-size")
    assert notices or kind == "sinks"
    if kind == "sinks":  # the layer and the text's length, in words, beside the JSON link
        hint = soup.select_one("p.hint:has(a[data-twin=json])")
        assert hint is not None and hint.a is not None
        hint.a.decompose()
        notices.append(hint)
    for element in notices:
        text = said(element)
        assert not text or any(text in s for s in texts), text
    for a in soup.select("a[data-twin=json], .steps a[href], .heads a[href], .color-modes a, [data-sink-shares] a"):
        assert a["href"] in texts


@pytest.mark.parametrize(("path", "kind", "query", "swaps"), [(p, k, qs[0], s) for p, k, qs, s in PAGES])
def test_an_htmx_request_gets_the_fragment(client, path, kind, query, swaps) -> None:
    r = client.get(url(path, query), headers={"HX-Request": "true"})
    assert r.status_code == 200 and "HX-Request" in r.headers["vary"]
    if swaps:  # the panel and the form, nothing around them
        assert "<html" not in r.text and r.text.lstrip().startswith(("<form", "<section"))
        soup = BeautifulSoup(r.text, "html.parser")
        controls = soup.select_one("#controls")
        assert soup.select_one("#stage") and controls is not None and controls["hx-swap-oob"] == "true"
    else:  # no blocks to swap: the whole page
        assert "<html" in r.text
    # An htmx request never gets the JSON face, even when it accepts JSON.
    both = client.get(url(path, query), headers={"HX-Request": "true", "Accept": "application/json"})
    assert both.headers["content-type"].startswith("text/html")


@pytest.mark.parametrize(("path", "query", "field"), BAD)
def test_a_bad_field_is_named_on_both_faces(client, path, query, field) -> None:
    twin = client.get(url(path, query, json=True))
    assert twin.status_code == 422 and twin.headers["content-type"].startswith("application/json")
    assert twin.json()["detail"][0]["loc"] == ["query", field]
    page = client.get(url(path, query))
    assert page.status_code == 422 and page.headers["content-type"].startswith("text/html")
    error = BeautifulSoup(page.text, "html.parser").select_one(".error[role=alert]")
    assert error is not None and field in error.text


def test_the_accept_header_is_the_twin(client) -> None:
    """`Accept: application/json` on the page's own URL is its `.json` twin."""
    by_header = client.get(url("/decode", "step=1"), headers={"Accept": "application/json"})
    assert by_header.json() == client.get(url("/decode", "step=1", json=True)).json()


VIEWS = [BlockView, DecodeView, GenerateView, TilesView, SinksView]
# /block, /decode, /generate, /tiles, /sinks and the other whole pages are routed by the kernel's `page_route`.
ROUTES = [page_route]


@pytest.mark.parametrize("view", VIEWS)
def test_a_view_is_frozen_and_shadows_no_kernel_name(view) -> None:
    names = set(view.model_fields)
    assert not names & BASE
    assert view.model_config.get("frozen")
    assert view.kind != "view"


@pytest.mark.parametrize("route", ROUTES, ids=lambda r: r.__name__)
def test_a_page_route_parses_its_state_and_calls_serve(route) -> None:
    lines = inspect.getsource(route).splitlines()
    body = lines[next(i for i, line in enumerate(lines) if line.lstrip().startswith("async def")) :]
    assert len(body) <= 15, f"{route.__name__} has {len(body)} lines"
