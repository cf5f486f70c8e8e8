"""How the next token is chosen (engine/sampling.py): every filter's distribution against transformers' logits
processors on the same logits, and the sampled tokens against transformers' `generate(do_sample=True)` with the same
seed, on SmolLM2 and on tiny random models of two families; branches and the sequence's log-probability; several
samples of one prompt continuing from one prefill, each what its own `generate` gives."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import pytest
import torch

import engine.generate as gen
import engine.sampling as sampling_module
from engine.generate import Generation, continuations, generate, prefill, rows_alike, samples
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


@pytest.mark.parametrize("temperature", [1e-38, 1e-45, 1e-300])
def test_a_temperature_that_overflows_float32_draws_the_top_token(temperature: float) -> None:
    """Logits over T past float32's range (|x| / T > 3.4e38) were ±inf, the softmax NaN and the draw a RuntimeError
    (a 500 on /api/v1/generate for temperature=1e-38; transformers fails alike): the limit T → 0 is the top token."""
    logits = torch.tensor([1.5, 3.25, -2.0, 0.5, 3.0])
    s = Sampling(True, temperature=temperature, top_k=3, top_p=0.5, min_p=0.1)
    c = choose(logits, s, s.generator())
    assert c.token_id == 1 and c.p == 1.0 and c.logp == 0.0
    assert [(st.name, st.kept) for st in c.stages] == [("logits", 5), ("temperature", 5), ("top_k", 3),
                                                       ("top_p", 1), ("min_p", 1)]  # fmt: skip
    assert all(st.probs[0] == 1.0 and sum(st.probs) == 1.0 for st in c.stages[1:])
    names, probs, kept = distributions(logits, s)
    assert names == ("logits", "temperature", "top_k", "top_p", "min_p") and not probs.isnan().any()
    assert probs[1:, 1].tolist() == [1.0] * 4 and kept.tolist() == [5, 5, 3, 1, 1]
    # a token a model masks (-inf) stays removed; a tie at the top splits evenly
    tied = apply("temperature", torch.tensor([[2.0, float("-inf"), 2.0, 1.0]]), Sampling(True, temperature=1e-40))
    assert torch.isinf(tied[0, 1]) and tied.softmax(-1)[0].tolist() == [0.5, 0.0, 0.5, 0.0]


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


# -- several samples from one prefill (engine.generate.samples, /generate/samples) ----------------------------------


def same_generation(shared: Generation, alone: Generation) -> None:
    """A sample continued from the shared prefill against the same sample's own `generate`: the same tokens, their
    probabilities (each filter's, the top five, the sequence's log-probability), attention and logits."""
    assert shared.token_ids == alone.token_ids, shared.sampling
    assert shared.sampling == alone.sampling and shared.stopped_at_eos == alone.stopped_at_eos
    assert shared.layer == alone.layer and shared.kv_bytes_per_token == alone.kv_bytes_per_token
    assert math.isclose(shared.logprob, alone.logprob, rel_tol=0, abs_tol=1e-5)  # −inf and −inf are close
    for a, b in zip(shared.steps, alone.steps, strict=True):
        assert (a.context, a.forced, a.top_ids) == (b.context, b.forced, b.top_ids)
        assert a.choice is not None and b.choice is not None and a.choice.ids == b.choice.ids
        torch.testing.assert_close(torch.tensor(a.top_probs), torch.tensor(b.top_probs), rtol=0, atol=1e-5)
        for x, y in zip(a.choice.stages, b.choice.stages, strict=True):
            assert (x.name, x.kept) == (y.name, y.kept)
            torch.testing.assert_close(torch.tensor(x.probs), torch.tensor(y.probs), rtol=0, atol=1e-5)
        for x, y in ((a.attention, b.attention), (a.logits, b.logits)):
            assert (x is None) == (y is None)
            if x is not None:
                torch.testing.assert_close(x, y, rtol=0, atol=1e-5)


def each_alone(model, ids: tuple[int, ...], n: int, layer: int, s: Sampling, count: int,  # type: ignore[no-untyped-def]
               forced: dict[int, int] | None = None, keep_logits: bool = False) -> list[Generation]:  # fmt: skip
    """What /generate/samples computed before the prompt was shared: one `generate` per sample, seed + i."""
    first = generate(model, ids, n, layer, sampling=s, forced=forced, keep_logits=keep_logits)
    return [first] + [generate(model, ids, n, None, sampling=replace(s, seed=s.seed + i), forced=forced)
                      for i in range(1, count)]  # fmt: skip


def prompts_run(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The lengths of the prompts run through the blocks from position 0 (each prefill), recorded."""
    runs: list[int] = []
    real = gen._run

    def counted(model, ids, start, *rest):  # type: ignore[no-untyped-def]
        if start == 0:
            runs.append(len(ids))
        return real(model, ids, start, *rest)

    monkeypatch.setattr(gen, "_run", counted)
    return runs


