"""Heads with jobs (issue #33), the engine: head-role scores, the induction probe's loss, the pruning curve and
activation patching, each held to 1e-4 against transformers on tiny random models built here (eager attention's
own weights; forward hooks on o_proj / c_proj, on the MLPs and on the layers' inputs), and on SmolLM2 the
induction heads' proof: the probe's second copy is predicted, and knocking its top induction heads out undoes it."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from engine import heads as E
from engine import predict as P
from engine.models import load
from tests.own_models import build

pytest.importorskip("transformers")

TEXT = "The cat sat on the mat. The dog sat on the log."
ARCHS = ("gpt2", "llama", "qwen2")


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Any, Any]]:
    root = tmp_path_factory.mktemp("heads")
    out = {}
    for i, arch in enumerate(ARCHS):
        path, ref = build(arch, root / f"tiny-{arch}", seed=40 + i)
        out[arch] = (load(path), ref)
    return out


def blocks(ref: Any) -> list[Any]:
    return list(ref.transformer.h) if hasattr(ref, "transformer") else list(ref.model.layers)


def out_proj(block: Any) -> Any:
    return block.attn.c_proj if hasattr(block, "attn") else block.self_attn.o_proj


def hooked(ref: Any, ids: list[int], hooks: list[tuple[Any, str, Any]] = (), **kw: Any) -> Any:  # type: ignore[assignment]
    """A forward pass of `ref` with the hooks (module, 'pre' | 'post', fn) on, then removed."""
    handles = []
    for module, kind, fn in hooks:
        if kind == "pre":
            handles.append(module.register_forward_pre_hook(fn, with_kwargs=True))
        else:
            handles.append(module.register_forward_hook(fn))
    try:
        with torch.no_grad():
            return ref(torch.tensor([ids]), **kw)
    finally:
        for h in handles:
            h.remove()


def zero_heads(ref: Any, heads: set[tuple[int, int]], dk: int, mean: bool = False) -> list[tuple[Any, str, Any]]:
    """Pre-hooks on W_O that knock each chosen head's slice out (zeros, or its running mean over positions)."""
    out = []
    for i, block in enumerate(blocks(ref)):
        chosen = [h for li, h in heads if li == i]
        if not chosen:
            continue

        def fn(module: Any, args: tuple, kwargs: dict, chosen: list[int] = chosen) -> tuple:
            x = args[0].clone()
            for h in chosen:
                part = x[..., h * dk : (h + 1) * dk]
                if mean:
                    x[..., h * dk : (h + 1) * dk] = part.cumsum(1) / torch.arange(1, x.shape[1] + 1).view(1, -1, 1)
                else:
                    x[..., h * dk : (h + 1) * dk] = 0
            return (x, *args[1:]), kwargs

        out.append((out_proj(block), "pre", fn))
    return out


def hf_mean_loss(ref: Any, inputs: list[int], targets: list[int], hooks: list[Any] = ()) -> float:  # type: ignore[assignment]
    logp = torch.log_softmax(hooked(ref, inputs, hooks).logits[0], -1)
    return float(-logp.gather(1, torch.tensor(targets).unsqueeze(1)).double().mean())


