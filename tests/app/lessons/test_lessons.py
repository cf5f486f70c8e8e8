"""Guided lessons: every step opens a working lab view, in both languages, with a question and an answer."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import numpy as np
import pytest
from bs4 import BeautifulSoup
from fastapi.testclient import TestClient

from app.web.lessons import LESSONS, Step
from engine import STAGES

from ..generate.test_sampling_lesson import CHECKED as SAMPLING_LESSON
from .test_attribution_lesson import CHECKED as ATTRIBUTION_LESSON
from .test_cross_lesson import CHECKED as CROSS_LESSON
from .test_train_lesson import CHECKED as TRAIN_LESSON


def on_the_lab(url: str) -> bool:
    """A step on the lab itself (/), where the lesson's panel sits beside the stage."""
    return url == "/" or url.startswith("/?")


def test_there_are_the_chapters_three_experiments_and_at_least_five_more():
    slugs = [lesson.slug for lesson in LESSONS]
    assert slugs[:3] == ["five-stages", "mask-toggle", "row-one"]
    assert {"scale", "positions", "rope", "padding-vs-causal", "kv-cache"} <= set(slugs)


@pytest.mark.parametrize("lesson", LESSONS, ids=lambda lesson: lesson.slug)
@pytest.mark.parametrize("lang", ["en", "zh"])
def test_every_step_opens_a_working_view(client, lesson, lang):
    page = BeautifulSoup(client.get(f"/lessons/{lesson.slug}?lang={lang}").text, "html.parser")
    steps = page.select("li.lesson-step")
    assert len(steps) == len(lesson.steps)
    for li in steps:
        href = li.select_one("a[data-open=lab]")["href"]
        assert f"lang={lang}" in href
        assert client.get(href.split("#")[0]).status_code == 200, href
        assert li.select_one(".question").text.strip() and li.select_one("details.answer p").text.strip()


def test_lesson_index_and_unknown_lesson(client):
    page = BeautifulSoup(client.get("/lessons?lang=zh").text, "html.parser")
    assert len(page.select("a[data-lesson]")) == len(LESSONS) and "引导式课程" in page.text
    assert client.get("/lessons/nope").status_code == 404


def test_every_lesson_step_opens_and_lab_steps_show_the_panel(client):
    from bs4 import BeautifulSoup

    from app.web.lessons import LESSONS, step_url

    for lesson in LESSONS:
        for k, step in enumerate(lesson.steps, start=1):
            for lang in ("en", "zh"):
                url = step_url(lesson, k, lang)
                r = client.get(url)
                assert r.status_code == 200, url
                if on_the_lab(step.url):
                    panel = BeautifulSoup(r.text, "html.parser").select_one(".lesson-panel")
                    assert panel is not None and panel["data-step"] == str(k), url
                    assert step.text(lang)[1] in panel.get_text()


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_lessons_back_link_and_the_stages_say_different_words(client, lang: str) -> None:
    """A lesson step beside the lab shows two ways back: the lab's previous stage and the lesson's previous step.
    On a phone both stand on one screen: they read differently ("← 上一步" twice in Chinese, the lesson's own key
    lesson.prev_step unused), the lesson's as its way on does ("课程下一步 →")."""
    from app.templating import translator

    t = translator(lang)
    page = BeautifulSoup(client.get(f"/?stage=2&lesson=five-stages&lesson_step=2&lang={lang}").text, "html.parser")
    stage, step = page.select_one("[data-action=prev]"), page.select_one(".lesson-panel [data-lesson-step=prev]")
    assert stage.get_text(strip=True) == t("prev") and step.get_text(strip=True) == t("lesson.prev_step")
    assert t("prev") != t("lesson.prev_step")
    labels = [a.get_text(strip=True) for a in page.select("main a, main span.btn, aside a, .lesson-beside a")]
    assert len([x for x in labels if x == t("prev")]) == 1, labels


def test_the_lesson_panel_follows_the_lab_and_leads_on(client):
    from bs4 import BeautifulSoup

    page = BeautifulSoup(client.get("/?stage=3&lesson=five-stages&step=3&lang=zh").text, "html.parser")
    nxt = page.select_one("[data-lesson-step=next]")["href"]
    assert "step=4" in nxt and "stage=4" in nxt and "lesson=five-stages" in nxt
    # stepping the lab keeps the lesson's question on screen
    assert "lesson=five-stages" in page.select_one("[data-action=next]")["href"]
    assert client.get("/?lesson=nope&lang=en").status_code == 422
    assert client.get("/?lesson=five-stages&step=6&lang=en").status_code == 422


def test_walk_the_five_stages_has_five_steps_one_per_stage():
    from app.web.lessons import BY_SLUG

    steps = BY_SLUG["five-stages"].steps
    assert [s.url for s in steps] == [f"/?stage={i}" for i in range(1, 6)]


# ---- prepared classroom polls: every step's question, ready to ask the class --------------------------------------


def _steps() -> list[tuple[str, int]]:
    return [(lesson.slug, k) for lesson in LESSONS for k in range(1, len(lesson.steps) + 1)]


def _step(slug: str, k: int) -> Step:
    from app.web.lessons import BY_SLUG

    return BY_SLUG[slug].steps[k - 1]


def _key(slug: str, k: int) -> str:
    """The poll's key as the rooms API gets it (English): the correct option's text, or "row,col"."""
    step = _step(slug, k)
    assert step.poll is not None
    return str(step.poll.for_lang(step.text("en")[1], "en")["answer"])


