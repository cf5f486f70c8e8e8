"""How the next token is chosen (engine/sampling.py): every filter's distribution against transformers' logits
processors on the same logits, and the sampled tokens against transformers' `generate(do_sample=True)` with the same
seed, on SmolLM2 and on tiny random models of two families; branches and the sequence's log-probability."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from engine.generate import generate
from engine.models import load
from engine.sampling import Sampling, apply, choose, distributions
from tests.own_models import build

tf = pytest.importorskip("transformers")
from transformers.generation import logits_process as lp  # noqa: E402

SETTINGS = [
    Sampling(True, temperature=0.7),
    Sampling(True, top_k=7),
    Sampling(True, top_p=0.9),
    Sampling(True, min_p=0.05),
    Sampling(True, temperature=1.3, top_k=40, top_p=0.8, min_p=0.02),
    Sampling(True, temperature=0.01),
]


def warpers(s: Sampling) -> list[tuple[str, object]]:
    """transformers' own warpers for the same settings, in the order `generate` builds them."""
    out: list[tuple[str, object]] = []
    if s.temperature != 1.0:
        out.append(("temperature", lp.TemperatureLogitsWarper(s.temperature)))
    if s.top_k:
        out.append(("top_k", lp.TopKLogitsWarper(s.top_k)))
    if s.top_p < 1.0:
        out.append(("top_p", lp.TopPLogitsWarper(s.top_p)))
    if s.min_p > 0:
        out.append(("min_p", lp.MinPLogitsWarper(s.min_p)))
    return out


@pytest.mark.parametrize("s", SETTINGS, ids=str)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_each_filter_equals_transformers_logits_processor(s: Sampling, seed: int) -> None:
    logits = torch.randn(1, 500, generator=torch.Generator().manual_seed(seed)) * 3
    ours, theirs = logits.clone(), logits.clone()
    assert [n for n, _ in warpers(s)] == list(s.active())
    for name, warper in warpers(s):
        ours = apply(name, ours, s)
        theirs = warper(None, theirs)  # type: ignore[operator]
        assert torch.equal(torch.isinf(ours), torch.isinf(theirs)), name  # the same tokens survive
        torch.testing.assert_close(ours.softmax(-1), theirs.softmax(-1), rtol=0, atol=1e-6)


@pytest.mark.parametrize("s", SETTINGS, ids=str)
def test_the_whole_distributions_are_transformers_and_hold_the_stages(s: Sampling) -> None:
    """`distributions` (the .npz's): each filter's whole distribution equals transformers' warpers applied in turn,
    and its most likely tokens are the ones `choose` keeps for the page."""
    logits = torch.randn(500, generator=torch.Generator().manual_seed(5)) * 3
    names, probs, kept = distributions(logits, s)
    assert names == ("logits", *s.active()) and probs.shape == (len(names), 500) and kept[0] == 500
    theirs = logits.reshape(1, -1).clone()
    torch.testing.assert_close(probs[0], torch.softmax(logits.double(), -1), rtol=0, atol=1e-12)
    for row, n, (_, warper) in zip(probs[1:], kept[1:], warpers(s), strict=True):
        theirs = warper(None, theirs)  # type: ignore[operator]
        torch.testing.assert_close(row.float(), theirs.softmax(-1)[0], rtol=0, atol=1e-6)
        assert n == int(torch.isfinite(theirs).sum())
    c = choose(logits, s, torch.Generator().manual_seed(0))
    for st, row, n in zip(c.stages, probs, kept, strict=True):
        assert st.kept == n
        torch.testing.assert_close(torch.tensor(st.probs, dtype=torch.float64), row[list(c.ids)], rtol=0, atol=1e-12)


def test_the_stages_say_what_each_filter_keeps() -> None:
    logits = torch.tensor([4.0, 3.0, 2.0, 1.0, 0.0, -1.0])
    c = choose(logits, Sampling(True, top_k=4, top_p=0.9, min_p=0.2, seed=3), torch.Generator().manual_seed(3))
    assert [st.name for st in c.stages] == ["logits", "top_k", "top_p", "min_p"]
    assert c.ids == (0, 1, 2, 3, 4, 5)
    raw = torch.softmax(logits.double(), -1)
    assert c.stages[0].kept == 6 and math.isclose(sum(c.stages[0].probs), 1.0)
    assert c.stages[1].kept == 4 and c.stages[1].probs[4:] == (0.0, 0.0)
    top4 = raw[:4] / raw[:4].sum()
    assert all(math.isclose(a, float(b), rel_tol=1e-9) for a, b in zip(c.stages[1].probs, top4, strict=False))
    # top-p 0.9 over the four: 0.644 + 0.237 = 0.881 < 0.9, so the third stays, the fourth (0.032) goes
    assert c.stages[2].kept == 3
    # min-p 0.2 × the top's probability: the third (0.090 of the three) is under 0.2 × 0.665 = 0.133 and goes
    assert c.stages[3].kept == 2
    assert c.token_id in (0, 1) and math.isclose(c.p, c.stages[3].probs[c.token_id])
    assert math.isclose(c.logp, math.log(c.p))