# -- head roles ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("arch", ARCHS)
def test_role_scores_and_the_probe_loss_equal_transformers_eager_weights(built, arch: str) -> None:
    model, ref = built[arch]
    ids = model.tokenize(TEXT)
    n = 16 if arch == "gpt2" else 32  # GPT-2's tiny model has 64 positions
    roles = E.head_roles(model, ids, n=n, seed=3)
    probe = list(roles.probe)
    assert probe == E.probe_ids(model, n, 3) and len(probe) == 2 * n + 1 and probe[0] == model.bos_id
    r = probe[1 : n + 1]
    assert probe[n + 1 :] == r and len(set(r)) == n and model.bos_id not in r and all(t < 300 for t in r)
    assert E.probe_ids(model, n, 4) != probe  # the seed draws
    text = hooked(ref, ids, output_attentions=True).attentions
    on_probe = hooked(ref, probe, output_attentions=True).attentions
    for li in range(model.arch.n_layer):
        a, b = text[li][0].double(), on_probe[li][0].double()
        i = torch.arange(1, len(ids))
        prev, sink = a[:, i, i - 1].mean(1), a[:, i, 0].mean(1)
        j = torch.arange(1 + n, 1 + 2 * n)
        dup, ind = b[:, j, j - n].mean(1), b[:, j, j - n + 1].mean(1)
        for name, theirs in (("previous_token", prev), ("sink", sink), ("duplicate_token", dup), ("induction", ind)):
            torch.testing.assert_close(roles.scores[name][li], theirs, rtol=0, atol=1e-4)
    logp = torch.log_softmax(hooked(ref, probe).logits[0], -1)
    losses = -logp[:-1].gather(1, torch.tensor(probe[1:]).unsqueeze(1)).squeeze(1).double()
    torch.testing.assert_close(torch.tensor(roles.loss.positions, dtype=torch.float64), losses, rtol=0, atol=1e-4)
    assert abs(roles.loss.first - float(losses[:n].mean())) < 1e-4
    assert abs(roles.loss.second - float(losses[n : 2 * n].mean())) < 1e-4
    top = roles.top("induction", 3)
    assert [s for *_, s in top] == sorted((s for *_, s in top), reverse=True)
    assert top[0][2] == float(roles.scores["induction"].max())


@pytest.mark.parametrize("mean", [False, True])
def test_the_knocked_out_probe_loss_equals_a_transformers_hook(built, mean: bool) -> None:
    model, ref = built["llama"]
    ids = model.tokenize(TEXT)
    heads = {(1, 0), (2, 3)}
    roles = E.head_roles(model, ids, n=24, seed=1, iv=P.Intervention(ablate=tuple(sorted(heads)), mean=mean))
    assert roles.ablated_loss is not None
    probe = list(roles.probe)
    logp = torch.log_softmax(hooked(ref, probe, zero_heads(ref, heads, model.arch.d_k, mean)).logits[0], -1)
    losses = -logp[:-1].gather(1, torch.tensor(probe[1:]).unsqueeze(1)).squeeze(1).double()
    assert abs(roles.ablated_loss.second - float(losses[24:48].mean())) < 1e-4
    assert abs(roles.ablated_loss.second - roles.loss.second) > 1e-3  # the heads mattered


@pytest.mark.parametrize("mean", [False, True])
def test_heads_knocked_out_from_the_plain_roles_run_one_pass_and_give_the_same_roles(built, mean, monkeypatch) -> None:
    """The scores and the plain loss never depend on the heads knocked out: given the plain roles, only the knocked
    pass runs (one forward pass, not three), and the roles are those computed whole."""
    model, _ = built["llama"]
    ids = model.tokenize(TEXT)
    iv = P.Intervention(ablate=((1, 0), (2, 3)), mean=mean)
    whole = E.head_roles(model, ids, n=24, seed=1, iv=iv)
    plain = E.head_roles(model, ids, n=24, seed=1)
    passes = []
    diagonals = E._diagonals
    monkeypatch.setattr(E, "_diagonals", lambda *a, **k: passes.append(1) or diagonals(*a, **k))
    knocked = E.head_roles(model, ids, n=24, seed=1, iv=iv, plain=plain)
    assert len(passes) == 1
    assert knocked.ablated_loss == whole.ablated_loss and knocked.loss == whole.loss
    assert all(torch.equal(knocked.scores[r], whole.scores[r]) for r in E.ROLES)
    assert E.head_roles(model, ids, n=24, seed=1, plain=plain) == plain
    with pytest.raises(ValueError, match="plain"):
        E.head_roles(model, ids, n=24, seed=2, iv=iv, plain=plain)


def test_a_layers_weights_are_the_eager_attentions(built) -> None:
    model, ref = built["qwen2"]
    probe = E.probe_ids(model, 8, 0)
    theirs = hooked(ref, probe, output_attentions=True).attentions[1][0]
    torch.testing.assert_close(E.layer_weights(model, probe, 1), theirs, rtol=0, atol=1e-5)