def _trace(client: TestClient, query: str) -> dict[str, Any]:
    r = client.get(f"/api/v1/attention?{query}")
    assert r.status_code == 200, (query, r.text)
    return r.json()  # type: ignore[no-any-return]


def _tensor(doc: dict[str, Any], name: str, head: int | None = 0) -> np.ndarray:
    """One tensor of a trace (masked entries, null in JSON, as nan); a per-head tensor's head `head`."""
    for stage in doc["stages"]:
        if name in stage["tensors"]:
            a = np.array(stage["tensors"][name], dtype=float)
            return a[head] if head is not None and a.ndim == 3 else a
    raise KeyError(name)


def _query(url: str) -> str:
    return urlsplit(url).query


# The matrix a lab page shows at each stage, where a cell poll's students click.
CLICKED = {"scores": "scaled", "mask": "masked", "softmax": "weights"}


def _clicked_matrix(client: TestClient, url: str) -> np.ndarray:
    from app.web.state import parse_stage

    key = parse_stage(parse_qs(_query(url))["stage"][0], STAGES)
    assert key in CLICKED, f"{url}: a cell poll on stage {key!r}: say here which matrix its students click"
    return _tensor(_trace(client, _query(url)), CLICKED[key])


@pytest.mark.parametrize(("slug", "k"), _steps())
def test_every_step_has_a_poll_that_the_rooms_api_accepts_in_both_languages(client, slug, k):
    from app.rooms.api import PollIn
    from app.web.lessons import panel

    step = _step(slug, k)
    assert step.poll is not None, f"{slug} step {k} has no poll"
    extra: dict[str, int] = {}
    if step.poll.kind == "cell":
        assert on_the_lab(step.url), "a cell poll needs a matrix to click"
        rows, cols = _clicked_matrix(client, step.url).shape
        r, c = step.poll.answer  # type: ignore[misc]
        assert 0 <= r < rows and 0 <= c < cols
        extra = {"rows": rows, "cols": cols}
        # …and the page at that step has the cell to click
        page = BeautifulSoup(client.get(step.url).text, "html.parser")
        assert page.select_one(f'td[data-row="{r}"][data-col="{c}"]') is not None
    else:
        assert len(step.poll.options["en"]) == len(step.poll.options["zh"])
    for lang in ("en", "zh"):
        body = step.poll.for_lang(step.text(lang)[1], lang)
        assert set(body) == {"prompt", "kind", "options", "answer"}
        assert body["prompt"] == step.text(lang)[1]
        poll = PollIn.model_validate(body | extra)
        if poll.kind == "choice":
            assert poll.answer in poll.options and 2 <= len(poll.options) <= 5
            assert all(len(o) <= 60 for o in poll.options)
        else:
            assert poll.options == [] and poll.answer == body["answer"]
        if on_the_lab(step.url):
            shown = panel(slug, k, lang)
            assert shown is not None and shown.poll == body


def test_the_polls_open_in_a_real_room():
    """Every step's poll, as the panel holds it, posted to the rooms API: a 201, not a 422 in front of a class."""
    from tests.conftest import make_client

    with make_client() as c:
        room = c.post("/api/v1/rooms", json={}).json()
        auth = {"Authorization": f"Bearer {room['teacher_token']}"}
        for slug, k in _steps():
            step = _step(slug, k)
            assert step.poll is not None
            for lang in ("en", "zh"):
                r = c.post(f"/api/v1/rooms/{room['code']}/polls", headers=auth,
                           json=step.poll.for_lang(step.text(lang)[1], lang))  # fmt: skip
                assert r.status_code == 201, (slug, k, lang, r.text)


def test_the_languages_ask_the_same_poll():
    from app.web.lessons import panel

    en, zh = panel("scale", 1, "en"), panel("scale", 1, "zh")
    assert en is not None and zh is not None and en.poll is not None and zh.poll is not None
    assert en.poll["options"].index(en.poll["answer"]) == zh.poll["options"].index(zh.poll["answer"])
    assert en.poll["options"] != zh.poll["options"] and zh.poll["prompt"] == zh.question
    cell = panel("row-one", 1, "zh")
    assert cell is not None and cell.poll == {"prompt": cell.question, "kind": "cell", "options": [], "answer": "0,0"}


# ---- a malformed poll stops the server at start, naming its lesson and step ------------------------------------

