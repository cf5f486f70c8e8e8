"""The sampling on /generate (#45): the bars' numbers are the API's `filters` for the same URL, a branch link's URL
forces its token, a greedy page stays as it was, and a bad setting is named on the page in both languages."""

from __future__ import annotations

import math
from urllib.parse import parse_qs, urlsplit

import pytest
from bs4 import BeautifulSoup
from fastapi.testclient import TestClient

from tests.conftest import make_client

QUERY = ("text=Once+upon+a+time,+a+small+cat&max_new_tokens=5&layer=2&do_sample=true&temperature=0.8&top_k=20"
         "&top_p=0.9&min_p=0.02&seed=7")  # fmt: skip
NAMES = ["logits", "temperature", "top_k", "top_p", "min_p"]


@pytest.fixture(scope="module")
def api(smollm2) -> TestClient:  # type: ignore[no-untyped-def]
    return make_client()


def page(api: TestClient, query: str) -> BeautifulSoup:
    r = api.get(f"/generate?{query}")
    assert r.status_code == 200, r.text[:500]
    return BeautifulSoup(r.text, "html.parser")


def twin(api: TestClient, html: BeautifulSoup) -> dict:  # type: ignore[type-arg]
    """The API's answer for the page's own URL (its JSON link)."""
    r = api.get(html.select_one("a[data-twin=json]")["href"])
    assert r.status_code == 200, r.text[:500]
    return r.json()


@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize("step", [1, 3])
def test_the_bars_are_the_apis_filters_for_the_same_url(api: TestClient, lang: str, step: int) -> None:
    html = page(api, f"lang={lang}&{QUERY}&step={step}")
    doc = twin(api, html)
    assert doc["sampling"]["filters"] == NAMES[1:]
    want = doc["generated"][step - 1]
    table = html.select_one("table[data-filters]")
    heads = table.select("thead th[data-filter]")
    assert [h["data-filter"] for h in heads] == [f["name"] for f in want["filters"]] == NAMES  # in the order they run
    for h, f in zip(heads, want["filters"], strict=True):
        assert int(h["data-kept"]) == f["kept"]
        assert str(f["kept"]) in h.get_text()
    rows = table.select("tbody tr[data-token-id]")
    assert [int(r["data-token-id"]) for r in rows] == [c["token_id"] for c in want["candidates"]]
    for i, row in enumerate(rows):
        cells = row.select("td")
        assert len(cells) == len(NAMES)
        for cell, f in zip(cells, want["filters"], strict=True):
            assert math.isclose(float(cell["data-p"]), f["probs"][i], rel_tol=1e-12, abs_tol=1e-15)
            shown = cell.get_text(strip=True)
            assert shown == ("—" if f["probs"][i] == 0 else f"{f['probs'][i]:.3f}")
    rest = table.select_one("tr[data-rest]").select("td")
    assert [float(c["data-p"]) for c in rest] == pytest.approx([f["rest"] for f in want["filters"]], abs=1e-12)
    # The mass each filter cut: what its survivors weighed before it, read back from the API's own numbers.
    for h, before, after in zip(heads[1:], want["filters"][:-1], want["filters"][1:], strict=True):
        cut = 0.0 if after["name"] == "temperature" else 1 - before["probs"][0] / after["probs"][0]
        assert float(h["data-cut"]) == pytest.approx(max(0.0, cut), abs=1e-12)
        if after["kept"] < before["kept"] and after["kept"] <= len(after["probs"]):
            assert cut == pytest.approx(1 - sum(before["probs"][: after["kept"]]), abs=1e-9)  # the tokens cut
    drawn = html.select_one("[data-drawn]")
    assert float(drawn["data-p"]) == pytest.approx(want["p"], abs=1e-15)
    assert float(drawn["data-logp"]) == pytest.approx(want["logp"], abs=1e-12)
    lp = html.select_one("[data-logprob]")
    assert float(lp["data-logprob"]) == pytest.approx(sum(s["logp"] for s in doc["generated"][:step]), abs=1e-9)
    assert float(lp["data-logprob-total"]) == pytest.approx(doc["logprob"], abs=1e-9)
    marked = table.select("tr.drawn")
    assert len(marked) == 1
    ids = [c["token_id"] for c in want["candidates"]]
    if want["token_id"] in ids:
        assert int(marked[0]["data-token-id"]) == want["token_id"]
    else:  # drawn from everything else: said so
        assert "data-rest" in marked[0].attrs and html.select_one("[data-drawn-outside]") is not None