# -- the pruning curve -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("arch", "mean"), [("llama", False), ("gpt2", True), ("qwen2", False)])
def test_the_pruning_curve_equals_transformers_with_those_heads_zeroed(built, arch: str, mean: bool) -> None:
    model, ref = built[arch]
    seq = P.sequence(model, model.tokenize(TEXT), bos=True, eos=True)
    inputs, targets = seq[:-1], seq[1:]
    old = E.ROWS
    E.ROWS = 3 * len(inputs)  # several batches of copies, as a long text would run
    try:
        pr = E.prune(model, inputs, targets, mean=mean)
    finally:
        E.ROWS = old
    every = model.arch.n_layer * model.arch.n_heads
    dk = model.arch.d_k
    assert len(pr.order) == every and len(set(pr.order)) == every and len(pr.mean_loss) == every + 1
    assert abs(pr.clean - hf_mean_loss(ref, inputs, targets)) < 1e-4
    rises = [float(pr.single[c]) for c in pr.order]
    assert rises == sorted(rises)
    for li, hi in pr.order:
        theirs = hf_mean_loss(ref, inputs, targets, zero_heads(ref, {(li, hi)}, dk, mean))
        assert abs(float(pr.single[li, hi]) - theirs) < 1e-4
    for k in range(every + 1):
        theirs = hf_mean_loss(ref, inputs, targets, zero_heads(ref, set(pr.order[:k]), dk, mean))
        assert abs(pr.mean_loss[k] - theirs) < 1e-4, k
    k = pr.can_go(0.05)
    assert all(v <= pr.clean * 1.05 for v in pr.mean_loss[: k + 1])
    assert k == every or pr.mean_loss[k + 1] > pr.clean * 1.05


def test_a_loss_mask_scores_only_the_later_positions(built) -> None:
    model, ref = built["llama"]
    seq = P.sequence(model, model.tokenize(TEXT), bos=True, eos=True)
    pr = E.prune(model, seq[:-1], seq[1:], loss_from=5)
    logp = torch.log_softmax(hooked(ref, seq[:-1]).logits[0], -1)
    theirs = -logp[5:].gather(1, torch.tensor(seq[6:]).unsqueeze(1)).double().mean()
    assert abs(pr.clean - float(theirs)) < 1e-4


def test_the_pruning_curve_and_patching_report_progress_layer_by_layer(built) -> None:
    """What the pages' progress bars read: a fixed total, steps that never go back, the last one the total."""
    model, _ = built["llama"]
    seq = P.sequence(model, model.tokenize(TEXT), bos=True, eos=True)
    clean, corrupted = model.tokenize("The cat sat on the mat."), model.tokenize("The dog sat on the log.")
    old = E.ROWS
    E.ROWS = 3 * len(seq)  # several batches
    try:
        for run in (lambda p: E.prune(model, seq[:-1], seq[1:], progress=p),
                    lambda p: E.patch(model, clean, corrupted, progress=p)):  # fmt: skip
            seen: list[tuple[int, int]] = []
            run(lambda done, total, seen=seen: seen.append((done, total)))
            totals = {t for _, t in seen}
            done = [d for d, _ in seen]
            assert len(totals) == 1 and done == sorted(done) and done[-1] == seen[-1][1]
            assert len(seen) > model.arch.n_layer  # a step per layer, not one at the end
    finally:
        E.ROWS = old


# -- activation patching -----------------------------------------------------------------------------------------


def capture(ref: Any, ids: list[int]) -> dict[str, list[torch.Tensor]]:
    """The clean run's layer inputs, W_O inputs and outputs, and MLP outputs, by forward hooks."""
    got: dict[str, list[torch.Tensor]] = {"resid": [], "heads": [], "attn": [], "mlp": []}
    hooks: list[tuple[Any, str, Any]] = []
    for block in blocks(ref):

        def layer_in(m: Any, args: tuple, kwargs: dict) -> None:
            got["resid"].append((args[0] if args else kwargs["hidden_states"]).clone())

        def wo_in(m: Any, args: tuple, kwargs: dict) -> None:
            got["heads"].append(args[0].clone())

        hooks += [(block, "pre", layer_in), (out_proj(block), "pre", wo_in)]
        hooks.append((out_proj(block), "post", lambda m, a, o: got["attn"].append(o.clone())))
        hooks.append((block.mlp, "post", lambda m, a, o: got["mlp"].append(o.clone())))
    hooked(ref, ids, hooks)
    return got