GOOD = {"kind": "choice", "en": ["yes", "no"], "zh": ["是", "否"], "answer": 0}
MALFORMED = {  # each refused naming the field (pydantic's path from the step) and the rule it breaks
    "unknown kind": ({"kind": "slider", "answer": 0}, "poll: Input tag 'slider' found using 'kind' does not match"),
    "no kind": ({"en": ["yes", "no"], "zh": ["是", "否"], "answer": 0}, "poll: Unable to extract tag using discriminator"),
    "answer past the options": (GOOD | {"answer": 2}, "poll: answer must be an option's index, 0 to 1, not 2"),
    "negative answer": (GOOD | {"answer": -1}, "poll.answer: Input should be greater than or equal to 0"),
    "answer as text": (GOOD | {"answer": "yes"}, "poll.answer: Input should be a valid integer"),
    "answer as a bool": (GOOD | {"answer": True}, "poll.answer: Input should be a valid integer"),
    "no answer": ({k: v for k, v in GOOD.items() if k != "answer"}, "poll.answer: Field required"),
    "languages differ in length": (GOOD | {"zh": ["是", "否", "也许"]}, "poll: the languages must have the same options"),
    "a language missing": ({k: v for k, v in GOOD.items() if k != "zh"}, "poll.zh: Field required"),
    "a misspelt field": (GOOD | {"anwser": 1}, "poll.anwser: Extra inputs are not permitted"),
    "duplicate options": (GOOD | {"en": ["yes", "yes"]}, "poll: en options repeat"),
    "one option": (GOOD | {"en": ["yes"], "zh": ["是"]}, "poll.en: List should have at least 2 items"),
    "six options": (GOOD | {"en": list("abcdef"), "zh": list("甲乙丙丁戊己")}, "poll.en: List should have at most 5"),
    "over-long option": (GOOD | {"en": ["yes", "n" + "o" * 60]}, "poll.en[1]: String should have at most 60 characters"),
    "empty option": (GOOD | {"zh": ["是", " "]}, "poll.zh[1]: String should match pattern"),
    "an option with outer spaces": (GOOD | {"en": [" yes", "no"]}, "poll.en[0]: String should match pattern"),
    "options not a list": (GOOD | {"en": "yes, no"}, "poll.en: Input should be a valid array"),
    "cell answer of one number": ({"kind": "cell", "answer": [0]}, "poll.answer[1]: Field required"),
    "cell answer negative": ({"kind": "cell", "answer": [-1, 0]}, "poll.answer[0]: Input should be greater than or"),
    "cell answer as text": ({"kind": "cell", "answer": "0,0"}, "poll.answer: Input should be a valid array"),
    "cell answer of strings": ({"kind": "cell", "answer": ["0", "0"]}, "poll.answer[0]: Input should be a valid integer"),
    "cell answer fractional": ({"kind": "cell", "answer": [0, 1.5]}, "poll.answer[1]: Input should be a valid integer"),
    "cell answer bool": ({"kind": "cell", "answer": [True, 0]}, "poll.answer[0]: Input should be a valid integer"),
    "cell poll with options": ({"kind": "cell", "answer": [0, 0], "en": ["a", "b"]}, "poll.en: Extra inputs are not"),
    "not an object": (["yes", "no"], "poll: Input should be an object"),
}  # fmt: skip


def _write_with_poll(tmp_path: Path, poll: object, question: str | None = None) -> Path:
    """The real lessons with the second step of "scale" carrying `poll` (and, if given, an English question)."""
    from app.web.lessons import DATA

    data = json.loads(DATA.read_text(encoding="utf-8"))
    lesson = next(item for item in data if item["slug"] == "scale")
    lesson["steps"][1]["poll"] = poll
    if question is not None:
        lesson["steps"][1]["en"]["question"] = question
    path = tmp_path / "lessons.json"
    path.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    return path


def test_the_real_lessons_and_a_good_poll_load(tmp_path):
    from app.web.lessons import DATA, load

    assert load(DATA) == LESSONS
    lessons = load(_write_with_poll(tmp_path, GOOD))
    poll = lessons[3].steps[1].poll
    assert poll is not None and poll.for_lang("Q?", "zh") == {
        "prompt": "Q?", "kind": "choice", "options": ["是", "否"], "answer": "是"
    }  # fmt: skip


@pytest.mark.parametrize(("poll", "says"), MALFORMED.values(), ids=list(MALFORMED))
def test_a_malformed_poll_is_refused_at_load(tmp_path, poll, says):
    from app.web.lessons import load

    with pytest.raises(ValueError, match=r"^lessons\.json: lesson 'scale', step 2: poll") as refused:
        load(_write_with_poll(tmp_path, poll))
    assert f"lesson 'scale', step 2: {says}" in str(refused.value)


def test_a_question_too_long_to_ask_is_refused_at_load(tmp_path):
    from app.web.lessons import load

    with pytest.raises(ValueError, match=r"lesson 'scale', step 2: poll: the en question .* 1 to 300"):
        load(_write_with_poll(tmp_path, GOOD, question="why? " * 61))


# ---- every key agrees with what the lab computes at that step --------------------------------------------------


def _nonzero(row: np.ndarray) -> list[int]:
    return [int(j) for j in np.flatnonzero(row > 0)]


def check_query_meets_every_key(client: TestClient) -> None:  # five-stages 2
    doc = _trace(client, _query(_step("five-stages", 2).url))
    n, d_k = len(doc["tokens"]), doc["spec"]["d_k"]
    assert _tensor(doc, "scaled").shape == (n, n) and _tensor(doc, "q").shape == (n, d_k) and d_k != n
    assert _key("five-stages", 2) == "Every query is compared with every key"


def _strict_upper(mask: np.ndarray) -> bool:
    n = mask.shape[0]
    return bool(all(np.isnan(mask[i, j]) == (j > i) for i in range(n) for j in range(n)))


def check_masked_weights_are_exactly_zero(client: TestClient) -> None:  # five-stages 3
    doc = _trace(client, _query(_step("five-stages", 3).url))
    mask, w = _tensor(doc, "mask"), _tensor(doc, "weights")
    assert _strict_upper(mask) and np.all(w[np.isnan(mask)] == 0.0) and np.all(w[~np.isnan(mask)] > 0)
    assert _key("five-stages", 3) == "Above the diagonal; they become exactly 0"


def check_rows_sum_to_one(client: TestClient) -> None:  # five-stages 4
    w = _tensor(_trace(client, _query(_step("five-stages", 4).url)), "weights")
    assert np.allclose(w.sum(axis=1), 1, atol=1e-6)
    assert _key("five-stages", 4) == "Exactly 1"