def test_the_sampling_controls_redraw_by_htmx_and_keep_the_settings(api: TestClient) -> None:
    html = page(api, f"lang=en&{QUERY}")
    box = html.select_one("[data-sampling]")
    assert box["hx-get"] == "/generate" and box["hx-trigger"] == "change" and box["hx-include"] == "#controls"
    assert box["hx-push-url"] == "true" and box["hx-vals"] == '{"step": "1"}'  # the same step redrawn
    assert box.select_one("input[name=do_sample]").has_attr("checked")
    assert not box.select_one("fieldset").has_attr("disabled")
    values = {i["name"]: i["value"] for i in box.select("fieldset input")}
    assert values == {"temperature": "0.8", "top_k": "20", "top_p": "0.9", "min_p": "0.02", "seed": "7", "samples": ""}
    assert box["hx-sync"] == "this:replace"  # a setting changed again replaces the request in flight (no 429 pile)
    # The browser accepts the usual settings (a step from min refused 1, 0.7 and 0.9: the form would not send).
    for name, typed in (
        ("temperature", ("0.7", "1", "1.3", "2")),
        ("top_p", ("0.9", "0.95", "1")),
        ("min_p", ("0.1",)),
    ):
        field = box.select_one(f"input[name={name}]")
        lo, step = float(field.get("min", 0)), float(field["step"])
        assert all(abs((float(v) - lo) / step - round((float(v) - lo) / step)) < 1e-6 for v in typed), (name, step)
    fragment = api.get(f"/generate?lang=en&{QUERY}&temperature=1.5", headers={"HX-Request": "true"})
    assert fragment.status_code == 200
    part = BeautifulSoup(fragment.text, "html.parser")
    assert (
        part.select_one("#stage table[data-filters] th[data-filter=temperature]")
        .get_text()
        .startswith("Temperature 1.5")
    )
    assert part.select_one("form#controls")["hx-swap-oob"] == "true"


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_branch_link_opens_a_generation_with_that_token_forced(api: TestClient, lang: str) -> None:
    step = 2
    html = page(api, f"lang={lang}&{QUERY}&step={step}")
    doc = twin(api, html)
    links = html.select("table[data-filters] a[data-branch]")
    want = doc["generated"][step - 1]
    survivors = [c["token_id"] for c, p in zip(want["candidates"], want["filters"][-1]["probs"], strict=True) if p > 0]
    # Every survivor but the token taken is a branch; a token the filters cut is none.
    assert sorted(int(a["data-branch"]) for a in links) == sorted(t for t in survivors if t != want["token_id"])
    link = links[-1]
    token = int(link["data-branch"])
    query = parse_qs(urlsplit(link["href"]).query)
    assert query["branch"] == [f"{step - 1}:{token}"] and query["step"] == [str(step + 1)]
    assert query["temperature"] == ["0.8"] and query["seed"] == ["7"]  # the settings kept
    branched = page(api, link["href"].removeprefix("/generate?"))
    assert branched.select_one("#stage")["data-index"] == str(step + 1)  # opened at the next step
    forked = twin(api, branched)
    assert forked["generated"][step - 1]["token_id"] == token and forked["generated"][step - 1]["forced"] is True
    assert [s["token_id"] for s in forked["generated"][: step - 1]] == [
        s["token_id"] for s in doc["generated"][: step - 1]
    ]  # the same text before the branch
    assert branched.select_one("[data-branch-path]") is not None
    # A class following the page sees the same: the same URL, the same tokens.
    again = twin(api, page(api, link["href"].removeprefix("/generate?")))
    assert [s["token_id"] for s in again["generated"]] == [s["token_id"] for s in forked["generated"]]
    # Branching again further on keeps the first choice; branching before it drops it.
    later = branched.select("table[data-filters] a[data-branch]")
    if later:
        deeper = parse_qs(urlsplit(later[0]["href"]).query)["branch"][0]
        assert deeper == f"{step - 1}:{token},{step}:{later[0]['data-branch']}"


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_greedy_page_is_the_page_it_was(api: TestClient, lang: str) -> None:
    plain = page(api, f"lang={lang}&text=The+cat+sat&max_new_tokens=4&layer=2&step=2")
    assert plain.select_one("[data-choosing]") is None and plain.select_one("table[data-filters]") is None
    assert len(plain.select("table[data-top] tbody tr")) == 5
    box = plain.select_one("[data-sampling]")
    assert not box.select_one("input[name=do_sample]").has_attr("checked")
    assert box.select_one("fieldset").has_attr("disabled")  # left out of the form's URL while greedy
    assert all(i["value"] == "" for i in box.select("fieldset input"))
    # Settings without "Draw" change nothing: greedy ignores them, as transformers does.
    ignored = page(api, f"lang={lang}&text=The+cat+sat&max_new_tokens=4&layer=2&step=2&temperature=3&top_k=2&seed=5")
    for sel in ("[data-generated]", "table[data-top]", "#stage h2"):
        assert ignored.select_one(sel).get_text() == plain.select_one(sel).get_text()
    assert ignored.select_one("[data-choosing]") is None
    plain_doc = twin(api, plain)
    assert plain_doc["sampling"]["do_sample"] is False
    assert all(s["top"][0][0] == s["token"] for s in plain_doc["generated"])  # the most likely, every step


@pytest.mark.parametrize(
    ("lang", "query", "field", "words"),
    [
        ("en", "temperature=0", "temperature", "greater than 0"),
        ("zh", "temperature=0", "temperature", "应大于"),
        ("en", "top_p=1.5", "top_p", "less than or equal to 1"),
        ("zh", "min_p=2", "min_p", "1"),
        ("en", "top_k=5000", "top_k", "at most 1000"),
        ("zh", "top_k=5000", "top_k", "1000"),
    ],
)
def test_a_bad_setting_is_named_on_the_page(api: TestClient, lang: str, query: str, field: str, words: str) -> None:
    r = api.get(f"/generate?lang={lang}&text=The+cat&max_new_tokens=3&do_sample=true&{query}")
    assert r.status_code == 422
    error = BeautifulSoup(r.text, "html.parser").select_one(".error").get_text(" ", strip=True)
    assert f"“{field}”" in error and words in error
    assert ("实验室" in error) == (lang == "zh")
    form = BeautifulSoup(r.text, "html.parser").select_one("[data-sampling]")
    assert form is not None  # the form stays, to put the setting right
