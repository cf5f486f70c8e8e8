"""A toy trace worked by hand: every expected number below is derived step by step from the formulas."""

from __future__ import annotations

import math

import pytest
import torch

from engine import make_spec, trace
from engine.spec import SpecError

# Three tokens, d_model 2, one head. Q = K = X (identity weights), V = X W_V, W_O = identity.
X = [[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]
I2 = [[1.0, 0.0], [0.0, 1.0]]
W_V = [[1.0, 2.0], [3.0, 4.0]]


def hand_trace(mask: str = "causal", scale: str = "sqrt_dk"):
    return trace(["a", "b", "c"], x=X, w_q=I2, w_k=I2, w_v=W_V, w_o=I2, mask=mask, scale=scale)


def test_projection_multiplies_rows_by_the_weights():
    t = hand_trace()
    assert t.projection.q.shape == (1, 3, 2)
    assert t.projection.q[0].tolist() == X
    # v_i = x_i W_V: [1,0]W_V = [1,2]; [0,1]W_V = [3,4]; [1,1]W_V = [4,6]
    assert t.projection.v[0].tolist() == [[1, 2], [3, 4], [4, 6]]


def test_scores_are_dot_products_then_divided_by_sqrt_dk():
    t = hand_trace()
    raw = [[1, 0, 1], [0, 1, 1], [1, 1, 2]]  # q_i · k_j
    assert t.scores.raw[0].tolist() == raw
    s = math.sqrt(2)
    expected = torch.tensor([[v / s for v in row] for row in raw])
    torch.testing.assert_close(t.scores.scaled[0], expected)


@pytest.mark.parametrize(("scale", "divisor"), [("none", 1.0), ("dk", 2.0), ("sqrt_dk", math.sqrt(2))])
def test_scale_choices(scale, divisor):
    t = hand_trace(scale=scale)
    assert t.spec.scale_value == pytest.approx(divisor)
    torch.testing.assert_close(t.scores.scaled, t.scores.raw / divisor)


def test_causal_mask_hides_the_strict_upper_triangle():
    t = hand_trace()
    inf = float("-inf")
    assert t.mask.mask.tolist() == [[0, inf, inf], [0, 0, inf], [0, 0, 0]]
    assert t.mask.masked[0, 0, 1] == inf and t.mask.masked[0, 1, 1] == t.scores.scaled[0, 1, 1]


def test_softmax_by_hand():
    t = hand_trace()
    s = math.sqrt(2)
    w = t.softmax.weights[0]
    assert w[0].tolist() == [1.0, 0.0, 0.0]  # the first token sees only itself
    # row 2: scores [0, 1/√2] -> e^0 / (e^0 + e^(1/√2)), ...
    z = 1 + math.exp(1 / s)
    assert w[1, 0].item() == pytest.approx(1 / z, abs=1e-6)
    assert w[1, 1].item() == pytest.approx(math.exp(1 / s) / z, abs=1e-6)
    assert w[1, 2].item() == 0.0
    # row 3: scores [1, 1, 2] / √2
    e = [math.exp(v / s) for v in (1, 1, 2)]
    for j in range(3):
        assert w[2, j].item() == pytest.approx(e[j] / sum(e), abs=1e-6)


def test_weighted_sum_and_output_projection_by_hand():
    t = hand_trace()
    w = t.softmax.weights[0].double()
    v = torch.tensor([[1, 2], [3, 4], [4, 6]], dtype=torch.double)
    expected = [[sum(w[i, j].item() * v[j, c].item() for j in range(3)) for c in range(2)] for i in range(3)]
    torch.testing.assert_close(t.weighted_sum.heads[0].double(), torch.tensor(expected, dtype=torch.double))
    assert t.weighted_sum.heads[0, 0].tolist() == [1.0, 2.0]  # row 1 copies v_1
    torch.testing.assert_close(t.weighted_sum.output, t.weighted_sum.concat)  # W_O = I, no bias


def test_biases_are_added_to_each_projection():
    b = [0.5, -1.0]
    t = trace(["a", "b"], x=X[:2], w_q=I2, w_k=I2, w_v=I2, w_o=I2, b_q=b, b_o=b)
    assert t.projection.q[0].tolist() == [[1.5, -1.0], [0.5, 0.0]]
    assert t.projection.k[0].tolist() == X[:2]  # b_k not given: zero
    torch.testing.assert_close(t.weighted_sum.output, t.weighted_sum.concat + torch.tensor(b))


def test_heads_own_contiguous_column_blocks():
    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(4, 6, generator=g), torch.randn(6, 6, generator=g)
    t = trace(["a", "b", "c", "d"], x=x.tolist(), w_q=w.tolist(), n_heads=3)
    q_full = x @ w  # (4, 6)
    assert t.projection.q.shape == (3, 4, 2)
    for h in range(3):  # head h owns columns 2h and 2h + 1
        torch.testing.assert_close(t.projection.q[h], q_full[:, 2 * h : 2 * h + 2])
    heads = t.weighted_sum.heads
    torch.testing.assert_close(t.weighted_sum.concat, torch.cat([heads[h] for h in range(3)], dim=1))


def test_fully_masked_row_gives_zeros_not_nan():
    t = trace(["a", "b", "c"], mask="padding", pad_positions=[0, 1, 2])
    assert torch.equal(t.softmax.weights, torch.zeros(1, 3, 3))
    assert torch.equal(t.weighted_sum.heads, torch.zeros_like(t.weighted_sum.heads))
    assert t.checks.rows_sum_to_one  # fully masked rows are expected to sum to 0
    assert t.checks.max_abs_diff_vs_sdpa == 0.0


def test_checks_agree_with_sdpa():
    t = trace("the cat sat on the mat", preset="gpt2-small", mask="causal")
    assert t.checks.rows_sum_to_one
    assert t.checks.max_abs_diff_vs_sdpa < 1e-5


def test_same_seed_same_numbers_and_same_word_same_vector():
    a = trace("猫 坐 在 猫 上", seed=7)
    b = trace("猫 坐 在 猫 上", seed=7)
    assert torch.equal(a.weighted_sum.output, b.weighted_sum.output)
    assert torch.equal(a.projection.x[0], a.projection.x[3])  # "猫" at positions 0 and 3
    c = trace("猫 坐 在 猫 上", seed=8)
    assert not torch.equal(a.projection.x, c.projection.x)


def test_embedding_depends_on_the_token_not_its_neighbours():
    a = trace("猫 坐", seed=1)
    b = trace("狗 狗 猫", seed=1)
    assert torch.equal(a.projection.x[0], b.projection.x[2])


def test_gpt2_small_preset_shapes_and_init():
    t = trace(["a", "b", "c", "d"], preset="gpt2-small")
    assert t.projection.q.shape == (12, 4, 64)
    assert t.scores.raw.shape == (12, 4, 4)
    assert t.weighted_sum.output.shape == (4, 768)
    assert t.spec.bias and t.spec.init_std == 0.02 and t.spec.d_k == 64


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"d_model": 10, "n_heads": 3}, "n_heads"),
        ({"d_model": 5000}, "d_model"),
        ({"mask": "sideways"}, "mask"),
        ({"scale": "half"}, "scale"),
        ({"preset": "gpt5"}, "preset"),
        ({"mask": "padding", "pad_positions": [9]}, "pad_positions"),
        ({"mask": "document", "segment_ids": [0, 1]}, "segment_ids"),
        ({"pad_positions": [1]}, "pad_positions"),
        ({"tokens": ["a", "b"], "x": [[1.0, 2.0]]}, "x"),
        ({"x": [[float("nan")] * 4] * 5}, "x"),
        ({"w_q": [[1.0] * 4] * 3}, "w_q"),
        ({"b_o": [1.0, 2.0]}, "b_o"),
        ({"dtype": "float16"}, "dtype"),
        ({"tokens": ["a"] * 1025}, "tokens"),
        ({"tokens": ["a", " "]}, "tokens"),
    ],
)
def test_bad_specs_name_their_field(kwargs, field):
    tokens = kwargs.pop("tokens", None)
    with pytest.raises(SpecError) as err:
        make_spec(tokens, **kwargs)
    assert err.value.field == field


def test_memory_budget_is_enforced():
    from engine import Limits

    with pytest.raises(SpecError, match="budget") as err:
        make_spec(["a"] * 1024, preset="gpt2-small", limits=Limits(memory_budget_bytes=50 * 2**20))
    assert err.value.field == "tokens"