def check_output_mixes_values(client: TestClient) -> None:  # five-stages 5
    doc = _trace(client, _query(_step("five-stages", 5).url))
    w, heads = _tensor(doc, "weights"), _tensor(doc, "heads")
    assert np.allclose(heads, w @ _tensor(doc, "v"), atol=1e-5)
    assert not any(np.allclose(heads, w @ _tensor(doc, other), atol=1e-3) for other in ("k", "q"))
    assert _key("five-stages", 5) == "The rows of V"


def check_causal_mask_keeps_the_diagonal(client: TestClient) -> None:  # mask-toggle 1
    mask = _tensor(_trace(client, _query(_step("mask-toggle", 1).url)), "mask")
    assert _strict_upper(mask) and np.all(np.diag(mask) == 0)
    assert _key("mask-toggle", 1) == "Above the diagonal: a token may read itself"


def check_first_row_spreads_without_the_mask(client: TestClient) -> None:  # mask-toggle 2
    query = _query(_step("mask-toggle", 2).url)
    on = _tensor(_trace(client, query), "weights")[0]
    off = _tensor(_trace(client, query.replace("mask=causal", "mask=none")), "weights")[0]
    assert on.tolist() == [1, 0, 0, 0, 0]
    assert np.all(off > 0) and not np.allclose(off, 1 / len(off), atol=0.01)
    assert _key("mask-toggle", 2) == "It spreads its weight over all five tokens"


def check_the_only_weight_of_one(client: TestClient) -> None:  # row-one 1 (a cell poll)
    w = _clicked_matrix(client, _step("row-one", 1).url)
    assert [tuple(int(i) for i in rc) for rc in np.argwhere(np.round(w, 2) == 1.0)] == [(0, 0)]
    assert w[0, 0] == 1.0 and _nonzero(w[0]) == [0]
    assert _key("row-one", 1) == "0,0"


def check_first_output_is_v0(client: TestClient) -> None:  # row-one 2
    doc = _trace(client, _query(_step("row-one", 2).url))
    out0, v = _tensor(doc, "heads")[0], _tensor(doc, "v")
    assert np.allclose(out0, v[0], atol=1e-6)
    assert not np.allclose(out0, v.mean(axis=0), atol=1e-3) and not np.allclose(out0, _tensor(doc, "q")[0], atol=1e-3)
    assert _key("row-one", 2) == "Exactly v_0, its own value"


def check_unscaled_logits_are_8_times_larger(client: TestClient) -> None:  # scale 1
    query = _query(_step("scale", 1).url)
    none, scaled = _trace(client, query), _trace(client, query.replace("scale=none", "scale=sqrt_dk"))
    assert none["spec"]["d_k"] == 64 and scaled["spec"]["scale_value"] == 8.0
    assert np.allclose(_tensor(none, "scaled"), 8 * _tensor(scaled, "scaled"), rtol=1e-5, atol=1e-5)
    assert _key("scale", 1) == "8 times larger (√64)"


def _entropy(w: np.ndarray) -> np.ndarray:
    return -np.sum(np.where(w > 0, w * np.log(np.where(w > 0, w, 1)), 0), axis=-1)


def check_no_scaling_is_sharper(client: TestClient) -> None:  # scale 2: the page compares sqrt_dk with none
    query = _query(_step("scale", 2).url)
    none = _entropy(_tensor(_trace(client, query + "&scale=none"), "weights"))
    sqrt = _entropy(_tensor(_trace(client, query + "&scale=sqrt_dk"), "weights"))
    assert np.all(none <= sqrt + 1e-6) and none.mean() < sqrt.mean()
    assert _key("scale", 2) == "No scaling"


def check_sqrt_dk_curve_is_flat(client: TestClient) -> None:  # scale 3: /demos#scaling
    rows = client.get("/api/v1/demo/scaling").json()["rows"]
    assert rows[0]["d_k"] == 4 and rows[-1]["d_k"] == 1024

    def spread(stat: str, scale: str) -> float:
        values = [r[f"{stat}_{scale}"] for r in rows]
        return max(values) - min(values)

    for stat in ("max", "entropy"):
        assert spread(stat, "sqrt_dk") < min(spread(stat, "none"), spread(stat, "dk")) / 2
    assert _key("scale", 3) == "÷ √d_k"


def check_reversing_reverses_the_outputs(client: TestClient) -> None:  # positions 1
    doc = client.get(f"/api/v1/demo/permutation?{_query(_step('positions', 1).url)}").json()
    plain = next(case for case in doc["cases"] if case["case"] == "plain")
    out, shuffled = np.array(plain["output"]), np.array(plain["shuffled_output"])
    assert doc["perm"] == [4, 3, 2, 1, 0] and np.allclose(shuffled, out[::-1], atol=1e-5)
    assert not np.allclose(shuffled, out, atol=1e-3) and not np.allclose(out, out[0], atol=1e-3)
    assert _key("positions", 1) == "The same rows, in reverse order"


def check_positions_change_x(client: TestClient) -> None:  # positions 2
    # The step's own view holds the token the question names at positions 0 and 3 (a class opens that view).
    doc = _trace(client, _query(_step("positions", 2).url))
    assert doc["tokens"][0] == doc["tokens"][3] == "猫"
    with_p = _tensor(doc, "x")
    without = _tensor(_trace(client, "stage=1&tokens=" + "+".join(doc["tokens"])), "x")
    assert np.allclose(without[0], without[3]) and not np.allclose(with_p[0], with_p[3], atol=1e-3)
    assert _key("positions", 2) == "No: P differs at every position"


