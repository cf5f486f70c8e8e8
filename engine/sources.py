"""Where a trace's input x and its weights come from: given explicitly, or generated from the seed.

Everything random is drawn on the CPU from a seeded `torch.Generator` and only then moved, so a seed gives the same
numbers on every machine and device. A token's embedding is seeded by (seed, token text) alone, so the same word has
the same vector wherever it stands in the sentence; the weights are seeded by the seed alone.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import torch

from .device import CPU, DTYPES
from .memo import bytes_bounded
from .spec import Spec


@dataclass(frozen=True)
class Weights:
    """Row-vector convention (GPT-2, nanoGPT): Q = X W_Q + b_Q, each W is (d_model, d_model)."""

    w_q: torch.Tensor  # (d, d)
    w_k: torch.Tensor  # (d, d)
    w_v: torch.Tensor  # (d, d)
    w_o: torch.Tensor  # (d, d)
    b_q: torch.Tensor | None = None  # (d,)
    b_k: torch.Tensor | None = None
    b_v: torch.Tensor | None = None
    b_o: torch.Tensor | None = None


def seed_of(*parts: object) -> int:
    digest = hashlib.blake2b("\x1f".join(map(str, parts)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") & (2**63 - 1)


@bytes_bounded(32 * 2**20)
def token_embedding(token: str, seed: int, d_model: int) -> torch.Tensor:
    """N(0, 1) vector for one token's text: (d_model,). It stands for the normalised input attention sees."""
    g = torch.Generator().manual_seed(seed_of("token", seed, token))
    return torch.randn(d_model, generator=g, device=CPU)


def embed(tokens: tuple[str, ...], seed: int, d_model: int) -> torch.Tensor:
    return torch.stack([token_embedding(t, seed, d_model) for t in tokens])  # (N, d)


@bytes_bounded(64 * 2**20)  # gpt2-small's four 768² matrices are 9 MiB
def random_weights(seed: int, d_model: int, init_std: float, bias: bool, d_kv: int | None = None) -> Weights:
    """W_Q, W_K, W_V, W_O drawn from N(0, init_std²) in that order; biases start at zero as in GPT-2.
    Under GQA, W_K and W_V have d_kv = n_kv_heads · d_k columns."""
    d_kv = d_model if d_kv is None else d_kv
    g = torch.Generator().manual_seed(seed_of("weights", seed))
    cols = (d_model, d_kv, d_kv, d_model)
    ws = [torch.randn(d_model, c, generator=g, device=CPU) * init_std for c in cols]
    bs = [torch.zeros(c, device=CPU) for c in cols] if bias else [None] * 4
    return Weights(*ws, *bs)


def source(spec: Spec, device: torch.device, dtype: torch.dtype) -> torch.Tensor | None:
    """Cross-attention: the seeded vectors of the sequence K and V are read from, (N_kv, d); else None."""
    if not spec.kv_tokens:
        return None
    return embed(spec.kv_tokens, spec.seed, spec.d_model).to(device=device, dtype=dtype)


def cast(w: Weights, device: torch.device, dtype: torch.dtype) -> Weights:
    return Weights(**{k: None if v is None else v.to(device, dtype) for k, v in vars(w).items()})  # type: ignore[arg-type]


@bytes_bounded(256 * 2**20)
def placed_weights(seed: int, d_model: int, init_std: float, bias: bool, d_kv: int, device: str, dtype: str) -> Weights:
    """The seeded weights already on the serving device in the serving dtype: uploaded once, not per request."""
    return cast(random_weights(seed, d_model, init_std, bias, d_kv), torch.device(device), DTYPES[dtype])


def load(spec: Spec, device: torch.device, dtype: torch.dtype) -> tuple[torch.Tensor, Weights]:
    """The layer input x (N, d) and the weights for `spec`, on `device` in `dtype`."""
    x = torch.tensor(spec.x, device=CPU) if spec.x is not None else embed(spec.tokens, spec.seed, spec.d_model)
    explicit = any(getattr(spec, n) is not None for n in ("w_q", "w_k", "w_v", "w_o", "b_q", "b_k", "b_v", "b_o"))
    if not explicit and (device.type != "cpu" or dtype != torch.float32):
        w = placed_weights(spec.seed, spec.d_model, spec.init_std, spec.bias, spec.d_kv, str(device), spec.dtype)
        return x.to(device=device, dtype=dtype), w
    generated = random_weights(spec.seed, spec.d_model, spec.init_std, spec.bias, spec.d_kv)
    parts: dict[str, torch.Tensor | None] = {}
    for name in ("w_q", "w_k", "w_v", "w_o", "b_q", "b_k", "b_v", "b_o"):
        given = getattr(spec, name)
        value = torch.tensor(given, device=CPU) if given is not None else getattr(generated, name)
        if value is None and spec.bias:  # an explicit bias given for one projection: the others are zero
            value = torch.zeros(spec.d_kv if name in ("b_k", "b_v") else spec.d_model, device=CPU)
        parts[name] = None if value is None else value.to(device=device, dtype=dtype)
    return x.to(device=device, dtype=dtype), Weights(**parts)  # type: ignore[arg-type]