def test_greedy_takes_the_argmax_and_draws_nothing() -> None:
    g = torch.Generator().manual_seed(0)
    before = g.get_state()
    c = choose(torch.tensor([0.1, 2.0, 1.0]), Sampling(), g)
    assert c.token_id == 1 and [st.name for st in c.stages] == ["logits"]
    assert torch.equal(g.get_state(), before)


@pytest.mark.parametrize("bad", [{"temperature": 0}, {"top_k": -1}, {"top_p": 0}, {"top_p": 1.5}, {"min_p": 2}])
def test_settings_out_of_range_are_refused(bad: dict[str, float]) -> None:
    with pytest.raises(ValueError, match=next(iter(bad))):
        Sampling(True, **bad)  # type: ignore[arg-type]


def transformers_tokens(reference, ids: list[int], s: Sampling, n: int) -> list[int]:  # type: ignore[no-untyped-def]
    extra = {"min_p": s.min_p} if s.min_p else {}
    torch.manual_seed(s.seed)
    with torch.no_grad():
        out = reference.generate(torch.tensor([ids]), max_new_tokens=n, do_sample=True, temperature=s.temperature,
                                 top_k=s.top_k, top_p=s.top_p, **extra)  # fmt: skip
    return out[0, len(ids) :].tolist()


def same_tokens(model, reference, text: str, s: Sampling, n: int = 12) -> None:  # type: ignore[no-untyped-def]
    ids = model.tokenize(text)
    ours = generate(model, tuple(ids), n, None, sampling=s)
    theirs = transformers_tokens(reference, ids, s, n)
    assert [st.token_id for st in ours.steps] == theirs[: len(ours.steps)], s
    assert len(ours.steps) == len(theirs)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[object, object]]:
    root: Path = tmp_path_factory.mktemp("sampling")
    out = {}
    for i, arch in enumerate(("gpt2", "qwen2")):
        path, reference = build(arch, root / f"tiny-{arch}", seed=20 + i)
        out[arch] = (load(path), reference)
    return out


@pytest.mark.parametrize("arch", ["gpt2", "qwen2"])
@pytest.mark.parametrize("s", SETTINGS[:5], ids=str)
def test_sampled_tokens_equal_transformers_generate_on_tiny_models(tiny, arch: str, s: Sampling) -> None:
    model, reference = tiny[arch]
    for seed in (0, 5):
        same_tokens(model, reference, "The cat sat on the mat.", Sampling(**{**s.__dict__, "seed": seed}), n=16)


@pytest.mark.parametrize("s", [Sampling(True, seed=1), Sampling(True, temperature=0.8, top_k=50, top_p=0.95, seed=2)],
                         ids=str)  # fmt: skip
def test_sampled_tokens_equal_transformers_generate_on_smollm2(smollm2, llama, s: Sampling) -> None:
    same_tokens(smollm2, llama, "Once upon a time, a small cat", s, n=10)


def test_a_branch_forces_its_token_and_keeps_what_came_before(tiny) -> None:
    model, _ = tiny["gpt2"]
    ids = tuple(model.tokenize("The cat sat"))
    s = Sampling(True, temperature=1.5, seed=4)
    first = generate(model, ids, 6, None, sampling=s)
    assert all(st.choice is not None and not st.forced for st in first.steps)
    surviving = [i for i in first.steps[2].choice.ids if i != first.steps[2].token_id]  # type: ignore[union-attr]
    b = generate(model, ids, 6, None, sampling=s, forced={2: surviving[0]})
    assert [st.token_id for st in b.steps[:2]] == [st.token_id for st in first.steps[:2]]  # same seed, same start
    assert b.steps[2].token_id == surviving[0] and b.steps[2].forced
    at = first.steps[2].choice.ids.index(surviving[0])  # type: ignore[union-attr]
    assert math.isclose(b.steps[2].choice.p, first.steps[2].choice.stages[-1].probs[at])  # type: ignore[union-attr]
    assert math.isclose(b.logprob, sum(st.choice.logp for st in b.steps))  # type: ignore[union-attr]
    greedy = generate(model, ids, 6, None)
    assert greedy.logprob <= 0 and all(st.choice.p > 0 for st in greedy.steps)  # type: ignore[union-attr]


def test_the_seeded_generator_is_the_global_one_seeded_alike() -> None:
    """A request's own generator draws what `torch.manual_seed(seed)` makes the global one draw (what transformers
    uses), without touching the global state another request may be using."""
    probs = torch.softmax(torch.randn(1, 1000), -1)
    torch.manual_seed(9)
    theirs = [int(torch.multinomial(probs, 1)[0, 0]) for _ in range(20)]
    g = Sampling(True, seed=9).generator()
    assert [int(torch.multinomial(probs, 1, generator=g)[0, 0]) for _ in range(20)] == theirs