def check_rope_leaves_position_0(client: TestClient) -> None:  # rope 1
    doc = _trace(client, _query(_step("rope", 1).url))
    q, q_rot = _tensor(doc, "q"), _tensor(doc, "q_rot")
    assert [bool(np.allclose(a, b, atol=1e-6)) for a, b in zip(q, q_rot, strict=True)] == [True] + [False] * 4
    assert _key("rope", 1) == "The first, at position 0"


def check_rope_depends_on_the_offset(client: TestClient) -> None:  # rope 2
    doc = client.get(f"/api/v1/demo/rope?{_query(_step('rope', 2).url)}").json()
    offsets = doc["offsets"]
    assert len({o["n"] - o["m"] for o in offsets}) == 1 and len({o["n"] + o["m"] for o in offsets}) == len(offsets)
    assert np.allclose([o["score"] for o in offsets], offsets[0]["score"]) and doc["equal"]
    assert not np.isclose(doc["unrotated"], doc["absolute"])
    assert _key("rope", 2) == "Only the offset n − m"


def check_padding_hides_columns(client: TestClient) -> None:  # padding-vs-causal 1
    mask = _tensor(_trace(client, _query(_step("padding-vs-causal", 1).url)), "mask")
    assert all(bool(np.isnan(mask[i, j])) == (j in (3, 4)) for i in range(5) for j in range(5))
    assert _key("padding-vs-causal", 1) == "Columns 3 and 4: the pad keys"


def check_causal_is_a_triangle(client: TestClient) -> None:  # padding-vs-causal 2
    mask = _tensor(_trace(client, _query(_step("padding-vs-causal", 2).url)), "mask")
    assert _strict_upper(mask) and len({bool(np.isnan(x)) for x in mask[:, 1]}) == 2  # a column half hidden
    assert _key("padding-vs-causal", 2) == "A triangle: it depends on the query's position"


def check_the_leak_reads_the_first_document(client: TestClient) -> None:  # padding-vs-causal 3
    query = _query(_step("padding-vs-causal", 3).url)
    leak = _tensor(_trace(client, "mask=causal&stage=4"), "weights")  # the compare's side without boundaries
    blocked = _tensor(_trace(client, query), "weights")
    assert _nonzero(leak[3]) == [0, 1, 2, 3] and _nonzero(blocked[3]) == [2, 3]
    assert _key("padding-vs-causal", 3) == "Positions 0–3: the first document too"


def _decode(client: TestClient, query: str) -> dict[str, Any]:
    r = client.get(f"/api/v1/decode?{query}")
    assert r.status_code == 200, r.text
    return r.json()  # type: ignore[no-any-return]


def check_prefill_caches_keys_and_values(client: TestClient) -> None:  # kv-cache 1
    pre = _decode(client, _query(_step("kv-cache", 1).url))["prefill"]
    assert set(pre) == {"k_cache", "v_cache", "cache_len", "cache_bytes"} and pre["cache_len"] == 2
    assert np.array(pre["k_cache"]).shape[-2] == np.array(pre["v_cache"]).shape[-2] == 2
    assert _key("kv-cache", 1) == "The keys and values of the 2 prompt tokens"


def check_a_decode_step_has_one_query(client: TestClient) -> None:  # kv-cache 2
    doc = _decode(client, _query(_step("kv-cache", 2).url))
    h, d_k = doc["spec"]["n_heads"], doc["spec"]["d_k"]
    for s in doc["steps"]:
        assert np.array(s["q"]).shape == (h, d_k) and np.array(s["weights"]).shape == (h, s["position"] + 1)
    assert _key("kv-cache", 2) == "One: the new token's"


def check_gqa_cache_is_a_quarter(client: TestClient) -> None:  # kv-cache 3
    query = _query(_step("kv-cache", 3).url)
    gqa = _decode(client, query)["kv_cache_bytes_per_token"]
    full = _decode(client, query.replace("n_kv_heads=3", "n_kv_heads=12"))["kv_cache_bytes_per_token"]
    assert full == 4 * gqa
    assert _key("kv-cache", 3) == "A quarter: 4 times smaller"


def _view(client: TestClient, url: str) -> dict[str, Any]:
    """A page's View, from its `.json` twin."""
    path, _, query = url.partition("?")
    r = client.get(f"{path}.json", params=parse_qs(query))
    assert r.status_code == 200, r.text
    return r.json()  # type: ignore[no-any-return]


def check_bos_predicts_the_first_piece(client: TestClient) -> None:  # why-causal 1
    v = _view(client, _step("why-causal", 1).url)
    assert v["tokens"][:3] == ["<|im_start|>", "我₁", "我₂"] and v["targets"][0] == "我₁"
    assert v["targets"][-1] == "<|im_end|>" and v["tokens"][1:] == v["targets"][:-1]
    assert _key("why-causal", 1) == "我₁, the first piece of 我"


def check_a_loss_mask_moves_only_the_mean(client: TestClient) -> None:  # why-causal 2
    plain, masked = _view(client, _step("why-causal", 1).url), _view(client, _step("why-causal", 2).url)
    assert [c["p_target"] for c in masked["columns"]] == [c["p_target"] for c in plain["columns"]]
    assert masked["mean_loss"] != plain["mean_loss"] and masked["n_scored"] == len(masked["columns"]) - 6
    assert _key("why-causal", 2) == "No, only the mean loss changed"


def check_the_leakage_proof(client: TestClient) -> None:  # why-causal 3
    v = _view(client, _step("why-causal", 3).url)
    # positions count the text's tokens (the BOS, shown first, has none): 欢₁ is position 5, as in the lab
    assert v["unchanged"] == [None, 0, 1, 2, 3, 4] and v["changed"] == list(range(5, len(v["columns"]) - 1))
    assert v["columns"][6]["position"] == 5 and v["columns"][6]["input"] == "的" and v["replace"]["position"] == 5
    assert _key("why-causal", 3) == "Only positions 5 to 11" and len(v["columns"]) == 13


