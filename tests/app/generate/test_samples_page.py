"""The samples block of /generate (#45): N continuations of one setting, asked for on their own by htmx; every text,
seed and log-probability is the API's for the same setting, the distinct texts are counted, and the block keeps
its place (its id) while the steps change and is asked for again when a setting does."""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

import pytest
from bs4 import BeautifulSoup
from fastapi.testclient import TestClient

from tests.conftest import make_client

QUERY = "text=Once+upon+a+time&max_new_tokens=5&layer=2&do_sample=true&temperature=1.2&top_p=0.95&seed=4"


@pytest.fixture(scope="module")
def api(smollm2) -> TestClient:  # type: ignore[no-untyped-def]
    return make_client()


def soup(r) -> BeautifulSoup:  # type: ignore[no-untyped-def]
    assert r.status_code == 200, r.text[:500]
    return BeautifulSoup(r.text, "html.parser")


def slot(api: TestClient, query: str) -> BeautifulSoup:
    found = soup(api.get(f"/generate?{query}")).select_one("[data-samples-slot]")
    assert found is not None
    return found


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_samples_are_the_apis_for_the_same_setting(api: TestClient, lang: str) -> None:
    box = slot(api, f"lang={lang}&{QUERY}&step=2")
    assert box["hx-trigger"] == "load" and box["hx-target"] == "this" and box["hx-swap"] == "innerHTML"
    assert box["hx-push-url"] == "false" and box.has_attr("hx-preserve")
    asked = box["hx-get"]
    query = parse_qs(urlsplit(asked).query)
    assert urlsplit(asked).path == "/generate/samples" and query["samples"] == ["8"] and "step" not in query
    assert box.select_one("a")["href"] == asked  # without script, a link to the same block as a page
    block = soup(api.get(asked, headers={"HX-Request": "true"}))
    section = block.select_one("section[data-samples]")
    assert block.select_one("header") is None and section is not None  # the block alone
    assert block.select("[hx-swap-oob], [data-lang]") == []  # not the header's links: htmx pushes no URL for it
    doc = api.get(section.select_one("a[data-twin=json]")["href"]).json()
    assert [s["seed"] for s in doc["samples"]] == list(range(4, 12))
    rows = section.select("li[data-sample]")
    assert [int(li["data-seed"]) for li in rows] == [s["seed"] for s in doc["samples"]]
    shown = [s["text"].replace("\n", "↵") for s in doc["samples"]]  # a new line shown as the step view shows it
    assert [li.select_one(".gen").get_text() for li in rows] == shown
    assert [float(li["data-logprob"]) for li in rows] == pytest.approx([s["logprob"] for s in doc["samples"]])
    assert int(section["data-n"]) == 8 and int(section["data-distinct"]) == doc["distinct"]
    assert str(doc["distinct"]) in section.select_one("[data-distinct-line]").get_text()
    first: dict[tuple[int, ...], int] = {}
    for li, s in zip(rows, doc["samples"], strict=True):  # a repeat names the first sample of its text
        ids = tuple(s["token_ids"])
        assert li.get("data-same-as") == (str(first[ids]) if ids in first else None)
        first.setdefault(ids, int(li["data-sample"]))
    # Sample 1 is the text the step view shows (the same seed); each seed opens its own sample there.
    step_doc = api.get(f"/api/v1/generate?{QUERY}").json()
    assert [g["token_id"] for g in step_doc["generated"]] == doc["samples"][0]["token_ids"]
    link = rows[3].select_one("a.seed")["href"]
    assert urlsplit(link).path == "/generate" and parse_qs(urlsplit(link).query)["seed"] == ["7"]
    opened = api.get("/api/v1/generate", params={k: v[0] for k, v in parse_qs(urlsplit(link).query).items()
                                                  if k not in ("lang", "samples")}).json()  # fmt: skip
    assert [g["token_id"] for g in opened["generated"]] == doc["samples"][3]["token_ids"]
    assert ("抽样" in section.get_text()) == (lang == "zh")


def test_a_temperature_near_zero_draws_one_text_and_a_hot_one_many(api: TestClient) -> None:
    cold = soup(api.get(f"/generate/samples?lang=en&{QUERY}&temperature=0.01&samples=4", headers={"HX-Request": "1"}))
    rows = cold.select("li[data-sample]")
    assert cold.select_one("[data-samples]")["data-distinct"] == "1" and len(rows) == 4
    assert [li.get("data-same-as") for li in rows] == [None, "1", "1", "1"]
    assert "drawn 4 times: 1 different text" in cold.get_text()
    hot = soup(api.get(f"/generate/samples?lang=en&{QUERY}&temperature=1.5&samples=4", headers={"HX-Request": "1"}))
    assert hot.select_one("[data-samples]")["data-distinct"] == "4"


