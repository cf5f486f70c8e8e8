"""Where a transformer block's work goes, from its shapes: the multiply–adds of each stage counted (2 FLOPs each),
and the same stages timed on this machine with torch, as the sequence length N grows for a fixed width d.

    projections  Q, K, V: 2·N·d·(d + 2·d_kv)    W_O: 2·N·d²        (~N·d²: linear in N)
    scores       QKᵀ:     2·N²·d                                    (~N²·d: quadratic in N)
    weighted sum PV:      2·N²·d
    FFN          2·N·d·d_ff, 3 matrices if gated (SwiGLU), else 2

(d_kv = kv_heads · d_k: grouped-query attention shares K and V between heads.) The softmax's few operations per
score (~h·N²) are left out: no matmul, and d times fewer than the scores'. Attention's N² terms overtake the
projections' at N* = projections / (4·N·d) tokens (2·d for multi-head attention), and the projections and FFN
together at a larger N."""

from __future__ import annotations

import time
from dataclasses import dataclass
from functools import lru_cache

import torch

STAGES = ("projections", "scores", "weighted_sum", "output", "ffn")


@dataclass(frozen=True)
class Shape:
    name: str
    d: int  # the model's width
    heads: int
    kv_heads: int
    d_ff: int
    gated: bool  # the FFN has a gate (SwiGLU: three matrices)

    @property
    def d_k(self) -> int:
        return self.d // self.heads

    @property
    def d_kv(self) -> int:
        return self.kv_heads * self.d_k


SHAPES = {
    "toy": Shape("toy", 32, 2, 2, 128, False),  # /cross's encoder–decoder, its default size
    "gpt2": Shape("gpt2", 768, 12, 12, 3072, False),  # GPT-2 small's block
    "smollm2": Shape("smollm2", 576, 9, 3, 1536, True),  # SmolLM2-135M's block (GQA, SwiGLU)
}


def flops(s: Shape, n: int) -> dict[str, int]:
    """Each stage's FLOPs for one sequence of n tokens through one block (2 per multiply–add)."""
    return {
        "projections": 2 * n * s.d * (s.d + 2 * s.d_kv),
        "scores": 2 * n * n * s.d,
        "weighted_sum": 2 * n * n * s.d,
        "output": 2 * n * s.d * s.d,
        "ffn": 2 * n * s.d * s.d_ff * (3 if s.gated else 2),
    }


def crossover(s: Shape) -> tuple[float, float]:
    """N where attention's N² terms (scores + weighted sum, 4·N²·d) equal the projections' (Q, K, V, W_O), and
    where they equal the projections and the FFN together."""
    one = flops(s, 1)
    proj = one["projections"] + one["output"]
    return proj / (4 * s.d), (proj + one["ffn"]) / (4 * s.d)


def grid(n_max: int) -> list[int]:
    """N from 16 doubling up to n_max (n_max itself the last)."""
    ns, n = [], 16
    while n < n_max:
        ns.append(n)
        n *= 2
    return [*ns, n_max]


def _best(f: object, repeats: int) -> float:
    """The fastest of `repeats` runs of f after one untimed (one run only when it takes over 0.2 s: a shared
    machine's other work only ever adds time, so the fastest is the closest to the arithmetic's own)."""
    f()  # type: ignore[operator]  # warm: the first call of a shape pays for its allocations
    times: list[float] = []
    while len(times) < repeats and not (times and times[0] > 0.2):
        t0 = time.perf_counter()
        f()  # type: ignore[operator]
        times.append(time.perf_counter() - t0)
    return min(times)


@lru_cache(maxsize=16)
def measure(name: str, n_max: int, repeats: int = 3) -> dict[str, list[float]]:
    """Each stage's time in seconds (the best of `repeats`) on this machine's CPU, float32, for each N of the
    grid: the same matmuls the counts count, with random inputs. Kept per shape and n_max for the process."""
    s = SHAPES[name]
    g = torch.Generator().manual_seed(0)
    w_qkv = torch.randn(s.d + 2 * s.d_kv, s.d, generator=g)
    w_o = torch.randn(s.d, s.d, generator=g)
    w_ff = [torch.randn(s.d_ff, s.d, generator=g) for _ in range(2 if s.gated else 1)]
    w_down = torch.randn(s.d, s.d_ff, generator=g)
    out: dict[str, list[float]] = {k: [] for k in STAGES}
    with torch.inference_mode():
        for n in grid(n_max):
            x = torch.randn(n, s.d, generator=g)
            q = torch.randn(s.heads, n, s.d_k, generator=g)
            k = torch.randn(s.heads, n, s.d_k, generator=g)  # K and V as every head reads them
            p = torch.softmax(torch.randn(s.heads, n, n, generator=g), -1)
            h = torch.randn(n, s.d_ff, generator=g)
            out["projections"].append(_best(lambda: x @ w_qkv.T, repeats))  # noqa: B023
            out["scores"].append(_best(lambda: q @ k.transpose(1, 2), repeats))  # noqa: B023
            out["weighted_sum"].append(_best(lambda: p @ k, repeats))  # noqa: B023
            out["output"].append(_best(lambda: x @ w_o.T, repeats))  # noqa: B023
            out["ffn"].append(_best(lambda: [x @ w.T for w in w_ff] and h @ w_down.T, repeats))  # noqa: B023
    return out


def measured_crossover(ns: list[int], attention: list[float], projections: list[float]) -> float | None:
    """The N (interpolated on log N) where the measured attention time first reaches the projections'; None when
    it never does within the grid (or already does at its first N)."""
    import math

    for i in range(1, len(ns)):
        a0, a1 = attention[i - 1] - projections[i - 1], attention[i] - projections[i]
        if a0 < 0 <= a1:
            t = -a0 / (a1 - a0)
            return math.exp(math.log(ns[i - 1]) + t * (math.log(ns[i]) - math.log(ns[i - 1])))
    return None