def check_the_future_leaks_without_the_mask(client: TestClient) -> None:  # why-causal 4
    v = _view(client, _step("why-causal", 4).url)
    assert v["changed"] == [None, *range(12)] and v["unchanged"] == []
    assert _key("why-causal", 4) == "All of them, the BOS and 0 to 11"


def check_reading_the_answer_lowers_the_loss(client: TestClient) -> None:  # why-causal 5
    v = _view(client, _step("why-causal", 5).url)
    assert v["mean_loss"] < v["before_mean_loss"]
    assert _key("why-causal", 5) == "It falls"


def check_the_previous_token_head_of_layer_1(client: TestClient) -> None:  # why-causal 6
    v = _view(client, _step("why-causal", 6).url)
    layer1 = max(range(v["heads"]), key=lambda h: v["grid"][1][h]["value"])
    assert layer1 == 0 and v["ranked"][0]["layer"] == 16 and v["ranked"][0]["head"] == 0
    assert _key("why-causal", 6) == "Head 0"


def check_knocking_it_out_raises_the_loss(client: TestClient) -> None:  # why-causal 7
    v = _view(client, _step("why-causal", 7).url)
    assert v["switches"]["ablate"] == [[1, 0]] and v["mean_loss"] > v["before_mean_loss"]
    assert _key("why-causal", 7) == "It rises"


# Heads with jobs, on SmolLM2: the head views' JSON twins. The pruning curve on SmolLM2 takes tens of seconds even on
# the step's short text (some 540 runs of it), so its step opens the page without computing it: the points the answer
# names are each one forward pass (/predict knocks out the same heads, zeroed, as the curve does), and the curve's
# order, least harmful first, is checked on a tiny decoder, where it costs a fraction of a second.


def _heads_view(client: TestClient, slug_step: tuple[str, int], **extra: str) -> dict[str, Any]:
    path, _, query = _step(*slug_step).url.partition("?")
    params = parse_qs(query.split("#")[0])
    r = client.get(f"{path}.json", params={**params, **extra})
    assert r.status_code == 200, r.text
    return r.json()  # type: ignore[no-any-return]


def _head(entry: dict[str, Any]) -> tuple[int, int]:
    return entry["layer"], entry["head"]


def check_the_top_previous_token_head(client: TestClient) -> None:  # heads-jobs 1
    v = _heads_view(client, ("heads-jobs", 1))
    assert v["role"] == "previous_token" and (v["layers"], v["heads"]) == (30, 9)
    top = [(c["layer"], c["col"], c["value"]) for c in v["top"]]
    assert top[0][:2] == (16, 0) and round(top[0][2], 2) == 0.83
    assert top[1][:2] == (1, 2) and round(top[1][2], 2) == 0.72
    drawn = np.array(_heads_view(client, ("heads-jobs", 1), head="16.0")["weights"])
    assert all(int(np.argmax(drawn[i])) == i - 1 for i in range(1, len(drawn)))  # just left of the diagonal
    assert _key("heads-jobs", 1) == "Layer 16 · head 0"


def check_the_induction_head_reads_what_followed(client: TestClient) -> None:  # heads-jobs 2
    v = _heads_view(client, ("heads-jobs", 2))
    n = v["probe"]["n"]
    assert v["role"] == "induction" and n == 32 and v["offset"] == 31 and tuple(v["chosen"]) == (18, 6)
    w = np.array(v["weights"])
    second = range(n + 1, 2 * n + 1)
    assert sum(int(np.argmax(w[i])) == i - n + 1 for i in second) == 29
    roles = client.get("/api/v1/head_roles", params={"text": "The cat sat on the mat. The dog sat on the log."}).json()
    assert _head(roles["top"]["induction"][0]) == (18, 6) and round(roles["roles"]["induction"][18][6], 2) == 0.86
    assert roles["roles"]["duplicate_token"][18][6] < 0.01
    assert _key("heads-jobs", 2) == "The token after it, in the first copy"


def check_the_probe_loss_drops_on_the_second_copy(client: TestClient) -> None:  # heads-jobs 3
    loss = _heads_view(client, ("heads-jobs", 3))["probe_loss"]
    assert (round(loss["first"], 1), round(loss["second"], 1)) == (13.6, 3.6)
    assert _key("heads-jobs", 3) == "Far lower: the model copies"


def check_knocking_out_the_induction_heads(client: TestClient) -> None:  # heads-jobs 4
    v = _heads_view(client, ("heads-jobs", 4))
    gone = v["ablated"]
    assert sorted(map(tuple, gone["ablate"])) == [(17, 3), (17, 4), (17, 5), (18, 6), (18, 7)]
    after, before, first = gone["probe_loss"]["second"], v["probe_loss"]["second"], v["probe_loss"]["first"]
    assert round(after, 1) == 11.5 and (after - before) / (first - before) > 0.75  # most of the way back
    one = _heads_view(client, ("heads-jobs", 4), knock="1")["ablated"]
    assert one["ablate"] == [[18, 6]] and round(one["probe_loss"]["second"], 1) == 5.1
    assert _key("heads-jobs", 4) == "It rises most of the way back"