def seeds_drawn(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The seeds of the continuations drawn (each makes its own generator, `Sampling.generator`), recorded."""
    drawn: list[int] = []
    real = sampling_module.Sampling.generator

    def counted(self: Sampling) -> torch.Generator:
        drawn.append(self.seed)
        return real(self)

    monkeypatch.setattr(sampling_module.Sampling, "generator", counted)
    return drawn


SHARED = [Sampling(True, seed=3), Sampling(True, temperature=1.3, top_k=40, top_p=0.8, min_p=0.02, seed=11),
          Sampling(True, top_p=0.9, seed=0), Sampling(True, temperature=0.01, seed=7)]  # fmt: skip


@pytest.mark.parametrize("arch", ["gpt2", "qwen2"])
@pytest.mark.parametrize("s", SHARED, ids=str)
def test_samples_share_one_prefill_and_equal_their_own_generate(tiny, arch: str, s: Sampling,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    """GPT-2 (LayerNorm, learned positions, 4 heads) and Qwen2 (RoPE, 4 query heads sharing 2 K/V heads): 5 samples
    with seeds seed … seed + 4, the first keeping the last layer's attention and its logits."""
    model, _ = tiny[arch]
    ids = tuple(model.tokenize("The cat sat on the mat. The dog"))
    layer = model.info.n_layer - 1
    alone = each_alone(model, ids, 12, layer, s, 5, keep_logits=True)
    runs = prompts_run(monkeypatch)
    g = samples(model, ids, 12, layer, s, 5, keep_logits=True)
    assert runs == [len(ids)]  # the prompt went through the blocks once for all five
    shared = [g, *g.others]
    assert [d.sampling.seed for d in shared] == [s.seed + i for i in range(5)]
    assert all(st.attention is not None and st.logits is not None for st in g.steps)
    assert all(st.attention is None and st.logits is None for d in g.others for st in d.steps)
    for a, b in zip(shared, alone, strict=True):
        same_generation(a, b)
    assert len({d.token_ids for d in shared}) > 1 or s.temperature < 0.1  # the seeds draw different samples


@pytest.mark.parametrize("arch", ["gpt2", "qwen2"])
def test_a_branch_from_the_shared_prefill_forces_its_tokens_in_every_sample(tiny, arch: str) -> None:
    """A branch (tokens forced at steps 0 and 3, the second one a filter may remove: its probability 0, the sequence's
    log-probability −inf) drawn as 4 samples from one prefill, each its own `generate` with the same branch."""
    model, _ = tiny[arch]
    ids = tuple(model.tokenize("A small model"))
    s = Sampling(True, temperature=0.9, top_k=5, seed=2)
    last = generate(model, ids, 8, None).steps[3].choice.ids[-1]  # type: ignore[union-attr]
    forced = {0: ids[0], 3: last}
    g = samples(model, ids, 8, 1, s, 4, forced)
    for a, b in zip([g, *g.others], each_alone(model, ids, 8, 1, s, 4, forced), strict=True):
        same_generation(a, b)
        assert a.steps[0].forced and a.steps[0].token_id == ids[0] and a.steps[3].token_id == last
        assert a.logprob == -math.inf  # top-k 5 removed the forced twelfth most likely token


def test_one_sample_greedy_is_generate(tiny) -> None:
    """/generate's own generation (samples=1, greedy): `samples` gives exactly what `generate` gives, and a prefill
    kept at another layer, or for another prompt, is refused rather than used."""
    model, _ = tiny["qwen2"]
    ids = tuple(model.tokenize("猫坐在垫子上"))
    g = samples(model, ids, 10, 0, Sampling(), 1)
    assert g.others == ()
    same_generation(g, generate(model, ids, 10, 0))
    p = prefill(model, ids, 10, 0)
    with pytest.raises(ValueError, match="layer 0, not 1"):
        generate(model, ids, 10, 1, prefilled=p)
    with pytest.raises(ValueError, match="another prompt"):
        generate(model, ids[:-1], 10, 0, prefilled=p)
    with pytest.raises(ValueError, match="another prompt"):
        generate(model, ids, 9, 0, prefilled=p)
    same_generation(generate(model, ids, 10, 0, prefilled=p), generate(model, ids, 10, 0, prefilled=p))


def test_samples_on_smollm2_equal_their_own_generate(smollm2) -> None:
    """The real LLaMA (9 query heads sharing 3 K/V heads, RoPE): 3 samples of 4 tokens from one prefill."""
    ids = tuple(smollm2.tokenize("Once upon a time, a small cat"))
    s = Sampling(True, temperature=0.8, top_k=50, top_p=0.95, seed=2)
    g = samples(smollm2, ids, 4, 29, s, 3)
    for a, b in zip([g, *g.others], each_alone(smollm2, ids, 4, 29, s, 3), strict=True):
        same_generation(a, b)


def test_samples_take_a_first_continuation_already_computed(tiny, monkeypatch: pytest.MonkeyPatch) -> None:
    """/generate's step page computes the first sample (`samples(..., n=1)`) before its samples block asks for all
    n: given it, `samples` draws only the others, and the whole is what it computes alone; a first continuation of
    another setting is refused."""
    model, _ = tiny["qwen2"]
    ids = tuple(model.tokenize("The cat sat on the mat. The dog"))
    s = Sampling(True, temperature=1.2, top_p=0.9, seed=5)
    whole = samples(model, ids, 6, 1, s, 4)
    one = samples(model, ids, 6, 1, s, 1)
    drawn = seeds_drawn(monkeypatch)
    reused = samples(model, ids, 6, 1, s, 4, first=one)
    assert drawn == [6, 7, 8]  # seed 5's continuation was given
    assert reused.steps is one.steps
    for a, b in zip([reused, *reused.others], [whole, *whole.others], strict=True):
        same_generation(a, b)
    with pytest.raises(ValueError, match="another prompt, setting or layer"):
        samples(model, ids, 6, 1, replace(s, seed=6), 4, first=one)
    with pytest.raises(ValueError, match="another prompt, setting or layer"):
        samples(model, ids, 6, 0, s, 4, first=one)


# -- the extra samples advance together (engine.generate.continuations): one forward a step for several -----------


def same_to_the_bit(together: Generation, alone: Generation) -> None:
    """Not close: equal. Every step's logits (torch.equal), so the same tokens, probabilities and draws."""
    assert together.token_ids == alone.token_ids and together.stopped_at_eos == alone.stopped_at_eos
    assert together.logprob == alone.logprob or (math.isinf(together.logprob) and math.isinf(alone.logprob))
    for a, b in zip(together.steps, alone.steps, strict=True):
        assert a.logits is not None and b.logits is not None and torch.equal(a.logits, b.logits)
        assert (a.top_ids, a.top_probs, a.choice, a.context, a.forced) == (b.top_ids, b.top_probs, b.choice,
                                                                           b.context, b.forced)  # fmt: skip


@pytest.mark.parametrize("arch", ["gpt2", "qwen2"])
@pytest.mark.parametrize("s", [*SHARED, Sampling()], ids=str)
def test_continuations_together_equal_each_alone_to_the_bit(tiny, arch: str, s: Sampling) -> None:
    """7 continuations of one prefill, several rows a forward, against each one's own `generate` from the same
    prefill: the same logits at every step to the last bit (float32 sums rounded alike), for 3 × 7 seeds; some
    stop early (the end-of-text token), and the others go on together."""
    model, _ = tiny[arch]
    for text, base in (("The cat sat on the mat. The dog", 0), ("猫坐在垫子上", 7), ("A", 14)):
        ids = tuple(model.tokenize(text))
        shared = prefill(model, ids, 14, None)
        drawn = [replace(s, seed=s.seed + base + i) for i in range(7)]
        together = continuations(model, shared, drawn, keep_logits=True)
        assert [g.sampling for g in together] == drawn
        for g, d in zip(together, drawn, strict=True):
            same_to_the_bit(g, generate(model, ids, 14, None, sampling=d, keep_logits=True, prefilled=shared))


def test_each_step_runs_the_unfinished_continuations_as_rows_of_few_forwards(tiny, monkeypatch: pytest.MonkeyPatch
                                                                            ) -> None:  # fmt: skip
    """The extra samples of /generate/samples advance together: each step runs its unfinished continuations as the
    rows of ⌈unfinished / rows_alike⌉ forwards (one sample a forward before), and no forward carries more rows than
    `rows_alike` measured to give every row its own numbers."""
    model, _ = tiny["gpt2"]
    rows = rows_alike(model)
    ids = tuple(model.tokenize("The cat sat on the mat. The dog"))
    s = Sampling(True, temperature=0.7, seed=1)
    shared = prefill(model, ids, 10, None)
    carried: list[int] = []
    real = model.layer_qkv

    def counted(i, x, pos):  # type: ignore[no-untyped-def]
        if i == 0:
            carried.append(x.shape[0])
        return real(i, x, pos)

    monkeypatch.setattr(model, "layer_qkv", counted)
    together = continuations(model, shared, [replace(s, seed=1 + i) for i in range(7)])
    going = [sum(len(g.steps) > k for g in together) for k in range(1, 10)]  # continued after their kth token
    assert max(carried) <= rows and sum(carried) == sum(going)
    assert len(carried) == sum(-(-n // rows) for n in going)  # ⌈n / rows⌉ forwards a step
    assert rows > 1 or len(carried) == sum(going)


def test_rows_that_would_round_otherwise_run_alone(tiny, monkeypatch: pytest.MonkeyPatch) -> None:
    """A forward whose rows' numbers depend on how many rows it carries (a kernel for several rows that sums in
    another order) is found by `rows_alike`: every continuation then runs alone, with its own `generate`'s numbers."""
    from engine.models import load

    model, _ = tiny["gpt2"]  # GPT-2's weights (in, out): up to 3 rows alike on oneMKL
    other = load(model.path)
    real = other.layer_rest

    def rounded_by_rows(i, x, heads):  # type: ignore[no-untyped-def]
        out = real(i, x, heads)
        return out if x.shape[0] < 3 else out * (1 + 2**-20)  # three rows or more: another rounding

    monkeypatch.setattr(other, "layer_rest", rounded_by_rows)
    assert rows_alike(other) == min(2, rows_alike(model))  # never the third row that rounds otherwise
    ids = tuple(other.tokenize("The cat sat"))
    shared = prefill(other, ids, 6, None)
    drawn = [Sampling(True, seed=i) for i in range(5)]
    for g, d in zip(continuations(other, shared, drawn, keep_logits=True), drawn, strict=True):
        same_to_the_bit(g, generate(other, ids, 6, None, sampling=d, keep_logits=True, prefilled=shared))
