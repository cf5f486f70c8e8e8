"""The chapter's demonstrations, computed live: permutation equivariance, RoPE's relativity, why √d_k, and why
softmax subtracts the row maximum. Each returns plain numbers (lists, floats, bools) for a page, a chart or JSON.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Any

import torch

from .positions import rotate
from .spec import make_spec
from .tracing import compute


def permutation(tokens: list[str], perm: list[int], seed: int = 0) -> dict[str, Any]:
    """Shuffle the tokens and compare the outputs with the original outputs shuffled the same way, for plain
    attention, for added positions and for the causal mask."""
    n = len(tokens)
    if sorted(perm) != list(range(n)):
        raise ValueError(f"perm must reorder 0..{n - 1}")
    shuffled = [tokens[i] for i in perm]
    cases = []
    for label, positions, mask in (("plain", "none", "none"), ("sinusoidal", "sinusoidal", "none"),
                                   ("causal", "none", "causal")):  # fmt: skip
        a = compute(make_spec(tokens, seed=seed, positions=positions, mask=mask))
        b = compute(make_spec(shuffled, seed=seed, positions=positions, mask=mask))
        expected = a.weighted_sum.output[perm]
        diff = float((b.weighted_sum.output - expected).abs().max())
        cases.append({
            "case": label,
            "output": a.weighted_sum.output.tolist(),
            "shuffled_output": b.weighted_sum.output.tolist(),
            "max_abs_diff": diff,
            "equivariant": diff < 1e-5,
        })  # fmt: skip
    return {"tokens": tokens, "perm": perm, "shuffled": shuffled, "cases": cases}


def rope_relative(m: int, n: int, d_k: int = 8, base: float = 10000.0, pairing: str = "adjacent", seed: int = 0,
                  shift: int = 10) -> dict[str, Any]:  # fmt: skip
    """⟨R_m q, R_n k⟩ against ⟨q, R_(n−m) k⟩ for a seeded q and k, and the same pair moved by `shift`."""
    g = torch.Generator().manual_seed(seed)
    q, k = torch.randn(d_k, generator=g, dtype=torch.float64), torch.randn(d_k, generator=g, dtype=torch.float64)

    def at(t: torch.Tensor, pos: int) -> torch.Tensor:
        return rotate(t[None], torch.tensor([pos]), base, pairing)[0]

    def score(a: int, b: int) -> float:
        return float(at(q, a) @ at(k, b))

    relative = float(q @ at(k, n - m)) if n >= m else float(at(q, m - n) @ k)
    offsets = [(0, 5), (shift, shift + 5), (3 * shift, 3 * shift + 5)]
    return {
        "q": q.tolist(),
        "k": k.tolist(),
        "m": m,
        "n": n,
        "absolute": score(m, n),
        "relative": relative,
        "equal": abs(score(m, n) - relative) < 1e-9,
        "unrotated": float(q @ k),
        "offsets": [{"m": a, "n": b, "score": score(a, b)} for a, b in offsets],
    }


@lru_cache(maxsize=8)
def scaling(samples: int = 2000, n_keys: int = 16, seed: int = 0) -> dict[str, Any]:
    """Var(q·k) against d_k for q, k ~ N(0, I), and softmax's largest weight and entropy over `n_keys` keys
    when the scores are divided by 1, √d_k or d_k.

    Each sample is one q and its `n_keys` scores q·k_j, drawn as ‖q‖·z_j with z ~ N(0, I_n_keys): given q, the q·k_j
    of independent k_j ~ N(0, I_d) are independent N(0, ‖q‖²), so the scores have exactly the distribution of the
    dot products, without drawing the keys (samples × n_keys × d numbers: 65 million, 3-4 s, for the defaults)."""
    g = torch.Generator().manual_seed(seed)
    rows = []
    for e in range(2, 11):
        d = 2**e
        q = torch.randn(samples, d, generator=g, dtype=torch.float64)
        z = torch.randn(samples, n_keys, generator=g, dtype=torch.float64)
        dots = torch.linalg.vector_norm(q, dim=-1, keepdim=True) * z  # (samples, n_keys): q·k_j for each key
        row = {"d_k": d, "var": float(dots[:, 0].var()), "expected_var": float(d)}
        for name, s in (("none", 1.0), ("sqrt_dk", math.sqrt(d)), ("dk", float(d))):
            p = torch.softmax(dots / s, dim=-1)
            entropy = -(p * torch.log(p.clamp_min(1e-300))).sum(-1)
            row[f"max_{name}"] = float(p.max(-1).values.mean())
            row[f"entropy_{name}"] = float(entropy.mean())
        rows.append(row)
    return {"samples": samples, "n_keys": n_keys, "uniform_entropy": math.log(n_keys), "rows": rows}


def softmax_stability(logits: list[float], dtype: str = "float16") -> dict[str, Any]:
    """Softmax of `logits` without and with the row maximum subtracted, in float16 (or another dtype)."""
    dt = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}[dtype]
    x = torch.tensor(logits, dtype=dt)
    naive_exp = torch.exp(x)
    naive = naive_exp / naive_exp.sum()
    shifted = x - x.max()
    stable_exp = torch.exp(shifted)
    stable = stable_exp / stable_exp.sum()
    reference = torch.softmax(torch.tensor(logits, dtype=torch.float64), dim=0)

    def floats(t: torch.Tensor) -> list[float | None]:
        return [None if not math.isfinite(v) else v for v in t.double().tolist()]

    return {
        "dtype": dtype,
        "max_finite": float(torch.finfo(dt).max),
        "logits": logits,
        "naive_exp": floats(naive_exp),
        "naive_sum": floats(naive_exp.sum()[None])[0],
        "naive": floats(naive),
        "naive_ok": bool(torch.isfinite(naive).all()),
        "shifted": floats(shifted),
        "stable_exp": floats(stable_exp),
        "stable": floats(stable),
        "reference": reference.tolist(),
        "stable_max_abs_diff": float((stable.double() - reference).abs().max()),
    }