def check_the_first_heads_to_go_cost_almost_nothing(client: TestClient) -> None:  # heads-jobs 5
    import math

    url = _step("heads-jobs", 5).url
    assert "prune=" not in url and url.endswith("#prune")  # the step opens the page; the teacher asks for the curve
    text = parse_qs(urlsplit(url).query)["text"][0]
    plain = _view(client, f"/predict?text={text}")
    assert len(plain["columns"]) == 6 and round(plain["mean_loss"], 2) == 6.51
    alone = _view(client, f"/predict?text={text}&heads=2.0")
    assert round(alone["mean_loss"], 2) == 6.12 < round(alone["before_mean_loss"], 2)  # removing a head can help
    every = ",".join(f"{li}.{h}" for li in range(30) for h in range(9))
    bare = _view(client, f"/predict?text={text}&heads={every}")
    assert round(bare["mean_loss"], 1) == 14.5 and round(math.log(49_152), 1) == 10.8
    # the curve itself, on a tiny decoder: the heads go in the order of their single knock-outs, least harmful first,
    # so its first point is the smallest of them (the curve on the page is this document: tests/app/heads)
    import tempfile

    from tests.conftest import make_client
    from tests.own_models import build

    with tempfile.TemporaryDirectory() as tmp:
        path, _ = build("llama", Path(tmp) / "tiny", seed=6)
        with make_client(models=f"tiny={path}", pretrained=False) as tiny:
            doc = tiny.get("/api/v1/prune", params={"preset": "tiny", "text": "The cat sat on the mat."}).json()
    single = np.array(doc["single"])
    assert [single[li, h] for li, h in doc["order"]] == sorted(single.ravel().tolist())
    assert doc["mean_loss"][0] == doc["clean_loss"] and abs(doc["mean_loss"][1] - single.min()) < 1e-5
    assert _key("heads-jobs", 5) == "Almost nothing; it can even fall"


def check_where_the_answer_lives(client: TestClient) -> None:  # heads-jobs 6
    v = _view(client, _step("heads-jobs", 6).url)
    assert v["answer"]["token"] == " Paris" and v["wrong"]["token"] == " Rome" and v["kind_shown"] == "resid_pre"
    assert v["clean_tokens"][4] == " France" and v["corrupted_tokens"][4] == " Italy" and len(v["columns"]) == 6
    resid, attn, head = (np.array(v["grids"][k], dtype=float) for k in ("resid_pre", "attn_out", "head"))
    others = [0, 1, 2, 3]
    assert np.all(resid[:24, 4] > 0.95) and np.all(np.abs(resid[:24, [*others, 5]]) < 0.1)
    assert np.all(resid[24:, 5] > 0.95) and np.all(np.abs(resid[24:, [*others, 4]]) < 0.1)
    assert round(resid[0, 4], 2) == 1.0
    assert round(attn[23, 5], 2) == 0.94 and round(head[23, 4], 2) == 0.85
    assert np.unravel_index(np.argmax(head), head.shape) == (23, 4)
    assert _key("heads-jobs", 6) == "At France up to layer 23, then at “is”"


CHECKS = {
    ("five-stages", 2): check_query_meets_every_key,
    ("five-stages", 3): check_masked_weights_are_exactly_zero,
    ("five-stages", 4): check_rows_sum_to_one,
    ("five-stages", 5): check_output_mixes_values,
    ("mask-toggle", 1): check_causal_mask_keeps_the_diagonal,
    ("mask-toggle", 2): check_first_row_spreads_without_the_mask,
    ("row-one", 1): check_the_only_weight_of_one,
    ("row-one", 2): check_first_output_is_v0,
    ("scale", 1): check_unscaled_logits_are_8_times_larger,
    ("scale", 2): check_no_scaling_is_sharper,
    ("scale", 3): check_sqrt_dk_curve_is_flat,
    ("positions", 1): check_reversing_reverses_the_outputs,
    ("positions", 2): check_positions_change_x,
    ("rope", 1): check_rope_leaves_position_0,
    ("rope", 2): check_rope_depends_on_the_offset,
    ("padding-vs-causal", 1): check_padding_hides_columns,
    ("padding-vs-causal", 2): check_causal_is_a_triangle,
    ("padding-vs-causal", 3): check_the_leak_reads_the_first_document,
    ("kv-cache", 1): check_prefill_caches_keys_and_values,
    ("kv-cache", 2): check_a_decode_step_has_one_query,
    ("kv-cache", 3): check_gqa_cache_is_a_quarter,
    ("why-causal", 1): check_bos_predicts_the_first_piece,
    ("why-causal", 2): check_a_loss_mask_moves_only_the_mean,
    ("why-causal", 3): check_the_leakage_proof,
    ("why-causal", 4): check_the_future_leaks_without_the_mask,
    ("why-causal", 5): check_reading_the_answer_lowers_the_loss,
    ("why-causal", 6): check_the_previous_token_head_of_layer_1,
    ("why-causal", 7): check_knocking_it_out_raises_the_loss,
    ("heads-jobs", 1): check_the_top_previous_token_head,
    ("heads-jobs", 2): check_the_induction_head_reads_what_followed,
    ("heads-jobs", 3): check_the_probe_loss_drops_on_the_second_copy,
    ("heads-jobs", 4): check_knocking_out_the_induction_heads,
    ("heads-jobs", 5): check_the_first_heads_to_go_cost_almost_nothing,
    ("heads-jobs", 6): check_where_the_answer_lives,
}
NOT_NUMERIC = {("five-stages", 1)}  # which matrices q comes from: a formula, not a number
# "Train your own GPT" (checked against the class's run in test_train_lesson.py), "Why the same prompt gives
# different answers" (against SmolLM2's samples in tests/app/generate/test_sampling_lesson.py) and "Is a big
# attention weight an important one?" (test_attribution_lesson.py): checked in their files.
TRAINED = TRAIN_LESSON | SAMPLING_LESSON | ATTRIBUTION_LESSON | CROSS_LESSON  # and /cross's: test_cross_lesson.py


