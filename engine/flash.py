"""FlashAttention's schedule, computed and recorded: the online softmax over blocks of keys, one block of queries
at a time, never holding the N × N matrix.

For each query block the running row maximum m, the running sum l and the accumulator O start empty; each key block
updates them — m' = max(m, rowmax(S_blk)), rescale = exp(m − m'), l' = l·rescale + Σ exp(S_blk − m'),
O' = O·rescale + exp(S_blk − m') V_blk — and the block's output is O / l. A key block every entry of which is masked
(above the causal diagonal) is skipped. The result equals stage 5's heads; the trace of every step is returned so a
class can follow it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Step:
    k_block: int
    cols: tuple[int, int]  # key positions [start, end)
    skipped: bool  # every entry masked: FlashAttention does not even load this block
    m: torch.Tensor  # (rows,) running row maximum after this block
    l: torch.Tensor  # (rows,) running sum after this block  # noqa: E741
    rescale: torch.Tensor  # (rows,) exp(m_before − m_after): how much the earlier sum and accumulator shrink
    acc: torch.Tensor  # (rows, d_k) unnormalised output after this block


@dataclass(frozen=True)
class QueryBlock:
    q_block: int
    rows: tuple[int, int]  # query positions [start, end)
    steps: tuple[Step, ...]
    output: torch.Tensor  # (rows, d_k) = acc / l


@dataclass(frozen=True)
class Tiled:
    blocks: tuple[QueryBlock, ...]
    output: torch.Tensor  # (N, d_k)


def tiled_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, allow: torch.Tensor, scale: float, block_q: int, block_k: int
) -> Tiled:
    """One head: q (N, d_k), k and v (N_kv, d_k), `allow` (N, N_kv) booleans, scores divided by `scale`.
    Computed in float64 so the recorded running values are exact to print; a row with no readable key is 0."""
    q, k, v = q.double(), k.double(), v.double()
    n, n_kv, dk = q.shape[0], k.shape[0], v.shape[1]
    out = torch.zeros(n, dk, dtype=torch.float64, device=q.device)
    blocks = []
    for qi, r0 in enumerate(range(0, n, block_q)):
        r1 = min(n, r0 + block_q)
        m = torch.full((r1 - r0,), -math.inf, dtype=torch.float64, device=q.device)
        total = torch.zeros(r1 - r0, dtype=torch.float64, device=q.device)
        acc = torch.zeros(r1 - r0, dk, dtype=torch.float64, device=q.device)
        steps = []
        for kj, c0 in enumerate(range(0, n_kv, block_k)):
            c1 = min(n_kv, c0 + block_k)
            ok = allow[r0:r1, c0:c1]
            if not bool(ok.any()):
                one = torch.ones_like(m)
                steps.append(Step(kj, (c0, c1), True, m.clone(), total.clone(), one, acc.clone()))
                continue
            s = (q[r0:r1] @ k[c0:c1].T) / scale
            s = s.masked_fill(~ok, -math.inf)
            m_new = torch.maximum(m, s.amax(dim=1))
            safe = torch.where(torch.isfinite(m_new), m_new, torch.zeros_like(m_new))
            rescale = torch.where(torch.isfinite(m), torch.exp(m - safe), torch.zeros_like(m))
            p = torch.exp(s - safe[:, None])  # masked entries: exp(−∞) = 0
            total = total * rescale + p.sum(dim=1)
            acc = acc * rescale[:, None] + p @ v[c0:c1]
            m = m_new
            steps.append(Step(kj, (c0, c1), False, m.clone(), total.clone(), rescale, acc.clone()))
        block_out = acc / torch.where(total > 0, total, torch.ones_like(total))[:, None]
        out[r0:r1] = block_out
        blocks.append(QueryBlock(qi, (r0, r1), tuple(steps), block_out))
    return Tiled(tuple(blocks), out)


def memory_bytes(n: int, n_kv: int, d_k: int, block_q: int, block_k: int, itemsize: int = 4) -> dict[str, int]:
    """What one head holds at once: the staged path's N × N_kv scores and weights, against the tiled path's
    blocks and per-row running values (O(N·d) in all)."""
    return {
        "staged": itemsize * (2 * n * n_kv + 3 * n * d_k),
        "tiled": itemsize * (block_q * d_k + 2 * block_k * d_k + block_q * block_k + block_q * (d_k + 2) + n * d_k),
    }