def replace_at(where: int, value: torch.Tensor) -> Any:
    def fn(m: Any, a: Any, o: torch.Tensor) -> torch.Tensor:
        o = o.clone()
        o[:, where] = value[:, where]
        return o

    return fn


def layer_input(where: int, value: torch.Tensor) -> Any:
    def fn(m: Any, args: tuple, kwargs: dict) -> tuple:
        if args:
            x = args[0].clone()
            x[:, where] = value[:, where]
            return (x, *args[1:]), kwargs
        x = kwargs["hidden_states"].clone()
        x[:, where] = value[:, where]
        return args, {**kwargs, "hidden_states": x}

    return fn


def head_input(h: int, dk: int, value: torch.Tensor) -> Any:
    def fn(m: Any, args: tuple, kwargs: dict) -> tuple:
        x = args[0].clone()
        x[..., h * dk : (h + 1) * dk] = value[..., h * dk : (h + 1) * dk]
        return (x, *args[1:]), kwargs

    return fn


@pytest.mark.parametrize(("arch", "metric"), [("llama", "logit_diff"), ("gpt2", "prob"), ("qwen2", "logit_diff")])
def test_every_patched_cell_equals_transformers_with_that_activation_replaced(built, arch: str, metric: str) -> None:
    model, ref = built[arch]
    clean, corrupted = model.tokenize("The cat sat on the mat."), model.tokenize("The dog sat on the log.")
    assert len(clean) == len(corrupted)
    n, dk = len(clean), model.arch.d_k
    old = E.ROWS
    E.ROWS = 5 * n  # several batches per layer
    try:
        pt = E.patch(model, clean, corrupted, metric=metric)
    finally:
        E.ROWS = old
    a = torch.log_softmax(hooked(ref, clean).logits[0, -1], -1)
    b = torch.log_softmax(hooked(ref, corrupted).logits[0, -1], -1)
    assert pt.answer == int(a.argmax())
    if metric == "logit_diff":
        assert pt.wrong == next(t for t in b.topk(2).indices.tolist() if t != pt.answer)

    def metric_of(out: Any) -> float:
        logits = out.logits[0, -1].double()
        if metric == "prob":
            return float(torch.softmax(logits, -1)[pt.answer])
        return float(logits[pt.answer] - logits[pt.wrong])

    assert abs(pt.clean_value - metric_of(hooked(ref, clean))) < 1e-4
    assert abs(pt.corrupted_value - metric_of(hooked(ref, corrupted))) < 1e-4
    got = capture(ref, clean)
    span = pt.clean_value - pt.corrupted_value
    for li, block in enumerate(blocks(ref)):
        for p in range(n):
            cells = {
                "resid_pre": (block, "pre", layer_input(p, got["resid"][li])),
                "attn_out": (out_proj(block), "post", replace_at(p, got["attn"][li])),
                "mlp_out": (block.mlp, "post", replace_at(p, got["mlp"][li])),
            }
            for kind, hook in cells.items():
                theirs = metric_of(hooked(ref, corrupted, [hook]))
                assert abs(float(pt.values[kind][li, p]) - theirs) < 1e-4, (kind, li, p)
                effect = (theirs - pt.corrupted_value) / span
                assert abs(float(pt.grids[kind][li, p]) - effect) < 1e-4 * max(1.0, 1 / abs(span))
        for h in range(model.arch.n_heads):
            theirs = metric_of(hooked(ref, corrupted, [(out_proj(block), "pre", head_input(h, dk, got["heads"][li]))]))
            assert abs(float(pt.values["head"][li, h]) - theirs) < 1e-4, ("head", li, h)
    # a token both prompts share has the same embedding: patching it in changes nothing
    same = [p for p in range(n) if clean[p] == corrupted[p]]
    assert same and all(abs(float(pt.grids["resid_pre"][0, p])) < 1e-6 for p in same)
    assert max(abs(float(pt.grids["resid_pre"][0, p])) for p in range(n) if p not in same) > 1e-2


