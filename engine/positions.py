"""Where a token stands: absolute tables added to x (sinusoidal, learned) or rotations of q and k (RoPE).

Without any of them, and without an asymmetric mask, attention is permutation-equivariant: shuffle the tokens and
the output rows shuffle the same way. RoPE rotates each pair of a head's dimensions by m·θ_i, θ_i = base^(−2i/d_k),
so ⟨R_m q, R_n k⟩ = ⟨q, R_(n−m) k⟩ depends on the offset n − m alone. Two pairings are in use: adjacent dimensions
(2i, 2i+1), as the RoFormer paper and the chapter write it, and first half with second half (i, i + d_k/2), as
Hugging Face's LLaMA implements it (`rotate_half`). Both are offered; they give the same scores up to a permutation
of the dimensions inside q and k.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from .device import CPU
from .memo import bytes_bounded
from .sources import seed_of


def sinusoidal(n: int, d: int, base: float = 10000.0) -> torch.Tensor:
    """PE[p, 2i] = sin(p / base^(2i/d)), PE[p, 2i+1] = cos(p / base^(2i/d)): (N, d)."""
    pos = torch.arange(n, dtype=torch.float64, device=CPU)[:, None]
    i = torch.arange(0, d, 2, dtype=torch.float64, device=CPU)
    angle = pos / base ** (i / d)  # (N, ceil(d/2))
    pe = torch.zeros(n, d, dtype=torch.float64, device=CPU)
    pe[:, 0::2] = torch.sin(angle)
    pe[:, 1::2] = torch.cos(angle[:, : d // 2])
    return pe.float()


POSITION_BLOCK = 64  # rows drawn together; each block has its own seed


@bytes_bounded(64 * 2**20)
def _position_block(seed: int, block: int, d: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed_of("positions", seed, block))
    return torch.randn(POSITION_BLOCK, d, generator=g, device=CPU)


def learned_rows(seed: int, n: int, d: int) -> torch.Tensor:
    """The first `n` rows of a seeded learned position table standing for GPT-2's wpe; N(0, 1) so its effect is as
    visible as the tokens'. Rows come in seeded blocks, so position i's vector is the same whatever the table's
    length n_ctx or the sequence's, and only the rows asked for are ever made (n_ctx bounds positions; it costs
    nothing)."""
    blocks = [_position_block(seed, b, d) for b in range((n + POSITION_BLOCK - 1) // POSITION_BLOCK)]
    return torch.cat(blocks)[:n] if blocks else torch.zeros(0, d, device=CPU)


def rope_angles(
    positions: torch.Tensor, d_k: int, base: float, factors: tuple[float, ...] = ()
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of m·θ_i for every position m and pair i: (N, d_k/2) each, computed in float64. `factors`
    divides each θ_i (a model's RoPE scaling, e.g. llama3's: long wavelengths stretched)."""
    theta = base ** (-torch.arange(0, d_k, 2, dtype=torch.float64, device=positions.device) / d_k)  # (d_k/2,)
    if factors:
        theta = theta / torch.tensor(factors, dtype=torch.float64, device=positions.device)
    angle = positions.to(torch.float64)[:, None] * theta[None, :]
    return torch.cos(angle), torch.sin(angle)


class Angles(NamedTuple):
    """cos and sin of m·θ_i for a run of positions, in the working dtype and device: compute once, rotate many
    (generation rotates q and k of every layer at the same positions)."""

    cos: torch.Tensor
    sin: torch.Tensor


def angles(
    positions: torch.Tensor, d_k: int, base: float, factors: tuple[float, ...] = (), like: torch.Tensor | None = None
) -> Angles:
    """rope_angles cast once to the dtype and device of `like` (float32 on the positions' device without it)."""
    dev = positions.device if like is None else like.device
    dtype = torch.float32 if like is None else like.dtype
    cos, sin = rope_angles(positions.to(dev), d_k, base, factors)
    return Angles(cos.to(dtype), sin.to(dtype))


def rotate(
    t: torch.Tensor, positions: torch.Tensor | Angles, base: float, pairing: str, factors: tuple[float, ...] = ()
) -> torch.Tensor:
    """Apply RoPE to t (..., N, d_k) at the given positions (N,), or at precomputed `Angles` of them."""
    d_k = t.shape[-1]
    cos, sin = positions if isinstance(positions, Angles) else angles(positions, d_k, base, factors, like=t)
    if pairing == "adjacent":
        x1, x2 = t[..., 0::2], t[..., 1::2]
    else:
        x1, x2 = t[..., : d_k // 2], t[..., d_k // 2 :]
    r1, r2 = x1 * cos - x2 * sin, x1 * sin + x2 * cos
    if pairing == "adjacent":
        return torch.stack((r1, r2), dim=-1).flatten(-2)
    return torch.cat((r1, r2), dim=-1)