def test_the_block_keeps_its_id_across_steps_and_changes_it_with_a_setting(api: TestClient) -> None:
    ids = {step: slot(api, f"lang=en&{QUERY}&step={step}")["id"] for step in (1, 3, 5)}
    assert len(set(ids.values())) == 1  # htmx keeps the loaded block (hx-preserve) while the steps change
    assert slot(api, f"lang=en&{QUERY}&temperature=0.7")["id"] != ids[1]  # a new setting: a new block
    assert slot(api, f"lang=en&{QUERY}&samples=3")["id"] != ids[1]
    assert parse_qs(urlsplit(slot(api, f"lang=en&{QUERY}&samples=3")["hx-get"]).query)["samples"] == ["3"]


def test_a_greedy_page_has_no_samples_block(api: TestClient) -> None:
    page = soup(api.get("/generate?lang=en&text=The+cat+sat&max_new_tokens=3&layer=2"))
    assert page.select_one("[data-samples-slot]") is None


def test_the_block_opened_as_a_page_links_back(api: TestClient) -> None:
    page = soup(api.get(f"/generate/samples?lang=zh&{QUERY}&samples=3"))
    assert page.select_one("header") is not None and len(page.select("li[data-sample]")) == 3
    back = page.select_one("main > p > a")["href"]
    assert urlsplit(back).path == "/generate" and "temperature=1.2" in back
    view = api.get(f"/generate/samples.json?lang=en&{QUERY}&samples=3").json()
    assert view["view"] == "generate_samples" and view["n"] == 3 and len(view["samples"]) == 3


@pytest.mark.parametrize(("query", "lang", "present"), [("", "en", False), ("lang=zh&present=1", "zh", True),
                                                      ("lang=zh&samples=9&do_sample=1", "zh", False)])  # fmt: skip
def test_the_block_refused_as_a_page_still_links_back(api: TestClient, query: str, lang: str, present: bool) -> None:
    """/generate/samples opened bare (no setting: greedy, so no samples) or with a bad field is a 422 page that named
    the field and had no way back but the browser's; now it links to the step view of the same setting, in its
    language and presenter mode, where the form shows the field at fault."""
    r = api.get(f"/generate/samples?{query}".rstrip("?"))
    assert r.status_code == 422
    page = BeautifulSoup(r.text, "html.parser")
    assert page.select_one("[data-samples] .error") is not None and "“samples”" in page.select_one(".error").text
    back = page.select_one("main > p > a")
    assert back is not None and back.text.strip() == ("回到逐步视图" if lang == "zh" else "Back to the step view")
    url = urlsplit(back["href"])
    assert url.path == "/generate"
    q = parse_qs(url.query)
    assert q.get("lang", ["en"]) == [lang] and ("present" in q) == present and q.get("present", ["1"]) == ["1"]
    for key, value in parse_qs(query).items():
        assert q[key] == value
    fragment = api.get(f"/generate/samples?{query}", headers={"HX-Request": "true"})  # the block in /generate: no link
    assert fragment.status_code == 422 and "main" not in fragment.text and "<a " not in fragment.text


@pytest.mark.parametrize(("query", "field"), [("samples=9", "samples"), ("do_sample=false", "samples")])
def test_a_bad_setting_is_named_in_the_block(api: TestClient, query: str, field: str) -> None:
    r = api.get(f"/generate/samples?lang=en&{QUERY}&{query}", headers={"HX-Request": "true"})
    assert r.status_code == 422
    error = BeautifulSoup(r.text, "html.parser").select_one("[data-samples] .error")
    assert error is not None and f"“{field}”" in error.get_text()


def test_the_block_draws_only_the_samples_the_step_page_has_not(
    api: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The step page computed sample 1 (the page's own seed): its samples block draws the seven others, sample 1
    taken from the page's; asked for first, the block draws all eight and the step page then computes nothing."""
    import engine.sampling as sampling

    drawn: list[int] = []  # the seeds of the samples drawn: each draws with a generator of its own
    real = sampling.Sampling.generator

    def counted(self):  # type: ignore[no-untyped-def]
        drawn.append(self.seed)
        return real(self)

    monkeypatch.setattr(sampling.Sampling, "generator", counted)
    query = QUERY.replace("seed=4", "seed=30")
    page = soup(api.get(f"/generate?lang=en&{query}"))
    assert drawn == [30]
    block = soup(api.get(page.select_one("[data-samples-slot]")["hx-get"], headers={"HX-Request": "true"}))
    assert drawn == list(range(30, 38))
    doc = api.get(f"/api/v1/generate?{query}&samples=8").json()
    rows = block.select("li[data-sample]")
    assert [int(li["data-seed"]) for li in rows] == [s["seed"] for s in doc["samples"]] == list(range(30, 38))
    step = api.get(f"/api/v1/generate?{query}").json()
    assert [g["token_id"] for g in step["generated"]] == doc["samples"][0]["token_ids"]
    drawn.clear()
    query = QUERY.replace("seed=4", "seed=50")
    soup(api.get(f"/generate/samples?lang=en&{query}&samples=8", headers={"HX-Request": "true"}))
    assert drawn == list(range(50, 58))
    soup(api.get(f"/generate?lang=en&{query}"))
    assert drawn == list(range(50, 58))  # the step page's generation: the block's first sample