def test_every_poll_key_is_checked_against_the_lab_or_is_not_about_numbers():
    assert set(CHECKS) | NOT_NUMERIC | TRAINED == set(_steps()) and not set(CHECKS) & (NOT_NUMERIC | TRAINED)


@pytest.mark.parametrize("where", list(CHECKS), ids=lambda w: f"{w[0]}-{w[1]}")
def test_the_poll_key_agrees_with_the_numbers(client, where):
    CHECKS[where](client)


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_step_on_any_page_keeps_its_lesson_in_view(client, lang):
    """A step on a page other than the lab (/predict, /model, /decode) shows the lesson's panel above it, with the
    data the teacher's remote reads (data-lesson, data-step, the next step's link); hints off leave the answer out."""
    from app.web import lessons

    for slug in ("why-causal", "kv-cache", "heads-jobs"):
        lesson = lessons.BY_SLUG[slug]
        for k in range(1, len(lesson.steps) + 1):
            url = lessons.step_url(lesson, k, lang)
            page = BeautifulSoup(client.get(url).text, "html.parser")
            panel = page.select_one(f'.lesson-panel[data-lesson="{slug}"][data-step="{k}"]')
            assert panel is not None, url
            assert lesson.steps[k - 1].text(lang)[1] in panel.get_text()
            nxt = panel.select_one('a[data-lesson-step="next"]')
            assert (nxt is not None) == (k < len(lesson.steps))
            if nxt is not None:
                assert nxt["href"] == lessons.step_url(lesson, k + 1, lang)
        hidden = BeautifulSoup(client.get(lessons.step_url(lesson, 1, lang, {"hints": "off"})).text, "html.parser")
        assert hidden.select_one("[data-hints-off]") is not None
        assert lesson.steps[0].text(lang)[2] not in hidden.get_text()


@pytest.mark.parametrize("slug", ["heads-jobs", "train-your-own"])
def test_a_class_can_follow_every_step_of_a_lesson(client, slug):
    """Every step's page (/heads, /patch, /train …) is a page a room can be on: a teacher starts a class on a step
    and the room takes it (its own view check)."""
    from app.web.lessons import BY_SLUG
    from app.web.share import FOLLOWABLE

    lesson = BY_SLUG[slug]
    for step in lesson.steps:
        assert FOLLOWABLE.fullmatch(urlsplit(step.url).path), step.url
    first = urlsplit(lesson.steps[0].url)
    r = client.post("/api/v1/rooms", json={"page": first.path, "query": f"{first.query}&lesson={slug}&lesson_step=1"})
    assert r.status_code == 201, r.text
    assert r.json()["page"] == first.path


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_heads_lesson_on_the_projector(client, lang):
    """Presenter mode: the patching step's 30 layers are two halves side by side, sized by the page to the screen
    (so layers 23 and 24 are both in view), every cell once; each step's #anchor is on its page."""
    from app.web.lessons import BY_SLUG, step_url

    lesson = BY_SLUG["heads-jobs"]
    for k, step in enumerate(lesson.steps, start=1):
        url = step_url(lesson, k, lang, {"present": "1"})
        page = BeautifulSoup(client.get(url.split("#")[0]).text, "html.parser")
        anchor = step.url.partition("#")[2]
        assert not anchor or page.select_one(f"#{anchor}") is not None, url
    patch = BeautifulSoup(client.get(step_url(lesson, 6, lang, {"present": "1"})).text, "html.parser")
    halves = patch.select("div.model-grids.split[data-fit-grids] table.patch-grid")
    assert [[th.text for th in t.select("tbody th")] for t in halves] == [
        [str(i) for i in range(15)], [str(i) for i in range(15, 30)]
    ]  # fmt: skip
    assert len(patch.select("table.patch-grid td")) == 30 * 6


def test_a_step_with_a_place_on_its_page_names_it_on_its_panel(client):
    """A step whose link has a #fragment (/demos#scaling) names that place on its panel (data-anchor, which lab.js
    scrolls to when the page was reached without it: a room's view has no fragment); the others name none (#32)."""
    from app.web import lessons

    placed = [(lesson, k) for lesson in LESSONS for k, step in enumerate(lesson.steps, 1) if "#" in step.url]
    assert len(placed) >= 3
    for lesson, k in [*placed, (lessons.BY_SLUG["mask-toggle"], 1), (lessons.BY_SLUG["why-causal"], 1)]:
        url = lessons.step_url(lesson, k, "en").partition("#")[0]
        panel = BeautifulSoup(client.get(url).text, "html.parser").select_one(".lesson-panel")
        assert panel is not None, url
        assert panel.get("data-anchor") == (urlsplit(lesson.steps[k - 1].url).fragment or None), url


@pytest.mark.parametrize("lesson", LESSONS, ids=lambda le: le.slug)
def test_a_lessons_choice_polls_do_not_all_keep_their_answer_in_one_place(lesson):
    """Students who learn that the answer is the first button tap the first button: a lesson with three or more
    choice polls (app/web/lessons.json) puts their answers at more than one option index."""
    from app.web.lessons import ChoicePoll

    answers = [s.poll.answer for s in lesson.steps if isinstance(s.poll, ChoicePoll)]
    assert len(answers) < 3 or len(set(answers)) > 1, (lesson.slug, answers)
