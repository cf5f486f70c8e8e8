"""engine/train.py: a tiny GPT trained from its seed: same numbers twice, the induction score's definition, the
mask-off cheat on a tiny run, the limits named by field."""

from __future__ import annotations

import itertools
import threading

import pytest
import torch

from engine.errors import SpecError
from engine.train import induction_scores, make_config, make_data, snapshot_steps, train

TINY = {"n_layer": 1, "n_heads": 2, "d_model": 32, "n_repeat": 4, "vocab": 8, "batch": 16, "steps": 30,
        "eval_every": 10, "n_snapshots": 3}  # fmt: skip


def test_same_seed_same_numbers() -> None:
    a, b = train(make_config(**TINY)), train(make_config(**TINY))
    assert a.loss == b.loss and a.eval_loss == b.eval_loss
    assert [s.induction for s in a.snapshots] == [s.induction for s in b.snapshots]
    c = train(make_config(**TINY | {"seed": 1}))
    assert c.loss != a.loss


def test_learned_positions_and_mlp_train() -> None:
    run = train(make_config(**TINY | {"positions": "learned", "mlp": True, "steps": 12}))
    assert run.status == "done" and len(run.loss) == 12 and all(x > 0 for x in run.loss)
    assert "transformer.h.0.mlp.c_fc.weight" in run.params


def test_induction_score_reads_a_i_minus_n_plus_1() -> None:
    n, t = 4, 7
    a = torch.zeros(1, 2, t, t)
    for i in range(t):
        a[0, 0, i, 0] = 1.0  # head 0: always the first token
        a[0, 1, i, i - n + 1 if i >= n else 0] = 1.0  # head 1: a perfect induction head
    assert induction_scores([a], n) == [[0.0, 1.0]]


def test_snapshots_are_log_spaced() -> None:
    steps = snapshot_steps(1000, 5)
    assert steps[0] == 0 and steps[-1] == 1000 and steps == sorted(set(steps))
    gaps = [b / max(a, 1) for a, b in itertools.pairwise(steps[1:])]
    assert all(g > 2 for g in gaps)


def test_the_mask_off_cheat() -> None:
    """Mask off: the training loss falls far lower, but under the causal mask (as generation runs) it is worse."""
    honest = train(make_config(**TINY | {"steps": 100, "lr": 0.01}))
    cheat = train(make_config(**TINY | {"steps": 100, "lr": 0.01, "causal": False}))
    assert cheat.loss[-1] < 0.5 * honest.loss[-1]
    assert cheat.eval_own[-1] < honest.eval_loss[-1]  # its own (mask-off) held-out loss, too
    assert cheat.eval_loss[-1] > honest.eval_loss[-1]


def test_text_task_samples() -> None:
    text = "the cat sat on the mat. " * 40
    run = train(make_config(**TINY | {"task": "text", "context": 16, "sample_chars": 12}), text=text)
    assert run.labels == sorted(set(text))
    assert all(len(s.sample) == 12 and set(s.sample) <= set(text) for s in run.snapshots)
    assert make_data(make_config(task="text", context=16), text).train_ids is not None


def test_cancel_stops_between_steps() -> None:
    stop = threading.Event()
    seen: list[int] = []

    def on_event(kind: str, data: dict) -> None:
        if kind == "step":
            seen.append(data["step"])
            if data["step"] == 3:
                stop.set()

    run = train(make_config(**TINY), on_event, stop)
    assert run.status == "cancelled" and run.step == 3 and seen == [1, 2, 3]


@pytest.mark.parametrize(
    ("given", "field"),
    [({"n_layer": 5}, "n_layer"), ({"d_model": 30}, "d_model"), ({"task": "poems"}, "task"),
     ({"positions": "rope", "n_heads": 4, "d_model": 36}, "d_model"), ({"lr": 0}, "lr"), ({"color": 1}, "color")],
)  # fmt: skip
def test_limits_name_the_field(given: dict, field: str) -> None:
    with pytest.raises(SpecError) as e:
        make_config(**given)
    assert e.value.field == field


@pytest.mark.parametrize("positions", ["rope", "learned"])
def test_export_loads_with_the_same_logits(tmp_path, positions: str) -> None:
    """The lab's own loader (a Llama or a GPT-2) and transformers compute the trained model's logits."""
    from transformers import AutoModelForCausalLM

    from engine.models import load
    from engine.train import export, forward

    run = train(make_config(**TINY | {"positions": positions, "steps": 20, "n_layer": 2}))
    path = export(run, tmp_path / "tiny")
    ids = run.probe
    want = forward(run.config, run.params, torch.tensor([ids]), True)[0]
    model = load(path)
    assert model.family == ("llama" if positions == "rope" else "gpt2")
    assert model.tokenize("".join(run.labels[i] for i in ids)) == ids
    assert torch.allclose(model.logits(ids), want, atol=1e-4)
    hf = AutoModelForCausalLM.from_pretrained(path).eval()
    with torch.no_grad():
        got = hf(torch.tensor([ids])).logits[0]
    assert torch.allclose(got, want, atol=1e-4)