def test_patching_refuses_prompts_of_different_lengths(built) -> None:
    model, _ = built["llama"]
    with pytest.raises(ValueError, match="corrupted"):
        E.patch(model, model.tokenize("The cat sat."), model.tokenize("The cat sat on the mat."))


@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_a_patched_logit_difference_reads_two_logits_not_the_vocabulary(built, arch: str, monkeypatch) -> None:
    """logit[answer] − logit[wrong] of every patched run from the two tokens' rows of the output projection: the
    whole vocabulary's logits were an eighth of /patch's time on SmolLM2 (40% at 5 tokens), and the same numbers."""
    model, _ = built[arch]
    clean, corrupted = model.tokenize("The cat sat on the mat."), model.tokenize("The dog sat on the log.")
    expected = E.patch(model, clean, corrupted)
    whole: list[int] = []  # rows of whole-vocabulary logits computed
    unembed = model.unembed
    monkeypatch.setattr(model, "unembed", lambda x, out=None: whole.append(x.shape[0]) or unembed(x, out))
    pt = E.patch(model, clean, corrupted, answer=expected.answer, wrong=expected.wrong)
    assert whole == []
    for kind, values in expected.values.items():
        assert torch.allclose(pt.values[kind], values, rtol=0, atol=1e-5), kind
    assert abs(pt.clean_value - expected.clean_value) < 1e-5


# -- SmolLM2 ----------------------------------------------------------------------------------------------------


def test_smollm2_copies_the_probe_and_its_induction_heads_do_it(smollm2) -> None:
    ids = smollm2.tokenize("The quick brown fox jumps over the lazy dog. " * 2)
    roles = E.head_roles(smollm2, ids, n=32, seed=0)
    assert roles.loss.first > 10 and roles.loss.second < roles.loss.first / 3  # random tokens, then copied
    top = roles.top("induction", 9)
    assert top[0][2] > 0.3
    knocked = E.head_roles(smollm2, ids, n=32, seed=0, iv=P.Intervention(ablate=tuple((li, h) for li, h, _ in top)))
    assert knocked.ablated_loss is not None and knocked.ablated_loss.second > roles.loss.second + 1
    prev = roles.top("previous_token", 1)[0]
    assert prev[2] > 0.5


def test_smollm2_roles_and_probe_loss_equal_transformers(smollm2, llama) -> None:
    ids = smollm2.tokenize("The cat sat on the mat. The dog sat on the log.")
    roles = E.head_roles(smollm2, ids, n=16, seed=2)
    probe, n = list(roles.probe), 16
    text = hooked(llama, ids, output_attentions=True).attentions
    out = hooked(llama, probe, output_attentions=True)
    i, j = torch.arange(1, len(ids)), torch.arange(1 + n, 1 + 2 * n)
    for li in range(smollm2.arch.n_layer):
        a, b = text[li][0].double(), out.attentions[li][0].double()
        torch.testing.assert_close(roles.scores["previous_token"][li], a[:, i, i - 1].mean(1), rtol=0, atol=1e-4)
        torch.testing.assert_close(roles.scores["sink"][li], a[:, i, 0].mean(1), rtol=0, atol=1e-4)
        torch.testing.assert_close(roles.scores["induction"][li], b[:, j, j - n + 1].mean(1), rtol=0, atol=1e-4)
        torch.testing.assert_close(roles.scores["duplicate_token"][li], b[:, j, j - n].mean(1), rtol=0, atol=1e-4)
    logp = torch.log_softmax(out.logits[0].double(), -1)
    losses = -logp[:-1].gather(1, torch.tensor(probe[1:]).unsqueeze(1)).squeeze(1)
    assert abs(roles.loss.second - float(losses[n : 2 * n].mean())) < 1e-4
